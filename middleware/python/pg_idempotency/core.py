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
import warnings
from dataclasses import InitVar, dataclass
from typing import (Any, Callable, Dict, Generator, Generic, Hashable, List, Mapping, Optional,
                    Sequence, Tuple, TypeVar, Union, cast)

# What every package shares -- the answers, the options' defaults, the route rules, the
# SQL, the SQLSTATE map -- is src/protocol.txt's and src/errcodes.txt's, generated into
# protocol.py.
from . import protocol
from .protocol import SQLSTATE_ANSWERS

Headers = List[Tuple[str, str]]

log = logging.getLogger("pg_idempotency")

# The framework's own request object, which the hooks receive: flask.Request,
# starlette.requests.Request (FastAPI's too), django.http.HttpRequest.
NativeRequest = TypeVar("NativeRequest")
Hook = Callable[[NativeRequest], str]
Row = Dict[str, Any]
Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])
ROUTE_OPTIONS = "__idempotency_options__"


@dataclass
class Request:
    """What the course needs of a request; an adapter reads it from the framework's."""
    method: str
    route: str  # the matched route's canonical pattern ("/orders/{id}"): canonical_route
    path: str  # the path, as the framework decodes it
    query: str  # the query string as sent, without its "?"; "" when there is none
    body: bytes
    key: Optional[str]  # the key header, None when absent
    # The Content-Type header a character per byte (latin-1), as WSGI and ASGI give it.
    content_type: str = ""


@dataclass
class Response:
    status: int
    headers: Headers
    body: bytes
    # The framework's own response the handler answered with, which an adapter sends as
    # it is (cookies and all); None for an answer of the middleware's.
    native: Any = None
    # What the request came to (src/protocol.txt, "outcomes"), for Options.on_outcome: the
    # course sets it on the handler's answer.
    outcome: str = "error"


@dataclass
class Options(Generic[NativeRequest]):
    """The middleware's options (middleware/README.md, "Options"; the defaults are
    src/protocol.txt's).  per_route and max_body_bytes, the old names of scope_per_route
    and max_request_bytes, are still taken, with a DeprecationWarning, until 0.6.0."""
    header: str = protocol.DEFAULT_HEADER
    required: bool = protocol.DEFAULT_REQUIRED
    # Response headers stored with the response and replayed (compared case-insensitively).
    stored_headers: Sequence[str] = protocol.DEFAULT_STORED_HEADERS
    # 5xx responses are not stored: the transaction rolls back and a retry runs again.
    store_server_errors: bool = protocol.DEFAULT_STORE_SERVER_ERRORS
    # Seconds to wait for a request in flight with the same key instead of answering 409.
    wait: Optional[float] = protocol.DEFAULT_WAIT
    ttl: Optional[str] = protocol.DEFAULT_TTL  # interval text, e.g. "24 hours"; None: the server's
    # tenant(request): the key's namespace (default: one namespace, ""); scope(request):
    # the whole scope, replacing tenant and scope_per_route.  On Citus, the tenant
    # column's value.
    tenant: Optional[Hook[NativeRequest]] = None
    scope: Optional[Hook[NativeRequest]] = None
    # Keys per route: the scope is "<tenant> <METHOD> <route pattern>" ("<METHOD> <route
    # pattern>" without a tenant hook, 0.3.0's scope), for clients that reuse keys across
    # routes on purpose.
    scope_per_route: bool = protocol.DEFAULT_SCOPE_PER_ROUTE
    # The methods protected; requests of others pass through.
    methods: Sequence[str] = protocol.DEFAULT_METHODS
    # Request bodies over this many bytes answer 413 before anything runs.
    max_request_bytes: int = protocol.DEFAULT_MAX_REQUEST_BYTES
    # Two-phase mode (doc/handlers.md): the claim commits at once with this lease (an
    # interval text), the handler runs outside a transaction and may checkpoint.
    lease: Optional[str] = protocol.DEFAULT_LEASE
    # on_outcome(outcome, request): called once per protected request, before its answer
    # is sent, with what it came to ("claimed", "replayed", ...: src/protocol.txt,
    # "outcomes") and the framework's request.  What it raises is logged, never answered.
    on_outcome: Optional[Callable[[str, NativeRequest], None]] = None
    per_route: InitVar[Optional[bool]] = None
    max_body_bytes: InitVar[Optional[int]] = None

    def __post_init__(self, per_route: Optional[bool], max_body_bytes: Optional[int]) -> None:
        if per_route is not None:
            self.scope_per_route = deprecated("per_route", per_route)
        if max_body_bytes is not None:
            self.max_request_bytes = deprecated("max_body_bytes", max_body_bytes)
        self.methods = tuple(m.upper() for m in self.methods)

    def merged(self, overrides: Dict[str, Any]) -> "Options[NativeRequest]":
        """These options with some fields replaced (a route's own, in Starlette and Django)."""
        return Options(**{**self.__dict__, **overrides}) if overrides else self

    def protects(self, method: str) -> bool:
        return method.upper() in self.methods


