'use strict';
// The examples of the READMEs (middleware/node/examples), run as written: a new request
// is created once, its retry replays it.
const assert = require('node:assert');
const { randomUUID } = require('node:crypto');
const { test, before, after } = require('node:test');
const { Pool } = require('pg');

const admin = new Pool({ max: 2 });
before(async () => {
  await admin.query('DROP TABLE IF EXISTS orders');
  await admin.query('CREATE TABLE orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, item text NOT NULL)');
});
after(() => admin.end());

async function createdOnce(post, item) {
  const key = randomUUID();
  const first = await post(key, JSON.stringify({ item }));
  const again = await post(key, JSON.stringify({ item }));
  assert.deepStrictEqual([first.status, again.status], [201, 201]);
  assert.strictEqual(again.body, first.body);
  assert.strictEqual(again.replayed, 'true');
  const { rows } = await admin.query('SELECT count(*) FROM orders WHERE item = $1', [item]);
  assert.strictEqual(Number(rows[0].count), 1);
}

test('the Express example', async () => {
  const { app, pool } = require('../examples/express');
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  try {
    await createdOnce(async (key, body) => {
      const answer = await fetch(`http://127.0.0.1:${server.address().port}/orders`, {
        method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': key }, body,
      });
      return { status: answer.status, body: await answer.text(), replayed: answer.headers.get('idempotent-replayed') };
    }, 'express book');
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    await pool.end();
  }
});

test('the Fastify example', async () => {
  const { app, pool } = require('../examples/fastify');
  try {
    await createdOnce(async (key, payload) => {
      const answer = await app.inject({
        method: 'POST', url: '/orders', payload, headers: { 'content-type': 'application/json', 'idempotency-key': key },
      });
      return { status: answer.statusCode, body: answer.body, replayed: answer.headers['idempotent-replayed'] };
    }, 'fastify book');
  } finally {
    await app.close();
    await pool.end();
  }
});
