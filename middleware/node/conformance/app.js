'use strict';
// The application every conformance setup serves (test/conformance/README.md, "The
// application every setup serves"), for Express and for Fastify, built from what the
// caller passes: the framework, the package and a pool.  serve.js runs it with the
// packages installed from the registry and the packed tarball; the package's own tests
// (test/) run it too, with options of their own and a table of their own.
const { Readable } = require('node:stream');

// X-Tenant from the framework's own request object: "public" when absent; "fail" throws.
function tenant(request) {
  const name = request.headers['x-tenant'];
  if (name === 'fail') throw new Error('the tenant hook fails, as X-Tenant: fail asks');
  return name ?? 'public';
}

// Steps 1-3 of the order handler, in the claim's transaction: the gate, the insert, the
// transaction ended early, an asynchronous failure.  Returns the order's id.
async function insertOrder(client, body, table) {
  if (body.gate != null) await client.query('SELECT pg_advisory_xact_lock_shared($1)', [body.gate]);
  const { rows } = await client.query(`INSERT INTO ${table} (item) VALUES ($1) RETURNING id`, [body.item]);
  if (body.split) await client.query('COMMIT');
  if (body.fail === 'async') throw new Error('the handler fails after an await, as asked');
  return Number(rows[0].id);
}

// Step 4: the answer's status, headers and body text; a synchronous failure.
function orderAnswer(body, id) {
  if (body.fail === 'sync') throw new Error('the handler fails synchronously, as asked');
  const document = { order: id, item: body.item };
  if (body.size != null) document.pad = 'x'.repeat(body.size);
  return { status: body.status ?? 201, location: `/orders/${id}`, text: JSON.stringify(document) };
}

// The text in `count` pieces (at least three), for the streamed answer.
function pieces(text, count = 3) {
  const size = Math.ceil(text.length / count);
  return Array.from({ length: count }, (_, i) => text.slice(i * size, (i + 1) * size));
}

// Express: the middleware on each route, the insert (async: a rejection in Express 4 is
// the middleware's to catch) and the answer (sync: a throw is Express's to catch) as two
// handlers; /parsed/orders has express.json() first.
function expressApp({ express, idempotency, pool, table = 'orders', options = {} }) {
  const app = express();
  const protect = idempotency(pool, { tenant, ...options });
  const waiting = idempotency(pool, { tenant, ...options, wait: 30 });
  const insert = async (req, res, next) => {
    res.locals.order = await insertOrder(req.idempotency.client, req.body, table);
    next();
  };
  const answer = (req, res) => {
    const { status, location, text } = orderAnswer(req.body, res.locals.order);
    res.status(status).type('application/json').location(location);
    if (!req.body.stream) return res.send(text);
    const [first, ...rest] = pieces(text);
    res.write(first);
    const next = () => (rest.length > 1 ? (res.write(rest.shift()), setImmediate(next)) : res.end(rest.shift()));
    return setImmediate(next);
  };
  app.get('/health', (req, res) => res.json({ ok: true }));
  app.post('/orders', protect, insert, answer);
  app.post('/refunds', protect, insert, answer);
  app.post('/waiting/orders', waiting, insert, answer);
  app.post('/parsed/orders', express.json(), protect, insert, answer);
  return app;
}

// Fastify: the plugin for the whole app, /waiting/orders with its own options in the
// route's config; the insert as the route's preHandler (async), the answer as its handler
// (sync), a stream as a Readable.
function fastifyApp({ Fastify, fastifyIdempotency, pool, table = 'orders', options = {} }) {
  const app = Fastify();
  const orders = new WeakMap();
  app.register(fastifyIdempotency, { pool, tenant, ...options });
  const insert = async (request) => {
    orders.set(request, await insertOrder(request.idempotency.client, request.body, table));
  };
  const answer = (request, reply) => {
    const { status, location, text } = orderAnswer(request.body, orders.get(request));
    reply.code(status).type('application/json').header('location', location);
    if (!request.body.stream) return reply.send(text);
    return reply.send(Readable.from((async function* () {
      for (const piece of pieces(text)) {
        await new Promise(setImmediate);
        yield piece;
      }
    })()));
  };
  app.get('/health', async () => ({ ok: true }));
  for (const url of ['/orders', '/refunds', '/parsed/orders']) app.post(url, { preHandler: insert }, answer);
  app.post('/waiting/orders', { preHandler: insert, config: { idempotency: { wait: 30 } } }, answer);
  return app;
}

module.exports = { expressApp, fastifyApp, tenant };