Value = TypeVar("Value")


def deprecated(name: str, value: Value) -> Value:
    """An option given its old name: still taken, with a warning, until 0.6.0."""
    warnings.warn(f"pg_idempotency: the option {name} is now {protocol.DEPRECATED[name]};"
                  f" {name} goes in 0.6.0", DeprecationWarning, stacklevel=4)
    return value


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


def statement(sql: str, names: Sequence[str], values: Mapping[str, Any]) -> Query:
    """A statement of the protocol, its parameters taken from `values` by name."""
    return Query(sql, tuple(values.get(name) for name in names))


def checkpoint_query(scope: str, key: Optional[str], recovery_point: Optional[str],
                     attempt: Optional[int]) -> Query:
    return statement(protocol.SQL_CHECKPOINT, protocol.SQL_CHECKPOINT_PARAMS,
                     {"scope": scope, "key": key, "recovery_point": recovery_point,
                      "attempt": attempt})


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
        step = checkpoint_query(self.scope, self.key, recovery_point, self.attempt)
        execute(self.conn, step.sql, step.params)
        self.conn.commit()
        self.recovery_point = recovery_point


# ------------------------------------------------------------------ answers

def problem(status: int, title: str, retry_after: Optional[int] = None,
            detail: Optional[str] = None, outcome: str = "error") -> Response:
    headers = [("Content-Type", protocol.PROBLEM_CONTENT_TYPE)]
    if retry_after is not None:
        headers.append(("Retry-After", str(retry_after)))
    document: Dict[str, Any] = {"type": protocol.PROBLEM_TYPE, "title": title, "status": status}
    if detail:
        document["detail"] = detail
    return Response(status, headers, json.dumps(document).encode(), outcome=outcome)


def render(template: str, **values: Any) -> str:
    """A template's "{name}"s filled in from `values` (the others left as they are)."""
    return re.sub(r"\{(\w+)\}", lambda m: str(values.get(m.group(1), m.group(0))), template)


def answer(name: str, retry_after: Optional[int] = None, detail: Optional[str] = None,
           **values: Any) -> Response:
    """One of the protocol's answers (src/protocol.txt, "answers"): `values` fill in its
    title and its detail, which `detail` replaces; Retry-After is `retry_after`, at least
    1, where the protocol gives it one."""
    spec: protocol.Answer = getattr(protocol, name.upper())
    return problem(spec.status, render(spec.title, **values),
                   max(retry_after or 1, 1) if spec.retry == "row" else None,
                   detail if detail is not None else
                   render(spec.detail, **values) if spec.detail is not None else None,
                   spec.outcome)


def key_required(options: "Options[Any]") -> Response:
    return answer("key_required", header=options.header)


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
    """The answers given before the hooks run: 413 for a body over
    Options.max_request_bytes (None: the adapter stopped reading it there), 400 for a
    missing key or one that is not UTF-8.  Returns (answer, None), or (None, the key:
    key_text of the header)."""
    if body is None:
        return answer("body_too_large", limit=options.max_request_bytes,
                      option="max_request_bytes"), None
    if header is None:
        return (key_required(options) if options.required else None), None
    key = key_text(header)
    if key is None:
        return answer("key_not_utf8", header=options.header), None
    return None, key


def hook_failed() -> Response:
    """A tenant or scope hook raised: nothing ran.  The adapter logs the exception."""
    return answer("hook_failed")


def database_error() -> Response:
    """A statement of the middleware's own failed with a SQLSTATE the map does not answer
    (or a connection could not be had): rolled back; the caller logs the exception."""
    return answer("database_error")


