"""The framework-neutral part: the course of one request through the extension's SQL
functions (middleware/README.md is the contract every package follows).

The SQL functions do the work (claim, arbitration, storage, replay); this module turns a
request into their arguments and their answers into HTTP responses:

    claimed      run the handler in the claim's transaction, store its response, commit
    replay       the stored status, headers and body, plus Idempotent-Replayed: true
    in_progress  409 with Retry-After (or wait first, with Options.wait)
    mismatch     422
    no key       400 when Options.required, else the handler runs unprotected

The course is written once, as a generator of steps (a query, a commit, a rollback, the
handler, a pause) that does no I/O itself: `handle` runs it on a blocking connection,
pg_idempotency.aio on an asyncio one or, without blocking the event loop, on a blocking
one in worker threads.  Works with psycopg 3 and psycopg2 connections in their default
(non-autocommit) mode: both open a transaction on the first statement, and the course
commits or rolls it back.
"""
import functools
import inspect
import json
import logging
import re
import time
from dataclasses import dataclass
from typing import (Any, Callable, Dict, Generator, Generic, Hashable, List, Optional, Sequence,
                    Tuple, TypeVar, Union, cast)

# The SQLSTATEs answered with something other than 500, and how (doc/reference.md,
# "Errors"; generated from src/errcodes.txt).  Any other error is the handler's or the
# operator's, and propagates as a 500.
from .errcodes import ANSWERS

Headers = List[Tuple[str, str]]

log = logging.getLogger("pg_idempotency")

# The framework's own request object, which the hooks receive: flask.Request,
# starlette.requests.Request (FastAPI's too), django.http.HttpRequest.
NativeRequest = TypeVar("NativeRequest")
Hook = Callable[[NativeRequest], str]
Row = Tuple[Any, ...]
Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])
ROUTE_OPTIONS = "__idempotency_options__"


@dataclass
class Request:
    """What the course needs of a request; an adapter reads it from the framework's."""
    method: str
    route: str  # the matched route's pattern ("/orders/<id>"), part of the fingerprint
    path: str  # the path, as the framework decodes it
    query: str  # the query string as sent, without its "?"; "" when there is none
    body: bytes
    key: Optional[str]  # the key header, None when absent
    content_type: str = ""


@dataclass
class Response:
    status: int
    headers: Headers
    body: bytes
    # The framework's own response the handler answered with, which an adapter sends as
    # it is (cookies and all); None for an answer of the middleware's.
    native: Any = None


@dataclass
class Options(Generic[NativeRequest]):
    """The middleware's options (middleware/python/README.md, "Options")."""
    header: str = "Idempotency-Key"
    required: bool = True
    # Response headers stored with the response and replayed (compared case-insensitively).
    stored_headers: Sequence[str] = ("Content-Type", "Location")
    # 5xx responses are not stored: the transaction rolls back and a retry runs again.
    store_server_errors: bool = False
    # Seconds to wait for a request in flight with the same key instead of answering 409.
    wait: Optional[float] = None
    ttl: Optional[str] = None  # interval text, e.g. "24 hours"; None: the server's default
    # tenant(request): the key's namespace (default: one namespace, ""); scope(request):
    # the whole scope, replacing tenant and per_route.  On Citus, the tenant column's value.
    tenant: Optional[Hook[NativeRequest]] = None
    scope: Optional[Hook[NativeRequest]] = None
    # Keys per route: the scope is "<tenant> <METHOD> <route pattern>" ("<METHOD> <route
    # pattern>" without a tenant hook, 0.3.0's scope), for clients that reuse keys across
    # routes on purpose.
    per_route: bool = False
    # Request bodies over this many bytes answer 413 before anything runs.
    max_body_bytes: int = 1024 * 1024
    # Two-phase mode (doc/handlers.md): the claim commits at once with this lease (an
    # interval text), the handler runs outside a transaction and may checkpoint.
    lease: Optional[str] = None

    def merged(self, overrides: Dict[str, Any]) -> "Options[NativeRequest]":
        """These options with some fields replaced (a route's own, in Starlette and Django)."""
        return Options(**{**self.__dict__, **overrides}) if overrides else self


