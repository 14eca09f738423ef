'use strict';
// What only Express has: body parsers placed before the middleware, writeHead, requests
// without a key when it is not required, JSON it cannot parse.
const assert = require('node:assert');
const { randomUUID } = require('node:crypto');
const { test, before, after } = require('node:test');
const express = require('express');
const { Pool } = require('pg');
const { idempotency } = require('..');
const { post, listen, isProblem, assertReplay } = require('./http');

const pool = new Pool({ max: 10 });
let server;

before(async () => {
  await pool.query('DROP TABLE IF EXISTS orders_express_only');
  await pool.query('CREATE TABLE orders_express_only (id bigserial PRIMARY KEY, item text NOT NULL)');
  const app = express();
  const order = async (req, res) => {
    const { rows } = await req.idempotency.client.query(
      'INSERT INTO orders_express_only (item) VALUES ($1) RETURNING id', [req.body.item]);
    res.status(201).location(`/orders/${rows[0].id}`).json({ order: Number(rows[0].id), raw: req.rawBody.length });
  };
  app.post('/parsed', express.json(), idempotency(pool), order);
  app.post('/verified', express.json({ verify: (req, res, buf) => { req.rawBody = buf; } }), idempotency(pool), order);
  app.post('/raw', express.raw({ type: '*/*' }), idempotency(pool), async (req, res) => {
    req.body = JSON.parse(req.body.toString());
    await order(req, res);
  });
  app.post('/optional', idempotency(pool, { required: false }), order);
  app.post('/head', idempotency(pool), async (req, res) => {
    await req.idempotency.client.query('INSERT INTO orders_express_only (item) VALUES ($1)', [req.body.item]);
    res.writeHead(202, { 'content-type': 'text/plain', location: '/head/1' });
    res.write('accepted ');
    res.end(Buffer.from(req.body.item));
  });
  app.post('/parse-after', idempotency(pool), express.json(), express.urlencoded({ extended: false }), order);
  app.set('env', 'test');
  server = await listen(app);
});
after(async () => {
  await server.close();
  await pool.end();
});

const orders = async (item) =>
  Number((await pool.query('SELECT count(*) FROM orders_express_only WHERE item = $1', [item])).rows[0].count);

test('express: a body parser first is 500 naming the fix, at once, and runs nothing', async () => {
  const item = randomUUID();
  const answer = await post(`${server.url}/parsed`, { item }, randomUUID());
  assert.ok(isProblem(answer, 500));
  assert.match(answer.json.detail, /before express\.json\(\)/);
  assert.strictEqual(await orders(item), 0);
});

test('express: a parser first that keeps the raw bytes (verify, express.raw) works', async () => {
  for (const path of ['/verified', '/raw']) {
    const key = randomUUID();
    const item = randomUUID();
    const first = await post(`${server.url}${path}`, { item }, key);
    assert.strictEqual(first.status, 201, path);
    assertReplay(await post(`${server.url}${path}`, { item }, key), first);
    assert.strictEqual(await orders(item), 1);
  }
});

test('express: parsers after the middleware leave its req.body alone', async () => {
  const key = randomUUID();
  const item = randomUUID();
  const first = await post(`${server.url}/parse-after`, { item }, key);
  assert.strictEqual(first.status, 201);
  assert.strictEqual(first.json.raw, JSON.stringify({ item }).length);
  assertReplay(await post(`${server.url}/parse-after`, { item }, key), first);
});

test('express: writeHead, write and end are held and stored as one response', async () => {
  const key = randomUUID();
  const item = randomUUID();
  const first = await post(`${server.url}/head`, { item }, key);
  assert.strictEqual(first.status, 202);
  assert.strictEqual(first.body.toString(), `accepted ${item}`);
  const again = await post(`${server.url}/head`, { item }, key);
  assert.strictEqual(again.headers['idempotent-replayed'], 'true');
  assert.deepStrictEqual([again.status, again.body.toString(), again.headers.location], [202, `accepted ${item}`, '/head/1']);
  assert.strictEqual(await orders(item), 1);
});

test('express: without a key and required: false, the handler runs unprotected', async () => {
  const item = randomUUID();
  assert.strictEqual((await post(`${server.url}/optional`, { item })).status, 201);
  assert.strictEqual((await post(`${server.url}/optional`, { item })).status, 201);
  assert.strictEqual(await orders(item), 2);
});

test('express: a JSON body that does not parse is 400 problem+json', async () => {
  const answer = await post(`${server.url}/optional`, '{"item": ', randomUUID());
  assert.ok(isProblem(answer, 400));
});
