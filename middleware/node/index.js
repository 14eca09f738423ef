'use strict';
// pg-idempotency: Idempotency-Key middleware over the idempotency PostgreSQL extension.
// Express (express.js) and Fastify (fastify.js) here; the node-idempotency store is
// pg-idempotency/node-idempotency.
const { idempotency } = require('./express');
const { fastifyIdempotency } = require('./fastify');

module.exports = { idempotency, fastifyIdempotency };
