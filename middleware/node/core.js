'use strict';
// The framework-neutral part: one HTTP request through the extension's SQL functions
// (middleware/README.md is the contract every package keeps).
//
// The SQL functions do the work (claim, arbitration, storage, replay); this module turns
// a request into their arguments and their answers into HTTP responses:
//   claimed      the handler runs in the claim's transaction; its response is stored
//   replay       the stored status, headers and body, plus Idempotent-Replayed: true
//   in_progress  409 with Retry-After (or wait, with options.wait)
//   mismatch     422
//   no key       400 when options.required, else the handler runs unprotected
// The adapters (express.js, fastify.js) only translate the framework's request and
// response; every rule about what is answered lives here.

const MAX_BODY_BYTES = 1024 * 1024;

const DEFAULTS = Object.freeze({
  header: 'idempotency-key',
  required: true,
  // Response headers stored and replayed (lower case).
  storedHeaders: ['content-type', 'location'],
  // 5xx responses are not stored: the transaction rolls back and a retry runs again.
  storeServerErrors: false,
  wait: null, // seconds to wait for a request in flight instead of answering 409
  ttl: null, // interval text ('24 hours'); null: the server's default
  // tenant(request) and scope(request) get the framework's own request object.  The
  // scope is the tenant ('' without the hook); perRoute makes it
  // "<tenant> <METHOD> <route pattern>" ("<METHOD> <route pattern>" without a tenant
  // hook); a scope hook replaces both.  On Citus, the scope is the tenant column's value.
  tenant: null,
  scope: null,
  perRoute: false,
  methods: ['POST', 'PATCH'],
  // Request bodies over this many bytes answer 413 before anything runs; null: 1 MiB
  // (MAX_BODY_BYTES), and in Fastify the route's bodyLimit (1 MiB unless set).
  maxBodyBytes: null,
  // Two-phase mode (doc/handlers.md), for handlers that call other systems: the claim
  // commits at once with this lease (interval text); the handler may checkpoint(), which
  // commits; its response commits with its writes after the last checkpoint, fenced by
  // the attempt (a handler whose lease ended and was taken over gets 409).
  lease: null,
});

const CHECKS = {
  header: (v) => typeof v === 'string' && v.length > 0,
  required: (v) => typeof v === 'boolean',
  storedHeaders: (v) => Array.isArray(v) && v.every((h) => typeof h === 'string'),
  storeServerErrors: (v) => typeof v === 'boolean',
  wait: (v) => v == null || (typeof v === 'number' && v >= 0),
  ttl: (v) => v == null || typeof v === 'string',
  tenant: (v) => v == null || typeof v === 'function',
  scope: (v) => v == null || typeof v === 'function',
  perRoute: (v) => typeof v === 'boolean',
  methods: (v) => Array.isArray(v) && v.every((m) => typeof m === 'string'),
  maxBodyBytes: (v) => v == null || (Number.isSafeInteger(v) && v >= 0),
  lease: (v) => v == null || typeof v === 'string',
};

// The options merged over the defaults; a wrong one is a TypeError when the app starts,
// not a 500 on every request.
function settings(options = {}) {
  for (const [name, value] of Object.entries(options)) {
    if (!(name in CHECKS)) throw new TypeError(`pg-idempotency: unknown option ${name}`);
    if (!CHECKS[name](value)) throw new TypeError(`pg-idempotency: option ${name} has a wrong value`);
  }
  const merged = { ...DEFAULTS, ...options };
  merged.header = merged.header.toLowerCase();
  merged.storedHeaders = merged.storedHeaders.map((h) => h.toLowerCase());
  merged.methods = merged.methods.map((m) => m.toUpperCase());
  return Object.freeze(merged);
}

// The SQLSTATEs answered with something other than 500, and how (doc/reference.md,
// "Errors"; generated from src/errcodes.txt); any other error is the handler's or the
// operator's, a 500.
const RETRYABLE = require('./errcodes');

