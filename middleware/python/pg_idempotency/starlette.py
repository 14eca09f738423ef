"""Starlette and FastAPI: an ASGI middleware.

    app.add_middleware(IdempotencyMiddleware, connect=psycopg.AsyncConnection.connect)

    @app.post("/orders")
    async def create_order(request: Request):
        idem = request.state.idempotency     # idem.conn: in the claim's transaction
        ...

Requests of `methods` (default POST and PATCH; a route's own with @route_options) to a route
of the application go through pg_idempotency.aio on the event loop: `connect()` returns psycopg 3's AsyncConnection
(or an awaitable of one: the endpoints then await it) or a blocking psycopg 3 or psycopg2
connection (each statement then runs in a worker thread, and so should the endpoints that
use it: FastAPI runs `def` endpoints in one).  `release(conn)` gives it back (default:
conn.close()).  Waiting for a duplicate in flight holds no thread either way.
"""
import inspect
from typing import Any, Awaitable, Callable, Iterable, List, Optional, Sequence, Tuple, Union

import anyio
import anyio.to_thread
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request as StarletteRequest
from starlette.routing import Match, Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .aio import handle_async
from .core import (Context, Hook, Options, Request, Response, ResponseTooLarge, admit,
                   canonical_route, database_error, log, options_of_route, route_options, told)

__all__ = ["IdempotencyMiddleware", "StarletteRequest", "route_options"]

# What connect() may return: a connection, or an awaitable of one.
Connect = Callable[[], Any]


def matched_route(routes: Iterable[Any], scope: Scope, prefix: str = "") -> Optional[Tuple[str, Any]]:
    """The pattern ("/orders/{id:int}") and the route the request will reach, through mounts;
    None when no route takes it (its 404 or 405 is not the middleware's)."""
    for route in routes:
        match, child = route.matches(scope)
        if match != Match.FULL:
            continue
        if isinstance(route, Mount):
            return matched_route(route.routes, {**scope, **child}, prefix + route.path)
        return prefix + route.path, route
    return None


async def call(function: Callable[..., Any], *args: Any) -> Any:
    """Calls connect or release: awaited when it is asynchronous, else in a worker thread
    (a blocking connect must not stall the event loop)."""
    if inspect.iscoroutinefunction(function):
        return await function(*args)
    result = await anyio.to_thread.run_sync(function, *args)
    return await result if inspect.isawaitable(result) else result


async def close(conn: Any) -> None:
    await call(conn.close)


class IdempotencyMiddleware:
    # Options' fields are spelt out rather than taken as **options: Starlette 0.35 and
    # later type add_middleware's class as a factory whose `app` is positional-only, which
    # mypy finds a class taking `app` by keyword and **options not to be, while Starlette
    # before 0.35 passes `app` by keyword.  Their defaults are Options' own; per_route and
    # max_body_bytes are the old names of scope_per_route and max_request_bytes.
    def __init__(self, app: ASGIApp, connect: Connect,
                 release: Optional[Callable[[Any], Union[None, Awaitable[None]]]] = None,
                 methods: Iterable[str] = Options.methods, *,
                 tenant: Optional[Hook[StarletteRequest]] = None,
                 scope: Optional[Hook[StarletteRequest]] = None,
                 header: str = Options.header, required: bool = Options.required,
                 stored_headers: Sequence[str] = Options.stored_headers,
                 store_server_errors: bool = Options.store_server_errors,
                 wait: Optional[float] = Options.wait, ttl: Optional[str] = Options.ttl,
                 scope_per_route: bool = Options.scope_per_route,
                 max_request_bytes: int = Options.max_request_bytes,
                 lease: Optional[str] = Options.lease,
                 on_outcome: Optional[Callable[[str, StarletteRequest], None]] = None,
                 per_route: Optional[bool] = None, max_body_bytes: Optional[int] = None):
        """The keyword arguments are pg_idempotency.Options' fields; `tenant`, `scope` and
        `on_outcome` receive starlette.requests.Request (FastAPI's Request); plain
        functions, they run on the event loop and must not block."""
        self.app = app
        self.connect = connect
        self.release = release or close
        self.options: Options[StarletteRequest] = Options(
            header=header, required=required, stored_headers=stored_headers,
            store_server_errors=store_server_errors, wait=wait, ttl=ttl, tenant=tenant,
            scope=scope, scope_per_route=scope_per_route, methods=tuple(methods),
            max_request_bytes=max_request_bytes, lease=lease, on_outcome=on_outcome,
            per_route=per_route,
            max_body_bytes=max_body_bytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = None
        if scope["type"] == "http":
            found = matched_route(getattr(scope.get("app"), "routes", []), scope)
        options = self.options
        if found is not None:
            options = options_of_route(options, getattr(found[1], "endpoint", None))
        if found is None or not options.protects(scope["method"]):
            await self.app(scope, receive, send)
            return
        pattern = canonical_route("brace", found[0])
        body = await read_body(receive, options.max_request_bytes)
        native = StarletteRequest(scope, replay(body or b""))
        refused, namespace, key = admit(options, native, scope["method"], pattern, body,
                                        Headers(scope=scope).get(options.header))
        if refused is not None:
            await respond(send, refused)
            return
        assert body is not None  # else refused (413)
        read: bytes = body  # for run(): mypy does not carry the assert into it
        incoming = Request(method=scope["method"], route=pattern, path=scope["path"],
                           query=scope.get("query_string", b"").decode("latin-1"), body=body,
                           key=key, content_type=native.headers.get("content-type", ""))

        async def run(context: Context) -> Response:
            scope.setdefault("state", {})["idempotency"] = context
            return await self.run_app(scope, read, context.max_response_bytes)

        try:
            conn = await call(self.connect)
        except Exception:  # noqa: BLE001 - answered 500 problem+json, and logged
            log.exception("pg_idempotency: connect() failed")
            await respond(send, told(options, native, database_error()))
            return
        try:
            result = await handle_async(conn, incoming, run, options, namespace, native)
        finally:
            await call(self.release, conn)
        await respond(send, result)

    async def run_app(self, scope: Scope, body: bytes, limit: Optional[int]) -> Response:
        """Runs the application on the request, collecting its response -- a streamed one
        too, up to `limit` bytes, past which ResponseTooLarge stops it."""
        status, headers, chunks = 500, [], []
        size = 0

        async def send(message: Message) -> None:
            nonlocal status, headers, size
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(n.decode("latin-1"), v.decode("latin-1"))
                           for n, v in message.get("headers", [])]
            elif message["type"] == "http.response.body":
                chunk = message.get("body", b"")
                size += len(chunk)
                if limit is not None and size > limit:
                    raise ResponseTooLarge()
                chunks.append(chunk)

        await self.app(scope, replay(body), send)
        return Response(status, headers, b"".join(chunks))


def replay(body: bytes) -> Receive:
    """The receive channel of a request whose body was read: the body, then nothing (no
    disconnect while the handler runs)."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            await anyio.sleep_forever()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


async def read_body(receive: Receive, limit: int) -> Optional[bytes]:
    """The request's body; None once it is over `limit` bytes (the rest is not read)."""
    chunks: List[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()  # the client is gone: nothing to claim or answer
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def respond(send: Send, response: Response) -> None:
    """Sends an answer whole, with its exact Content-Length (a replay's too)."""
    headers = [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in response.headers
               if n.lower() not in ("content-length", "transfer-encoding")]
    headers.append((b"content-length", str(len(response.body)).encode()))
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": response.body})
