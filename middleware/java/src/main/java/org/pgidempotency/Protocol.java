// Generated from src/protocol.txt and src/errcodes.txt by src/protocol.pl (make protocol): do not edit.
package org.pgidempotency;

import java.util.List;
import java.util.Map;

/** What every package shares (middleware/README.md), which the filter's core reads. */
final class Protocol {
    /**
     * An answer of the package's own, or of the SQLSTATE map.
     *
     * @param status the HTTP status
     * @param title the problem's title ("{name}" is filled in)
     * @param detail the problem's detail ("{name}" is filled in), or null
     * @param retryAfter Retry-After seconds, or null
     * @param retryRow whether Retry-After is the begin row's
     * @param outcome what the request came to
     */
    record Spec(int status, String title, String detail, Integer retryAfter, boolean retryRow,
        String outcome) {}

    static final Spec KEY_REQUIRED = new Spec(400, "The {header} header is required",
        null, null, false, "refused");
    static final Spec KEY_NOT_UTF8 = new Spec(400, "The {header} header is not valid UTF-8",
        null, null, false, "refused");
    static final Spec BODY_NOT_JSON = new Spec(400, "The request body is not valid JSON",
        null, null, false, "refused");
    static final Spec BODY_UNREADABLE = new Spec(400, "The request body could not be read",
        null, null, false, "refused");
    static final Spec BODY_TOO_LARGE = new Spec(413, "The request body is too large",
        "The request body is over {limit} bytes, the middleware's {option} option.", null, false, "too_large");
    static final Spec HOOK_FAILED = new Spec(500, "The tenant or scope hook failed",
        null, null, false, "error");
    static final Spec BODY_READ_BEFORE = new Spec(500, "The request body was read before the idempotency middleware",
        "{fix}", null, false, "error");
    static final Spec IN_PROGRESS = new Spec(409, "A request with this Idempotency-Key is in progress",
        null, null, true, "in_flight");
    static final Spec MISMATCH = new Spec(422, "The Idempotency-Key was used for a different request",
        null, null, false, "mismatch");
    static final Spec BODY_OMITTED = new Spec(500, "The stored response of this Idempotency-Key has no body",
        "It was over idempotency.max_response_bytes and was stored without its body: a replay would not be the first answer.", null, false, "error");
    static final Spec RESPONSE_TOO_LARGE = new Spec(500, "The response is over idempotency.max_response_bytes",
        "The response is over {setting}, the largest the database stores: it was not sent, its work was rolled back, and nothing was stored.", null, false, "too_large");
    static final Spec SPLIT = new Spec(500, "The request's transaction was split by a connection pooler",
        "idempotency_begin and idempotency_complete did not run in one server transaction that committed, so the work was rolled back and nothing was stored. Behind a pooler in transaction mode (PgBouncer before 1.21), {drivers}; from PgBouncer 1.21 set max_prepared_statements; or use the pooler's session mode.", null, false, "error");
    static final Spec DATABASE_ERROR = new Spec(500, "The idempotency middleware's database call failed",
        null, null, false, "error");
    static final Spec INTERNAL_ERROR = new Spec(500, "Internal Server Error",
        null, null, false, "error");

    static final String SPLIT_DRIVERS = "give pgjdbc prepareThreshold=0";

    /** SQLSTATE -> its answer, for every answer other than 500 (src/errcodes.txt). */
    static final Map<String, Spec> SQLSTATE_ANSWERS = Map.ofEntries(
        Map.entry("IK006", new Spec(400, "The Idempotency-Key header is empty or too long", null, null, false, "refused")),
        Map.entry("IK003", new Spec(409, "A newer attempt of this request took over", null, 1, false, "conflict")),
        Map.entry("IK005", new Spec(503, "Service unavailable, retry", null, 1, false, "error")),
        Map.entry("55006", new Spec(409, "A request with this Idempotency-Key is in progress", null, 1, false, "conflict")),
        Map.entry("25006", new Spec(503, "Service unavailable, retry", null, 1, false, "error")),
        Map.entry("57014", new Spec(503, "Service unavailable, retry", null, 1, false, "error")),
        Map.entry("55P03", new Spec(503, "Service unavailable, retry", null, 1, false, "error")),
        Map.entry("40P01", new Spec(503, "Service unavailable, retry", null, 1, false, "error")),
        Map.entry("53200", new Spec(503, "Service unavailable, retry", null, 1, false, "error")));

