"""Starlette and FastAPI: an ASGI middleware.

    app.add_middleware(IdempotencyMiddleware, connect=get_connection)

    @app.post("/orders")
    def create_order(request: Request):      # a sync endpoint: FastAPI runs it in a thread
        idem = request.state.idempotency     # idem.conn: in the claim's transaction
        ...

Requests of `methods` (default POST and PATCH) go through pg_idempotency.core in a worker
thread, with a psycopg (3 or 2) connection from `connect()`, given back with
`release(conn)` (default: conn.close()).  The rest of the application runs on the event
loop as usual; an async endpoint that uses the connection blocks the loop while it does.
"""
import anyio
import anyio.from_thread
import anyio.to_thread
from starlette.datastructures import Headers
from starlette.routing import Match

from .core import Options, Request, Response, handle


def route_pattern(scope) -> str:
    """The pattern of the route the request will reach ("/orders/{id}"), which names the
    scope; the path itself when no route matches (a 404 is not stored)."""
    for route in getattr(scope.get("app"), "routes", []):
        match, _ = route.matches(scope)
        if match == Match.FULL:
            return getattr(route, "path", scope["path"])
    return scope["path"]


class IdempotencyMiddleware:
    def __init__(self, app, connect, release=None, methods=("POST", "PATCH"), **options):
        self.app = app
        self.connect = connect
        self.release = release
        self.methods = {m.upper() for m in methods}
        self.options = Options(**options)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in self.methods:
            await self.app(scope, receive, send)
            return
        body = await read_body(receive)
        headers = Headers(scope=scope)
        incoming = Request(method=scope["method"], route=route_pattern(scope),
                           path=scope["path"], body=body,
                           key=headers.get(self.options.header),
                           content_type=headers.get("content-type", ""))
        incoming.raw = scope
        result = await anyio.to_thread.run_sync(self.handle_in_thread, scope, incoming)
        await send({"type": "http.response.start", "status": result.status,
                    "headers": [(n.lower().encode(), v.encode()) for n, v in result.headers]})
        await send({"type": "http.response.body", "body": result.body})

    def handle_in_thread(self, scope, incoming: Request) -> Response:
        def run(context):
            scope.setdefault("state", {})["idempotency"] = context
            return anyio.from_thread.run(self.run_app, scope, incoming.body)

        conn = self.connect()
        try:
            return handle(conn, incoming, run, self.options)
        finally:
            (self.release or type(conn).close)(conn)

    async def run_app(self, scope, body: bytes) -> Response:
        """Runs the application on the request, collecting its response."""
        sent = False
        response = {"status": 500, "headers": [], "body": b""}

        async def receive():
            nonlocal sent
            if sent:
                await anyio.sleep_forever()  # no disconnect while the handler runs
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message):
            if message["type"] == "http.response.start":
                response["status"] = message["status"]
                response["headers"] = [(n.decode(), v.decode()) for n, v in message["headers"]]
            elif message["type"] == "http.response.body":
                response["body"] += message.get("body", b"")

        await self.app(scope, receive, send)
        return Response(response["status"], response["headers"], response["body"])


async def read_body(receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body
