'use strict';
// The behaviour every adapter must show, for a POST /orders route that inserts the JSON
// body's item into the table `orders_<name>` and answers 201 {"order": id} with a
// Location header; item "boom" throws, item "fail" answers 503.  Connections from
// libpq's environment (PGHOST, PGPORT, ...).  Each suite has its table: the test files
// run at the same time.
const assert = require('node:assert');
const { randomUUID } = require('node:crypto');
const { test, before, after, beforeEach } = require('node:test');
const { Pool } = require('pg');
const { Course, settings } = require('..');

function checks(name, makeApp) {
  const pool = new Pool({ max: 30 });
  const table = `orders_${name}`;
  let post; // (key, body) => {status, headers, body}
  let close;

  before(async () => {
    ({ post, close } = await makeApp(pool, table));
  });
  after(async () => {
    await close();
    await pool.end();
  });
  beforeEach(async () => {
    await pool.query(`DROP TABLE IF EXISTS ${table}`);
    await pool.query(`CREATE TABLE ${table} (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, item text NOT NULL)`);
  });

  const orders = async (item) =>
    Number((await pool.query(`SELECT count(*) FROM ${table} WHERE $1::text IS NULL OR item = $1`, [item ?? null])).rows[0].count);
  const keyStatus = async (key) => {
    const { rows } = await pool.query("SELECT status FROM idempotency_lookup('POST /orders', $1)", [key]);
    return rows.length ? rows[0].status : null;
  };

  test(`${name}: a new request, then a byte-exact replay`, async () => {
    const key = randomUUID();
    const first = await post(key, '{"item": "book"}');
    assert.strictEqual(first.status, 201);
    assert.strictEqual(first.headers['idempotent-replayed'], undefined);
    const again = await post(key, '{"item":   "book"}'); // the same JSON, spelled otherwise
    assert.strictEqual(again.status, 201);
    assert.deepStrictEqual(again.body, first.body);
    assert.strictEqual(again.headers['idempotent-replayed'], 'true');
    assert.strictEqual(again.headers.location, first.headers.location);
    assert.strictEqual(await orders('book'), 1);
  });

  test(`${name}: a changed body is 422 problem+json`, async () => {
    const key = randomUUID();
    assert.strictEqual((await post(key, '{"item": "book"}')).status, 201);
    const changed = await post(key, '{"item": "pen"}');
    assert.strictEqual(changed.status, 422);
    assert.strictEqual(changed.headers['content-type'], 'application/problem+json');
    assert.strictEqual(JSON.parse(changed.body).status, 422);
    assert.strictEqual(await orders(), 1);
  });

  test(`${name}: a missing or bad key is 400`, async () => {
    assert.strictEqual((await post(null, '{"item": "book"}')).status, 400);
    assert.strictEqual((await post('', '{"item": "book"}')).status, 400);
    assert.strictEqual((await post('k'.repeat(5000), '{"item": "book"}')).status, 400);
    assert.strictEqual(await orders(), 0);
  });

  test(`${name}: an in-flight duplicate is 409 with Retry-After`, async () => {
    const key = randomUUID();
    const holder = new Course(pool, {
      method: 'POST', route: '/orders', path: '/orders', body: Buffer.from('{"item": "book"}'),
      key, contentType: 'application/json',
    }, settings({}));
    assert.strictEqual(await holder.start(), null); // claimed, transaction open
    try {
      const busy = await post(key, '{"item": "book"}');
      assert.strictEqual(busy.status, 409);
      assert.ok(Number(busy.headers['retry-after']) >= 1);
    } finally {
      await holder.abort();
    }
    assert.strictEqual((await post(key, '{"item": "book"}')).status, 201);
  });

  test(`${name}: a server error is not stored`, async () => {
    const key = randomUUID();
    assert.strictEqual((await post(key, '{"item": "fail"}')).status, 503);
    assert.strictEqual(await keyStatus(key), null);
    assert.strictEqual((await post(key, '{"item": "fail"}')).status, 503); // ran again
    assert.strictEqual(await orders(), 0);
  });

  test(`${name}: a handler that throws rolls back`, async () => {
    const key = randomUUID();
    assert.strictEqual((await post(key, '{"item": "boom"}')).status, 500);
    assert.strictEqual(await keyStatus(key), null);
    assert.strictEqual(await orders(), 0);
  });

  test(`${name}: 20 concurrent duplicates write one order`, async () => {
    const key = randomUUID();
    const answers = await Promise.all(Array.from({ length: 20 }, () => post(key, '{"item": "once"}')));
    const statuses = answers.map((a) => a.status);
    assert.strictEqual(await orders('once'), 1);
    assert.ok(statuses.every((s) => s === 201 || s === 409), statuses.join(','));
    assert.ok(statuses.includes(201));
  });
}

module.exports = { checks };