def route_options(**overrides: Any) -> Callable[[Endpoint], Endpoint]:
    """Marks a Starlette/FastAPI endpoint or a Django view with options of its own, which
    replace the middleware's for its route: @route_options(wait=30)."""
    Options(**overrides)  # a misspelt option fails here, at import

    def mark(endpoint: Endpoint) -> Endpoint:
        setattr(endpoint, ROUTE_OPTIONS, overrides)
        return endpoint

    return mark


def options_of_route(options: "Options[NativeRequest]", endpoint: Any) -> "Options[NativeRequest]":
    return options.merged(getattr(endpoint, ROUTE_OPTIONS, {}))


class ResponseTooLarge(Exception):
    """Raised by an adapter whose handler streams more than the server would store."""


# ------------------------------------------------------------------ the course's steps

@dataclass(frozen=True)
class Query:
    """Run `sql`; the course gets its first row (or None)."""
    sql: str
    params: Tuple[Any, ...]


@dataclass(frozen=True)
class Commit:
    pass


@dataclass(frozen=True)
class Rollback:
    pass


@dataclass(frozen=True)
class Run:
    """Run the handler; the course gets its Response.  The fields are what the handler's
    context tells it of the claim."""
    scope: str
    key: Optional[str]
    attempt: Optional[int] = None
    recovery_point: Optional[str] = None
    # idempotency.max_response_bytes: a streamed response is buffered up to this many
    # bytes; None where nothing is stored (no key).
    max_response_bytes: Optional[int] = None


@dataclass(frozen=True)
class Sleep:
    seconds: float


Step = Union[Query, Commit, Rollback, Run, Sleep]
Course = Generator[Step, Any, Response]
COMMIT, ROLLBACK = Commit(), Rollback()

CHECKPOINT_SQL = "SELECT idempotency_checkpoint(%s, %s, %s, attempt => %s)"


class Context:
    """What the handler gets: the connection, in the claim's transaction (or, in two-phase
    mode, outside it), and the claim."""

    def __init__(self, conn: Any, run: Run):
        self.conn = conn
        self.scope = run.scope
        self.key = run.key
        self.attempt = run.attempt
        self.recovery_point = run.recovery_point
        self.max_response_bytes = run.max_response_bytes

    def checkpoint(self, recovery_point: Optional[str]) -> None:
        """Two-phase mode: records progress and renews the lease, fenced by the attempt."""
        execute(self.conn, CHECKPOINT_SQL, (self.scope, self.key, recovery_point, self.attempt))
        self.conn.commit()


# ------------------------------------------------------------------ answers

def problem(status: int, title: str, retry_after: Optional[int] = None,
            detail: Optional[str] = None) -> Response:
    headers = [("Content-Type", "application/problem+json")]
    if retry_after is not None:
        headers.append(("Retry-After", str(retry_after)))
    document = {"type": "about:blank", "title": title, "status": status}
    if detail:
        document["detail"] = detail
    return Response(status, headers, json.dumps(document).encode())


def key_required(options: "Options[Any]") -> Response:
    return problem(400, f"The {options.header} header is required")


KEY_NOT_UTF8 = "The Idempotency-Key header is not valid UTF-8"


def key_text(header: str) -> Optional[str]:
    """The key a header's value carries: its bytes read as UTF-8, as in every package of the
    project, so that a retry moved to another package finds its key; None when they are not
    UTF-8.  WSGI (PEP 3333) and ASGI servers give a header a character per byte (latin-1);
    a value with a character past U+00FF was decoded before, and is taken as it is."""
    try:
        return header.encode("latin-1").decode("utf-8")
    except UnicodeEncodeError:  # a character past U+00FF
        pass
    except UnicodeDecodeError:
        return None
    try:
        header.encode("utf-8")  # no lone surrogate
    except UnicodeEncodeError:
        return None
    return header


def refused_early(options: "Options[Any]", body: Optional[bytes],
                  header: Optional[str]) -> Tuple[Optional[Response], Optional[str]]:
    """The answers given before the hooks run: 413 for a body over Options.max_body_bytes
    (None: the adapter stopped reading it there), 400 for a missing key or one that is
    not UTF-8.  Returns (answer, None), or (None, the key: key_text of the header)."""
    if body is None:
        return problem(413, "The request body is too large", detail=f"The limit is "
                       f"{options.max_body_bytes} bytes (the max_body_bytes option)."), None
    if header is None:
        return (key_required(options) if options.required else None), None
    key = key_text(header)
    if key is None:
        return problem(400, KEY_NOT_UTF8), None
    return None, key


