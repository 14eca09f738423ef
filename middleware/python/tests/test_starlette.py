"""pg_idempotency.starlette on FastAPI and on plain Starlette, through their test clients."""
import asyncio
import inspect
import json
import unittest
from dataclasses import fields

import psycopg

from fastapi import FastAPI, Request as FastAPIRequest
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.requests import Request as StarletteRequest
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from pg_idempotency import Options
from pg_idempotency.starlette import IdempotencyMiddleware
from support import (DRIVERS, Checks, check_server_error_stored, pieces, place_order,
                     reset_orders, tenant)


def answer(data, order_id, body):
    if data["item"] == "boom":
        raise RuntimeError("the endpoint failed")
    if data["item"] == "fail":
        return JSONResponse({"error": "upstream down"}, status_code=503)
    headers = {"Location": f"/orders/{order_id}"}
    if data.get("stream"):
        return StreamingResponse(pieces(body), 201, headers, media_type="application/json")
    return Response(body, 201, headers, media_type="application/json")


def fastapi_app(connect):
    """Blocking connections: a `def` endpoint, which FastAPI runs in a thread."""
    app = FastAPI()
    app.add_middleware(IdempotencyMiddleware, connect=connect, tenant=tenant)

    @app.post("/orders")
    def orders(request: FastAPIRequest, data: dict):
        return answer(data, *place_order(request.state.idempotency.conn.cursor(), data))

    return app


def fastapi_async_app(connect, **options):
    """psycopg 3's AsyncConnection and an async endpoint."""
    app = FastAPI()
    app.add_middleware(IdempotencyMiddleware, connect=psycopg.AsyncConnection.connect,
                       tenant=tenant, **options)

    @app.post("/orders")
    async def orders(request: FastAPIRequest):
        data = await request.json()
        conn = request.state.idempotency.conn
        if data.get("limit"):
            await conn.execute("SELECT set_config('idempotency.max_response_bytes', %s, true)",
                               (str(data["limit"]),))
        cur = await conn.execute("INSERT INTO orders (item) VALUES (%s) RETURNING id",
                                 (data["item"],))
        (order_id,) = await cur.fetchone()
        await asyncio.sleep(0)  # a failure after an await
        document = {"order": order_id, "pad": "x" * data.get("size", 0)}
        return answer(data, order_id, json.dumps(document).encode())

    return app


def starlette_app(connect):
    async def orders(request):
        data = json.loads(await request.body())
        return answer(data, *place_order(request.state.idempotency.conn.cursor(), data))

    app = Starlette(routes=[Route("/orders", orders, methods=["POST"])])
    app.add_middleware(IdempotencyMiddleware, connect=connect, tenant=tenant)
    return app


class StarletteChecks(Checks):
    make_app = None
    driver = "psycopg"
    native_type = StarletteRequest

    def setUp(self):
        super().setUp()
        self.client = TestClient(type(self).make_app(DRIVERS[self.driver]),
                                 raise_server_exceptions=False)

    def post(self, key, body, headers=None):
        headers = {"Content-Type": "application/json", **(headers or {})}
        if key is not None:
            headers["Idempotency-Key"] = key
        answer = self.client.post("/orders", content=body, headers=headers)
        return answer.status_code, {k.lower(): v for k, v in answer.headers.items()}, answer.content

    def post_raising(self, key, body):
        return self.post(key, body)[0]


class FastAPIPsycopg(StarletteChecks, unittest.TestCase):
    make_app = fastapi_app


class FastAPIPsycopg2(StarletteChecks, unittest.TestCase):
    make_app = fastapi_app
    driver = "psycopg2"


class FastAPIAsyncConnection(StarletteChecks, unittest.TestCase):
    make_app = fastapi_async_app


class StarlettePsycopg(StarletteChecks, unittest.TestCase):
    make_app = starlette_app


class StarletteOptions(unittest.TestCase):
    def test_store_server_errors_stores_a_5xx_the_server_would_not(self):
        for lease in (None, "1 minute"):  # one transaction; two-phase
            reset_orders()
            client = TestClient(fastapi_async_app(None, store_server_errors=True, lease=lease),
                                raise_server_exceptions=False)

            def post(key, body, client=client):
                answer = client.post("/orders", content=body, headers={
                    "Content-Type": "application/json", "Idempotency-Key": key})
                return (answer.status_code, {k.lower(): v for k, v in answer.headers.items()},
                        answer.content)

            check_server_error_stored(self, post)

    def test_every_option_is_a_keyword_with_its_default(self):
        # The middleware spells Options' fields out (see its __init__): none may be missed.
        keywords = {name: parameter.default for name, parameter
                    in inspect.signature(IdempotencyMiddleware).parameters.items()
                    if parameter.kind is inspect.Parameter.KEYWORD_ONLY}
        self.assertEqual(keywords, {field.name: field.default for field in fields(Options)})


if __name__ == "__main__":
    unittest.main()
