"""The framework-neutral part: one HTTP request through the extension's SQL functions.

The SQL functions do the work (claim, arbitration, storage, replay); this module turns a
request into their arguments and their answers into HTTP responses, as the IETF
Idempotency-Key draft and Stripe answer:

    claimed      run the handler in the claim's transaction, store its response, commit
    replay       the stored status, headers and body, plus Idempotent-Replayed: true
    in_progress  409 with Retry-After (or wait, with Options.wait)
    mismatch     422
    no key       400 when Options.required, else the handler runs unprotected

Works with psycopg 3 and psycopg2 connections in their default (non-autocommit) mode:
both open a transaction on the first statement, and this module commits or rolls it back.
"""
import json
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Tuple

# The SQLSTATEs answered with something other than 500, and how (doc/reference.md,
# "Errors"; generated from src/errcodes.txt).  Any other error is the handler's or the
# operator's, and propagates as a 500.
from .errcodes import ANSWERS

Headers = Sequence[Tuple[str, str]]


@dataclass
class Request:
    method: str
    route: str  # the route's pattern ("/orders/<id>"), which names the scope
    path: str  # the path as sent, part of the fingerprint
    body: bytes
    key: Optional[str]  # the Idempotency-Key header, None when absent
    content_type: str = ""


@dataclass
class Response:
    status: int
    headers: Headers
    body: bytes


@dataclass
class Options:
    header: str = "Idempotency-Key"
    required: bool = True
    # Response headers stored with the response and replayed (compared case-insensitively).
    stored_headers: Sequence[str] = ("Content-Type", "Location")
    # 5xx responses are not stored: the transaction rolls back and a retry runs again.
    store_server_errors: bool = False
    # Seconds to wait for a request in flight with the same key instead of answering 409.
    wait: Optional[float] = None
    ttl: Optional[str] = None  # interval text, e.g. "24 hours"; None: the server's default
    # The scope of a request: by default method and route, prefixed by tenant(request)
    # when given.  On Citus, return the tenant column's value (doc/citus.md).
    scope: Optional[Callable[[Request], str]] = None
    tenant: Optional[Callable[[Request], str]] = None
    # Two-phase mode (doc/handlers.md): the claim commits at once with this lease (an
    # interval text), the handler runs outside a transaction and may checkpoint.
    lease: Optional[str] = None


class Context:
    """What the handler gets: the connection, and in two-phase mode its claim."""

    def __init__(self, conn, scope: str, key: Optional[str], attempt=None, recovery_point=None):
        self.conn = conn
        self.scope = scope
        self.key = key
        self.attempt = attempt
        self.recovery_point = recovery_point

    def checkpoint(self, recovery_point: Optional[str]) -> None:
        """Two-phase mode: records progress and renews the lease, fenced by the attempt."""
        execute(self.conn, "SELECT idempotency_checkpoint(%s, %s, %s, attempt => %s)",
                (self.scope, self.key, recovery_point, self.attempt))
        self.conn.commit()


def problem(status: int, title: str, retry_after: Optional[int] = None) -> Response:
    headers = [("Content-Type", "application/problem+json")]
    if retry_after is not None:
        headers.append(("Retry-After", str(retry_after)))
    return Response(status, headers, json.dumps({"type": "about:blank", "title": title,
                                                 "status": status}).encode())


def sqlstate(error: Optional[BaseException]) -> Optional[str]:
    # psycopg 3 names it sqlstate, psycopg2 pgcode; Django wraps the driver's error.
    while error is not None:
        code = getattr(error, "sqlstate", None) or getattr(error, "pgcode", None)
        if code:
            return code
        error = error.__cause__
    return None


def execute(conn, sql: str, params=()):
    cur = conn.cursor()
    cur.execute(sql, params)
    return cur


def scope_of(request: Request, options: Options) -> str:
    if options.scope is not None:
        return options.scope(request)
    scope = f"{request.method} {request.route}"
    return f"{options.tenant(request)} {scope}" if options.tenant is not None else scope


def fingerprint_sql(request: Request) -> Tuple[str, tuple]:
    """request_hash of method, path and body; a JSON body by its value, not its spelling."""
    if "json" in request.content_type:
        try:
            json.loads(request.body)
            body_hash = "request_hash_jsonb(%s::text)::text"
            body = request.body.decode()
        except ValueError:
            body_hash, body = "request_hash(%s::bytea)::text", request.body
    else:
        body_hash, body = "request_hash(%s::bytea)::text", request.body
    return (f"request_hash_parts(%s::text, %s::text, {body_hash})",
            (request.method, request.path, body))


