// Express 4 and 5 (express.js).  Express's types (@types/express) are an optional
// peer, as Express is: an app without them, a Fastify-only one, compiles this file
// too (under strict, without skipLibCheck), where nothing below is used.
// @ts-ignore: @types/express is not installed in an app without Express
import type { Request, RequestHandler } from 'express';
import type { Pool } from 'pg';
import type { IdempotencyContext, IdempotencyOptions } from './core';

export type { IdempotencyContext, IdempotencyOptions } from './core';

/** The options of the Express middleware: the hooks get Express's `req`. */
export type ExpressIdempotencyOptions = IdempotencyOptions<Request>;

/**
 * Route middleware: `app.post('/orders', idempotency(pool), handler)`.  Place it before
 * any body parser: it reads the body, sets `req.rawBody`, and parses JSON into `req.body`.
 */
export function idempotency(pool: Pool, options?: ExpressIdempotencyOptions): RequestHandler;

declare global {
  namespace Express {
    interface Request {
      /** Set by the idempotency middleware on the routes it protects. */
      idempotency: IdempotencyContext;
      /** The request's bytes, as the idempotency middleware read them. */
      rawBody?: Buffer;
    }
  }
}
