'use strict';
// pg-idempotency: Idempotency-Key middleware over the idempotency PostgreSQL extension.
const { idempotency } = require('./express');
const { fastifyIdempotency } = require('./fastify');
const { Course, settings, problem } = require('./core');

module.exports = { idempotency, fastifyIdempotency, Course, settings, problem };