BEGIN_COLUMNS = ("outcome::text, response_status, response_headers::text, response_body_bytes,"
                 " retry_after_seconds, attempt, recovery_point")


def begin(conn, scope: str, request: Request, options: Options, lease: Optional[str]):
    hash_sql, hash_params = fingerprint_sql(request)
    named, params = [], []
    for name, value, cast in (("ttl", options.ttl, "interval"), ("lease", lease, "interval"),
                              ("wait", options.wait, "float8")):
        if value is not None:
            named.append(f"{name} => %s::{cast}" if cast == "interval"
                         else f"{name} => make_interval(secs => %s::{cast})")
            params.append(value)
    sql = (f"SELECT {BEGIN_COLUMNS} FROM idempotency_begin(%s, %s, {hash_sql}"
           + "".join(", " + n for n in named) + ")")
    return execute(conn, sql, (scope, request.key, *hash_params, *params)).fetchone()


def unclaimed(outcome: str, status, headers, body, retry_after_seconds) -> Response:
    if outcome == "replay":
        stored = json.loads(headers) if headers else {}
        return Response(status, [*stored.items(), ("Idempotent-Replayed", "true")],
                        bytes(body) if body is not None else b"")
    if outcome == "in_progress":
        return problem(409, "A request with this Idempotency-Key is in progress",
                       retry_after_seconds)
    return problem(422, "The Idempotency-Key was used for a different request")


def complete(conn, scope: str, key: str, response: Response, options: Options, attempt=None):
    wanted = {name.lower() for name in options.stored_headers}
    headers = {name: value for name, value in response.headers if name.lower() in wanted}
    execute(conn, "SELECT idempotency_complete(%s, %s, %s, response_headers => %s::jsonb,"
                  " response_body_bytes => %s, attempt => %s::integer)",
            (scope, key, response.status, json.dumps(headers), response.body, attempt))


def handle(conn, request: Request, handler: Callable[[Context], Response],
           options: Options = Options()) -> Response:
    """Runs `handler` at most once per key: the whole course of one request."""
    scope = scope_of(request, options)
    if request.key is None:
        if options.required:
            return problem(400, f"The {options.header} header is required")
        return run_in_transaction(conn, lambda: handler(Context(conn, scope, None)))
    try:
        if options.lease is not None:
            return two_phase(conn, scope, request, handler, options)
        outcome, *stored, attempt, _ = begin(conn, scope, request, options, None)
        if outcome != "claimed":
            conn.rollback()
            return unclaimed(outcome, *stored)
        response = handler(Context(conn, scope, request.key, attempt))
        if response.status >= 500 and not options.store_server_errors:
            conn.rollback()  # the work and the claim: a retry runs again
            return response
        complete(conn, scope, request.key, response, options)
        conn.commit()
        return response
    except Exception as error:
        conn.rollback()
        answer = ANSWERS.get(sqlstate(error))
        if answer is None:
            raise
        return problem(*answer)


def run_in_transaction(conn, work: Callable[[], Response]) -> Response:
    try:
        response = work()
    except BaseException:
        conn.rollback()
        raise
    conn.commit()
    return response


def two_phase(conn, scope: str, request: Request, handler, options: Options) -> Response:
    """Claim with a lease and commit; the handler runs outside the claim's transaction
    (it may call other systems and checkpoint); its response is stored in a transaction
    of its own, fenced by the attempt: a worker whose lease ended gets IK003 (409)."""
    outcome, *stored, attempt, recovery_point = begin(conn, scope, request, options,
                                                      options.lease)
    conn.commit()
    if outcome != "claimed":
        return unclaimed(outcome, *stored)
    context = Context(conn, scope, request.key, attempt, recovery_point)
    try:
        response = handler(context)
    except BaseException:
        conn.rollback()
        # The next retry may go on at once instead of waiting for the lease.
        execute(conn, "SELECT idempotency_release(%s, %s, attempt => %s)",
                (scope, request.key, attempt))
        conn.commit()
        raise
    if response.status >= 500 and not options.store_server_errors:
        conn.rollback()
        execute(conn, "SELECT idempotency_release(%s, %s, attempt => %s)",
                (scope, request.key, attempt))
        conn.commit()
        return response
    complete(conn, scope, request.key, response, options, attempt)
    conn.commit()
    return response
