// Code generated from src/protocol.txt and src/errcodes.txt by src/protocol.pl (make protocol). DO NOT EDIT.

// What every package shares (middleware/README.md), which the package's core reads.

package idempotency

// protocolAnswer is an answer of the package's own, or of the SQLSTATE map: its status, its
// problem's title and detail ("{name}" in them is filled in), its Retry-After (retryAfter
// seconds; retryRow: the begin row's) and its outcome.
type protocolAnswer struct {
	status     int
	title      string
	detail     string
	retryAfter int
	retryRow   bool
	outcome    string
}

var (
	answerKeyRequired      = protocolAnswer{status: 400, title: "The {header} header is required", retryRow: false, outcome: "refused"}
	answerKeyNotUTF8       = protocolAnswer{status: 400, title: "The {header} header is not valid UTF-8", retryRow: false, outcome: "refused"}
	answerBodyNotJSON      = protocolAnswer{status: 400, title: "The request body is not valid JSON", retryRow: false, outcome: "refused"}
	answerBodyUnreadable   = protocolAnswer{status: 400, title: "The request body could not be read", retryRow: false, outcome: "refused"}
	answerBodyTooLarge     = protocolAnswer{status: 413, title: "The request body is too large", detail: "The request body is over {limit} bytes, the middleware's {option} option.", retryRow: false, outcome: "too_large"}
	answerHookFailed       = protocolAnswer{status: 500, title: "The tenant or scope hook failed", retryRow: false, outcome: "error"}
	answerBodyReadBefore   = protocolAnswer{status: 500, title: "The request body was read before the idempotency middleware", detail: "{fix}", retryRow: false, outcome: "error"}
	answerInProgress       = protocolAnswer{status: 409, title: "A request with this Idempotency-Key is in progress", retryRow: true, outcome: "in_flight"}
	answerMismatch         = protocolAnswer{status: 422, title: "The Idempotency-Key was used for a different request", retryRow: false, outcome: "mismatch"}
	answerBodyOmitted      = protocolAnswer{status: 500, title: "The stored response of this Idempotency-Key has no body", detail: "It was over idempotency.max_response_bytes and was stored without its body: a replay would not be the first answer.", retryRow: false, outcome: "error"}
	answerResponseTooLarge = protocolAnswer{status: 500, title: "The response is over idempotency.max_response_bytes", detail: "The response is over {setting}, the largest the database stores: it was not sent, its work was rolled back, and nothing was stored.", retryRow: false, outcome: "too_large"}
	answerSplit            = protocolAnswer{status: 500, title: "The request's transaction was split by a connection pooler", detail: "idempotency_begin and idempotency_complete did not run in one server transaction that committed, so the work was rolled back and nothing was stored. Behind a pooler in transaction mode (PgBouncer before 1.21), {drivers}; from PgBouncer 1.21 set max_prepared_statements; or use the pooler's session mode.", retryRow: false, outcome: "error"}
	answerDatabaseError    = protocolAnswer{status: 500, title: "The idempotency middleware's database call failed", retryRow: false, outcome: "error"}
	answerInternalError    = protocolAnswer{status: 500, title: "Internal Server Error", retryRow: false, outcome: "error"}
)

// What the split's detail tells this package's users to change.
const splitDrivers = "use lib/pq, or pgx with statement_cache_mode=describe (v4) or default_query_exec_mode=exec (v5)"

// sqlstateAnswers maps a SQLSTATE to the answer other than 500 (src/errcodes.txt;
// doc/reference.md, "Errors").
var sqlstateAnswers = map[string]protocolAnswer{
	"IK006": {status: 400, title: "The Idempotency-Key header is empty or too long", retryAfter: 0, outcome: "refused"},
	"IK003": {status: 409, title: "A newer attempt of this request took over", retryAfter: 1, outcome: "conflict"},
	"IK005": {status: 503, title: "Service unavailable, retry", retryAfter: 1, outcome: "error"},
	"55006": {status: 409, title: "A request with this Idempotency-Key is in progress", retryAfter: 1, outcome: "conflict"},
	"25006": {status: 503, title: "Service unavailable, retry", retryAfter: 1, outcome: "error"},
	"57014": {status: 503, title: "Service unavailable, retry", retryAfter: 1, outcome: "error"},
	"55P03": {status: 503, title: "Service unavailable, retry", retryAfter: 1, outcome: "error"},
	"40P01": {status: 503, title: "Service unavailable, retry", retryAfter: 1, outcome: "error"},
	"53200": {status: 503, title: "Service unavailable, retry", retryAfter: 1, outcome: "error"},
}

// The outcomes a request comes to.
const (
	outcomeClaimed     = "claimed"
	outcomeReplayed    = "replayed"
	outcomeInFlight    = "in_flight"
	outcomeMismatch    = "mismatch"
	outcomeConflict    = "conflict"
	outcomeTooLarge    = "too_large"
	outcomeRefused     = "refused"
	outcomeUnprotected = "unprotected"
	outcomeError       = "error"
)

// The names of spans, attributes and metrics (and their units): exported, for the
// module middleware/go/otel and for an OnOutcome hook's own counter.
const (
	NameRequestSpan         = "idempotency.request"
	NameOutcomeAttribute    = "idempotency.outcome"
	NameScopeAttribute      = "idempotency.scope"
	NameKeySHA256Attribute  = "idempotency.key_sha256"
	NameAttemptAttribute    = "idempotency.attempt"
	NameRouteAttribute      = "idempotency.route"
	NameRequestsMetric      = "idempotency.requests"
	UnitRequestsMetric      = "{request}"
	NameBeginDurationMetric = "idempotency.begin.duration"
	UnitBeginDurationMetric = "s"
)

