// pg-idempotency: Idempotency-Key middleware over the idempotency PostgreSQL extension.
export { idempotency } from './express';
export type { ExpressIdempotencyOptions } from './express';
export { fastifyIdempotency } from './fastify';
export type { FastifyIdempotencyOptions, FastifyRouteIdempotencyOptions } from './fastify';
export type { IdempotencyContext, IdempotencyOptions } from './core';
