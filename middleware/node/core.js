'use strict';
// The framework-neutral part: one HTTP request through the extension's SQL functions.
//
// The SQL functions do the work (claim, arbitration, storage, replay); this module turns
// a request into their arguments and their answers into HTTP responses, as the IETF
// Idempotency-Key draft and Stripe answer:
//   claimed      the handler runs in the claim's transaction; its response is stored
//   replay       the stored status, headers and body, plus Idempotent-Replayed: true
//   in_progress  409 with Retry-After (or wait, with options.wait)
//   mismatch     422
//   no key       400 when options.required, else the handler runs unprotected

const DEFAULTS = {
  header: 'idempotency-key',
  required: true,
  // Response headers stored and replayed (lower case).
  storedHeaders: ['content-type', 'location'],
  // 5xx responses are not stored: the transaction rolls back and a retry runs again.
  storeServerErrors: false,
  wait: null, // seconds to wait for a request in flight instead of answering 409
  ttl: null, // interval text ('24 hours'); null: the server's default
  // scope(request): by default method and route pattern, prefixed by tenant(request).
  // On Citus, return the tenant column's value (doc/citus.md).
  scope: null,
  tenant: null,
  methods: ['POST', 'PATCH'],
  // Two-phase mode (doc/handlers.md), for handlers that call other systems: the claim
  // commits at once with this lease (interval text); the handler may checkpoint(), which
  // commits; its response commits with its writes after the last checkpoint, fenced by
  // the attempt (a handler whose lease ended and was taken over gets 409).
  lease: null,
};

function settings(options) {
  const merged = { ...DEFAULTS, ...options };
  merged.header = merged.header.toLowerCase();
  merged.storedHeaders = merged.storedHeaders.map((h) => h.toLowerCase());
  return merged;
}

// The SQLSTATEs answered with something other than 500, and how (doc/reference.md,
// "Errors"; generated from src/errcodes.txt); any other error is the handler's or the
// operator's, a 500.
const RETRYABLE = require('./errcodes');

function problem(status, title, retryAfter) {
  const headers = { 'content-type': 'application/problem+json' };
  if (retryAfter != null) headers['retry-after'] = String(retryAfter);
  return { status, headers, body: Buffer.from(JSON.stringify({ type: 'about:blank', title, status })) };
}

function problemFor(error) {
  const answer = error && RETRYABLE[error.code];
  return answer ? problem(...answer) : null;
}

function scopeOf(request, options) {
  if (options.scope) return options.scope(request);
  const scope = `${request.method} ${request.route}`;
  return options.tenant ? `${options.tenant(request)} ${scope}` : scope;
}

// request_hash of method, path and body; a JSON body by its value, not its spelling.
function fingerprint(request, first) {
  let json = /json/.test(request.contentType || '');
  if (json) {
    try {
      JSON.parse(request.body.toString());
    } catch {
      json = false;
    }
  }
  const body = json
    ? [`request_hash_jsonb($${first + 2}::text)::text`, request.body.toString()]
    : [`request_hash($${first + 2}::bytea)::text`, request.body];
  return {
    sql: `request_hash_parts($${first}::text, $${first + 1}::text, ${body[0]})`,
    params: [request.method, request.path, body[1]],
  };
}

async function begin(client, scope, request, options, lease) {
  const hash = fingerprint(request, 3);
  const params = [scope, request.key, ...hash.params];
  const named = [];
  if (options.ttl != null) named.push(`ttl => $${params.push(options.ttl)}::interval`);
  if (lease != null) named.push(`lease => $${params.push(lease)}::interval`);
  if (options.wait != null) named.push(`wait => make_interval(secs => $${params.push(options.wait)})`);
  const { rows } = await client.query(
    `SELECT outcome::text AS outcome, response_status, response_headers, response_body_bytes,
            retry_after_seconds, attempt, recovery_point
       FROM idempotency_begin($1, $2, ${hash.sql}${named.map((n) => ', ' + n).join('')})`,
    params,
  );
  return rows[0];
}