// An application/problem+json answer (RFC 9457).
function problem(status, title, { detail, retryAfter } = {}) {
  const headers = { 'content-type': 'application/problem+json' };
  if (retryAfter != null) headers['retry-after'] = String(retryAfter);
  const document = { type: 'about:blank', title, status };
  if (detail) document.detail = detail;
  return { status, headers, body: Buffer.from(JSON.stringify(document)) };
}

function problemFor(error) {
  const answer = error && RETRYABLE[error.code];
  return answer ? problem(answer[0], answer[1], { retryAfter: answer[2] }) : null;
}

// The answers of this module's own, other than the SQLSTATE map's.
const LIMIT = 'idempotency.max_response_bytes';
const answers = {
  keyRequired: () => problem(400, 'The Idempotency-Key header is required'),
  bodyTooLarge: (limit) => problem(413, 'The request body is too large', {
    detail: `The body is over ${limit} bytes, the middleware's maxBodyBytes.` }),
  badJson: () => problem(400, 'The request body is not valid JSON'),
  hookFailed: () => problem(500, 'The tenant or scope hook failed'),
  responseTooLarge: (detail) => problem(500, `The response is over ${LIMIT}`, {
    detail: detail || `It cannot be stored whole, so it was not sent and its work was rolled back; ${LIMIT} is the server's limit.` }),
  bodyOmitted: () => problem(500, 'The stored response of this Idempotency-Key has no body', {
    detail: `It was over ${LIMIT} and was stored without its body; a replay would not be the first answer.` }),
  mismatch: () => problem(422, 'The Idempotency-Key was used for a different request'),
  inProgress: (retryAfter) => problem(409, 'A request with this Idempotency-Key is in progress', { retryAfter }),
  keyNotUtf8: () => problem(400, 'The Idempotency-Key header is not valid UTF-8'),
  split: () => problem(500, "The request's transaction was split by a connection pooler", { detail: SPLIT }),
};

const SPLIT = 'idempotency_begin and idempotency_complete did not run in one server transaction that '
  + 'committed, so the work was rolled back and nothing was stored. Behind a pooler in transaction '
  + 'mode (PgBouncer before 1.21), give node-postgres queries no name; from PgBouncer 1.21 set '
  + "max_prepared_statements; or use the pooler's session mode.";

// The key of a request, from its header as Node's parser gives it (a byte per character,
// latin1), or the answer instead: 400 when it is required and missing, or not UTF-8.  The
// key is the header's bytes read as UTF-8 in every package of the project, so that a
// retry moved to another package finds its key.  A string with a character past U+00FF was
// decoded before (not by Node's parser) and is taken as it is.
const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
function keyOf(header, options) {
  if (header == null) return { key: null, refusal: options.required ? answers.keyRequired() : null };
  if (/[^\x00-\xff]/.test(header)) {
    return /\p{Surrogate}/u.test(header) ? { refusal: answers.keyNotUtf8() } : { key: header, refusal: null };
  }
  try {
    return { key: UTF8.decode(Buffer.from(header, 'latin1')), refusal: null };
  } catch {
    return { refusal: answers.keyNotUtf8() };
  }
}

// The scope of a request: options.scope(request), or the tenant, per route with
// options.perRoute.  The hooks get the framework's own request object and may be async;
// a hook that throws, or returns no text, rejects: the adapter answers 500.
async function scopeOf(native, method, route, options) {
  if (options.scope) return hookText(await options.scope(native), 'scope');
  const tenant = options.tenant ? hookText(await options.tenant(native), 'tenant') : null;
  if (!options.perRoute) return tenant ?? '';
  return tenant == null ? `${method} ${route}` : `${tenant} ${method} ${route}`;
}

function hookText(value, hook) {
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'bigint') return String(value);
  throw new TypeError(`pg-idempotency: the ${hook} hook returned ${value === null ? 'null' : typeof value}, not a string`);
}