def hook_failed() -> Response:
    """A tenant or scope hook raised: nothing ran.  The adapter logs the exception."""
    return problem(500, "The idempotency tenant or scope hook failed")


def admit(options: "Options[NativeRequest]", native: NativeRequest, method: str, route: str,
          body: Optional[bytes], header: Optional[str]
          ) -> Tuple[Optional[Response], str, Optional[str]]:
    """What comes before the course: the early answers (refused_early), then the hooks,
    whose failure answers hook_failed() and is logged.  `header` is the key header's value
    as the framework gives it, None when absent.  Returns (answer, "", None), or (None, the
    scope, the key)."""
    refused, key = refused_early(options, body, header)
    if refused is not None:
        return refused, "", None
    try:
        return None, scope_of(options, native, method, route), key
    except Exception:  # noqa: BLE001 - the hook's failure is answered, and logged
        log.exception("pg_idempotency: the tenant or scope hook raised")
        return hook_failed(), "", None


def response_too_large(detail: Optional[str]) -> Response:
    return problem(500, "The response is over idempotency.max_response_bytes and was not "
                   "stored: the request was rolled back", detail=detail)


def stream_detail(setting: Optional[str]) -> str:
    return (f"The streamed response was longer than idempotency.max_response_bytes "
            f"({byte_count(setting)} bytes).")


def sqlstate(error: Optional[BaseException]) -> Optional[str]:
    # psycopg 3 names it sqlstate, psycopg2 pgcode; Django wraps the driver's error.
    while error is not None:
        code = getattr(error, "sqlstate", None) or getattr(error, "pgcode", None)
        if code:
            return str(code)
        error = error.__cause__
    return None


def error_detail(error: Optional[BaseException]) -> Optional[str]:
    while error is not None:
        detail = getattr(getattr(error, "diag", None), "message_detail", None)
        if detail:
            return str(detail)
        error = error.__cause__
    return None


def execute(conn: Any, sql: str, params: Tuple[Any, ...] = ()) -> Any:
    cur = conn.cursor()
    if takes_prepare(cast(Hashable, type(cur))):  # a class is hashable; mypy 1.0 thinks not
        cur.execute(sql, params, prepare=False)
    else:
        cur.execute(sql, params)
    return cur


@functools.lru_cache(maxsize=None)
def takes_prepare(cursor_type: Hashable) -> bool:
    """Whether the cursor is psycopg 3's, which prepares a statement run five times on one
    connection: a pooler in transaction mode (PgBouncer) cannot keep that, and a wait that
    polls runs begin again and again.  So the middleware's statements are never prepared
    (psycopg2 and Django's cursors never prepare)."""
    try:
        return "prepare" in inspect.signature(getattr(cursor_type, "execute")).parameters
    except (TypeError, ValueError):  # a C method without a signature: psycopg2's
        return False


def run_step(conn: Any, step: Step) -> Any:
    """Performs a database step on a blocking connection."""
    if isinstance(step, Query):
        return execute(conn, step.sql, step.params).fetchone()
    if isinstance(step, Commit):
        return conn.commit()
    if isinstance(step, Rollback):
        return conn.rollback()
    raise TypeError(f"not a database step: {step!r}")


# ------------------------------------------------------------------ the request's parts

def scope_of(options: "Options[NativeRequest]", native: NativeRequest, method: str,
             route: str) -> str:
    """The key's namespace (middleware/README.md, "Scope"): the hooks run here, on the
    framework's own request; an adapter answers hook_failed() when one raises."""
    if options.scope is not None:
        return options.scope(native)
    tenant = options.tenant(native) if options.tenant is not None else None
    if options.per_route:
        return f"{tenant} {method} {route}" if tenant is not None else f"{method} {route}"
    return tenant or ""


def fingerprint_sql(request: Request) -> Tuple[str, Tuple[Any, ...]]:
    """request_hash_parts(method, route pattern, path, query string, body), the body
    hashed by the server's rule for every package (request_hash_body): a JSON body by
    its value, not its spelling, any other by its bytes."""
    return ("request_hash_parts(%s::text, %s::text, %s::text, %s::text,"
            " request_hash_body(%s::text, %s::bytea)::text)",
            (request.method, request.route, request.path, request.query,
             request.content_type, request.body))