function unclaimed(row) {
  if (row.outcome === 'replay') {
    return {
      status: row.response_status,
      headers: { ...(row.response_headers || {}), 'idempotent-replayed': 'true' },
      body: row.response_body_bytes || Buffer.alloc(0),
    };
  }
  if (row.outcome === 'in_progress') {
    return problem(409, 'A request with this Idempotency-Key is in progress', row.retry_after_seconds);
  }
  return problem(422, 'The Idempotency-Key was used for a different request');
}

async function complete(client, scope, key, response, options, attempt) {
  const headers = {};
  for (const [name, value] of Object.entries(response.headers)) {
    if (options.storedHeaders.includes(name.toLowerCase())) headers[name.toLowerCase()] = String(value);
  }
  await client.query(
    `SELECT idempotency_complete($1, $2, $3, response_headers => $4::jsonb,
                                 response_body_bytes => $5, attempt => $6::integer)`,
    [scope, key, response.status, JSON.stringify(headers), response.body, attempt ?? null],
  );
}

// The lifecycle of one request, for the adapters: start() claims (or answers), finish()
// stores the handler's response and commits (or rolls back), abort() rolls back.
class Course {
  constructor(pool, request, options) {
    this.pool = pool;
    this.request = request;
    this.options = options;
    this.scope = scopeOf(request, options);
    this.client = null;
  }

  // An answer to send without running the handler, or null: run it, with this.client
  // in the claim's transaction.
  async start() {
    if (this.request.key == null) {
      if (this.options.required) return problem(400, 'The Idempotency-Key header is required');
      this.client = await this.pool.connect();
      await this.client.query('BEGIN');
      this.unprotected = true;
      return null;
    }
    this.client = await this.pool.connect();
    try {
      await this.client.query('BEGIN');
      const lease = this.options.lease;
      const row = await begin(this.client, this.scope, this.request, this.options, lease);
      if (row.outcome === 'claimed') {
        this.attempt = row.attempt;
        this.recoveryPoint = row.recovery_point;
        if (lease != null) await this.client.query('COMMIT; BEGIN');
        return null;
      }
      await this.end('ROLLBACK');
      return unclaimed(row);
    } catch (error) {
      await this.end('ROLLBACK');
      const answer = problemFor(error);
      if (answer) return answer;
      throw error;
    }
  }

  // Stores the handler's {status, headers, body} and commits; what to send instead when
  // that fails with a SQLSTATE a retry resolves.
  async finish(response) {
    try {
      if (this.unprotected || response.status < 500 || this.options.storeServerErrors) {
        if (!this.unprotected) {
          await complete(this.client, this.scope, this.request.key, response, this.options,
                         this.options.lease != null ? this.attempt : null);
        }
        await this.end('COMMIT');
      } else {
        await this.abort(); // the work and the claim: a retry runs again
      }
      return response;
    } catch (error) {
      await this.end('ROLLBACK');
      const answer = problemFor(error);
      if (answer) return answer;
      throw error;
    }
  }

  // Two-phase mode: records progress and renews the lease, committed at once.
  async checkpoint(recoveryPoint) {
    await this.client.query('SELECT idempotency_checkpoint($1, $2, $3, attempt => $4)',
      [this.scope, this.request.key, recoveryPoint, this.attempt]);
    await this.client.query('COMMIT; BEGIN');
  }

  async abort() {
    if (this.client && this.options.lease != null && this.attempt != null) {
      // A committed claim: release it, so that the next retry goes on at once.
      try {
        await this.client.query('ROLLBACK');
        await this.client.query('SELECT idempotency_release($1, $2, attempt => $3)',
          [this.scope, this.request.key, this.attempt]);
      } catch {
        // Its lease ends by itself; a newer attempt may already hold it (IK003).
      }
    }
    await this.end('ROLLBACK');
  }

  async end(command) {
    const client = this.client;
    if (!client) return;
    this.client = null;
    try {
      await client.query(command);
      client.release();
    } catch (error) {
      client.release(error); // a broken connection leaves the pool
    }
  }
}

module.exports = { Course, settings, problem };
