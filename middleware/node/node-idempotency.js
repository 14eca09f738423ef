'use strict';
// A StorageAdapter for node-idempotency (@node-idempotency/core) over the extension, for
// applications that already use that library: its records become keys of one scope.
//
//   const { Idempotency } = require('@node-idempotency/core');
//   const { PostgresStorageAdapter } = require('pg-idempotency/node-idempotency');
//   const idempotency = new Idempotency(new PostgresStorageAdapter(pool), options);
//
// The library keeps its state as a JSON string per key: "in progress" first, then the
// response.  Each operation is one statement.  setIfNotExists claims the key, committed
// at once with a lease as long as the library's ttl (the library has no transaction to
// join), keeping the string as the claim's claim_data (a JSON string); set completes it
// with the string as the stored body; get reads either back, and nothing once the ttl
// has passed.  get reads what is committed, as a SELECT does.  The claim is arbitrated by
// the extension, so two processes never both hear "new" for one key.
//
// The library's key (its cache key: a prefix, the method, the path and the Idempotency-Key
// header) is read as the middleware reads a key: the header's bytes, which Node's parser
// gives a character each (latin1), as UTF-8 text.  A key whose bytes are not UTF-8 rejects
// the operation with a TypeError whose code is IDEMPOTENCY_KEY_NOT_UTF8 (the library passes
// it on to the application), rather than being stored as other text.
const { utf8Text } = require('./core');

// The claim of ($1 scope, $2 key) with ($3) ttl and lease, keeping ($4) the value.
const BEGIN = `idempotency_begin($1, $2, request_hash_text($1), ttl => $3::interval,
                                 lease => $3::interval, claim_data => to_jsonb($4::text))`;

// The extension's key of the library's `key`.
function keyText(key) {
  const text = utf8Text(String(key));
  if (text != null) return text;
  const error = new TypeError('pg-idempotency: the Idempotency-Key header is not valid UTF-8');
  error.code = 'IDEMPOTENCY_KEY_NOT_UTF8';
  throw error;
}

class PostgresStorageAdapter {
  constructor(pool, { scope = 'node-idempotency', defaultTtlMs = 24 * 3600 * 1000 } = {}) {
    this.pool = pool;
    this.scope = scope;
    this.defaultTtlMs = defaultTtlMs;
  }

  interval(ttl) {
    return `${Math.max(1, Math.ceil(ttl ?? this.defaultTtlMs))} milliseconds`;
  }

  async setIfNotExists(key, val, { ttl } = {}) {
    const { rows } = await this.pool.query(`SELECT outcome::text AS outcome FROM ${BEGIN}`,
      [this.scope, keyText(key), this.interval(ttl), val]);
    return rows[0].outcome === 'claimed';
  }

  // Completes the claim with `val` (the attempt that claimed it), or replaces a completed
  // record's value (the same attempt), or claims and completes a key that has none: one
  // statement, whose begin settles which, so no other caller comes in between.  A value
  // over idempotency.max_response_bytes raises 54000 rather than being kept without it.
  async set(key, val, { ttl } = {}) {
    await this.pool.query(
      `SELECT idempotency_complete($1, $2, 200, response_body_bytes => convert_to($4, 'UTF8'),
                                   attempt => b.attempt, replace => b.outcome = 'replay',
                                   omit_oversized => false)
         FROM ${BEGIN} AS b`,
      [this.scope, keyText(key), this.interval(ttl), val]);
  }

  async get(key) {
    const { rows } = await this.pool.query(
      `SELECT CASE WHEN status = 'completed' THEN convert_from(response_body_bytes, 'UTF8')
                   ELSE claim_data #>> '{}' END AS value
         FROM idempotency_lookup($1, $2)`, [this.scope, keyText(key)]);
    return rows.length ? rows[0].value ?? undefined : undefined;
  }
}

module.exports = { PostgresStorageAdapter };