def byte_count(setting: Optional[str]) -> Optional[int]:
    """idempotency.max_response_bytes as current_setting shows it ("1MB", "54kB", "100B")."""
    found = re.fullmatch(r"\s*(\d+)\s*(B|kB|MB|GB|TB)?\s*", setting or "")
    if found is None:
        return None
    power = ("B", "kB", "MB", "GB", "TB").index(found.group(2) or "B")
    return int(found.group(1)) << (10 * power)


# The server transaction a statement runs in: the server process and the transaction's
# start, as text that no setting changes.  A pooler in transaction mode runs a transaction
# on one server connection from BEGIN to its end, so begin and complete name the same one
# unless the transaction was split: ended early (a driver's named statement run as another
# client's COMMIT or ROLLBACK, where that client prepared the name) with the rest run
# elsewhere.
SERVER_TRANSACTION = ("pg_catalog.concat(pg_catalog.pg_backend_pid(), ' ', pg_catalog.to_char("
                      "pg_catalog.timezone('UTC', pg_catalog.now()), 'YYYY-MM-DD HH24:MI:SS.US'))")

BEGIN_COLUMNS = ("outcome::text, response_status, response_headers::text, response_body_bytes,"
                 " response_body_omitted, retry_after_seconds, attempt, recovery_point,"
                 " current_setting('idempotency.max_response_bytes', true), "
                 + SERVER_TRANSACTION)


def begin_query(scope: str, request: Request, options: "Options[Any]", lease: Optional[str],
                wait: Optional[float]) -> Query:
    hash_sql, hash_params = fingerprint_sql(request)
    named, params = [], []
    for name, value, cast in (("ttl", options.ttl, "interval"), ("lease", lease, "interval"),
                              ("wait", wait, "float8")):
        if value is not None:
            named.append(f"{name} => %s::{cast}" if cast == "interval"
                         else f"{name} => make_interval(secs => %s::{cast})")
            params.append(value)
    sql = (f"SELECT {BEGIN_COLUMNS} FROM idempotency_begin(%s, %s, {hash_sql}"
           + "".join(", " + n for n in named) + ")")
    return Query(sql, (scope, request.key, *hash_params, *params))


# omit_oversized => false: a response over the server's limit raises 54000 instead of being
# stored without its body.
COMPLETE = ("idempotency_complete(%s, %s, %s, response_headers => %s::jsonb,"
            " response_body_bytes => %s, attempt => %s::integer, omit_oversized => false)")


def complete_query(scope: str, key: str, response: Response, options: "Options[Any]",
                   attempt: Optional[int], transaction: Optional[str]) -> Query:
    """Stores the response whole or fails with 54000: never a record without its body.  Its
    row is true (stored), false (not stored), or NULL when it did not run in `transaction`,
    begin's SERVER_TRANSACTION (None: not checked, in two-phase mode, where they differ by
    design)."""
    wanted = {name.lower() for name in options.stored_headers}
    headers: Dict[str, Any] = {}
    for name, value in response.headers:
        if name.lower() in wanted:
            previous = headers.get(name)
            headers[name] = value if previous is None else (
                [*previous, value] if isinstance(previous, list) else [previous, value])
    # The server stores a 5xx (which only options.store_server_errors asks for) only with
    # idempotency.store_server_errors on: it is set for the transaction first, in the same
    # statement -- a CASE evaluates its condition before its result (PostgreSQL's manual,
    # "Expression Evaluation Rules").
    server_errors = (" AND pg_catalog.set_config('idempotency.store_server_errors', 'on', true)"
                     " IS NOT NULL" if response.status >= 500 else "")
    sql = (f"SELECT CASE WHEN (%s::text IS NULL OR %s::text = {SERVER_TRANSACTION}){server_errors}"
           f" THEN {COMPLETE} END")
    return Query(sql, (transaction, transaction, scope, key, response.status, json.dumps(headers),
                       response.body, attempt))


def release_query(scope: str, key: str, attempt: Optional[int]) -> Query:
    return Query("SELECT idempotency_release(%s, %s, attempt => %s)", (scope, key, attempt))