// The options' defaults (Options, whose zero values stand for them).
var (
	defaultHeader          = "Idempotency-Key"
	defaultStoredHeaders   = []string{"Content-Type", "Location"}
	defaultMethods         = []string{"POST", "PATCH"}
	defaultMaxRequestBytes = int64(1048576)
)

// optionNames are Options' fields that the protocol names.
var optionNames = []string{"Header", "KeyOptional", "StoredHeaders", "StoreServerErrors", "Wait", "TTL", "Lease", "Tenant", "Scope", "ScopePerRoute", "Methods", "MaxRequestBytes", "Route", "OnOutcome"}

const (
	replayedHeader        = "Idempotent-Replayed"
	problemContentType    = "application/problem+json"
	problemType           = "about:blank"
	scopePerRoute         = "{tenant} {method} {route}"
	scopePerRouteNoTenant = "{method} {route}"
)

// representationHeaders are stored and replayed whatever StoredHeaders names.
var representationHeaders = []string{"Content-Encoding", "Vary"}

// routeRules maps a syntax to its [regular expression, replacement] pairs, applied in
// order, globally.
var routeRules = map[string][][2]string{
	"colon": {
		{`[{}]`, ``},
		{`:(\w+)(?:\([^()]*(?:\([^()]*\)[^()]*)*\))?[?+*]?`, `{${1}}`},
		{`\*\w*`, `*`},
	},
	"angle": {
		{`<path:\w+>`, `*`},
		{`<(?:[^<>:]+:)?(\w+)>`, `{${1}}`},
	},
	"brace": {
		{`\{\$\}`, ``},
		{`\{\w+\.\.\.\}`, `*`},
		{`\{\s*\w+\s*:\s*path\s*\}`, `*`},
		{`\{\s*(\w+)\s*(?::(?:[^{}]|\{[^{}]*\})*)?\}`, `{${1}}`},
	},
}

// routeExamples are [syntax, pattern, canonical] triples that routeRules must give.
var routeExamples = [][3]string{
	{`colon`, `/orders`, `/orders`},
	{`colon`, `/orders/:id`, `/orders/{id}`},
	{`colon`, `/orders/:id(\d+)/items/:item?`, `/orders/{id}/items/{item}`},
	{`colon`, `/files/*`, `/files/*`},
	{`colon`, `/files/*path`, `/files/*`},
	{`colon`, `/orders{/:id}`, `/orders/{id}`},
	{`angle`, `/orders/<int:id>`, `/orders/{id}`},
	{`angle`, `/orders/<id>/items/<uuid:item>`, `/orders/{id}/items/{item}`},
	{`angle`, `/files/<path:rest>`, `/files/*`},
	{`brace`, `/orders/{id}`, `/orders/{id}`},
	{`brace`, `/orders/{id:int}`, `/orders/{id}`},
	{`brace`, `/orders/{id:[0-9]+}`, `/orders/{id}`},
	{`brace`, `/orders/{id:\d{3}}/items/{n}`, `/orders/{id}/items/{n}`},
	{`brace`, `/files/{rest...}`, `/files/*`},
	{`brace`, `/files/{rest:path}`, `/files/*`},
	{`brace`, `/orders/{$}`, `/orders/`},
	{`brace`, `/orders/*`, `/orders/*`},
}

// The statements: their text, the names of $1, $2, ... and the columns of a SELECT's row.
const beginSQL = `SELECT b.outcome::text AS outcome, b.attempt, b.response_status,
       b.response_headers::text AS response_headers, b.response_body_bytes,
       b.response_body_omitted, b.retry_after_seconds, b.recovery_point,
       pg_catalog.current_setting('idempotency.max_response_bytes', true) AS max_response_bytes,
       pg_catalog.concat(pg_catalog.pg_backend_pid(), ' ', pg_catalog.to_char(pg_catalog.timezone('UTC', pg_catalog.now()), 'YYYY-MM-DD HH24:MI:SS.US')) AS server_transaction
  FROM idempotency_begin($1::text, $2::text,
         request_hash_parts($3::text, $4::text, $5::text, $6::text,
           request_hash_body($7::text, $8::bytea)::text),
         ttl => $9::interval, lease => $10::interval, wait => $11::interval) AS b`

var beginParams = []string{"scope", "key", "method", "route", "path", "query", "content_type", "body", "ttl", "lease", "wait"}
var beginColumns = []string{"outcome", "attempt", "response_status", "response_headers", "response_body_bytes", "response_body_omitted", "retry_after_seconds", "recovery_point", "max_response_bytes", "server_transaction"}

const checkpointSQL = `SELECT idempotency_checkpoint($1::text, $2::text, $3::text, attempt => $4::integer)`

var checkpointParams = []string{"scope", "key", "recovery_point", "attempt"}

const completeSQL = `SELECT CASE WHEN ($1::text IS NULL OR $1::text = pg_catalog.concat(pg_catalog.pg_backend_pid(), ' ', pg_catalog.to_char(pg_catalog.timezone('UTC', pg_catalog.now()), 'YYYY-MM-DD HH24:MI:SS.US')))
             AND pg_catalog.set_config('idempotency.store_server_errors', 'on', true) IS NOT NULL
            THEN idempotency_complete($2::text, $3::text, $4::integer,
                   response_headers => $5::jsonb, response_body_bytes => $6::bytea,
                   attempt => $7::integer, omit_oversized => false) END AS stored`

var completeParams = []string{"transaction", "scope", "key", "status", "headers", "body", "attempt"}

const releaseSQL = `SELECT idempotency_release($1::text, $2::text, attempt => $3::integer)`

var releaseParams = []string{"scope", "key", "attempt"}
