'use strict';
// Fastify 4 and 5: a plugin that protects every route's POST and PATCH requests
// (options.methods) in the context it is registered in and its children, as
// fastify-plugin's plugins do; a route changes its options with
// `config: { idempotency: {...} }`, or opts out with `config: { idempotency: false }`.
//
//   fastify.register(fastifyIdempotency, { pool });
//   fastify.post('/orders', async (request, reply) => {
//     await request.idempotency.client.query('INSERT ...');   // in the claim's transaction
//     reply.code(201);
//     return { ... };
//   });
const { Readable } = require('node:stream');
const {
  MAX_REQUEST_BYTES, Course, settings, renamed, answers, keyOf, canonicalRoute, scopeOf, splitUrl, readStream,
  notifyOutcome, telemetry,
} = require('./core');

const kState = Symbol('pg-idempotency'); // per request: {config, key, body, course}

async function fastifyIdempotency(fastify, options = {}) {
  const { pool, ...given } = options;
  const rest = renamed(given);
  if (!pool || typeof pool.connect !== 'function') {
    throw new TypeError('pg-idempotency: register(fastifyIdempotency, { pool }) needs a pg Pool');
  }
  const base = settings(rest);
  const routeSettings = new WeakMap(); // a route's config.idempotency -> its settings
  const configOf = (request) => {
    const own = (request.routeOptions.config || {}).idempotency;
    if (own === false) return null;
    if (own == null || own === true) return base;
    if (!routeSettings.has(own)) routeSettings.set(own, settings({ ...rest, ...renamed(own) }));
    return routeSettings.get(own);
  };
  if (!fastify.hasRequestDecorator('idempotency')) fastify.decorateRequest('idempotency', null);

  // The key, then the raw body (for the fingerprint, up to the limit), handed on to
  // Fastify's parsers unchanged.  A registration in a parent context already did it.
  fastify.addHook('preParsing', async (request, reply, payload) => {
    const config = configOf(request);
    if (!config || !config.methods.includes(request.method) || request[kState]) return payload;
    telemetry.startSpan(request, canonicalRoute('colon', request.routeOptions.url));
    const { key, refusal } = keyOf(request.headers[config.header], config);
    if (refusal) return answer(request, reply, config, refusal);
    const limit = config.maxRequestBytes ?? request.routeOptions.bodyLimit ?? MAX_REQUEST_BYTES;
    if (Number(request.headers['content-length']) > limit) return answer(request, reply, config, answers.bodyTooLarge(limit));
    const held = await readStream(payload, limit);
    if (held.over) return answer(request, reply, config, answers.bodyTooLarge(limit));
    const body = held.bytes();
    request[kState] = { config, key, body, course: null };
    return Readable.from([body]);
  });

  // After parsing and validation: the hooks, then the claim.
  fastify.addHook('preHandler', async (request, reply) => {
    const state = request[kState];
    if (!state || state.course) return undefined;
    const { config, key, body } = state;
    const route = canonicalRoute('colon', request.routeOptions.url);
    let scope = '';
    if (key != null) {
      try {
        scope = await scopeOf(request, request.method, route, config);
      } catch (error) {
        request.log.error({ err: error }, 'pg-idempotency: the tenant or scope hook failed');
        return answer(request, reply, config, answers.hookFailed());
      }
    }
    const course = new Course(pool, {
      method: request.method, route, ...splitUrl(request.url), body, key,
      contentType: request.headers['content-type'] || '', scope,
    }, config, (error) => request.log.error({ err: error }, 'pg-idempotency: a database call failed'), request);
    const refused = await course.start();
    if (refused) return answer(request, reply, config, refused);
    state.course = course;
    request.idempotency = course.context();
    return undefined;
  });

  // The response, serialized or a stream (read here, up to the server's limit): stored
  // and committed before it is sent.
  fastify.addHook('onSend', async (request, reply, payload) => {
    const course = request[kState]?.course;
    if (!course || !course.client) return payload;
    let sent;
    try {
      const body = await bytesOf(payload, course.responseCap);
      const response = { status: reply.statusCode, headers: reply.getHeaders(), body };
      sent = await course.finish(response);
      if (sent === response) {
        outcome(request, course.options, sent.outcome);
        return body;
      }
    } catch (error) {
      request.log.error({ err: error }, 'pg-idempotency: the response could not be stored');
      await course.abort();
      sent = answers.internalError();
    }
    outcome(request, course.options, sent.outcome);
    for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name);
    reply.code(sent.status).headers(sent.headers);
    return sent.body;
  });

  // A handler that threw: roll back (the error's reply then passes onSend as is).
  fastify.addHook('onError', async (request) => {
    const course = request[kState]?.course;
    if (course && course.client) outcome(request, course.options, course.ran); // its reply skips onSend's
    await course?.abort();
  });
  // After the reply, nothing stays open (a no-op once finished).
  fastify.addHook('onResponse', async (request) => {
    await request[kState]?.course?.abort();
  });
}

// Tells options.onOutcome what the request came to, before its answer is sent.
function outcome(request, config, name) {
  notifyOutcome(config, request, name,
    (error) => request.log.error({ err: error }, 'pg-idempotency: the onOutcome hook failed'));
}

// An answer from a hook, instead of the handler.
function answer(request, reply, config, problem) {
  outcome(request, config, problem.outcome);
  reply.code(problem.status).headers(problem.headers).send(problem.body);
  return reply;
}

// The payload onSend got, as bytes; null when it is a stream over the server's limit,
// which is then destroyed.
async function bytesOf(payload, cap) {
  if (payload == null) return Buffer.alloc(0);
  if (Buffer.isBuffer(payload)) return payload;
  if (typeof payload === 'string') return Buffer.from(payload);
  if (typeof payload.pipe === 'function') {
    const held = await readStream(payload, cap);
    if (held.over) payload.destroy();
    return held.bytes();
  }
  return Buffer.from(String(payload));
}

// What fastify-plugin would set: hooks and decorators for the context the plugin is
// registered in, not an encapsulated child of it; the name and the Fastify versions.
fastifyIdempotency[Symbol.for('skip-override')] = true;
fastifyIdempotency[Symbol.for('fastify.display-name')] = 'pg-idempotency';
fastifyIdempotency[Symbol.for('plugin-meta')] = { name: 'pg-idempotency', fastify: '4.x || 5.x' };

module.exports = { fastifyIdempotency };
