"""The conformance application on Starlette (uvicorn): blocking psycopg 3 connections,
async endpoints that run their statements in worker threads."""
import asyncio
import json

import psycopg
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from orders import (OPTIONS, asgi_response, fail_if_asked, options_headers, options_order_on,
                    order_on, outcomes_json, tenant)
from pg_idempotency.starlette import IdempotencyMiddleware, route_options
from starlette.responses import Response


async def health(request):
    return PlainTextResponse("ok")


async def outcomes(request):
    return Response(outcomes_json(), media_type="application/json")


def make_order():
    async def order(request):
        data = await request.json()
        number = await run_in_threadpool(order_on, request.state.idempotency.conn, data)
        if data.get("fail") == "async":
            await asyncio.sleep(0)
        fail_if_asked(data)
        return asgi_response(number, data)
    return order


def passed_through(data):
    """A request the middleware let pass (PATCH), on a connection of its own."""
    with psycopg.connect("", autocommit=True) as conn:
        return options_order_on(conn, None, data)


@route_options(**OPTIONS)
async def options_order(request):
    data = await request.json()
    idem = getattr(request.state, "idempotency", None)
    if idem is not None:
        status, body = await run_in_threadpool(options_order_on, idem.conn, idem, data)
    else:
        status, body = await run_in_threadpool(passed_through, data)
    return Response(body, status, options_headers(json.loads(body)["order"]),
                    media_type="application/json")


app = Starlette(
    routes=[Route("/health", health), Route("/options/outcomes", outcomes)]
    + [Route(path, make_order(), methods=["POST"])
       for path in ("/orders", "/refunds", "/parsed/orders", "/compressed/orders")]
    + [Route("/waiting/orders", route_options(wait=30)(make_order()), methods=["POST"]),
       Route("/options/orders/{id:int}", options_order, methods=["POST", "PUT", "PATCH"]),
       Route("/options/refunds/{id:int}", options_order, methods=["POST"])],
    # GZipMiddleware inside the idempotency middleware: it compresses what a client that
    # accepts gzip is sent (/compressed/orders), and the middleware stores those bytes.
    middleware=[Middleware(IdempotencyMiddleware, connect=lambda: psycopg.connect(""),
                           tenant=tenant),
                Middleware(GZipMiddleware)])