def admit(options: "Options[NativeRequest]", native: NativeRequest, method: str, route: str,
          body: Optional[bytes], header: Optional[str]
          ) -> Tuple[Optional[Response], str, Optional[str]]:
    """What comes before the course: the early answers (refused_early), then the hooks,
    whose failure answers hook_failed() and is logged.  `header` is the key header's value
    as the framework gives it, None when absent.  Returns (answer, "", None), or (None, the
    scope, the key)."""
    refused, key = refused_early(options, body, header)
    if refused is not None:
        return told(options, native, refused), "", None
    try:
        return None, scope_of(options, native, method, route), key
    except Exception:  # noqa: BLE001 - the hook's failure is answered, and logged
        log.exception("pg_idempotency: the tenant or scope hook raised")
        return told(options, native, hook_failed()), "", None


def told(options: "Options[NativeRequest]", native: NativeRequest, answer: Response) -> Response:
    """`answer`, once Options.on_outcome has been told its outcome (tell)."""
    tell(options, native, answer.outcome)
    return answer


def tell(options: "Options[NativeRequest]", native: NativeRequest, outcome: str) -> None:
    """Calls Options.on_outcome, whose exception is logged, never answered."""
    if options.on_outcome is None:
        return
    try:
        options.on_outcome(outcome, native)
    except Exception:  # noqa: BLE001 - see above
        log.exception("pg_idempotency: the on_outcome hook raised")


def telling(steps: "Course", options: "Options[Any]", native: Any, unprotected: bool) -> "Course":
    """The course `steps`, telling Options.on_outcome what it came to before its answer is
    sent: its answer's outcome, or, when the handler's exception goes on to the
    framework, the claim's (the handler ran)."""
    try:
        answer = yield from steps
    except Exception:
        tell(options, native, "unprotected" if unprotected else "claimed")
        raise
    return told(options, native, answer)


def response_too_large(limit: Optional[int]) -> Response:
    setting = "idempotency.max_response_bytes"
    return answer("response_too_large",
                  setting=setting if limit is None else f"{setting} ({limit} bytes)")


def sqlstate(error: Optional[BaseException]) -> Optional[str]:
    # psycopg 3 names it sqlstate, psycopg2 pgcode; Django wraps the driver's error.
    while error is not None:
        code = getattr(error, "sqlstate", None) or getattr(error, "pgcode", None)
        if code:
            return str(code)
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
    if options.scope_per_route:
        if tenant is None:
            return render(protocol.SCOPE_PER_ROUTE_NO_TENANT, method=method, route=route)
        return render(protocol.SCOPE_PER_ROUTE, tenant=tenant, method=method, route=route)
    return tenant or ""


ROUTE_RULES = {syntax: tuple((re.compile(pattern), replacement) for pattern, replacement in rules)
               for syntax, rules in protocol.ROUTE_RULES.items()}


def canonical_route(syntax: str, pattern: str) -> str:
    """The canonical form of a route pattern (src/protocol.txt, "route rules"), part of the
    fingerprint and of a per-route scope: "angle" for Flask and Django ("<int:id>"),
    "brace" for Starlette ("{id:int}")."""
    for rule, replacement in ROUTE_RULES[syntax]:
        pattern = rule.sub(replacement, pattern)
    return pattern


def byte_count(setting: Optional[str]) -> Optional[int]:
    """idempotency.max_response_bytes as current_setting shows it ("1MB", "54kB", "100B")."""
    found = re.fullmatch(r"\s*(\d+)\s*(B|kB|MB|GB|TB)?\s*", setting or "")
    if found is None:
        return None
    power = ("B", "kB", "MB", "GB", "TB").index(found.group(2) or "B")
    return int(found.group(1)) << (10 * power)


def begin_query(scope: str, request: Request, options: "Options[Any]", lease: Optional[str],
                wait: Optional[float]) -> Query:
    """idempotency_begin with the request's fingerprint: request_hash_parts(method, route
    pattern, path, query string, body), the body hashed by the server's rule for every
    package (request_hash_body): a JSON body by its value, not its spelling, any other by
    its bytes."""
    return statement(protocol.SQL_BEGIN, protocol.SQL_BEGIN_PARAMS, {
        "scope": scope, "key": request.key, "method": request.method, "route": request.route,
        "path": request.path, "query": request.query, "content_type": request.content_type,
        "body": request.body, "ttl": options.ttl, "lease": lease,
        "wait": None if wait is None else f"{wait} seconds"})


