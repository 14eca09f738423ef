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

// The options application's outcomes (its onOutcome hook), which GET /options/outcomes
// answers.
const outcomes = {};
function countOutcome(outcome) {
  outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
}

// The options application's options (test/conformance/README.md, "The options
// application"): over the tenant hook, for every route under /options.
const OPTIONS = Object.freeze({
  header: 'Request-Key', required: false, storedHeaders: ['Content-Type', 'Location', 'X-Order'], ttl: '1 hour',
  lease: '1 second', scopePerRoute: true, storeServerErrors: true, methods: ['POST', 'PUT'], maxRequestBytes: 1024,
  onOutcome: countOutcome,
});

// The options application's order handler: `idem` the request's context (null when the
// request passed through, unprotected: `client` is then the pool).  A checkpoint and the
// gate only on a claim without a recovery point (a takeover resumes after them).
async function optionsOrder(client, idem, body, table) {
  const recovered = idem ? idem.recoveryPoint : null;
  if (idem && body.checkpoint != null && recovered == null) await idem.checkpoint(body.checkpoint);
  if (body.gate != null && recovered == null) await client.query('SELECT pg_advisory_xact_lock_shared($1)', [body.gate]);
  const { rows } = await client.query(`INSERT INTO ${table} (item) VALUES ($1) RETURNING id`, [body.item]);
  const id = Number(rows[0].id);
  const document = { order: id, item: body.item, attempt: idem ? idem.attempt : null, recovered };
  return { status: body.status ?? 201, location: `/orders/${id}`, id, text: JSON.stringify(document) };
}

// The text in `count` pieces (at least three), for the streamed answer.
function pieces(text, count = 3) {
  const size = Math.ceil(text.length / count);
  return Array.from({ length: count }, (_, i) => text.slice(i * size, (i + 1) * size));
}

// Express: the middleware on each route, the insert (async: a rejection in Express 4 is
// the middleware's to catch) and the answer (sync: a throw is Express's to catch) as two
// handlers; /parsed/orders has express.json() first; /compressed/orders has compression()
// after the middleware, which then holds gzip bytes (where `compression` is given).
function expressApp({ express, idempotency, pool, table = 'orders', options = {}, compression = null }) {
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
  if (compression) app.post('/compressed/orders', protect, compression(), insert, answer);
  // The options application: a PATCH passes through the middleware, and express.json()
  // after it parses its body (a protected request's body the middleware parsed already).
  const optionsProtect = idempotency(pool, { tenant, ...OPTIONS });
  const optionsAnswer = async (req, res) => {
    const { status, location, id, text } = await optionsOrder(req.idempotency ? req.idempotency.client : pool,
      req.idempotency || null, req.body, table);
    res.status(status).type('application/json').location(location).set('x-order', String(id)).send(text);
  };
  for (const method of ['post', 'put', 'patch']) {
    app[method]('/options/orders/:id', optionsProtect, express.json(), optionsAnswer);
  }
  app.post('/options/refunds/:id', optionsProtect, express.json(), optionsAnswer);
  app.get('/options/outcomes', (req, res) => res.json(outcomes));
  return app;
}

// Fastify: the plugin for the whole app, /waiting/orders with its own options in the
// route's config; the insert as the route's preHandler (async), the answer as its handler
// (sync), a stream as a Readable; /compressed/orders in a context of its own with
// @fastify/compress, registered after the middleware as a plugin is (where `compress` is given).
function fastifyApp({ Fastify, fastifyIdempotency, pool, table = 'orders', options = {}, compress = null }) {
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
  if (compress) {
    app.register(async (compressed) => {
      await compressed.register(compress, { global: true });
      compressed.post('/compressed/orders', { preHandler: insert }, answer);
    });
  }
  // The options application: its options in each route's config.
  const optionsAnswer = async (request, reply) => {
    const { status, location, id, text } = await optionsOrder(request.idempotency ? request.idempotency.client : pool,
      request.idempotency, request.body, table);
    reply.code(status).type('application/json').header('location', location).header('x-order', String(id));
    return text;
  };
  const config = { idempotency: OPTIONS };
  for (const method of ['POST', 'PUT', 'PATCH']) {
    app.route({ method, url: '/options/orders/:id', config, handler: optionsAnswer });
  }
  app.post('/options/refunds/:id', { config }, optionsAnswer);
  app.get('/options/outcomes', async () => outcomes);
  return app;
}

module.exports = { expressApp, fastifyApp, tenant, OPTIONS };
