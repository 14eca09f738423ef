// An Express app with no Fastify installed, under strict TypeScript without
// skipLibCheck (test/package.test.js): the package's declarations must not need
// fastify's types.
import express from 'express';
import { Pool } from 'pg';
import { idempotency } from 'pg-idempotency';
import type { IdempotencyContext } from 'pg-idempotency';

const pool = new Pool();
const app = express();
app.post('/orders', idempotency(pool, {
  tenant: (req) => req.get('x-tenant') ?? 'public', // Express's own Request
}), async (req, res) => {
  const context: IdempotencyContext = req.idempotency;
  const { rows } = await context.client.query<{ id: string }>(
    'INSERT INTO orders (item) VALUES ($1) RETURNING id', [req.body.item]);
  res.status(201).json({ order: rows[0].id });
});

// @ts-expect-error the hook gets Express's Request, which has no routeOptions
idempotency(pool, { tenant: (req) => req.routeOptions.url });

export { app };
