"""The conformance application on FastAPI (uvicorn).  CONFORMANCE_DRIVER=psycopg: psycopg 3's
AsyncConnection and async endpoints; psycopg2: blocking connections and `def` endpoints,
which FastAPI runs in its worker threads."""
import asyncio
import json
import os
from typing import Any, Dict

from fastapi import Body, FastAPI, Request
from fastapi.responses import Response
from starlette.middleware.gzip import GZipMiddleware

from orders import (GATE, INSERT, OPTIONS, SPLIT, asgi_response, fail_if_asked, options_answer,
                    options_first, options_headers, options_order_on, order_on, outcomes_json,
                    tenant)
from pg_idempotency.starlette import IdempotencyMiddleware, route_options

app = FastAPI()
# Added before the idempotency middleware, so inside it: it compresses what a client that
# accepts gzip is sent (/compressed/orders), and the middleware stores those bytes.
app.add_middleware(GZipMiddleware)


@app.get("/health")
def health():
    return "ok"


@app.get("/options/outcomes")
def outcomes() -> Response:
    return Response(outcomes_json(), media_type="application/json")


if os.environ["CONFORMANCE_DRIVER"] == "psycopg2":
    import psycopg2

    app.add_middleware(IdempotencyMiddleware, connect=lambda: psycopg2.connect(""),
                       tenant=tenant)

    def make_order():
        def order(request: Request, data: Dict[str, Any] = Body(...)) -> Response:
            number = order_on(request.state.idempotency.conn, data)
            fail_if_asked(data)
            return asgi_response(number, data)
        return order

    def options_order(request: Request, id: int, data: Dict[str, Any] = Body(...)) -> Response:
        idem = getattr(request.state, "idempotency", None)
        if idem is not None:
            status, body = options_order_on(idem.conn, idem, data)
        else:  # passed through (PATCH): a connection of its own
            conn = psycopg2.connect("")
            try:
                conn.autocommit = True
                status, body = options_order_on(conn, None, data)
            finally:
                conn.close()
        return Response(body, status, options_headers(json.loads(body)["order"]),
                        media_type="application/json")
else:
    import psycopg

    app.add_middleware(IdempotencyMiddleware, connect=psycopg.AsyncConnection.connect,
                       tenant=tenant)

    def make_order():
        async def order(request: Request) -> Response:
            data = await request.json()
            conn = request.state.idempotency.conn
            if data.get("gate") is not None:
                await conn.execute(GATE, (data["gate"],))
            number = (await (await conn.execute(INSERT, (data["item"],))).fetchone())[0]
            if data.get("split"):
                await conn.execute(SPLIT)
            if data.get("fail") == "async":
                await asyncio.sleep(0)
            fail_if_asked(data)
            return asgi_response(number, data)
        return order

    async def options_order(request: Request, id: int) -> Response:
        data = await request.json()
        idem = getattr(request.state, "idempotency", None)
        conn = idem.conn if idem is not None else await psycopg.AsyncConnection.connect(
            autocommit=True)
        try:
            gate, recovered = options_first(idem, data)
            if idem is not None and data.get("checkpoint") is not None and recovered is None:
                await idem.checkpoint(data["checkpoint"])
            if gate:
                await conn.execute(GATE, (data["gate"],))
            number = (await (await conn.execute(INSERT, (data["item"],))).fetchone())[0]
        finally:
            if idem is None:
                await conn.close()
        status, body = options_answer(idem, number, data, recovered)
        return Response(body, status, options_headers(number), media_type="application/json")

for path in ("/orders", "/refunds", "/parsed/orders", "/compressed/orders"):
    app.post(path)(make_order())
app.post("/waiting/orders")(route_options(wait=30)(make_order()))
app.api_route("/options/orders/{id}", methods=["POST", "PUT", "PATCH"])(
    route_options(**OPTIONS)(options_order))
app.post("/options/refunds/{id}")(route_options(**OPTIONS)(options_order))