    static final List<String> OUTCOMES = List.of("claimed", "replayed", "in_flight", "mismatch", "conflict", "too_large", "refused", "unprotected", "error");

    // The names of spans, attributes and metrics (and their units).
    static final String SPAN_REQUEST = "idempotency.request";
    static final String ATTRIBUTE_OUTCOME = "idempotency.outcome";
    static final String ATTRIBUTE_SCOPE = "idempotency.scope";
    static final String ATTRIBUTE_KEY_SHA256 = "idempotency.key_sha256";
    static final String ATTRIBUTE_ATTEMPT = "idempotency.attempt";
    static final String ATTRIBUTE_ROUTE = "idempotency.route";
    static final String METRIC_REQUESTS = "idempotency.requests";
    static final String METRIC_REQUESTS_UNIT = "{request}";
    static final String METRIC_BEGIN_DURATION = "idempotency.begin.duration";
    static final String METRIC_BEGIN_DURATION_UNIT = "s";

    // The options' defaults.
    static final String DEFAULT_HEADER = "Idempotency-Key";
    static final boolean DEFAULT_REQUIRED = true;
    static final List<String> DEFAULT_STORED_HEADERS = List.of("Content-Type", "Location");
    static final boolean DEFAULT_STORE_SERVER_ERRORS = false;
    static final String DEFAULT_WAIT = null;
    static final String DEFAULT_TTL = null;
    static final String DEFAULT_LEASE = null;
    static final boolean DEFAULT_SCOPE_PER_ROUTE = false;
    static final List<String> DEFAULT_METHODS = List.of("POST", "PATCH");
    static final long DEFAULT_MAX_REQUEST_BYTES = 1048576L;
    /** The builder's methods the protocol names. */
    static final List<String> OPTIONS = List.of("header", "required", "storedHeaders", "storeServerErrors", "waitFor", "ttl", "lease", "tenant", "scope", "scopePerRoute", "methods", "maxRequestBytes", "route", "onOutcome");

    static final String REPLAYED_HEADER = "Idempotent-Replayed";
    static final String PROBLEM_CONTENT_TYPE = "application/problem+json";
    static final String PROBLEM_TYPE = "about:blank";
    static final String SCOPE_PER_ROUTE = "{tenant} {method} {route}";
    static final String SCOPE_PER_ROUTE_NO_TENANT = "{method} {route}";
    /** Stored and replayed whatever storedHeaders names. */
    static final List<String> REPRESENTATION_HEADERS = List.of("Content-Encoding", "Vary");

    /** syntax -> [regular expression, replacement] pairs, applied in order, globally. */
    static final Map<String, List<List<String>>> ROUTE_RULES = Map.of(
        "colon", List.of(
            List.of("[{}]", ""),
            List.of(":(\\w+)(?:\\([^()]*(?:\\([^()]*\\)[^()]*)*\\))?[?+*]?", "{$1}"),
            List.of("\\*\\w*", "*")),
        "angle", List.of(
            List.of("<path:\\w+>", "*"),
            List.of("<(?:[^<>:]+:)?(\\w+)>", "{$1}")),
        "brace", List.of(
            List.of("\\{\\$\\}", ""),
            List.of("\\{\\w+\\.\\.\\.\\}", "*"),
            List.of("\\{\\s*\\w+\\s*:\\s*path\\s*\\}", "*"),
            List.of("\\{\\s*(\\w+)\\s*(?::(?:[^{}]|\\{[^{}]*\\})*)?\\}", "{$1}")));