// The server transaction a statement runs in: the server process and the transaction's
// start, as text that no setting changes.  A pooler in transaction mode runs a
// transaction on one server connection from BEGIN to its end, so begin and complete name
// the same one unless the transaction was split: ended early (a driver's named statement
// run as another client's COMMIT or ROLLBACK, where that client prepared the name) with
// the rest run elsewhere.
const SERVER_TRANSACTION = `pg_catalog.concat(pg_catalog.pg_backend_pid(), ' ',
  pg_catalog.to_char(pg_catalog.timezone('UTC', pg_catalog.now()), 'YYYY-MM-DD HH24:MI:SS.US'))`;

// A JSON content type: application/json or any application/...+json.
function isJsonType(contentType) {
  return /^application\/([\w.-]+\+)?json\s*(;|$)/i.test(contentType || '');
}

// request_hash_parts(method, route pattern, path, query string, body), the body hashed by
// the server's rule for every package (request_hash_body): a JSON body by its value, not
// its spelling, any other by its bytes.
function fingerprint(request, first) {
  const n = (i) => `$${first + i}`;
  return {
    sql: `request_hash_parts(${n(0)}::text, ${n(1)}::text, ${n(2)}::text, ${n(3)}::text, ` +
      `request_hash_body(${n(4)}::text, ${n(5)}::bytea)::text)`,
    params: [request.method, request.route, request.path, request.query, request.contentType || '', request.body],
  };
}

async function begin(client, request, options, lease) {
  const hash = fingerprint(request, 3);
  const params = [request.scope, request.key, ...hash.params];
  const named = [];
  if (options.ttl != null) named.push(`ttl => $${params.push(options.ttl)}::interval`);
  if (lease != null) named.push(`lease => $${params.push(lease)}::interval`);
  if (options.wait != null) named.push(`wait => make_interval(secs => $${params.push(options.wait)})`);
  const { rows } = await client.query(
    `SELECT outcome::text AS outcome, response_status, response_headers, response_body_bytes,
            response_body_omitted, retry_after_seconds, attempt, recovery_point,
            current_setting('idempotency.max_response_bytes', true) AS max_response_bytes,
            ${SERVER_TRANSACTION} AS server_transaction
       FROM idempotency_begin($1, $2, ${hash.sql}${named.map((n) => ', ' + n).join('')})`,
    params,
  );
  return rows[0];
}

// The server's limit as current_setting shows it ('1MB', '54000B'), in bytes; null when
// unknown (the server still enforces it).
function bytesOf(setting) {
  const match = /^(\d+)\s*(B|kB|MB|GB|TB)?$/.exec(setting || '');
  if (!match) return null;
  const unit = { B: 1, kB: 1024, MB: 1024 ** 2, GB: 1024 ** 3, TB: 1024 ** 4 }[match[2] || 'B'];
  return Number(match[1]) * unit;
}

function unclaimed(row) {
  if (row.outcome === 'replay') {
    // A record stored without its body would replay something other than the first
    // answer: nothing is acknowledged instead.
    if (row.response_body_omitted) return answers.bodyOmitted();
    return {
      status: row.response_status,
      headers: { ...(row.response_headers || {}), 'idempotent-replayed': 'true' },
      body: row.response_body_bytes || Buffer.alloc(0),
    };
  }
  if (row.outcome === 'in_progress') return answers.inProgress(row.retry_after_seconds);
  return answers.mismatch();
}

// omit_oversized => false: a response over the server's limit raises 54000 instead of
// being stored without its body.
const COMPLETE = `idempotency_complete($1, $2, $3, response_headers => $4::jsonb,
                                      response_body_bytes => $5, attempt => $6::integer,
                                      omit_oversized => false)`;

