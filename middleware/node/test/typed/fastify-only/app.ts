// A Fastify app with no Express installed, under strict TypeScript without
// skipLibCheck (test/package.test.js): the package's declarations must not need
// Express's types.
import Fastify from 'fastify';
import { Pool } from 'pg';
import { fastifyIdempotency } from 'pg-idempotency';

const pool = new Pool();
const server = Fastify();
server.register(fastifyIdempotency, {
  pool,
  tenant: async (request) => request.headers['x-tenant']?.toString() ?? 'public', // Fastify's own
});
server.post('/orders', { config: { idempotency: { wait: 30 } } }, async (request, reply) => {
  const context = request.idempotency;
  if (context === null) throw new Error('not protected');
  const { rows } = await context.client.query<{ id: string }>(
    'INSERT INTO orders (item) VALUES ($1) RETURNING id', ['book']);
  reply.code(201);
  return { order: rows[0].id };
});

// @ts-expect-error request.idempotency may be null on a route it does not protect
server.post('/other', async (request) => request.idempotency.key);
// @ts-expect-error the plugin needs its pool
server.register(fastifyIdempotency, { tenant: () => 't' });

export { server };
