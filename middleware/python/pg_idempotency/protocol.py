"""What every package shares (middleware/README.md), which the framework-neutral core
(core.py) reads.

Generated from src/protocol.txt and src/errcodes.txt by src/protocol.pl (make protocol): do not edit.
"""
from typing import Dict, NamedTuple, Optional, Tuple


class Answer(NamedTuple):
    """One of the protocol's answers; "{name}" in its title or detail is filled in."""
    status: int
    title: str
    retry: Optional[str]  # "row": the begin row's retry_after_seconds
    outcome: str
    detail: Optional[str]


KEY_REQUIRED = Answer(400, "The {header} header is required", None, "refused", None)
KEY_NOT_UTF8 = Answer(400, "The {header} header is not valid UTF-8", None, "refused", None)
BODY_NOT_JSON = Answer(400, "The request body is not valid JSON", None, "refused", None)
BODY_UNREADABLE = Answer(400, "The request body could not be read", None, "refused", None)
BODY_TOO_LARGE = Answer(413, "The request body is too large", None, "too_large", "The request body is over {limit} bytes, the middleware's {option} option.")
HOOK_FAILED = Answer(500, "The tenant or scope hook failed", None, "error", None)
BODY_READ_BEFORE = Answer(500, "The request body was read before the idempotency middleware", None, "error", "{fix}")
IN_PROGRESS = Answer(409, "A request with this Idempotency-Key is in progress", "row", "in_flight", None)
MISMATCH = Answer(422, "The Idempotency-Key was used for a different request", None, "mismatch", None)
BODY_OMITTED = Answer(500, "The stored response of this Idempotency-Key has no body", None, "error", "It was over idempotency.max_response_bytes and was stored without its body: a replay would not be the first answer.")
RESPONSE_TOO_LARGE = Answer(500, "The response is over idempotency.max_response_bytes", None, "too_large", "The response is over {setting}, the largest the database stores: it was not sent, its work was rolled back, and nothing was stored.")
SPLIT = Answer(500, "The request's transaction was split by a connection pooler", None, "error", "idempotency_begin and idempotency_complete did not run in one server transaction that committed, so the work was rolled back and nothing was stored. Behind a pooler in transaction mode (PgBouncer before 1.21), {drivers}; from PgBouncer 1.21 set max_prepared_statements; or use the pooler's session mode.")
DATABASE_ERROR = Answer(500, "The idempotency middleware's database call failed", None, "error", None)
INTERNAL_ERROR = Answer(500, "Internal Server Error", None, "error", None)

SPLIT_DRIVERS = "use psycopg 3 with prepare_threshold=None for the statements the handler runs (psycopg2 and Django bind on the client and need nothing)"

# SQLSTATE -> (HTTP status, problem title, Retry-After seconds or None, outcome) for every
# answer other than 500 (src/errcodes.txt; doc/reference.md, "Errors").
SQLSTATE_ANSWERS: Dict[str, Tuple[int, str, Optional[int], str]] = {
    "IK006": (400, "The Idempotency-Key header is empty or too long", None, "refused"),
    "IK003": (409, "A newer attempt of this request took over", 1, "conflict"),
    "IK005": (503, "Service unavailable, retry", 1, "error"),
    "55006": (409, "A request with this Idempotency-Key is in progress", 1, "conflict"),
    "25006": (503, "Service unavailable, retry", 1, "error"),
    "57014": (503, "Service unavailable, retry", 1, "error"),
    "55P03": (503, "Service unavailable, retry", 1, "error"),
    "40P01": (503, "Service unavailable, retry", 1, "error"),
    "53200": (503, "Service unavailable, retry", 1, "error"),
}
OUTCOMES = ("claimed", "replayed", "in_flight", "mismatch", "conflict", "too_large", "refused", "unprotected", "error")

# kind_name -> (name, unit or None)
OBSERVABILITY: Dict[str, Tuple[str, Optional[str]]] = {
    "request_span": ("idempotency.request", None),
    "outcome_attribute": ("idempotency.outcome", None),
    "scope_attribute": ("idempotency.scope", None),
    "key_sha256_attribute": ("idempotency.key_sha256", None),
    "attempt_attribute": ("idempotency.attempt", None),
    "route_attribute": ("idempotency.route", None),
    "requests_metric": ("idempotency.requests", "{request}"),
    "begin_duration_metric": ("idempotency.begin.duration", "s"),
}

# The options and their defaults.
DEFAULT_HEADER: str = "Idempotency-Key"
DEFAULT_REQUIRED: bool = True
DEFAULT_STORED_HEADERS: Tuple[str, ...] = ("Content-Type", "Location")
DEFAULT_STORE_SERVER_ERRORS: bool = False
DEFAULT_WAIT: Optional[float] = None
DEFAULT_TTL: Optional[str] = None
DEFAULT_LEASE: Optional[str] = None
DEFAULT_SCOPE_PER_ROUTE: bool = False
DEFAULT_METHODS: Tuple[str, ...] = ("POST", "PATCH")
DEFAULT_MAX_REQUEST_BYTES: int = 1048576
OPTIONS = ("header", "required", "stored_headers", "store_server_errors", "wait", "ttl", "lease", "tenant", "scope", "scope_per_route", "methods", "max_request_bytes", "on_outcome")
# Old spellings still taken: old -> option.
DEPRECATED: Dict[str, str] = {
    "max_body_bytes": "max_request_bytes",
    "per_route": "scope_per_route",
}

