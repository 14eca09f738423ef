'use strict';
// Generated from src/protocol.txt and src/errcodes.txt by src/protocol.pl (make protocol): do not edit.
// What every package shares (middleware/README.md); the framework-neutral core (core.js)
// reads it.
const f = Object.freeze;

module.exports = f({
  // name -> [HTTP status, problem title, Retry-After ("row": the begin row's), outcome,
  // detail or null]; "{name}" in a title or a detail is filled in.
  ANSWERS: f({
    keyRequired: f([400, 'The {header} header is required', null, 'refused', null]),
    keyNotUtf8: f([400, 'The {header} header is not valid UTF-8', null, 'refused', null]),
    bodyNotJson: f([400, 'The request body is not valid JSON', null, 'refused', null]),
    bodyUnreadable: f([400, 'The request body could not be read', null, 'refused', null]),
    bodyTooLarge: f([413, 'The request body is too large', null, 'too_large', 'The request body is over {limit} bytes, the middleware\'s {option} option.']),
    hookFailed: f([500, 'The tenant or scope hook failed', null, 'error', null]),
    bodyReadBefore: f([500, 'The request body was read before the idempotency middleware', null, 'error', '{fix}']),
    inProgress: f([409, 'A request with this Idempotency-Key is in progress', 'row', 'in_flight', null]),
    mismatch: f([422, 'The Idempotency-Key was used for a different request', null, 'mismatch', null]),
    bodyOmitted: f([500, 'The stored response of this Idempotency-Key has no body', null, 'error', 'It was over idempotency.max_response_bytes and was stored without its body: a replay would not be the first answer.']),
    responseTooLarge: f([500, 'The response is over idempotency.max_response_bytes', null, 'too_large', 'The response is over {setting}, the largest the database stores: it was not sent, its work was rolled back, and nothing was stored.']),
    split: f([500, 'The request\'s transaction was split by a connection pooler', null, 'error', 'idempotency_begin and idempotency_complete did not run in one server transaction that committed, so the work was rolled back and nothing was stored. Behind a pooler in transaction mode (PgBouncer before 1.21), {drivers}; from PgBouncer 1.21 set max_prepared_statements; or use the pooler\'s session mode.']),
    databaseError: f([500, 'The idempotency middleware\'s database call failed', null, 'error', null]),
    internalError: f([500, 'Internal Server Error', null, 'error', null]),
  }),
  SPLIT_DRIVERS: 'give node-postgres queries no name',
  // SQLSTATE -> [HTTP status, problem title, Retry-After seconds or null, outcome] for every
  // answer other than 500 (src/errcodes.txt; doc/reference.md, "Errors").
  SQLSTATE_ANSWERS: f({
    IK006: f([400, 'The Idempotency-Key header is empty or too long', null, 'refused']),
    IK003: f([409, 'A newer attempt of this request took over', 1, 'conflict']),
    IK005: f([503, 'Service unavailable, retry', 1, 'error']),
    '55006': f([409, 'A request with this Idempotency-Key is in progress', 1, 'conflict']),
    '25006': f([503, 'Service unavailable, retry', 1, 'error']),
    '57014': f([503, 'Service unavailable, retry', 1, 'error']),
    '55P03': f([503, 'Service unavailable, retry', 1, 'error']),
    '40P01': f([503, 'Service unavailable, retry', 1, 'error']),
    '53200': f([503, 'Service unavailable, retry', 1, 'error']),
  }),
  OUTCOMES: f(['claimed', 'replayed', 'in_flight', 'mismatch', 'conflict', 'too_large', 'refused', 'unprotected', 'error']),
  // kind -> [name, unit or null]
  OBSERVABILITY: f({
    requestSpan: f(['idempotency.request', null]),
    outcomeAttribute: f(['idempotency.outcome', null]),
    scopeAttribute: f(['idempotency.scope', null]),
    keySha256Attribute: f(['idempotency.key_sha256', null]),
    attemptAttribute: f(['idempotency.attempt', null]),
    routeAttribute: f(['idempotency.route', null]),
    requestsMetric: f(['idempotency.requests', '{request}']),
    beginDurationMetric: f(['idempotency.begin.duration', 's']),
  }),
  // The options and their defaults; null: none.
  DEFAULTS: f({
    header: 'Idempotency-Key',
    required: true,
    storedHeaders: ['Content-Type', 'Location'],
    storeServerErrors: false,
    wait: null,
    ttl: null,
    lease: null,
    tenant: null,
    scope: null,
    scopePerRoute: false,
    methods: ['POST', 'PATCH'],
    maxRequestBytes: 1048576,
    onOutcome: null,
  }),
  // Old spellings still taken: old -> option.
  DEPRECATED: f({
    maxBodyBytes: 'maxRequestBytes',
    perRoute: 'scopePerRoute',
  }),
  REPRESENTATION_HEADERS: f(['Content-Encoding', 'Vary']),
  CONSTANTS: f({
    replayedHeader: 'Idempotent-Replayed',
    problemContentType: 'application/problem+json',
    problemType: 'about:blank',
    scopePerRoute: '{tenant} {method} {route}',
    scopePerRouteNoTenant: '{method} {route}',
  }),
  // syntax -> [[regular expression, replacement], ...], applied in order, globally.
  ROUTE_RULES: f({
    colon: f([
      f(['[{}]', '']),
      f([':(\\w+)(?:\\([^()]*(?:\\([^()]*\\)[^()]*)*\\))?[?+*]?', '{$1}']),
      f(['\\*\\w*', '*']),
    ]),
    angle: f([
      f(['<path:\\w+>', '*']),
      f(['<(?:[^<>:]+:)?(\\w+)>', '{$1}']),
    ]),
    brace: f([
      f(['\\{\\$\\}', '']),
      f(['\\{\\w+\\.\\.\\.\\}', '*']),
      f(['\\{\\s*\\w+\\s*:\\s*path\\s*\\}', '*']),
      f(['\\{\\s*(\\w+)\\s*(?::(?:[^{}]|\\{[^{}]*\\})*)?\\}', '{$1}']),
    ]),
  }),
  ROUTE_EXAMPLES: f([
    f(['colon', '/orders', '/orders']),
    f(['colon', '/orders/:id', '/orders/{id}']),
    f(['colon', '/orders/:id(\\d+)/items/:item?', '/orders/{id}/items/{item}']),
    f(['colon', '/files/*', '/files/*']),
    f(['colon', '/files/*path', '/files/*']),
    f(['colon', '/orders{/:id}', '/orders/{id}']),
    f(['angle', '/orders/<int:id>', '/orders/{id}']),
    f(['angle', '/orders/<id>/items/<uuid:item>', '/orders/{id}/items/{item}']),
    f(['angle', '/files/<path:rest>', '/files/*']),
    f(['brace', '/orders/{id}', '/orders/{id}']),
    f(['brace', '/orders/{id:int}', '/orders/{id}']),
    f(['brace', '/orders/{id:[0-9]+}', '/orders/{id}']),
    f(['brace', '/orders/{id:\\d{3}}/items/{n}', '/orders/{id}/items/{n}']),
    f(['brace', '/files/{rest...}', '/files/*']),
    f(['brace', '/files/{rest:path}', '/files/*']),
    f(['brace', '/orders/{$}', '/orders/']),
    f(['brace', '/orders/*', '/orders/*']),
  ]),
  // The statements: their text and the names of $1, $2, ...
  SQL: f({
    begin: f({
      text: `SELECT b.outcome::text AS outcome, b.attempt, b.response_status,
       b.response_headers::text AS response_headers, b.response_body_bytes,
       b.response_body_omitted, b.retry_after_seconds, b.recovery_point,
       pg_catalog.current_setting('idempotency.max_response_bytes', true) AS max_response_bytes,
       pg_catalog.concat(pg_catalog.pg_backend_pid(), ' ', pg_catalog.to_char(pg_catalog.timezone('UTC', pg_catalog.now()), 'YYYY-MM-DD HH24:MI:SS.US')) AS server_transaction
  FROM idempotency_begin($1::text, $2::text,
         request_hash_parts($3::text, $4::text, $5::text, $6::text,
           request_hash_body($7::text, $8::bytea)::text),
         ttl => $9::interval, lease => $10::interval, wait => $11::interval) AS b`,
      params: f(['scope', 'key', 'method', 'route', 'path', 'query', 'content_type', 'body', 'ttl', 'lease', 'wait']),
    }),
    checkpoint: f({
      text: `SELECT idempotency_checkpoint($1::text, $2::text, $3::text, attempt => $4::integer)`,
      params: f(['scope', 'key', 'recovery_point', 'attempt']),
    }),
    complete: f({
      text: `SELECT CASE WHEN ($1::text IS NULL OR $1::text = pg_catalog.concat(pg_catalog.pg_backend_pid(), ' ', pg_catalog.to_char(pg_catalog.timezone('UTC', pg_catalog.now()), 'YYYY-MM-DD HH24:MI:SS.US')))
             AND pg_catalog.set_config('idempotency.store_server_errors', 'on', true) IS NOT NULL
            THEN idempotency_complete($2::text, $3::text, $4::integer,
                   response_headers => $5::jsonb, response_body_bytes => $6::bytea,
                   attempt => $7::integer, omit_oversized => false) END AS stored`,
      params: f(['transaction', 'scope', 'key', 'status', 'headers', 'body', 'attempt']),
    }),
    release: f({
      text: `SELECT idempotency_release($1::text, $2::text, attempt => $3::integer)`,
      params: f(['scope', 'key', 'attempt']),
    }),
  }),
});