def complete_query(scope: str, key: str, response: Response, options: "Options[Any]",
                   attempt: Optional[int], transaction: Optional[str]) -> Query:
    """Stores the response whole or fails with 54000: never a record without its body.  Its
    row is true (stored), false (not stored), or NULL when it did not run in `transaction`,
    begin's server transaction (None: not checked, in two-phase mode, where they differ by
    design).  The statement turns idempotency.store_server_errors on for its transaction
    first, so that a 5xx (which only Options.store_server_errors sends here) is stored."""
    wanted = {name.lower() for name in (*options.stored_headers, *protocol.REPRESENTATION_HEADERS)}
    headers: Dict[str, Any] = {}
    for name, value in response.headers:
        if name.lower() in wanted:
            previous = headers.get(name)
            headers[name] = value if previous is None else (
                [*previous, value] if isinstance(previous, list) else [previous, value])
    return statement(protocol.SQL_COMPLETE, protocol.SQL_COMPLETE_PARAMS, {
        "transaction": transaction, "scope": scope, "key": key, "status": response.status,
        "headers": json.dumps(headers), "body": response.body, "attempt": attempt})


def release_query(scope: str, key: str, attempt: Optional[int]) -> Query:
    return statement(protocol.SQL_RELEASE, protocol.SQL_RELEASE_PARAMS,
                     {"scope": scope, "key": key, "attempt": attempt})


def unclaimed(row: Row) -> Response:
    if row["outcome"] == "replay":
        if row["response_body_omitted"]:
            # Stored without its body by another caller (omit_oversized): an empty replay
            # would be another answer than the first, so none is given.
            return answer("body_omitted")
        replayed: Headers = []
        stored = row["response_headers"]
        for name, value in (json.loads(stored) if stored else {}).items():
            replayed += [(name, v) for v in value] if isinstance(value, list) else [(name, value)]
        body = row["response_body_bytes"]
        return Response(row["response_status"] or 200,
                        [*replayed, (protocol.REPLAYED_HEADER, "true")],
                        bytes(body) if body is not None else b"", outcome="replayed")
    if row["outcome"] == "in_progress":
        return answer("in_progress", retry_after=row["retry_after_seconds"])
    return answer("mismatch")


# ------------------------------------------------------------------ the course

# Polling a request in flight: the first pause, and the longest.
POLL_FIRST, POLL_MAX = 0.05, 0.5


def claim(scope: str, request: Request, options: "Options[Any]", lease: Optional[str],
          polls: bool) -> Generator[Step, Any, Row]:
    """idempotency_begin; with Options.wait, waits for a request in flight: in the server
    (one statement), or, where `polls`, by asking again after pauses that hold no
    connection's statement open, so that no thread is held while waiting."""
    wait = None if polls else options.wait
    deadline = time.monotonic() + (options.wait or 0)
    pause = POLL_FIRST
    while True:
        values = yield begin_query(scope, request, options, lease, wait)
        row = dict(zip(protocol.SQL_BEGIN_COLUMNS, values))
        left = deadline - time.monotonic()
        if not polls or options.wait is None or row["outcome"] != "in_progress" or left <= 0:
            return row
        yield ROLLBACK
        yield Sleep(min(pause, left))
        pause = min(pause * 2, POLL_MAX)


def failed(error: Exception, stage: str) -> Response:
    """The answer to an error of the course once it rolled back: the SQLSTATE map's, else
    the handler's exception raised again, else 500 problem+json for a statement of the
    middleware's own (logged)."""
    mapped = SQLSTATE_ANSWERS.get(sqlstate(error) or "")
    if mapped is not None:
        return problem(mapped[0], mapped[1], mapped[2], outcome=mapped[3])
    if stage == "handler":
        raise error
    log.error("pg_idempotency: a statement of the middleware failed, the request was rolled"
              " back", exc_info=error)
    return database_error()


