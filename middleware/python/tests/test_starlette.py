"""pg_idempotency.starlette on FastAPI and on plain Starlette, through their test clients."""
import json
import unittest

from fastapi import FastAPI, Request as FastAPIRequest
from fastapi.responses import JSONResponse
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from pg_idempotency.starlette import IdempotencyMiddleware
from support import DRIVERS, Checks


def create_order(request_state, item):
    cur = request_state.idempotency.conn.cursor()
    cur.execute("INSERT INTO orders (item) VALUES (%s) RETURNING id", (item,))
    (order_id,) = cur.fetchone()
    if item == "boom":
        raise RuntimeError("the endpoint failed")
    if item == "fail":
        return JSONResponse({"error": "upstream down"}, status_code=503)
    return JSONResponse({"order": order_id}, status_code=201,
                        headers={"Location": f"/orders/{order_id}"})


def fastapi_app(connect):
    app = FastAPI()
    app.add_middleware(IdempotencyMiddleware, connect=connect)

    @app.post("/orders")
    def orders(request: FastAPIRequest, body: dict):
        return create_order(request.state, body["item"])

    return app


def starlette_app(connect):
    async def orders(request):
        item = json.loads(await request.body())["item"]
        return create_order(request.state, item)

    app = Starlette(routes=[Route("/orders", orders, methods=["POST"])])
    app.add_middleware(IdempotencyMiddleware, connect=connect)
    return app


class StarletteChecks(Checks):
    make_app = None
    driver = "psycopg"

    def setUp(self):
        super().setUp()
        self.client = TestClient(type(self).make_app(DRIVERS[self.driver]),
                                 raise_server_exceptions=False)

    def post(self, key, body):
        headers = {"Content-Type": "application/json"}
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


class StarlettePsycopg(StarletteChecks, unittest.TestCase):
    make_app = starlette_app


if __name__ == "__main__":
    unittest.main()