// Stores the response: true when stored, false when not, null when the statement did not
// run in `transaction`, the server transaction begin ran in (null: not checked, in
// two-phase mode, where they differ by design).  The server stores a 5xx (which only
// options.storeServerErrors asks for) only with idempotency.store_server_errors on: it is
// set for the transaction first, in the same statement -- a CASE evaluates its condition
// before its result (PostgreSQL's manual, "Expression Evaluation Rules").
async function complete(client, request, response, options, attempt, transaction) {
  const headers = {};
  for (const [name, value] of Object.entries(response.headers)) {
    if (options.storedHeaders.includes(name.toLowerCase())) headers[name.toLowerCase()] = String(value);
  }
  const serverErrors = response.status >= 500
    ? " AND pg_catalog.set_config('idempotency.store_server_errors', 'on', true) IS NOT NULL" : '';
  const { rows } = await client.query(
    `SELECT CASE WHEN ($7::text IS NULL OR $7::text = ${SERVER_TRANSACTION})${serverErrors}
                 THEN ${COMPLETE} END AS stored`,
    [request.scope, request.key, response.status, JSON.stringify(headers), response.body, attempt ?? null,
      transaction ?? null]);
  return rows[0].stored;
}

// What a handler writes, held until it is stored: the chunks up to `cap` bytes, and only
// the count past it (such a response cannot be stored whole, so it is never sent).
class HeldBody {
  constructor(cap) {
    this.cap = cap ?? Infinity;
    this.chunks = [];
    this.size = 0;
  }

  add(chunk) {
    this.size += chunk.length;
    if (this.size <= this.cap) this.chunks.push(chunk);
    else this.chunks = null;
  }

  get over() {
    return this.size > this.cap;
  }

  bytes() {
    return this.chunks ? Buffer.concat(this.chunks, this.size) : null;
  }
}

// A stream's bytes, read into a HeldBody of `cap` bytes: resolves with the HeldBody once
// the stream ends or is over the cap.  Over the cap, the listeners go: the caller
// answers at once, and the rest of the stream is discarded (a request) or destroyed (a
// handler's stream).
function readStream(stream, cap) {
  const held = new HeldBody(cap);
  return new Promise((resolve, reject) => {
    const settle = (how, value) => {
      stream.off('data', onData).off('end', onEnd).off('error', onError);
      how(value);
    };
    const onData = (chunk) => {
      held.add(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk));
      if (held.over) settle(resolve, held);
    };
    const onEnd = () => settle(resolve, held);
    const onError = (error) => settle(reject, error);
    stream.on('data', onData).on('end', onEnd).on('error', onError);
  });
}

// The lifecycle of one request, for the adapters: start() claims (or answers), finish()
// stores the handler's response and commits (or rolls back), abort() rolls back.
// `request` is {method, route, path, query, body, key, contentType, scope}.
class Course {
  constructor(pool, request, options) {
    this.pool = pool;
    this.request = request;
    this.options = options;
    this.client = null;
    this.maxResponseBytes = null; // the server's limit, once claimed
  }

