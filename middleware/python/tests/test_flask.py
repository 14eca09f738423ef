"""pg_idempotency.flask on Flask's test client, with psycopg 3 and with psycopg2."""
import threading
import unittest

import flask
from flask import Flask, request

from pg_idempotency.flask import idempotent
from pg_idempotency.core import execute
from support import (DRIVERS, Checks, check_server_error_stored, hold_claim, key_status, new_key,
                     order_count, pieces, place_order, reset_orders, tenant)


def orders_app(connect, **options):
    app = Flask(__name__)

    @app.post("/orders")
    @idempotent(connect, tenant=tenant, **options)
    def create_order(idem):
        data = request.get_json()
        order_id, body = place_order(idem.conn.cursor(), data)
        if data["item"] == "boom":
            raise RuntimeError("the handler failed")
        if data["item"] == "fail":
            return {"error": "upstream down"}, 503
        headers = {"Location": f"/orders/{order_id}", "Content-Type": "application/json"}
        return flask.Response(pieces(body) if data.get("stream") else body, 201, headers)

    return app


class FlaskChecks(Checks):
    driver = None
    native_type = flask.Request

    def setUp(self):
        super().setUp()
        self.app = orders_app(DRIVERS[self.driver])

    def post(self, key, body, headers=None, app=None):
        headers = {"Content-Type": "application/json", **(headers or {})}
        if key is not None:
            headers["Idempotency-Key"] = key
        answer = (app or self.app).test_client().post("/orders", data=body, headers=headers)
        return answer.status_code, {k.lower(): v for k, v in answer.headers.items()}, answer.data

    def post_raising(self, key, body):
        # Outside testing mode Flask answers an exception with 500.
        return self.post(key, body)[0]


class FlaskPsycopg(FlaskChecks, unittest.TestCase):
    driver = "psycopg"


class FlaskPsycopg2(FlaskChecks, unittest.TestCase):
    driver = "psycopg2"


class FlaskOptions(unittest.TestCase):
    def setUp(self):
        reset_orders()

    def post(self, app, key, body):
        return app.test_client().post(
            "/orders", data=body, headers={"Content-Type": "application/json", "Idempotency-Key": key})

    def test_not_required_runs_unprotected(self):
        app = orders_app(DRIVERS["psycopg"], required=False)
        answer = app.test_client().post("/orders", json={"item": "free"})
        self.assertEqual(answer.status_code, 201)
        self.assertEqual(order_count("free"), 1)

    def test_store_server_errors_stores_a_5xx_the_server_would_not(self):
        for driver in DRIVERS:
            for lease in (None, "1 minute"):  # one transaction; two-phase
                reset_orders()
                app = orders_app(DRIVERS[driver], store_server_errors=True, lease=lease)
                check_server_error_stored(self, lambda key, body, app=app: self.answer(
                    self.post(app, key, body)))

    @staticmethod
    def answer(response):
        return (response.status_code, {k.lower(): v for k, v in response.headers.items()},
                response.data)

    def test_wait_answers_the_holders_response(self):
        key = new_key()
        holder = hold_claim("public", "POST", "/orders", "/orders", key, b'{"item": "book"}')
        app = orders_app(DRIVERS["psycopg"], wait=300)
        answers = []
        waiter = threading.Thread(target=lambda: answers.append(self.post(app, key, b'{"item": "book"}')))
        waiter.start()
        # The waiter answers once the holder commits, whenever it arrived.
        execute(holder, "SELECT idempotency_complete('public', %s, 201, response_body_bytes => %s)",
                (key, b'{"held": true}'))
        holder.commit()
        holder.close()
        waiter.join()
        self.assertEqual(answers[0].status_code, 201)
        self.assertEqual(answers[0].data, b'{"held": true}')
        self.assertEqual(answers[0].headers["Idempotent-Replayed"], "true")
        self.assertEqual(order_count(), 0)

    def test_two_phase_checkpoints_and_fences(self):
        app = Flask(__name__)
        seen = {}

        @app.post("/payments")
        @idempotent(DRIVERS["psycopg"], lease="1 minute")
        def pay(idem):
            seen["attempt"], seen["recovery_point"] = idem.attempt, idem.recovery_point
            # The external call happened: record it, committed at once.
            idem.checkpoint("charge-1")
            # Meanwhile a retry finds the committed claim in progress.
            retry = app.test_client().post("/payments", data=b"{}", headers={
                "Content-Type": "application/json", "Idempotency-Key": key})
            seen["retry"] = retry.status_code
            return {"payment": "charge-1"}, 201

        key = new_key()
        first = app.test_client().post("/payments", data=b"{}", headers={
            "Content-Type": "application/json", "Idempotency-Key": key})
        self.assertEqual(first.status_code, 201)
        self.assertEqual((seen["attempt"], seen["recovery_point"], seen["retry"]), (1, None, 409))
        self.assertEqual(key_status("", key), "completed")
        replay = app.test_client().post("/payments", data=b"{}", headers={
            "Content-Type": "application/json", "Idempotency-Key": key})
        self.assertEqual((replay.status_code, replay.data), (201, first.data))


if __name__ == "__main__":
    unittest.main()
