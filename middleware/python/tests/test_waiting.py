"""Duplicates that wait (Options.wait) on an event loop hold no worker thread: with anyio's
thread limiter cut to 4 tokens, 30 waiting duplicates all end in replays of the first,
whose endpoint needs one of those threads to finish (issue 33: 200 duplicates held
FastAPI's 40 threads, and most got 409 after the wait)."""
import asyncio
import time
import unittest

import anyio.to_thread
import httpx
import psycopg
from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from pg_idempotency.starlette import IdempotencyMiddleware
from support import DRIVERS, new_key, order_count, place_order, reset_orders

DUPLICATES, THREADS, WAIT = 30, 4, 15


def blocking_app(connect):
    app = FastAPI()
    app.add_middleware(IdempotencyMiddleware, connect=connect, wait=WAIT)

    @app.post("/orders")
    def orders(request: Request, data: dict):  # FastAPI runs it in a worker thread
        time.sleep(0.5)  # every duplicate arrives meanwhile
        order_id, body = place_order(request.state.idempotency.conn.cursor(), data)
        return Response(body, 201, media_type="application/json")

    return app


def async_app():
    app = FastAPI()
    app.add_middleware(IdempotencyMiddleware, connect=psycopg.AsyncConnection.connect,
                       wait=WAIT)

    @app.post("/orders")
    async def orders(request: Request):
        data = await request.json()
        await run_in_threadpool(time.sleep, 0.5)  # a thread the waiters must leave free
        cur = await request.state.idempotency.conn.execute(
            "INSERT INTO orders (item) VALUES (%s) RETURNING id", (data["item"],))
        return Response(str((await cur.fetchone())[0]), 201, media_type="application/json")

    return app


async def duplicates(app, key):
    anyio.to_thread.current_default_thread_limiter().total_tokens = THREADS
    # transport=, not app=: httpx 0.27 removed the shortcut (Debian 13 ships 0.28).
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as client:
        return await asyncio.gather(*(
            client.post("/orders", json={"item": "waited"}, headers={"Idempotency-Key": key})
            for _ in range(DUPLICATES)))


class WaitingHoldsNoThread(unittest.TestCase):
    def setUp(self):
        reset_orders()

    def check(self, app):
        answers = asyncio.run(duplicates(app, new_key()))
        self.assertEqual(sorted({a.status_code for a in answers}), [201], answers)
        self.assertEqual(len({a.content for a in answers}), 1)
        self.assertEqual(sum(a.headers.get("idempotent-replayed") != "true" for a in answers), 1)
        self.assertEqual(order_count("waited"), 1)

    def test_blocking_psycopg(self):
        self.check(blocking_app(DRIVERS["psycopg"]))

    def test_blocking_psycopg2(self):
        self.check(blocking_app(DRIVERS["psycopg2"]))

    def test_async_connection(self):
        self.check(async_app())


if __name__ == "__main__":
    unittest.main()
