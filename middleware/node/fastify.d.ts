// Fastify 4 and 5 (fastify.js).  Fastify, whose package has its types, is an optional
// peer: an app without it, an Express-only one, compiles this file too (under strict,
// without skipLibCheck), where nothing below is used.
// @ts-ignore: fastify is not installed in an app without Fastify
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { Pool } from 'pg';
import type { IdempotencyContext, IdempotencyOptions } from './core';

export type { IdempotencyContext, IdempotencyOptions } from './core';

/** The options a route may change in `config: { idempotency: {...} }`: the hooks get Fastify's `request`. */
export type FastifyRouteIdempotencyOptions = IdempotencyOptions<FastifyRequest>;

/** The plugin's options: the pool and the options of every route. */
export interface FastifyIdempotencyOptions extends FastifyRouteIdempotencyOptions {
  pool: Pool;
}

/** `app.register(fastifyIdempotency, { pool })`: protects the routes of that context and its children. */
export const fastifyIdempotency: FastifyPluginAsync<FastifyIdempotencyOptions>;

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the plugin on the requests it protects; `null` on the others. */
    idempotency: IdempotencyContext | null;
  }
  interface FastifyContextConfig {
    /** `false`: the route is not protected; an object: its own options. */
    idempotency?: boolean | FastifyRouteIdempotencyOptions;
  }
}