    /** [syntax, pattern, canonical] triples that ROUTE_RULES must give. */
    static final List<List<String>> ROUTE_EXAMPLES = List.of(
        List.of("colon", "/orders", "/orders"),
        List.of("colon", "/orders/:id", "/orders/{id}"),
        List.of("colon", "/orders/:id(\\d+)/items/:item?", "/orders/{id}/items/{item}"),
        List.of("colon", "/files/*", "/files/*"),
        List.of("colon", "/files/*path", "/files/*"),
        List.of("colon", "/orders{/:id}", "/orders/{id}"),
        List.of("angle", "/orders/<int:id>", "/orders/{id}"),
        List.of("angle", "/orders/<id>/items/<uuid:item>", "/orders/{id}/items/{item}"),
        List.of("angle", "/files/<path:rest>", "/files/*"),
        List.of("brace", "/orders/{id}", "/orders/{id}"),
        List.of("brace", "/orders/{id:int}", "/orders/{id}"),
        List.of("brace", "/orders/{id:[0-9]+}", "/orders/{id}"),
        List.of("brace", "/orders/{id:\\d{3}}/items/{n}", "/orders/{id}/items/{n}"),
        List.of("brace", "/files/{rest...}", "/files/*"),
        List.of("brace", "/files/{rest:path}", "/files/*"),
        List.of("brace", "/orders/{$}", "/orders/"),
        List.of("brace", "/orders/*", "/orders/*"));

    // The statements: their text, the names of their ? in order, and the columns of a SELECT's row.
    static final String SQL_BEGIN = """
        SELECT b.outcome::text AS outcome, b.attempt, b.response_status,
               b.response_headers::text AS response_headers, b.response_body_bytes,
               b.response_body_omitted, b.retry_after_seconds, b.recovery_point,
               pg_catalog.current_setting('idempotency.max_response_bytes', true) AS max_response_bytes,
               pg_catalog.concat(pg_catalog.pg_backend_pid(), ' ', pg_catalog.to_char(pg_catalog.timezone('UTC', pg_catalog.now()), 'YYYY-MM-DD HH24:MI:SS.US')) AS server_transaction
          FROM idempotency_begin(?::text, ?::text,
                 request_hash_parts(?::text, ?::text, ?::text, ?::text,
                   request_hash_body(?::text, ?::bytea)::text),
                 ttl => ?::interval, lease => ?::interval, wait => ?::interval) AS b
        """;
    static final List<String> SQL_BEGIN_PARAMS = List.of("scope", "key", "method", "route", "path", "query", "content_type", "body", "ttl", "lease", "wait");
    static final List<String> SQL_BEGIN_COLUMNS = List.of("outcome", "attempt", "response_status", "response_headers", "response_body_bytes", "response_body_omitted", "retry_after_seconds", "recovery_point", "max_response_bytes", "server_transaction");
    static final String SQL_CHECKPOINT = """
        SELECT idempotency_checkpoint(?::text, ?::text, ?::text, attempt => ?::integer)
        """;
    static final List<String> SQL_CHECKPOINT_PARAMS = List.of("scope", "key", "recovery_point", "attempt");
    static final String SQL_COMPLETE = """
        SELECT CASE WHEN (?::text IS NULL OR ?::text = pg_catalog.concat(pg_catalog.pg_backend_pid(), ' ', pg_catalog.to_char(pg_catalog.timezone('UTC', pg_catalog.now()), 'YYYY-MM-DD HH24:MI:SS.US')))
                     AND pg_catalog.set_config('idempotency.store_server_errors', 'on', true) IS NOT NULL
                    THEN idempotency_complete(?::text, ?::text, ?::integer,
                           response_headers => ?::jsonb, response_body_bytes => ?::bytea,
                           attempt => ?::integer, omit_oversized => false) END AS stored
        """;
    static final List<String> SQL_COMPLETE_PARAMS = List.of("transaction", "transaction", "scope", "key", "status", "headers", "body", "attempt");
    static final String SQL_RELEASE = """
        SELECT idempotency_release(?::text, ?::text, attempt => ?::integer)
        """;
    static final List<String> SQL_RELEASE_PARAMS = List.of("scope", "key", "attempt");

    private Protocol() {}
}
