"""The conformance application on FastAPI (uvicorn).  CONFORMANCE_DRIVER=psycopg: psycopg 3's
AsyncConnection and async endpoints; psycopg2: blocking connections and `def` endpoints,
which FastAPI runs in its worker threads."""
import asyncio
import os
from typing import Any, Dict

from fastapi import Body, FastAPI, Request
from fastapi.responses import Response

from orders import GATE, INSERT, SPLIT, asgi_response, fail_if_asked, order_on, tenant
from pg_idempotency.starlette import IdempotencyMiddleware, route_options

app = FastAPI()


@app.get("/health")
def health():
    return "ok"


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

for path in ("/orders", "/refunds", "/parsed/orders"):
    app.post(path)(make_order())
app.post("/waiting/orders")(route_options(wait=30)(make_order()))
