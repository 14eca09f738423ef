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

// What every package shares -- the answers, the options and their defaults, the route
// rules, the SQL -- is src/protocol.txt's, generated into protocol.js.
const {
  ANSWERS, SPLIT_DRIVERS, SQLSTATE_ANSWERS, DEFAULTS: SHARED, DEPRECATED, CONSTANTS,
  ROUTE_RULES, SQL, REPRESENTATION_HEADERS,
} = require('./protocol');
const telemetry = require('./telemetry');

// Stored whatever storedHeaders names: the coding of the stored body and what it varies by.
const REPRESENTATION = REPRESENTATION_HEADERS.map((h) => h.toLowerCase());

// The body limit when none is given (Fastify: the route's bodyLimit first).
const MAX_REQUEST_BYTES = SHARED.maxRequestBytes;

// The options: the protocol's, with this package's defaults where it has its own (the body
// limit null: MAX_REQUEST_BYTES, or in Fastify the route's bodyLimit).
const DEFAULTS = Object.freeze({ ...SHARED, maxRequestBytes: null });

const CHECKS = {
  header: (v) => typeof v === 'string' && v.length > 0,
  required: (v) => typeof v === 'boolean',
  storedHeaders: (v) => Array.isArray(v) && v.every((h) => typeof h === 'string'),
  storeServerErrors: (v) => typeof v === 'boolean',
  wait: (v) => v == null || (typeof v === 'number' && v >= 0),
  ttl: (v) => v == null || typeof v === 'string',
  tenant: (v) => v == null || typeof v === 'function',
  scope: (v) => v == null || typeof v === 'function',
  scopePerRoute: (v) => typeof v === 'boolean',
  methods: (v) => Array.isArray(v) && v.every((m) => typeof m === 'string'),
  maxRequestBytes: (v) => v == null || (Number.isSafeInteger(v) && v >= 0),
  lease: (v) => v == null || typeof v === 'string',
  onOutcome: (v) => v == null || typeof v === 'function',
};
for (const name of Object.keys(SHARED)) {
  if (!CHECKS[name]) throw new Error(`pg-idempotency: the protocol's option ${name} has no check`);
}

// The options with an old spelling (DEPRECATED) renamed, and a warning, once per name.
const warned = new Set();
function renamed(options = {}) {
  const given = {};
  for (const [name, value] of Object.entries(options)) {
    const current = DEPRECATED[name];
    if (current && current in options) {
      throw new TypeError(`pg-idempotency: options ${name} and ${current} are one option; give ${current}`);
    }
    if (current && !warned.has(name)) {
      warned.add(name);
      process.emitWarning(`pg-idempotency: the option ${name} is now ${current}; ${name} goes in 0.6.0`,
        { type: 'DeprecationWarning', code: `PG_IDEMPOTENCY_${name.toUpperCase()}` });
    }
    given[current || name] = value;
  }
  return given;
}

// The options merged over the defaults; a wrong one is a TypeError when the app starts,
// not a 500 on every request.
function settings(options = {}) {
  const given = renamed(options);
  for (const [name, value] of Object.entries(given)) {
    if (!(name in CHECKS)) throw new TypeError(`pg-idempotency: unknown option ${name}`);
    if (!CHECKS[name](value)) throw new TypeError(`pg-idempotency: option ${name} has a wrong value`);
  }
  const merged = { ...DEFAULTS, ...given };
  merged.headerName = merged.header;
  merged.header = merged.header.toLowerCase();
  merged.storedHeaders = merged.storedHeaders.map((h) => h.toLowerCase());
  merged.methods = merged.methods.map((m) => m.toUpperCase());
  return Object.freeze(merged);
}

// An application/problem+json answer (RFC 9457).
// `outcome` is what the request came to (src/protocol.txt, "outcomes"), for onOutcome.
function problem(status, title, { detail, retryAfter, outcome = 'error' } = {}) {
  const headers = { 'content-type': CONSTANTS.problemContentType };
  if (retryAfter != null) headers['retry-after'] = String(retryAfter);
  const document = { type: CONSTANTS.problemType, title, status };
  if (detail) document.detail = detail;
  return { status, headers, body: Buffer.from(JSON.stringify(document)), outcome };
}

// A template's "{name}"s filled in from `values`.
function render(template, values = {}) {
  return template.replace(/\{(\w+)\}/g, (whole, name) => (name in values ? String(values[name]) : whole));
}

// One of the protocol's answers: its status and title, its detail (`values` fill both in,
// `detail` replaces the protocol's), Retry-After from `retryAfter` where it has one.
function protocolAnswer(name, values = {}, { detail, retryAfter } = {}) {
  const [status, title, retry, outcome, template] = ANSWERS[name];
  return problem(status, render(title, values), {
    detail: detail ?? (template != null ? render(template, values) : undefined),
    retryAfter: retry === 'row' ? Math.max(Number(retryAfter ?? 1), 1) : null,
    outcome,
  });
}

// The answer of the SQLSTATE map (src/errcodes.txt) to an error, or null.
function problemFor(error) {
  const answer = error && SQLSTATE_ANSWERS[error.code];
  return answer ? problem(answer[0], answer[1], { retryAfter: answer[2], outcome: answer[3] }) : null;
}