def course(request: Request, scope: str, options: "Options[Any]", polls: bool = False) -> Course:
    """The whole course of one request whose method is protected and whose body is within
    the limit: yields steps, returns the answer."""
    if request.key is None:
        if options.required:
            return key_required(options)
        return (yield from unprotected(scope))
    if options.lease is not None:
        return (yield from two_phase(request, scope, options, polls))
    stage = "statements"
    try:
        row = yield from claim(scope, request, options, None, polls)
        if row["outcome"] != "claimed":
            yield ROLLBACK
            return unclaimed(row)
        limit = byte_count(row["max_response_bytes"])
        try:
            stage = "handler"
            response: Response = yield Run(scope, request.key, row["attempt"], None, limit)
            response.outcome = "claimed"
            stage = "statements"
        except ResponseTooLarge:
            yield ROLLBACK
            return response_too_large(limit)
        if response.status >= 500 and not options.store_server_errors:
            yield ROLLBACK  # the work and the claim: a retry runs again
            return response
        refused = yield from store(scope, request.key, response, options, None,
                                   row["server_transaction"], limit)
        if refused is not None:
            return refused
        yield COMMIT
        return response
    except Exception as error:
        yield ROLLBACK
        return failed(error, stage)


def store(scope: str, key: str, response: Response, options: "Options[Any]",
          attempt: Optional[int], transaction: Optional[str], limit: Optional[int]
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
        return response_too_large(limit)
    if row is None or row[0] is None:
        yield ROLLBACK
        return split()
    if row[0] is not True:
        yield ROLLBACK
        return response
    return None


def split() -> Response:
    """begin and complete ran in different server transactions: a pooler split the
    request's, and part of its work may have run outside it.  Nothing is acknowledged, and
    the operator learns which setting to change."""
    reply = answer("split", drivers=protocol.SPLIT_DRIVERS)
    log.error("pg_idempotency: %s", json.loads(reply.body)["detail"])
    return reply


def unprotected(scope: str) -> Course:
    """No key and not required: the handler runs in a transaction, nothing stored."""
    try:
        response: Response = yield Run(scope, None)
        response.outcome = "unprotected"
    except Exception:
        yield ROLLBACK
        raise
    try:
        yield COMMIT
    except Exception as error:
        yield ROLLBACK
        return failed(error, "statements")
    return response


def two_phase(request: Request, scope: str, options: "Options[Any]", polls: bool) -> Course:
    """Claim with a lease and commit; the handler runs outside the claim's transaction
    (it may call other systems and checkpoint); its response is stored in a transaction
    of its own, fenced by the attempt: a worker whose lease ended gets IK003 (409)."""
    key = request.key
    assert key is not None
    try:
        row = yield from claim(scope, request, options, options.lease, polls)
        yield COMMIT
    except Exception as error:
        yield ROLLBACK
        return failed(error, "statements")
    if row["outcome"] != "claimed":
        return unclaimed(row)
    attempt, limit = row["attempt"], byte_count(row["max_response_bytes"])
    try:
        response: Response = yield Run(scope, key, attempt, row["recovery_point"], limit)
        response.outcome = "claimed"
    except ResponseTooLarge:
        yield from give_up(scope, key, attempt)
        return response_too_large(limit)
    except Exception as error:
        yield from give_up(scope, key, attempt)
        return failed(error, "handler")
    if response.status >= 500 and not options.store_server_errors:
        yield from give_up(scope, key, attempt)
        return response
    try:
        refused = yield from store(scope, key, response, options, attempt, None, limit)
        if refused is None:
            yield COMMIT
            return response
    except Exception as error:
        yield from give_up(scope, key, attempt)
        return failed(error, "statements")
    yield from give_up(scope, key, attempt)
    return refused


def give_up(scope: str, key: str, attempt: Optional[int]) -> Generator[Step, Any, None]:
    """Rolls back the handler's open work and ends the lease, so that the next retry goes
    on at once instead of waiting for the lease.  A release that fails (a newer attempt
    holds the key: IK003) leaves the lease to end by itself."""
    yield ROLLBACK
    try:
        yield release_query(scope, key, attempt)
        yield COMMIT
    except Exception:  # noqa: BLE001 - see above
        yield ROLLBACK


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
           options: "Options[Any]" = Options(), scope: str = "", native: Any = None) -> Response:
    """Runs `handler` at most once per key: the whole course of one request, on a blocking
    psycopg 3 or psycopg2 connection; `scope` is scope_of's; `native`, the framework's
    request, is what Options.on_outcome gets."""
    run = Driven(telling(course(request, scope, options), options, native, request.key is None))
    run_statements(conn, run)
    while isinstance(run.step, Run):  # a blocking connection waits in the server: no Sleep
        run.resume(*outcome(handler, Context(conn, run.step)))
        run_statements(conn, run)
    return cast(Response, run.answer)
