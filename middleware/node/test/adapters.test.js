'use strict';
// What each adapter owns of the shared behaviour, which the conformance suite (test/t/056)
// checks over HTTP in every framework: the hooks get the framework's own request object,
// and Express 4, which drops an async handler's rejection, has it caught and rolled back.
const assert = require('node:assert');
const { randomUUID } = require('node:crypto');
const { test, before, after } = require('node:test');
const { Pool } = require('pg');
const { idempotency, fastifyIdempotency } = require('..');
const { expressApp, fastifyApp } = require('../conformance/app');
const { listen, post, isProblem } = require('./http');

const frameworks = {
  express4: { module: 'express', kind: 'express' },
  express5: { module: 'express5', kind: 'express' },
  fastify4: { module: 'fastify', kind: 'fastify' },
  fastify5: { module: 'fastify5', kind: 'fastify', node: 20 },
};
const table = 'orders_adapters';
const pool = new Pool({ max: 10 });
const servers = [];

before(async () => {
  await pool.query(`DROP TABLE IF EXISTS ${table}`);
  await pool.query(`CREATE TABLE ${table} (id bigserial PRIMARY KEY, item text NOT NULL)`);
});
after(async () => {
  for (const server of servers) await server.close();
  await pool.end();
});

// The conformance application of `name` with `options` over the defaults; its URL.
async function serve(name, options) {
  const framework = frameworks[name];
  const lib = require(framework.module);
  if (framework.kind === 'express') {
    const app = expressApp({ express: lib, idempotency, pool, table, options });
    app.set('env', 'test'); // Express's final handler answers 500 without printing stacks
    servers.push(await listen(app));
  } else {
    const app = fastifyApp({ Fastify: lib, fastifyIdempotency, pool, table, options });
    await app.listen({ port: 0, host: '127.0.0.1' });
    servers.push({ url: `http://127.0.0.1:${app.server.address().port}`, close: () => app.close() });
  }
  return servers[servers.length - 1].url;
}

const orders = async (item) =>
  Number((await pool.query(`SELECT count(*) FROM ${table} WHERE item = $1`, [item])).rows[0].count);

for (const name of Object.keys(frameworks)) {
  const major = Number(process.versions.node.split('.')[0]);
  const skip = frameworks[name].node > major ? `${name} needs Node ${frameworks[name].node}` : false;

  test(`${name}: the hooks get the framework's own request; one that fails or returns no text is 500`, { skip }, async () => {
    const seen = [];
    const url = await serve(name, {
      tenant: (request) => {
        seen.push(request);
        if (request.headers['x-tenant'] === 'none') return undefined;
        return request.headers['x-tenant'] === 'fail' ? Promise.reject(new Error('no')) : 'hooked';
      },
    });
    assert.strictEqual((await post(`${url}/orders`, { item: randomUUID() }, randomUUID())).status, 201);
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
      const item = randomUUID();
      assert.ok(isProblem(await post(`${url}/orders`, { item }, randomUUID(), { 'x-tenant': tenant }), 500));
      assert.strictEqual(await orders(item), 0);
    }
  });

  test(`${name}: a handler's rejection is rolled back and answered 500, never left unhandled`, { skip }, async () => {
    const rejections = [];
    const onRejection = (reason) => rejections.push(reason);
    process.on('unhandledRejection', onRejection);
    try {
      const url = await serve(name, {});
      const item = randomUUID();
      for (let attempt = 0; attempt < 2; attempt++) {
        assert.strictEqual((await post(`${url}/orders`, { item, fail: 'async' }, 'same-' + item)).status, 500);
      }
      assert.strictEqual(await orders(item), 0);
    } finally {
      process.off('unhandledRejection', onRejection);
    }
    assert.deepStrictEqual(rejections, []);
  });

  test(`${name}: onOutcome gets each outcome once with the framework's own request; what it throws is not answered`, { skip }, async () => {
    const seen = [];
    const url = await serve(name, {
      onOutcome: (outcome, request) => {
        seen.push([outcome, request.method]);
        if (request.headers['x-outcome'] === 'fail') throw new Error('the outcome hook fails');
      },
    });
    const item = randomUUID();
    const key = randomUUID();
    assert.strictEqual((await post(`${url}/orders`, { item }, key)).status, 201);
    assert.strictEqual((await post(`${url}/orders`, { item }, key, { 'x-outcome': 'fail' })).status, 201);
    assert.strictEqual((await post(`${url}/orders`, { item, fail: 'async' }, randomUUID())).status, 500);
    assert.strictEqual((await post(`${url}/orders`, { item, fail: 'sync' }, randomUUID())).status, 500);
    assert.ok(isProblem(await post(`${url}/orders`, { item }), 400));
    assert.deepStrictEqual(seen.map(([outcome]) => outcome), ['claimed', 'replayed', 'claimed', 'claimed', 'refused']);
    assert.ok(seen.every(([, method]) => method === 'POST'), 'the framework\'s request');
  });
}
