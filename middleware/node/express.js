'use strict';
// Express 4 and 5: route middleware.
//
//   app.post('/orders', idempotency(pool), async (req, res) => {
//     await req.idempotency.client.query('INSERT ...');   // in the claim's transaction
//     res.status(201).json({ ... });
//   });
//
// Put it before body parsers: it reads the raw body (for the fingerprint, up to
// maxRequestBytes), sets req.rawBody, and for JSON sets req.body itself.  The response,
// written at once or in pieces, is held until it is stored and committed.
const {
  MAX_REQUEST_BYTES, Course, settings, answers, keyOf, canonicalRoute, scopeOf, isJsonType, splitUrl, readStream,
  notifyOutcome, telemetry,
} = require('./core');

const readBefore = () => answers.readBefore(
  'Place idempotency() before express.json() and any other body parser: it reads the body ' +
  'itself and parses JSON into req.body. A parser that must come first can keep the raw bytes ' +
  'as req.rawBody: express.json({ verify: (req, res, buf) => { req.rawBody = buf; } }).');

function idempotency(pool, options = {}) {
  if (!pool || typeof pool.connect !== 'function') {
    throw new TypeError('pg-idempotency: idempotency(pool) needs a pg Pool');
  }
  const config = settings(options);
  return function idempotencyMiddleware(req, res, next) {
    if (!config.methods.includes(req.method)) return next();
    protect(pool, config, req, res, next).catch(next);
  };
}

async function protect(pool, config, req, res, next) {
  telemetry.startSpan(req, routeOf(req));
  const { key, refusal } = keyOf(req.headers[config.header], config);
  if (refusal) return deliver(config, req, res, refusal);
  const read = await requestBody(req, config.maxRequestBytes ?? MAX_REQUEST_BYTES);
  if (read.answer) return deliver(config, req, res, read.answer);
  const contentType = req.headers['content-type'] || '';
  req.rawBody = read.body;
  if (!req._body) {
    // Parsers placed after the middleware find req._body set and leave req.body alone.
    req._body = true;
    if (isJsonType(contentType) && read.body.length > 0) {
      try {
        req.body = JSON.parse(read.body.toString());
      } catch {
        return deliver(config, req, res, answers.badJson());
      }
    }
  }
  const route = routeOf(req);
  let scope = '';
  if (key != null) {
    try {
      scope = await scopeOf(req, req.method, route, config);
    } catch (error) {
      report(req, error);
      return deliver(config, req, res, answers.hookFailed());
    }
  }
  const course = new Course(pool, {
    method: req.method, route, ...splitUrl(req.originalUrl), body: read.body, key, contentType, scope,
  }, config, (error) => report(req, error), req);
  const answer = await course.start();
  if (answer) return deliver(config, req, res, answer);
  req.idempotency = course.context();
  catchRejections(req.route);
  holdResponse(req, res, course);
  next();
}

// The route pattern: the canonical form (src/protocol.txt, "route rules") of the path the
// route was declared with (within its router: the mount path is in the request's path);
// the path itself where the route is not known yet (app.use).
function routeOf(req) {
  return req.route ? canonicalRoute('colon', req.route.path) : splitUrl(req.originalUrl).path;
}

// {body} or {answer}: the request's raw bytes, read here unless a parser placed before
// the middleware read them already (then only its kept copy will do: express.raw()'s
// Buffer body, or a verify callback's req.rawBody; else 500, never a wait for bytes that
// will not come).  Over `limit` bytes: 413.
async function requestBody(req, limit) {
  if (req._body || req.readableEnded) {
    if (Buffer.isBuffer(req.rawBody)) return { body: req.rawBody };
    if (Buffer.isBuffer(req.body)) return { body: req.body };
    return { answer: readBefore() };
  }
  if (Number(req.headers['content-length']) > limit) return { answer: answers.bodyTooLarge(limit) };
  const held = await readStream(req, limit);
  return held.over ? { answer: answers.bodyTooLarge(limit) } : { body: held.bytes() };
}

