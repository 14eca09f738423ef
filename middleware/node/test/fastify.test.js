'use strict';
const Fastify = require('fastify');
const { fastifyIdempotency } = require('..');
const { checks } = require('./checks');

checks('fastify', async (pool, table) => {
  const app = Fastify();
  app.register(fastifyIdempotency, { pool });
  app.post('/orders', async (request, reply) => {
    const { item } = request.body;
    const { rows } = await request.idempotency.client.query(
      `INSERT INTO ${table} (item) VALUES ($1) RETURNING id`, [item]);
    if (item === 'boom') throw new Error('the handler failed');
    if (item === 'fail') return reply.code(503).send({ error: 'upstream down' });
    reply.code(201).header('location', `/orders/${rows[0].id}`);
    return { order: Number(rows[0].id) };
  });
  await app.ready();
  return {
    post: async (key, body) => {
      const headers = { 'content-type': 'application/json' };
      if (key != null) headers['idempotency-key'] = key;
      const answer = await app.inject({ method: 'POST', url: '/orders', headers, payload: body });
      return { status: answer.statusCode, headers: answer.headers, body: answer.rawPayload };
    },
    close: () => app.close(),
  };
});