// Calls options.onOutcome(outcome, native), once per protected request, before its answer
// is sent; what it throws (or its promise rejects with) goes to `log`, never to the client.
// The request's span (telemetry.js) ends with it.
function notifyOutcome(options, native, outcome, log) {
  telemetry.finish(native, outcome);
  if (!options.onOutcome) return;
  try {
    const result = options.onOutcome(outcome, native);
    if (result && typeof result.then === 'function') result.then(undefined, log);
  } catch (error) {
    log(error);
  }
}

const LIMIT = 'idempotency.max_response_bytes';
const answers = {
  keyRequired: (header) => protocolAnswer('keyRequired', { header }),
  keyNotUtf8: (header) => protocolAnswer('keyNotUtf8', { header }),
  bodyTooLarge: (limit) => protocolAnswer('bodyTooLarge', { limit, option: 'maxRequestBytes' }),
  badJson: () => protocolAnswer('bodyNotJson'),
  hookFailed: () => protocolAnswer('hookFailed'),
  readBefore: (fix) => protocolAnswer('bodyReadBefore', { fix }),
  responseTooLarge: (limit) => protocolAnswer('responseTooLarge', { setting: limit == null ? LIMIT : `${LIMIT} (${limit} bytes)` }),
  bodyOmitted: () => protocolAnswer('bodyOmitted'),
  mismatch: () => protocolAnswer('mismatch'),
  inProgress: (retryAfter) => protocolAnswer('inProgress', {}, { retryAfter }),
  split: () => protocolAnswer('split', { drivers: SPLIT_DRIVERS }),
  databaseError: () => protocolAnswer('databaseError'),
  internalError: () => protocolAnswer('internalError'),
};

// The key of a request, from its header as Node's parser gives it (a byte per character,
// latin1), or the answer instead: 400 when it is required and missing, or not UTF-8.  The
// key is the header's bytes read as UTF-8 in every package of the project, so that a
// retry moved to another package finds its key.  A string with a character past U+00FF was
// decoded before (not by Node's parser) and is taken as it is.
function keyOf(header, options) {
  if (header == null) return { key: null, refusal: options.required ? answers.keyRequired(options.headerName) : null };
  const key = utf8Text(header);
  return key == null ? { refusal: answers.keyNotUtf8(options.headerName) } : { key, refusal: null };
}

// The text whose UTF-8 bytes a header's latin1 characters are, or null when they are not
// UTF-8 (a string with a character past U+00FF: itself, unless it has a lone surrogate).
const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
function utf8Text(header) {
  if (/[^\x00-\xff]/.test(header)) return /\p{Surrogate}/u.test(header) ? null : header;
  try {
    return UTF8.decode(Buffer.from(header, 'latin1'));
  } catch {
    return null;
  }
}

// The canonical form of a route pattern in `syntax` (src/protocol.txt, "route rules"):
// "colon" for Express and Fastify.
const RULES = Object.fromEntries(Object.entries(ROUTE_RULES)
  .map(([syntax, rules]) => [syntax, rules.map(([pattern, replacement]) => [new RegExp(pattern, 'g'), replacement])]));
function canonicalRoute(syntax, pattern) {
  return RULES[syntax].reduce((route, [rule, replacement]) => route.replace(rule, replacement), String(pattern));
}

// The scope of a request: options.scope(request), or the tenant, per route with
// options.scopePerRoute.  The hooks get the framework's own request object and may be
// async; a hook that throws, or returns no text, rejects: the adapter answers 500.
async function scopeOf(native, method, route, options) {
  if (options.scope) return hookText(await options.scope(native), 'scope');
  const tenant = options.tenant ? hookText(await options.tenant(native), 'tenant') : null;
  if (!options.scopePerRoute) return tenant ?? '';
  return render(tenant == null ? CONSTANTS.scopePerRouteNoTenant : CONSTANTS.scopePerRoute, { tenant, method, route });
}

function hookText(value, hook) {
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'bigint') return String(value);
  throw new TypeError(`pg-idempotency: the ${hook} hook returned ${value === null ? 'null' : typeof value}, not a string`);
}

// A JSON content type: application/json or any application/...+json.
function isJsonType(contentType) {
  return /^application\/([\w.-]+\+)?json\s*(;|$)/i.test(contentType || '');
}

// A statement of the protocol, its parameters taken from `values` by name.
function query(client, name, values) {
  const statement = SQL[name];
  return client.query(statement.text, statement.params.map((param) => values[param] ?? null));
}