REPLAYED_HEADER = "Idempotent-Replayed"
PROBLEM_CONTENT_TYPE = "application/problem+json"
PROBLEM_TYPE = "about:blank"
SCOPE_PER_ROUTE = "{tenant} {method} {route}"
SCOPE_PER_ROUTE_NO_TENANT = "{method} {route}"
REPRESENTATION_HEADERS: Tuple[str, ...] = ("Content-Encoding", "Vary")

# syntax -> ((regular expression, replacement), ...), applied in order, globally.
ROUTE_RULES: Dict[str, Tuple[Tuple[str, str], ...]] = {
    "colon": (
        (r"[{}]", r""),
        (r":(\w+)(?:\([^()]*(?:\([^()]*\)[^()]*)*\))?[?+*]?", r"{\g<1>}"),
        (r"\*\w*", r"*"),
    ),
    "angle": (
        (r"<path:\w+>", r"*"),
        (r"<(?:[^<>:]+:)?(\w+)>", r"{\g<1>}"),
    ),
    "brace": (
        (r"\{\$\}", r""),
        (r"\{\w+\.\.\.\}", r"*"),
        (r"\{\s*\w+\s*:\s*path\s*\}", r"*"),
        (r"\{\s*(\w+)\s*(?::(?:[^{}]|\{[^{}]*\})*)?\}", r"{\g<1>}"),
    ),
}
ROUTE_EXAMPLES: Tuple[Tuple[str, str, str], ...] = (
    ("colon", "/orders", "/orders"),
    ("colon", "/orders/:id", "/orders/{id}"),
    ("colon", "/orders/:id(\\d+)/items/:item?", "/orders/{id}/items/{item}"),
    ("colon", "/files/*", "/files/*"),
    ("colon", "/files/*path", "/files/*"),
    ("colon", "/orders{/:id}", "/orders/{id}"),
    ("angle", "/orders/<int:id>", "/orders/{id}"),
    ("angle", "/orders/<id>/items/<uuid:item>", "/orders/{id}/items/{item}"),
    ("angle", "/files/<path:rest>", "/files/*"),
    ("brace", "/orders/{id}", "/orders/{id}"),
    ("brace", "/orders/{id:int}", "/orders/{id}"),
    ("brace", "/orders/{id:[0-9]+}", "/orders/{id}"),
    ("brace", "/orders/{id:\\d{3}}/items/{n}", "/orders/{id}/items/{n}"),
    ("brace", "/files/{rest...}", "/files/*"),
    ("brace", "/files/{rest:path}", "/files/*"),
    ("brace", "/orders/{$}", "/orders/"),
    ("brace", "/orders/*", "/orders/*"),
)

# The statements: their text, the names of their %s in order, and the columns of a
# SELECT's row.
SQL_BEGIN = """SELECT b.outcome::text AS outcome, b.attempt, b.response_status,
       b.response_headers::text AS response_headers, b.response_body_bytes,
       b.response_body_omitted, b.retry_after_seconds, b.recovery_point,
       pg_catalog.current_setting('idempotency.max_response_bytes', true) AS max_response_bytes,
       pg_catalog.concat(pg_catalog.pg_backend_pid(), ' ', pg_catalog.to_char(pg_catalog.timezone('UTC', pg_catalog.now()), 'YYYY-MM-DD HH24:MI:SS.US')) AS server_transaction
  FROM idempotency_begin(%s::text, %s::text,
         request_hash_parts(%s::text, %s::text, %s::text, %s::text,
           request_hash_body(%s::text, %s::bytea)::text),
         ttl => %s::interval, lease => %s::interval, wait => %s::interval) AS b"""
SQL_BEGIN_PARAMS = ("scope", "key", "method", "route", "path", "query", "content_type", "body", "ttl", "lease", "wait")
SQL_BEGIN_COLUMNS = ("outcome", "attempt", "response_status", "response_headers", "response_body_bytes", "response_body_omitted", "retry_after_seconds", "recovery_point", "max_response_bytes", "server_transaction")
SQL_CHECKPOINT = """SELECT idempotency_checkpoint(%s::text, %s::text, %s::text, attempt => %s::integer)"""
SQL_CHECKPOINT_PARAMS = ("scope", "key", "recovery_point", "attempt")
SQL_CHECKPOINT_COLUMNS = ()
SQL_COMPLETE = """SELECT CASE WHEN (%s::text IS NULL OR %s::text = pg_catalog.concat(pg_catalog.pg_backend_pid(), ' ', pg_catalog.to_char(pg_catalog.timezone('UTC', pg_catalog.now()), 'YYYY-MM-DD HH24:MI:SS.US')))
             AND pg_catalog.set_config('idempotency.store_server_errors', 'on', true) IS NOT NULL
            THEN idempotency_complete(%s::text, %s::text, %s::integer,
                   response_headers => %s::jsonb, response_body_bytes => %s::bytea,
                   attempt => %s::integer, omit_oversized => false) END AS stored"""
SQL_COMPLETE_PARAMS = ("transaction", "transaction", "scope", "key", "status", "headers", "body", "attempt")
SQL_COMPLETE_COLUMNS = ()
SQL_RELEASE = """SELECT idempotency_release(%s::text, %s::text, attempt => %s::integer)"""
SQL_RELEASE_PARAMS = ("scope", "key", "attempt")
SQL_RELEASE_COLUMNS = ()
