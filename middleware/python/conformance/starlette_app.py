"""The conformance application on Starlette (uvicorn): blocking psycopg 3 connections,
async endpoints that run their statements in worker threads."""
import asyncio

import psycopg
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from orders import asgi_response, fail_if_asked, order_on, tenant
from pg_idempotency.starlette import IdempotencyMiddleware, route_options


async def health(request):
    return PlainTextResponse("ok")


def make_order():
    async def order(request):
        data = await request.json()
        number = await run_in_threadpool(order_on, request.state.idempotency.conn, data)
        if data.get("fail") == "async":
            await asyncio.sleep(0)
        fail_if_asked(data)
        return asgi_response(number, data)
    return order


app = Starlette(
    routes=[Route("/health", health)]
    + [Route(path, make_order(), methods=["POST"])
       for path in ("/orders", "/refunds", "/parsed/orders")]
    + [Route("/waiting/orders", route_options(wait=30)(make_order()), methods=["POST"])],
    middleware=[Middleware(IdempotencyMiddleware, connect=lambda: psycopg.connect(""),
                           tenant=tenant)])
