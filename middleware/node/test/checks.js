'use strict';
// The behaviour every adapter must show (middleware/README.md), checked against the
// conformance application (conformance/app.js) of one framework, served over HTTP with
// a table of its own (the test files run at the same time).  Connections from libpq's
// environment (PGHOST, PGPORT, ...).
const assert = require('node:assert');
const { randomUUID } = require('node:crypto');
const { test, before, after } = require('node:test');
const { Pool } = require('pg');
const { idempotency, fastifyIdempotency } = require('..');
const { expressApp, fastifyApp } = require('../conformance/app');

// The frameworks, by name: their module and how to serve the application with them.
const frameworks = {
  express4: { module: 'express', kind: 'express' },
  express5: { module: 'express5', kind: 'express' },
  fastify4: { module: 'fastify', kind: 'fastify' },
  fastify5: { module: 'fastify5', kind: 'fastify', node: 20 },
};

// Skips the file's tests on a Node the framework does not run on.
function unsupported(name) {
  const major = Number(process.versions.node.split('.')[0]);
  return frameworks[name].node > major ? `${name} needs Node ${frameworks[name].node}` : false;
}

// Serves the conformance application of `name` with `options`; {url, close}.
async function serve(name, pool, table, options = {}) {
  const framework = frameworks[name];
  const lib = require(framework.module);
  if (framework.kind === 'express') {
    const app = expressApp({ express: lib, idempotency, pool, table, options });
    app.set('env', 'test'); // Express's final handler answers 500 without printing stacks
    return listen(app);
  }
  const app = fastifyApp({ Fastify: lib, fastifyIdempotency, pool, table, options });
  await app.listen({ port: 0, host: '127.0.0.1' });
  return { url: `http://127.0.0.1:${app.server.address().port}`, close: () => app.close() };
}

// An Express app on a free port; {url, close}.
async function listen(app) {
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close: () => new Promise((resolve) => {
      server.closeAllConnections();
      server.close(resolve);
    }),
  };
}

