const Fastify = require('fastify');
const { Pool } = require('pg');
const { fastifyIdempotency } = require('pg-idempotency');

const pool = new Pool();
const app = Fastify();
app.register(fastifyIdempotency, { pool });
app.post('/orders', async (request, reply) => {
  const { rows } = await request.idempotency.client.query(
    'INSERT INTO orders (item) VALUES ($1) RETURNING id', [request.body.item]);
  reply.code(201);
  return { order: rows[0].id };
});

module.exports = { app, pool };
