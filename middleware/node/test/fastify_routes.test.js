'use strict';
// The Fastify plugin leaves alone a route declared with config: { idempotency: false }.
const assert = require('node:assert');
const { test, after } = require('node:test');
const Fastify = require('fastify');
const { Pool } = require('pg');
const { fastifyIdempotency } = require('..');

const pool = new Pool({ max: 5 });
after(() => pool.end());

test('fastify: a route with config.idempotency false is not protected', async () => {
  const app = Fastify();
  let runs = 0;
  app.register(fastifyIdempotency, { pool });
  app.post('/webhook', { config: { idempotency: false } }, async (request, reply) => {
    runs += 1;
    assert.strictEqual(request.idempotency, null);
    reply.code(202);
    return { received: true };
  });
  app.post('/orders', async () => ({ order: 1 }));
  await app.ready();
  try {
    const post = (url, headers = {}) => app.inject({
      method: 'POST', url, payload: '{}', headers: { 'content-type': 'application/json', ...headers },
    });
    assert.strictEqual((await post('/webhook')).statusCode, 202); // no key needed
    assert.strictEqual((await post('/webhook', { 'idempotency-key': 'same' })).statusCode, 202);
    assert.strictEqual((await post('/webhook', { 'idempotency-key': 'same' })).statusCode, 202);
    assert.strictEqual(runs, 3);
    assert.strictEqual((await post('/orders')).statusCode, 400); // the others still are
  } finally {
    await app.close();
  }
});