// idempotency_begin with the request's fingerprint: request_hash_parts(method, route
// pattern, path, query string, body), the body hashed by the server's rule for every
// package (request_hash_body): a JSON body by its value, not its spelling, any other by
// its bytes.  The content type is the header as Node's parser gives it, a character per
// byte, as every package passes it.
async function begin(client, request, options, lease) {
  const { rows } = await query(client, 'begin', {
    scope: request.scope, key: request.key, method: request.method, route: request.route, path: request.path,
    query: request.query, content_type: request.contentType || '', body: request.body,
    ttl: options.ttl, lease, wait: options.wait == null ? null : `${options.wait} seconds`,
  });
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
      headers: { ...JSON.parse(row.response_headers || '{}'), [CONSTANTS.replayedHeader.toLowerCase()]: 'true' },
      body: row.response_body_bytes || Buffer.alloc(0),
      outcome: 'replayed',
    };
  }
  if (row.outcome === 'in_progress') return answers.inProgress(row.retry_after_seconds);
  return answers.mismatch();
}

// Stores the response: true when stored, false when not, null when the statement did not
// run in `transaction`, the server transaction begin ran in (null: not checked, in
// two-phase mode, where they differ by design).  The protocol's statement turns
// idempotency.store_server_errors on for its transaction before it completes, so that a
// 5xx (which only options.storeServerErrors sends here) is stored.
async function complete(client, request, response, options, attempt, transaction) {
  const headers = {};
  for (const [name, value] of Object.entries(response.headers)) {
    const lower = name.toLowerCase();
    if (options.storedHeaders.includes(lower) || REPRESENTATION.includes(lower)) headers[lower] = String(value);
  }
  const { rows } = await query(client, 'complete', {
    transaction, scope: request.scope, key: request.key, status: response.status,
    headers: JSON.stringify(headers), body: response.body, attempt,
  });
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
// `request` is {method, route, path, query, body, key, contentType, scope}; `report(error)`
// logs an error that the client is answered 500 for without it; `native`, the framework's
// request, is what its span (telemetry.js) is kept by.
class Course {
  constructor(pool, request, options, report, native) {
    this.pool = pool;
    this.request = request;
    this.options = options;
    this.report = report;
    this.native = native;
    telemetry.annotate(native, { scope: request.key == null ? null : request.scope, key: request.key });
    this.client = null;
    this.maxResponseBytes = null; // the server's limit, once claimed
  }

  // An answer to send without running the handler, or null: run it, with this.client
  // in the claim's transaction.
  async start() {
    if (this.request.key == null) {
      const { refusal } = keyOf(null, this.options);
      if (refusal) return refusal;
      this.unprotected = true;
    }
    try {
      this.client = await this.pool.connect();
      await this.client.query('BEGIN');
      if (this.unprotected) return null;
      const lease = this.options.lease;
      const started = process.hrtime.bigint();
      const row = await begin(this.client, this.request, this.options, lease);
      telemetry.recordBegin(Number(process.hrtime.bigint() - started) / 1e9);
      if (row.outcome === 'claimed') {
        telemetry.annotate(this.native, { attempt: row.attempt });
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
      return this.failed(error);
    }
  }

  // The answer to an error of the middleware's own statements: the SQLSTATE map's, else
  // 500 problem+json, logged.
  failed(error) {
    const answer = problemFor(error);
    if (answer) return answer;
    this.report(error);
    return answers.databaseError();
  }

  // The most of a response body worth holding: past the server's limit it cannot be
  // stored whole.
  get responseCap() {
    return this.unprotected ? null : this.maxResponseBytes;
  }

  // The outcome of a request whose handler ran (failing or not): its claim's.
  get ran() {
    return this.unprotected ? 'unprotected' : 'claimed';
  }

  heldBody() {
    return new HeldBody(this.responseCap);
  }

  // Stores the handler's {status, headers, body} and commits; returns what to send: the
  // response, or a problem when it cannot be stored (over the limit: 500, its work rolled
  // back), storing it failed (the SQLSTATE map's answer, else 500), or a pooler split the
  // transaction.  `body` null: a body over the limit, not kept.
  async finish(response) {
    response.outcome = this.ran; // the handler's answer, a 5xx's too
    try {
      if (this.unprotected) {
        if (await this.commit()) return response;
        throw new Error('pg-idempotency: the server answered COMMIT with ROLLBACK');
      }
      if (response.body == null) {
        await this.abort();
        return answers.responseTooLarge(this.maxResponseBytes);
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
      await this.abort();
      if (error && error.code === '54000') return answers.responseTooLarge(this.maxResponseBytes);
      return this.failed(error);
    }
  }

  // Two-phase mode: records progress and renews the lease, committed at once.
  async checkpoint(recoveryPoint) {
    await query(this.client, 'checkpoint', {
      scope: this.request.scope, key: this.request.key, recovery_point: recoveryPoint, attempt: this.attempt,
    });
    await this.client.query('COMMIT; BEGIN');
    this.recoveryPoint = recoveryPoint;
  }

  async abort() {
    if (this.client && this.options.lease != null && this.attempt != null) {
      // A committed claim: release it, so that the next retry goes on at once.
      try {
        await this.client.query('ROLLBACK');
        await query(this.client, 'release', { scope: this.request.scope, key: this.request.key, attempt: this.attempt });
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
  MAX_REQUEST_BYTES, Course, settings, renamed, problem, answers, keyOf, utf8Text, canonicalRoute, scopeOf, isJsonType,
  splitUrl, readStream, notifyOutcome, telemetry,
};