// An answer of the middleware's own, with its outcome told first.
function deliver(config, req, res, answer) {
  notifyOutcome(config, req, answer.outcome, (error) => report(req, error));
  send(res, answer);
}

function send(res, answer) {
  res.status(answer.status);
  for (const [name, value] of Object.entries(answer.headers)) res.setHeader(name, value);
  res.end(answer.body);
}

// Logs an error the client is answered 500 for without it, as Express's own final
// handler does.
function report(req, error) {
  if (req.app.get('env') !== 'test') console.error(error && error.stack ? error.stack : error);
}

// Express 5 answers a handler's rejected promise with next(error); Express 4 does not,
// and an async handler that throws would kill the process or hang the request with its
// transaction open.  So in Express 4 (whose Layer has handle_request) the handlers of
// the middleware's own route get their rejections passed to next, as Express 5 does.
const wrappedRoutes = new WeakSet();
function catchRejections(route) {
  if (!route || wrappedRoutes.has(route)) return;
  wrappedRoutes.add(route);
  for (const layer of route.stack) {
    if (typeof layer.handle_request !== 'function') continue;
    const handle = layer.handle;
    layer.handle = handle.length > 3
      ? function (error, req, res, next) { return settled(handle.call(this, error, req, res, next), next); }
      : function (req, res, next) { return settled(handle.call(this, req, res, next), next); };
  }
}

function settled(result, next) {
  if (result && typeof result.then === 'function') {
    result.then(undefined, (error) => next(error || new Error('the handler rejected without a reason')));
  }
  return result;
}

// Holds what the handler writes (writeHead, write, end: res.json, res.send, a piped
// stream) until its response is stored and committed; sends it then, or the problem that
// replaces it (a response over the server's limit, or a SQLSTATE a retry resolves).
const HELD = ['writeHead', 'write', 'end', 'flushHeaders'];
function holdResponse(req, res, course) {
  const own = HELD.filter((name) => Object.prototype.hasOwnProperty.call(res, name))
    .map((name) => [name, res[name]]);
  const original = Object.fromEntries(HELD.map((name) => [name, res[name]]));
  const release = () => {
    for (const name of HELD) delete res[name];
    for (const [name, value] of own) res[name] = value;
  };
  const held = course.heldBody();
  let ended = false;
  const bytes = (chunk, encoding) =>
    Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk, typeof encoding === 'string' ? encoding : 'utf8');

  res.writeHead = function (status, message, headers) {
    if (typeof message !== 'string') headers = message;
    else this.statusMessage = message;
    this.statusCode = status;
    if (Array.isArray(headers)) {
      for (let i = 0; i + 1 < headers.length; i += 2) this.setHeader(headers[i], headers[i + 1]);
    } else if (headers) {
      for (const [name, value] of Object.entries(headers)) this.setHeader(name, value);
    }
    return this;
  };
  res.flushHeaders = () => {};
  res.write = function (chunk, encoding, callback) {
    if (typeof encoding === 'function') [callback, encoding] = [encoding, undefined];
    if (chunk != null && !ended) held.add(bytes(chunk, encoding));
    if (callback) process.nextTick(callback);
    return true;
  };
  res.end = function (chunk, encoding, callback) {
    if (typeof chunk === 'function') [callback, chunk] = [chunk, undefined];
    else if (typeof encoding === 'function') [callback, encoding] = [encoding, undefined];
    if (ended) return this;
    ended = true;
    if (chunk != null) held.add(bytes(chunk, encoding));
    release();
    const body = held.bytes();
    const response = { status: this.statusCode, headers: this.getHeaders(), body };
    course.finish(response).then(
      (answer) => {
        if (answer === response) {
          notifyOutcome(course.options, req, response.outcome, (error) => report(req, error));
          original.end.call(this, body, callback);
        } else {
          for (const name of this.getHeaderNames()) this.removeHeader(name);
          deliver(course.options, req, this, answer);
        }
      },
      (error) => {
        report(req, error);
        for (const name of this.getHeaderNames()) this.removeHeader(name);
        deliver(course.options, req, this, answers.internalError());
      },
    );
    return this;
  };
}

module.exports = { idempotency };