def unclaimed(outcome: str, status: Optional[int], headers: Optional[str],
              body: Optional[bytes], omitted: Optional[bool],
              retry_after_seconds: Optional[int]) -> Response:
    if outcome == "replay":
        if omitted:
            # Stored without its body by another caller (omit_oversized): an empty replay
            # would be another answer than the first, so none is given.
            return problem(500, "The stored response of this request cannot be replayed",
                           detail="It was stored without its body, being over "
                           "idempotency.max_response_bytes.")
        replayed: Headers = []
        for name, value in (json.loads(headers) if headers else {}).items():
            replayed += [(name, v) for v in value] if isinstance(value, list) else [(name, value)]
        return Response(status or 200, [*replayed, ("Idempotent-Replayed", "true")],
                        bytes(body) if body is not None else b"")
    if outcome == "in_progress":
        return problem(409, "A request with this Idempotency-Key is in progress",
                       retry_after_seconds)
    return problem(422, "The Idempotency-Key was used for a different request")


# ------------------------------------------------------------------ the course

# Polling a request in flight: the first pause, and the longest.
POLL_FIRST, POLL_MAX = 0.05, 0.5


def claim(scope: str, request: Request, options: "Options[Any]", lease: Optional[str],
          polls: bool) -> Generator[Step, Any, Tuple[Any, ...]]:
    """idempotency_begin; with Options.wait, waits for a request in flight: in the server
    (one statement), or, where `polls`, by asking again after pauses that hold no
    connection's statement open, so that no thread is held while waiting."""
    row: Row
    if not polls or options.wait is None:
        row = yield begin_query(scope, request, options, lease, options.wait)
        return row
    deadline = time.monotonic() + options.wait
    pause = POLL_FIRST
    while True:
        row = yield begin_query(scope, request, options, lease, None)
        left = deadline - time.monotonic()
        if row[0] != "in_progress" or left <= 0:
            return row
        yield ROLLBACK
        yield Sleep(min(pause, left))
        pause = min(pause * 2, POLL_MAX)


def course(request: Request, scope: str, options: "Options[Any]", polls: bool = False) -> Course:
    """The whole course of one request whose method is protected and whose body is within
    the limit: yields steps, returns the answer."""
    if request.key is None:
        if options.required:
            return key_required(options)
        return (yield from unprotected(scope))
    try:
        if options.lease is not None:
            return (yield from two_phase(request, scope, options, polls))
        (outcome, status, headers, body, omitted, retry_after_seconds, attempt, _,
         limit, transaction) = yield from claim(scope, request, options, None, polls)
        if outcome != "claimed":
            yield ROLLBACK
            return unclaimed(outcome, status, headers, body, omitted, retry_after_seconds)
        try:
            response: Response = yield Run(scope, request.key, attempt, None, byte_count(limit))
        except ResponseTooLarge:
            yield ROLLBACK
            return response_too_large(stream_detail(limit))
        if response.status >= 500 and not options.store_server_errors:
            yield ROLLBACK  # the work and the claim: a retry runs again
            return response
        refused = yield from store(scope, request.key, response, options, None, transaction)
        if refused is not None:
            return refused
        yield COMMIT
        return response
    except Exception as error:
        yield ROLLBACK
        answer = ANSWERS.get(sqlstate(error) or "")
        if answer is None:
            raise
        return problem(*answer)


def store(scope: str, key: str, response: Response, options: "Options[Any]",
          attempt: Optional[int], transaction: Optional[str]
          ) -> Generator[Step, Any, Optional[Response]]:
    """idempotency_complete, in `transaction` (complete_query); None once stored.  Otherwise
    the transaction is rolled back, so that a retry runs again, and the answer is returned:
    500 for a response over idempotency.max_response_bytes (54000) or for a transaction a
    pooler split (split()), the response itself when the server did not store it
    (complete returned false): the work never commits without its response."""
    try:
        row = yield complete_query(scope, key, response, options, attempt, transaction)
    except Exception as error:
        if sqlstate(error) != "54000":
            raise
        yield ROLLBACK
        return response_too_large(error_detail(error))
    if row is None or row[0] is None:
        yield ROLLBACK
        return split()
    if row[0] is not True:
        yield ROLLBACK
        return response
    return None


SPLIT_TITLE = "The request's transaction was split by a connection pooler"


