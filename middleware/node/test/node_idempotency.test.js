'use strict';
// PostgresStorageAdapter under node-idempotency's own Idempotency class (from npm): the
// library's course of a request, and the adapter's contract.
const assert = require('node:assert');
const { randomUUID } = require('node:crypto');
const { test, after } = require('node:test');
const { Pool } = require('pg');
const { Idempotency } = require('@node-idempotency/core');
const { PostgresStorageAdapter } = require('../node-idempotency');

const pool = new Pool({ max: 10 });
after(() => pool.end());

const request = (key, body) => ({
  headers: { 'idempotency-key': key }, method: 'POST', path: '/orders', body,
});

async function rejectsWith(promise, code) {
  await assert.rejects(promise, (error) => error.code === code);
}

test('node-idempotency: new, in progress, replay, changed body', async () => {
  const idempotency = new Idempotency(new PostgresStorageAdapter(pool));
  const other = new Idempotency(new PostgresStorageAdapter(pool)); // another process
  const key = randomUUID();
  assert.strictEqual(await idempotency.onRequest(request(key, { item: 'book' })), undefined);
  await rejectsWith(other.onRequest(request(key, { item: 'book' })), 'REQUEST_IN_PROGRESS');
  await idempotency.onResponse(request(key, { item: 'book' }), { body: { order: 1 } });
  assert.deepStrictEqual(await other.onRequest(request(key, { item: 'book' })), { body: { order: 1 } });
  await rejectsWith(other.onRequest(request(key, { item: 'pen' })), 'IDEMPOTENCY_FINGERPRINT_MISSMATCH');
});

test('node-idempotency: 20 concurrent first requests, one hears "new"', async () => {
  const key = randomUUID();
  const results = await Promise.allSettled(Array.from({ length: 20 }, () =>
    new Idempotency(new PostgresStorageAdapter(pool)).onRequest(request(key, { item: 'once' }))));
  assert.strictEqual(results.filter((r) => r.status === 'fulfilled' && r.value === undefined).length, 1);
  assert.ok(results.filter((r) => r.status === 'rejected')
    .every((r) => r.reason.code === 'REQUEST_IN_PROGRESS'));
});

test('PostgresStorageAdapter: setIfNotExists, get, set, and set without a claim', async () => {
  const adapter = new PostgresStorageAdapter(pool, { scope: 'adapter-contract' });
  const key = randomUUID();
  assert.strictEqual(await adapter.get(key), undefined);
  assert.strictEqual(await adapter.setIfNotExists(key, '{"status": "IN_PROGRESS"}', { ttl: 60000 }), true);
  assert.strictEqual(await adapter.setIfNotExists(key, '{"status": "other"}', { ttl: 60000 }), false);
  assert.deepStrictEqual(JSON.parse(await adapter.get(key)), { status: 'IN_PROGRESS' });
  await adapter.set(key, '{"status":"COMPLETE","n":1}', { ttl: 60000 });
  assert.strictEqual(await adapter.get(key), '{"status":"COMPLETE","n":1}');
  await adapter.set(key, '{"status":"COMPLETE","n":2}', { ttl: 60000 }); // replaced
  assert.strictEqual(await adapter.get(key), '{"status":"COMPLETE","n":2}');
  assert.strictEqual(await adapter.setIfNotExists(key, '{}', { ttl: 60000 }), false);
  const plain = randomUUID(); // any string, not only JSON
  assert.strictEqual(await adapter.setIfNotExists(plain, 'v1', {}), true);
  assert.strictEqual(await adapter.get(plain), 'v1');
  const fresh = randomUUID();
  await adapter.set(fresh, '{"status":"COMPLETE"}', { ttl: 60000 });
  assert.strictEqual(await adapter.get(fresh), '{"status":"COMPLETE"}');
});

test('PostgresStorageAdapter: each operation is one statement, without a transaction of its own', async () => {
  const calls = [];
  const counted = { // what the adapter may use of the pool, counted
    query: (...args) => { calls.push('query'); return pool.query(...args); },
    connect: () => { calls.push('connect'); return pool.connect(); },
  };
  const adapter = new PostgresStorageAdapter(counted, { scope: 'adapter-statements' });
  const key = randomUUID();
  await adapter.setIfNotExists(key, '{"status":"IN_PROGRESS"}', { ttl: 60000 });
  await adapter.set(key, '{"status":"COMPLETE"}', { ttl: 60000 }); // completes the claim
  await adapter.set(key, '{"status":"COMPLETE","n":2}', { ttl: 60000 }); // replaces it
  await adapter.set(randomUUID(), '{"status":"COMPLETE"}', { ttl: 60000 }); // claims and completes
  assert.strictEqual(await adapter.get(key), '{"status":"COMPLETE","n":2}');
  assert.deepStrictEqual(calls, ['query', 'query', 'query', 'query', 'query']);
});

test('PostgresStorageAdapter: concurrent set and get of one key never see a half-done set', async () => {
  const adapter = new PostgresStorageAdapter(pool, { scope: 'adapter-race' });
  for (let round = 0; round < 20; round++) {
    const key = randomUUID();
    assert.strictEqual(await adapter.setIfNotExists(key, '"IN_PROGRESS"', { ttl: 60000 }), true);
    const [, seen] = await Promise.all([
      adapter.set(key, '"COMPLETE"', { ttl: 60000 }),
      Promise.all(Array.from({ length: 5 }, () => adapter.get(key))),
    ]);
    assert.ok(seen.every((value) => value === '"IN_PROGRESS"' || value === '"COMPLETE"'), seen.join());
    assert.strictEqual(await adapter.get(key), '"COMPLETE"');
    assert.strictEqual(await adapter.setIfNotExists(key, '"other"', { ttl: 60000 }), false);
  }
});

test('PostgresStorageAdapter: a key is its bytes read as UTF-8, as the middleware reads it', async () => {
  const adapter = new PostgresStorageAdapter(pool, { scope: 'adapter-utf8' });
  const key = `moved-é-🙂-${randomUUID()}`;
  const latin1 = Buffer.from(key).toString('latin1'); // as Node's parser hands the header over
  assert.strictEqual(await adapter.setIfNotExists(latin1, '"IN_PROGRESS"', { ttl: 60000 }), true);
  const { rows } = await pool.query("SELECT count(*) FROM idempotency.keys WHERE scope = 'adapter-utf8' AND key = $1", [key]);
  assert.strictEqual(Number(rows[0].count), 1);
  assert.strictEqual(await adapter.get(latin1), '"IN_PROGRESS"');
  await assert.rejects(adapter.setIfNotExists('caf\xe9', '{}', { ttl: 60000 }),
    (error) => error.code === 'IDEMPOTENCY_KEY_NOT_UTF8');
});
