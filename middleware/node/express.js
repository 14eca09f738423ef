'use strict';
// Express: route middleware.
//
//   app.post('/orders', idempotency(pool), async (req, res) => {
//     await req.idempotency.client.query('INSERT ...');   // in the claim's transaction
//     res.status(201).json({ ... });
//   });
//
// Put it before body parsers: it reads the raw body (for the fingerprint) and, for JSON,
// sets req.body itself.  The response is held until it is stored and committed.
const { Course, settings } = require('./core');

function readBody(req) {
  if (req.rawBody) return Promise.resolve(req.rawBody);
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

function send(res, answer) {
  res.status(answer.status);
  for (const [name, value] of Object.entries(answer.headers)) res.setHeader(name, value);
  res.end(answer.body);
}

function idempotency(pool, options = {}) {
  const config = settings(options);
  return async (req, res, next) => {
    if (!config.methods.includes(req.method)) return next();
    let course;
    try {
      const body = await readBody(req);
      req.rawBody = body;
      const contentType = req.headers['content-type'] || '';
      if (/json/.test(contentType) && body.length > 0 && req.body === undefined) {
        req.body = JSON.parse(body.toString());
        req._body = true; // body parsers leave it alone
      }
      course = new Course(pool, {
        method: req.method,
        route: req.route ? req.route.path : req.path,
        path: req.path,
        body,
        key: req.headers[config.header] ?? null,
        contentType,
      }, config);
      const answer = await course.start();
      if (answer) return send(res, answer);
    } catch (error) {
      if (course) await course.abort();
      return next(error);
    }
    req.idempotency = {
      client: course.client, scope: course.scope, key: course.request.key,
      attempt: course.attempt, recoveryPoint: course.recoveryPoint,
      checkpoint: (point) => course.checkpoint(point) };
    holdResponse(res, course, next);
    next();
  };
}

// Holds what the handler writes until its response is stored and committed; sends the
// response then (or a 409/503 answer when storing it failed on a retryable SQLSTATE).
function holdResponse(res, course, next) {
  const write = res.write.bind(res);
  const end = res.end.bind(res);
  const chunks = [];
  const bytes = (chunk, encoding) =>
    Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk, typeof encoding === 'string' ? encoding : 'utf8');
  res.write = (chunk, encoding) => {
    if (chunk != null) chunks.push(bytes(chunk, encoding));
    return true;
  };
  res.end = (chunk, encoding) => {
    if (chunk != null && typeof chunk !== 'function') chunks.push(bytes(chunk, encoding));
    res.write = write;
    res.end = end;
    const body = Buffer.concat(chunks);
    const headers = {};
    for (const [name, value] of Object.entries(res.getHeaders())) headers[name] = String(value);
    course.finish({ status: res.statusCode, headers, body }).then(
      (answer) => {
        if (answer.body === body) {
          end(body);
        } else {
          for (const name of Object.keys(res.getHeaders())) res.removeHeader(name);
          send(res, answer);
        }
      },
      (error) => next(error),
    );
    return res;
  };
  // A client gone before the handler answered: the transaction must not stay open.
  res.on('close', () => {
    if (course.client) course.abort();
  });
}

module.exports = { idempotency };