def split() -> Response:
    """begin and complete ran in different server transactions: a pooler split the
    request's, and part of its work may have run outside it.  Nothing is acknowledged, and
    the operator learns which setting to change."""
    detail = ("idempotency_begin and idempotency_complete ran in different server transactions,"
              " so the work was rolled back and nothing was stored. Behind a pooler in"
              " transaction mode (PgBouncer before 1.21), use psycopg 3 with"
              " prepare_threshold=None for the statements the handler runs (psycopg2 and"
              " Django bind on the client and need nothing); from PgBouncer 1.21 set"
              " max_prepared_statements; or use the pooler's session mode.")
    log.error("pg_idempotency: %s", detail)
    return problem(500, SPLIT_TITLE, detail=detail)


def unprotected(scope: str) -> Course:
    """No key and not required: the handler runs in a transaction, nothing stored."""
    try:
        response: Response = yield Run(scope, None)
    except Exception:
        yield ROLLBACK
        raise
    yield COMMIT
    return response


def two_phase(request: Request, scope: str, options: "Options[Any]", polls: bool) -> Course:
    """Claim with a lease and commit; the handler runs outside the claim's transaction
    (it may call other systems and checkpoint); its response is stored in a transaction
    of its own, fenced by the attempt: a worker whose lease ended gets IK003 (409)."""
    key = request.key
    assert key is not None
    (outcome, status, headers, body, omitted, retry_after_seconds, attempt, recovery_point,
     limit, _) = yield from claim(scope, request, options, options.lease, polls)
    yield COMMIT
    if outcome != "claimed":
        return unclaimed(outcome, status, headers, body, omitted, retry_after_seconds)
    try:
        response: Response = yield Run(scope, key, attempt, recovery_point, byte_count(limit))
    except ResponseTooLarge:
        yield from give_up(scope, key, attempt)
        return response_too_large(stream_detail(limit))
    except Exception:
        yield from give_up(scope, key, attempt)
        raise
    if response.status >= 500 and not options.store_server_errors:
        yield from give_up(scope, key, attempt)
        return response
    refused = yield from store(scope, key, response, options, attempt, None)
    if refused is not None:
        yield release_query(scope, key, attempt)
        yield COMMIT
        return refused
    yield COMMIT
    return response


def give_up(scope: str, key: str, attempt: Optional[int]) -> Generator[Step, Any, None]:
    """Rolls back the handler's open work and ends the lease, so that the next retry goes
    on at once instead of waiting for the lease."""
    yield ROLLBACK
    yield release_query(scope, key, attempt)
    yield COMMIT


# ------------------------------------------------------------------ on a blocking connection

class Driven:
    """A course being run: `step` is the next step to perform, None once `answer` is set."""

    def __init__(self, steps: Course):
        self.steps = steps
        self.step: Optional[Step] = None
        self.answer: Optional[Response] = None
        self.resume(None, None)

    def resume(self, value: Any, error: Optional[Exception]) -> None:
        """Hands the course the last step's value, or raises its error there, where it is
        handled."""
        try:
            self.step = self.steps.send(value) if error is None else self.steps.throw(error)
        except StopIteration as stop:
            self.step, self.answer = None, stop.value


def outcome(perform: Callable[..., Any], *args: Any) -> Tuple[Any, Optional[Exception]]:
    """A step's value, or its error, for Driven.resume."""
    try:
        return perform(*args), None
    except Exception as failure:  # noqa: BLE001 - handed to the course
        return None, failure


def run_statements(conn: Any, run: Driven) -> None:
    """Performs the course's database steps on a blocking connection, up to its next step
    that is not one (the handler, a pause) or its end."""
    while isinstance(run.step, (Query, Commit, Rollback)):
        run.resume(*outcome(run_step, conn, run.step))


def handle(conn: Any, request: Request, handler: Callable[[Context], Response],
           options: "Options[Any]" = Options(), scope: str = "") -> Response:
    """Runs `handler` at most once per key: the whole course of one request, on a blocking
    psycopg 3 or psycopg2 connection; `scope` is scope_of's."""
    run = Driven(course(request, scope, options))
    run_statements(conn, run)
    while isinstance(run.step, Run):  # a blocking connection waits in the server: no Sleep
        run.resume(*outcome(handler, Context(conn, run.step)))
        run_statements(conn, run)
    return cast(Response, run.answer)