  // An answer to send without running the handler, or null: run it, with this.client
  // in the claim's transaction.
  async start() {
    if (this.request.key == null) {
      const { refusal } = keyOf(null, this.options);
      if (refusal) return refusal;
      this.client = await this.pool.connect();
      this.unprotected = true;
      await this.query('BEGIN');
      return null;
    }
    this.client = await this.pool.connect();
    try {
      await this.client.query('BEGIN');
      const lease = this.options.lease;
      const row = await begin(this.client, this.request, this.options, lease);
      if (row.outcome === 'claimed') {
        this.attempt = row.attempt;
        this.recoveryPoint = row.recovery_point;
        this.maxResponseBytes = bytesOf(row.max_response_bytes);
        // complete must run in this server transaction, unless the claim commits here.
        this.transaction = lease == null ? row.server_transaction : null;
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

  async query(sql) {
    try {
      await this.client.query(sql);
    } catch (error) {
      await this.end('ROLLBACK');
      throw error;
    }
  }

  // The most of a response body worth holding: past the server's limit it cannot be
  // stored whole.
  get responseCap() {
    return this.unprotected ? null : this.maxResponseBytes;
  }

  heldBody() {
    return new HeldBody(this.responseCap);
  }

  // Stores the handler's {status, headers, body} and commits; returns what to send: the
  // response, or a problem when it cannot be stored (over the limit: 500, its work rolled
  // back) or storing it failed on a SQLSTATE a retry resolves.  `body` null: a body over
  // the limit, not kept.
  async finish(response) {
    try {
      if (this.unprotected) {
        if (await this.commit()) return response;
        throw new Error('pg-idempotency: the server answered COMMIT with ROLLBACK');
      }
      if (response.body == null) {
        await this.abort();
        return answers.responseTooLarge(null);
      }
      if (response.status >= 500 && !this.options.storeServerErrors) {
        await this.abort(); // the work and the claim: a retry runs again
        return response;
      }
      const stored = await complete(this.client, this.request, response, this.options,
        this.options.lease != null ? this.attempt : null, this.transaction);
      if (stored == null) {
        // begin and complete ran in different server transactions: a pooler split the
        // request's, and part of its work may have run outside it.  Nothing is acknowledged.
        await this.abort();
        return answers.split();
      }
      if (!stored) {
        // Nothing stored: the work must not commit without its response, or a retry
        // would run it again.  Rolled back, the 5xx is sent as any 5xx not stored.
        await this.abort();
        return response;
      }
      return await this.commit() ? response : answers.split();
    } catch (error) {
      await this.end('ROLLBACK');
      if (error && error.code === '54000') return answers.responseTooLarge(error.detail);
      const answer = problemFor(error);
      if (answer) return answer;
      throw error;
    }
  }

  // Two-phase mode: records progress and renews the lease, committed at once.
  async checkpoint(recoveryPoint) {
    await this.client.query('SELECT idempotency_checkpoint($1, $2, $3, attempt => $4)',
      [this.request.scope, this.request.key, recoveryPoint, this.attempt]);
    await this.client.query('COMMIT; BEGIN');
  }

  async abort() {
    if (this.client && this.options.lease != null && this.attempt != null) {
      // A committed claim: release it, so that the next retry goes on at once.
      try {
        await this.client.query('ROLLBACK');
        await this.client.query('SELECT idempotency_release($1, $2, attempt => $3)',
          [this.request.scope, this.request.key, this.attempt]);
      } catch {
        // Its lease ends by itself; a newer attempt may already hold it (IK003).
      }
    }
    await this.end('ROLLBACK');
  }

  // Commits and gives the connection back: whether the server committed.  A response goes
  // out only once its transaction is known to have committed: the COMMIT of a transaction
  // that failed answers ROLLBACK.  An error is thrown.
  async commit() {
    const client = this.client;
    this.client = null;
    let tag;
    try {
      ({ command: tag } = await client.query('COMMIT'));
    } catch (error) {
      client.release(error);
      throw error;
    }
    client.release();
    return tag === 'COMMIT';
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

  // What the handler gets as req.idempotency / request.idempotency.
  context() {
    return {
      client: this.client,
      scope: this.unprotected ? null : this.request.scope,
      key: this.request.key,
      attempt: this.attempt ?? null,
      recoveryPoint: this.recoveryPoint ?? null,
      checkpoint: (point) => this.checkpoint(point),
    };
  }
}

// The parts of a URL the fingerprint takes: the path and the query string as sent,
// without its "?".
function splitUrl(url) {
  const at = url.indexOf('?');
  return at < 0 ? { path: url, query: '' } : { path: url.slice(0, at), query: url.slice(at + 1) };
}

module.exports = {
  MAX_BODY_BYTES, Course, settings, problem, answers, keyOf, scopeOf, isJsonType, splitUrl, readStream,
};
