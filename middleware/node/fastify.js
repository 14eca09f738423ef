'use strict';
// Fastify: a plugin that protects every route's POST and PATCH requests (options.methods),
// but for a route declared with `config: { idempotency: false }`.
//
//   fastify.register(fastifyIdempotency, { pool });
//   fastify.post('/orders', async (request, reply) => {
//     await request.idempotency.client.query('INSERT ...');   // in the claim's transaction
//     reply.code(201);
//     return { ... };
//   });
const { Readable } = require('node:stream');
const { Course, settings } = require('./core');

async function readAll(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks);
}

function applies(request, config) {
  const route = request.routeOptions.config || {};
  return config.methods.includes(request.method) && route.idempotency !== false;
}

async function fastifyIdempotency(fastify, options) {
  const { pool, ...rest } = options;
  const config = settings(rest);

  fastify.decorateRequest('idempotency', null);

  // The raw body, for the fingerprint, handed on to Fastify's parsers unchanged.
  fastify.addHook('preParsing', async (request, reply, payload) => {
    if (!applies(request, config)) return payload;
    request.rawBody = await readAll(payload);
    return Readable.from([request.rawBody]);
  });

  fastify.addHook('preHandler', async (request, reply) => {
    if (!applies(request, config)) return;
    const course = new Course(pool, {
      method: request.method,
      route: request.routeOptions.url,
      path: request.url.split('?')[0],
      body: request.rawBody || Buffer.alloc(0),
      key: request.headers[config.header] ?? null,
      contentType: request.headers['content-type'] || '',
    }, config);
    const answer = await course.start();
    if (answer) {
      reply.code(answer.status).headers(answer.headers);
      return reply.send(answer.body);
    }
    request.idempotency = {
      client: course.client, scope: course.scope, key: course.request.key,
      attempt: course.attempt, recoveryPoint: course.recoveryPoint,
      checkpoint: (point) => course.checkpoint(point), course };
  });

  // The serialized response: stored and committed before it is sent.
  fastify.addHook('onSend', async (request, reply, payload) => {
    const course = request.idempotency && request.idempotency.course;
    if (!course || !course.client) return payload;
    const body = payload == null ? Buffer.alloc(0) : Buffer.isBuffer(payload) ? payload : Buffer.from(String(payload));
    const headers = {};
    for (const [name, value] of Object.entries(reply.getHeaders())) headers[name] = String(value);
    const answer = await course.finish({ status: reply.statusCode, headers, body });
    if (answer.body === body) return payload;
    reply.code(answer.status);
    for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name);
    reply.headers(answer.headers);
    return answer.body;
  });

  // A handler that threw: roll back (onSend may not run, or run for the error reply).
  fastify.addHook('onError', async (request) => {
    const course = request.idempotency && request.idempotency.course;
    if (course) await course.abort();
  });
  fastify.addHook('onResponse', async (request) => {
    const course = request.idempotency && request.idempotency.course;
    if (course) await course.abort(); // no-op once finished
  });
}

// Hooks for the whole instance, not only an encapsulated child context.
fastifyIdempotency[Symbol.for('skip-override')] = true;
fastifyIdempotency[Symbol.for('fastify.display-name')] = 'pg-idempotency';

module.exports = { fastifyIdempotency };
