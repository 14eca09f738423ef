// Types shared by the Express and Fastify adapters (core.js).
import type { PoolClient } from 'pg';

/** The options of both adapters; `Request` is the framework's own request type. */
export interface IdempotencyOptions<Request> {
  /** The request header that carries the key (default `'Idempotency-Key'`, in any case). */
  header?: string;
  /** Answer 400 without a key (default); `false` runs the handler unprotected. */
  required?: boolean;
  /** Response headers stored and replayed (default `['Content-Type', 'Location']`, in any case). */
  storedHeaders?: string[];
  /** Store responses with status 500 or more instead of rolling them back (default `false`). */
  storeServerErrors?: boolean;
  /** Seconds to wait for a request in flight instead of answering 409 (default `null`). */
  wait?: number | null;
  /** How long a completed key replays, as interval text (`'24 hours'`); `null`: the server's `idempotency.default_ttl`. */
  ttl?: string | null;
  /**
   * The tenant of a request, from the framework's own request object: the scope of its
   * keys.  A hook that throws (or returns no text) answers 500 and runs nothing.
   */
  tenant?: ((request: Request) => string | number | Promise<string | number>) | null;
  /**
   * The whole scope, replacing the tenant and `scopePerRoute`; on Citus, the tenant column's
   * value.  A hook that throws answers 500 and runs nothing.
   */
  scope?: ((request: Request) => string | number | Promise<string | number>) | null;
  /**
   * Scope keys per route: `"<tenant> <METHOD> <route pattern>"`, the pattern in its
   * canonical form (`/orders/{id}`) (default `false`: the tenant alone).
   */
  scopePerRoute?: boolean;
  /** @deprecated `scopePerRoute`'s old name, taken with a warning until 0.6.0. */
  perRoute?: boolean;
  /** The methods protected (default `['POST', 'PATCH']`). */
  methods?: string[];
  /** Request bodies over this many bytes answer 413 (default 1 MiB; Fastify: the route's `bodyLimit`). */
  maxRequestBytes?: number | null;
  /** @deprecated `maxRequestBytes`'s old name, taken with a warning until 0.6.0. */
  maxBodyBytes?: number | null;
  /** Two-phase mode: the claim commits at once with this lease, as interval text (`'2 minutes'`). */
  lease?: string | null;
  /**
   * Called once per protected request, before its answer is sent, with what it came to and
   * the framework's own request: for a counter or a span's attribute.  What it throws (or
   * its promise rejects with) is logged, never answered.
   */
  onOutcome?: ((outcome: Outcome, request: Request) => void | Promise<void>) | null;
}

/** What a protected request came to (src/protocol.txt, "outcomes"; middleware/README.md, "Observability"). */
export type Outcome = 'claimed' | 'replayed' | 'in_flight' | 'mismatch' | 'conflict' | 'too_large' | 'refused'
  | 'unprotected' | 'error';

/** What the handler gets as `req.idempotency` (Express) or `request.idempotency` (Fastify). */
export interface IdempotencyContext {
  /** The connection in the claim's transaction: the handler's writes commit with its response. */
  client: PoolClient;
  /** The key's scope; `null` when the request runs unprotected (no key, `required: false`). */
  scope: string | null;
  /** The request's key; `null` when it has none. */
  key: string | null;
  /** The claim's attempt (two-phase mode: the fence of its completion). */
  attempt: number | null;
  /** Two-phase mode: what an earlier attempt recorded with `checkpoint`. */
  recoveryPoint: string | null;
  /** Two-phase mode: records progress and renews the lease, committed at once. */
  checkpoint(recoveryPoint: string): Promise<void>;
}