// POSTs `body` (an object: JSON; a string: as is); {status, headers, body (Buffer), json}.
async function post(url, body, key, headers = {}) {
  const sent = { 'content-type': 'application/json', ...headers };
  if (key != null) sent['idempotency-key'] = key;
  const answer = await fetch(url, {
    method: 'POST', headers: sent, body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const bytes = Buffer.from(await answer.arrayBuffer());
  let json = null;
  try {
    json = JSON.parse(bytes.toString());
  } catch {
    // not JSON
  }
  return { status: answer.status, headers: Object.fromEntries(answer.headers), body: bytes, json };
}

function isProblem(answer, status) {
  return answer.status === status && answer.headers['content-type'] === 'application/problem+json' &&
    answer.json && answer.json.status === status && Boolean(answer.json.title);
}

function assertReplay(again, first) {
  assert.strictEqual(again.status, first.status);
  assert.strictEqual(again.headers['idempotent-replayed'], 'true');
  assert.deepStrictEqual(again.body, first.body);
  assert.strictEqual(again.headers['content-type'], first.headers['content-type']);
  assert.strictEqual(again.headers.location, first.headers.location);
  assert.strictEqual(again.headers['content-length'], String(again.body.length));
}

function checks(name) {
  const skip = unsupported(name);
  const table = `orders_${name}`;
  const pool = new Pool({ max: 30 });
  const servers = [];
  let base; // the application with default options

  const fresh = (what) => `${what}-${randomUUID()}`;
  const orders = async (item) =>
    Number((await pool.query(`SELECT count(*) FROM ${table} WHERE item = $1`, [item])).rows[0].count);
  const started = async (options, ownPool = pool) => {
    const server = await serve(name, ownPool, table, options);
    servers.push(server);
    return server.url;
  };

  before(async () => {
    if (skip) return;
    await pool.query(`DROP TABLE IF EXISTS ${table}`);
    await pool.query(`CREATE TABLE ${table} (id bigserial PRIMARY KEY, item text NOT NULL)`);
    base = await started();
  });
  after(async () => {
    for (const server of servers) await server.close();
    await pool.end();
  });

  const check = (title, body) => test(`${name}: ${title}`, { skip }, body);

  check('a new request, then a byte-exact replay with the stored headers', async () => {
    const key = fresh('key');
    const item = fresh('item');
    const first = await post(`${base}/orders`, { item }, key);
    assert.strictEqual(first.status, 201);
    assert.strictEqual(first.headers['idempotent-replayed'], undefined);
    assert.strictEqual(first.headers.location, `/orders/${first.json.order}`);
    assertReplay(await post(`${base}/orders`, `{"item":   ${JSON.stringify(item)}}`, key), first); // spelled otherwise
    assert.strictEqual(await orders(item), 1);
  });

  check('another body, route or query string is 422; the same query string replays', async () => {
    const key = fresh('key');
    const item = fresh('item');
    assert.strictEqual((await post(`${base}/orders?x=1`, { item }, key)).status, 201);
    assert.ok(isProblem(await post(`${base}/orders?x=1`, { item: `${item}-other` }, key), 422));
    assert.ok(isProblem(await post(`${base}/refunds?x=1`, { item }, key), 422));
    assert.ok(isProblem(await post(`${base}/orders?x=2`, { item }, key), 422));
    assert.ok(isProblem(await post(`${base}/orders`, { item }, key), 422));
    assert.strictEqual((await post(`${base}/orders?x=1`, { item }, key)).headers['idempotent-replayed'], 'true');
    assert.strictEqual(await orders(item), 1);
    assert.strictEqual(await orders(`${item}-other`), 0);
  });

  check('a missing, empty or over-long key is 400 problem+json and runs nothing', async () => {
    const item = fresh('item');
    for (const key of [null, '', 'k'.repeat(2000)]) {
      assert.ok(isProblem(await post(`${base}/orders`, { item }, key), 400), String(key).slice(0, 10));
    }
    assert.strictEqual(await orders(item), 0);
  });

  check('a duplicate in flight is 409 with Retry-After, then the replay', async () => {
    const key = fresh('key');
    const item = fresh('item');
    const gate = Math.floor(Math.random() * 1e9);
    const holder = await pool.connect(); // the gate, held in a transaction (as PgBouncer allows)
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT pg_advisory_xact_lock($1)', [gate]);
      const first = post(`${base}/orders`, { item, gate }, key);
      for (;;) { // the first is in its handler, at the gate
        const { rows } = await pool.query(
          "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = $1", [gate]);
        if (Number(rows[0].count) > 0) break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const busy = await post(`${base}/orders`, { item, gate }, key);
      assert.ok(isProblem(busy, 409), JSON.stringify(busy.json));
      assert.ok(Number(busy.headers['retry-after']) >= 1);
      await holder.query('COMMIT');
      const answered = await first;
      assert.strictEqual(answered.status, 201);
      assertReplay(await post(`${base}/orders`, { item, gate }, key), answered);
    } finally {
      holder.release();
    }
    assert.strictEqual(await orders(item), 1);
  });

  check('a handler that fails (sync, async) or answers 500 is rolled back and runs again', async () => {
    const rejections = [];
    const onRejection = (reason) => rejections.push(reason);
    process.on('unhandledRejection', onRejection);
    try {
      for (const body of [{ fail: 'sync' }, { fail: 'async' }, { status: 500 }]) {
        const key = fresh('key');
        const item = fresh('item');
        for (let attempt = 0; attempt < 2; attempt++) {
          const answer = await post(`${base}/orders`, { item, ...body }, key);
          assert.strictEqual(answer.status, 500, JSON.stringify(body));
          assert.strictEqual(answer.headers['idempotent-replayed'], undefined);
        }
        assert.strictEqual(await orders(item), 0);
      }
    } finally {
      process.off('unhandledRejection', onRejection);
    }
    assert.deepStrictEqual(rejections, []); // Express 4: the middleware caught it
  });

  check('storeServerErrors stores a 5xx with the server\'s setting off: run once, then replayed', async () => {
    const url = await started({ storeServerErrors: true });
    const key = fresh('key');
    const item = fresh('item');
    assert.strictEqual((await pool.query("SELECT current_setting('idempotency.store_server_errors') AS s")).rows[0].s, 'off');
    const first = await post(`${url}/orders`, { item, status: 503 }, key);
    assert.strictEqual(first.status, 503);
    assert.strictEqual(first.headers['idempotent-replayed'], undefined);
    assertReplay(await post(`${url}/orders`, { item, status: 503 }, key), first);
    assert.strictEqual(await orders(item), 1);
  });

  check('two tenants, one key: two records, each retry gets its own tenant\'s response', async () => {
    const key = fresh('key');
    const item = fresh('item');
    const one = await post(`${base}/orders`, { item }, key, { 'x-tenant': 't1' });
    const two = await post(`${base}/orders`, { item }, key, { 'x-tenant': 't2' });
    assert.deepStrictEqual([one.status, two.status], [201, 201]);
    assert.notDeepStrictEqual(one.body, two.body);
    assertReplay(await post(`${base}/orders`, { item }, key, { 'x-tenant': 't1' }), one);
    assertReplay(await post(`${base}/orders`, { item }, key, { 'x-tenant': 't2' }), two);
    assert.strictEqual(await orders(item), 2);
    const { rows } = await pool.query(
      "SELECT count(*) FROM idempotency_lookup('t1', $1) UNION ALL SELECT count(*) FROM idempotency_lookup('t2', $1)", [key]);
    assert.deepStrictEqual(rows.map((r) => Number(r.count)), [1, 1]);
  });

  check('the hooks get the framework\'s own request; one that fails is 500 and runs nothing', async () => {
    const seen = [];
    const hooked = await started({
      tenant: (request) => {
        seen.push(request);
        if (request.headers['x-tenant'] === 'none') return undefined;
        return request.headers['x-tenant'] === 'fail' ? Promise.reject(new Error('no')) : 'hooked';
      },
    });
    const item = fresh('item');
    assert.strictEqual((await post(`${hooked}/orders`, { item }, fresh('key'))).status, 201);
    const [request] = seen;
    const lib = require(frameworks[name].module);
    if (frameworks[name].kind === 'express') {
      assert.ok(lib.request.isPrototypeOf(request), 'Express\'s req');
      assert.strictEqual(request.get('content-type'), 'application/json');
      assert.strictEqual(request.route.path, '/orders');
    } else {
      assert.strictEqual(request.routeOptions.url, '/orders', 'Fastify\'s request');
      assert.strictEqual(typeof request.log.info, 'function');
    }
    for (const tenant of ['fail', 'none']) {
      const failed = fresh('item');
      assert.ok(isProblem(await post(`${hooked}/orders`, { item: failed }, fresh('key'), { 'x-tenant': tenant }), 500));
      assert.strictEqual(await orders(failed), 0);
    }
  });

  check('perRoute scopes keys per route; a scope hook replaces the scope', async () => {
    const perRoute = await started({ perRoute: true });
    const key = fresh('key');
    const item = fresh('item');
    assert.strictEqual((await post(`${perRoute}/orders`, { item }, key)).status, 201);
    assert.strictEqual((await post(`${perRoute}/refunds`, { item }, key)).status, 201);
    const { rows } = await pool.query('SELECT count(*) FROM idempotency_lookup($1, $2)', ['public POST /orders', key]);
    assert.strictEqual(Number(rows[0].count), 1);
    const scoped = await started({ scope: () => 'a-scope' });
    const other = fresh('key');
    assert.strictEqual((await post(`${scoped}/orders`, { item }, other)).status, 201);
    assert.strictEqual((await pool.query('SELECT count(*) FROM idempotency_lookup($1, $2)', ['a-scope', other])).rows[0].count, '1');
  });

  check('a response over idempotency.max_response_bytes is 500 naming it, rolled back; below, stored', async () => {
    // The server's limit, 3000 bytes, in each transaction of this pool's (SET LOCAL works
    // through PgBouncer in transaction mode, where a startup option would not).
    const small = new Pool({ max: 5 });
    small.on('connect', (client) => {
      const query = client.query.bind(client);
      client.query = (text, ...rest) =>
        query(text === 'BEGIN' ? 'BEGIN; SET LOCAL idempotency.max_response_bytes = 3000' : text, ...rest);
    });
    try {
      const limited = await started({}, small);
      // Over it: whole (the middleware's cap), streamed, and with its headers only (the server's check).
      for (const body of [{ size: 5000 }, { size: 5000, stream: true }, { size: 2900 }]) {
        const key = fresh('key');
        const item = fresh('item');
        for (let attempt = 0; attempt < 2; attempt++) {
          const answer = await post(`${limited}/orders`, { item, ...body }, key);
          assert.ok(isProblem(answer, 500), `${JSON.stringify(body)}: ${answer.status} ${answer.body.slice(0, 200)}`);
          assert.match(answer.body.toString(), /idempotency\.max_response_bytes/);
        }
        assert.strictEqual(await orders(item), 0);
      }
      const key = fresh('key');
      const item = fresh('item');
      const first = await post(`${limited}/orders`, { item, size: 2000, stream: true }, key);
      assert.strictEqual(first.status, 201);
      assertReplay(await post(`${limited}/orders`, { item, size: 2000, stream: true }, key), first);
    } finally {
      await small.end();
    }
  });

  check('a streamed response is stored and replayed byte for byte', async () => {
    const key = fresh('key');
    const item = fresh('item');
    const first = await post(`${base}/orders`, { item, stream: true, size: 50000 }, key);
    assert.strictEqual(first.status, 201);
    assert.ok(first.body.length > 50000);
    assert.strictEqual(first.json.item, item);
    assertReplay(await post(`${base}/orders`, { item, stream: true, size: 50000 }, key), first);
  });

  check('a record stored without its body (response_body_omitted) replays as 500, never empty', async () => {
    const key = fresh('key');
    const item = fresh('item');
    assert.strictEqual((await post(`${base}/orders`, { item }, key)).status, 201);
    // As 0.3.0's middleware or another caller stored an oversized response.
    await pool.query(`UPDATE idempotency.keys SET response_body_bytes = NULL, response_body_omitted = true
                       WHERE scope = 'public' AND key = $1`, [key]);
    const again = await post(`${base}/orders`, { item }, key);
    assert.ok(isProblem(again, 500), `${again.status} ${again.body}`);
    assert.match(again.json.detail, /idempotency\.max_response_bytes/);
  });

  check('a body over maxBodyBytes is 413 problem+json and runs nothing', async () => {
    const limited = await started({ maxBodyBytes: 100 });
    const item = fresh('item');
    const answer = await post(`${limited}/orders`, { item, pad: 'p'.repeat(200) }, fresh('key'));
    assert.ok(isProblem(answer, 413), `${answer.status} ${answer.body}`);
    assert.strictEqual(await orders(item), 0);
    assert.strictEqual((await post(`${limited}/orders`, { item }, fresh('key'))).status, 201);
  });

  check('20 concurrent duplicates write one order; the rest are replays or 409', async () => {
    const key = fresh('key');
    const item = fresh('item');
    const answers = await Promise.all(Array.from({ length: 20 }, () => post(`${base}/orders`, { item }, key)));
    assert.strictEqual(await orders(item), 1);
    assert.strictEqual(answers.filter((a) => a.status === 201 && !a.headers['idempotent-replayed']).length, 1);
    assert.ok(answers.every((a) => a.status === 201 || isProblem(a, 409)), answers.map((a) => a.status).join(','));
  });

  return { pool, table, fresh, orders, post, listen, isProblem, assertReplay, check, started };
}

module.exports = { checks, post, listen, isProblem, assertReplay };
