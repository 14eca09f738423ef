// The package's declarations under a strict compile (test/package.test.js): the typed
// use of each adapter and of the node-idempotency store, and what they must refuse.
import express from 'express';
import Fastify from 'fastify';
import { Pool } from 'pg';
import { idempotency, fastifyIdempotency } from 'pg-idempotency';
import type { IdempotencyContext } from 'pg-idempotency';
import { PostgresStorageAdapter } from 'pg-idempotency/node-idempotency';

const pool = new Pool();

const app = express();
app.post('/orders', idempotency(pool, {
  tenant: (req) => req.get('x-tenant') ?? 'public', // Express's own Request
  wait: 30,
}), async (req, res) => {
  const context: IdempotencyContext = req.idempotency;
  const { rows } = await context.client.query<{ id: string }>(
    'INSERT INTO orders (item) VALUES ($1) RETURNING id', [req.body.item]);
  res.status(201).json({ order: rows[0].id, key: context.key, raw: req.rawBody?.length });
});

const server = Fastify();
server.register(fastifyIdempotency, {
  pool,
  tenant: async (request) => request.headers['x-tenant']?.toString() ?? 'public', // Fastify's own
  scopePerRoute: true,
});
server.post('/orders', { config: { idempotency: { wait: 30 } } }, async (request, reply) => {
  const context = request.idempotency;
  if (context === null) throw new Error('not protected');
  const { rows } = await context.client.query('SELECT 1 AS one');
  reply.code(201);
  return { one: rows[0].one, attempt: context.attempt };
});
server.post('/webhook', { config: { idempotency: false } }, async () => ({ ok: true }));

const store = new PostgresStorageAdapter(pool, { scope: 'jobs' });
export const value: Promise<string | undefined> = store.get('k');

// What the declarations refuse: each line below must be an error.
// @ts-expect-error wait is a number of seconds
idempotency(pool, { wait: '30 seconds' });
// @ts-expect-error the hook gets Express's Request, which has no routeOptions
idempotency(pool, { tenant: (req) => req.routeOptions.url });
// @ts-expect-error the plugin needs its pool
server.register(fastifyIdempotency, { tenant: () => 't' });
// @ts-expect-error request.idempotency may be null on a route it does not protect
server.post('/other', async (request) => request.idempotency.key);
