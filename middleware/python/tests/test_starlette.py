"""pg_idempotency.starlette's glue, on FastAPI and on plain Starlette through their test
clients: the hooks get starlette.requests.Request, a request no route takes is the
application's 404 without a connection, a route's own options (its methods too) replace
the middleware's, and a connection that cannot be had answers 500 problem+json.  What
every package does is the conformance suite's."""
import json
import unittest

from fastapi import FastAPI, Request as FastAPIRequest
from fastapi.responses import Response
from starlette.applications import Starlette
from starlette.requests import Request as StarletteRequest
from starlette.routing import Route
from starlette.testclient import TestClient

from pg_idempotency.starlette import IdempotencyMiddleware, route_options
from support import DRIVERS, SEEN, new_key, order_count, place_order, reset_orders, tenant

CONNECTS = []


def counted(connect):
    def connection():
        CONNECTS.append(1)
        return connect()
    return connection


def fastapi_app(connect):
    app = FastAPI()
    app.add_middleware(IdempotencyMiddleware, connect=connect, tenant=tenant)

    @app.post("/orders")
    def orders(request: FastAPIRequest, data: dict):
        order_id, body = place_order(request.state.idempotency.conn.cursor(), data)
        return Response(body, 201, media_type="application/json")

    @app.put("/puts")
    @route_options(methods=("PUT",))
    def puts(request: FastAPIRequest, data: dict):
        order_id, body = place_order(request.state.idempotency.conn.cursor(), data)
        return Response(body, 201, media_type="application/json")

    return app


def starlette_app(connect):
    async def orders(request):
        data = json.loads(await request.body())
        return Response(place_order(request.state.idempotency.conn.cursor(), data)[1], 201)

    app = Starlette(routes=[Route("/orders", orders, methods=["POST"])])
    app.add_middleware(IdempotencyMiddleware, connect=connect, tenant=tenant)
    return app


def post(client, path, key, body, method="POST"):
    answer = client.request(method, path, content=body, headers={
        "Content-Type": "application/json", "Idempotency-Key": key})
    return answer.status_code, answer.headers, answer.content


class StarletteGlue(unittest.TestCase):
    def setUp(self):
        reset_orders()
        CONNECTS.clear()

    def test_hooks_get_starlettes_request(self):
        for make in (fastapi_app, starlette_app):
            SEEN.clear()
            client = TestClient(make(DRIVERS["psycopg"]), raise_server_exceptions=False)
            self.assertEqual(post(client, "/orders", new_key(), b'{"item": "book"}')[0], 201)
            self.assertTrue(SEEN and issubclass(SEEN[-1], StarletteRequest), SEEN)

    def test_a_request_no_route_takes_is_the_applications_without_a_connection(self):
        client = TestClient(fastapi_app(counted(DRIVERS["psycopg"])))
        self.assertEqual(post(client, "/nowhere", new_key(), b"{}")[0], 404)
        self.assertEqual(post(client, "/orders", new_key(), b"{}", "GET")[0], 405)
        self.assertEqual(CONNECTS, [])

    def test_a_routes_own_methods_replace_the_middlewares(self):
        client = TestClient(fastapi_app(DRIVERS["psycopg2"]))
        key = new_key()
        first = post(client, "/puts", key, b'{"item": "put"}', "PUT")
        again = post(client, "/puts", key, b'{"item": "put"}', "PUT")
        self.assertEqual((first[0], again[0], again[1]["idempotent-replayed"]), (201, 201, "true"))
        self.assertEqual(order_count("put"), 1)

    def test_a_connection_that_cannot_be_had_answers_500_problem_json(self):
        def connect():
            raise OSError("no database here")

        client = TestClient(starlette_app(connect), raise_server_exceptions=False)
        status, headers, body = post(client, "/orders", new_key(), b'{"item": "book"}')
        self.assertEqual((status, headers["content-type"], json.loads(body)["status"]),
                         (500, "application/problem+json", 500))


if __name__ == "__main__":
    unittest.main()
