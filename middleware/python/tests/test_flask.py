"""pg_idempotency.flask's glue, on Flask's test client: the hooks get flask.Request, a
method not protected calls the view with no context, and a connection that cannot be had
answers 500 problem+json.  What every package does is the conformance suite's."""
import json
import unittest

import flask
from flask import Flask, request

from pg_idempotency.flask import idempotent
from support import DRIVERS, SEEN, new_key, order_count, place_order, reset_orders, tenant


def orders_app(connect, **options):
    app = Flask(__name__)

    @app.route("/orders", methods=["POST", "PUT"])
    @idempotent(connect, tenant=tenant, **options)
    def create_order(idem):
        data = request.get_json()
        if idem is None:
            return {"protected": False}, 200
        order_id, body = place_order(idem.conn.cursor(), data)
        return flask.Response(body, 201, {"Location": f"/orders/{order_id}",
                                          "Content-Type": "application/json"})

    return app


def post(app, key, body, method="POST"):
    answer = app.test_client().open("/orders", method=method, data=body, headers={
        "Content-Type": "application/json", "Idempotency-Key": key})
    return answer.status_code, answer.headers, answer.data


class FlaskGlue(unittest.TestCase):
    def setUp(self):
        reset_orders()

    def test_hooks_get_flask_request_with_either_driver(self):
        for driver, connect in DRIVERS.items():
            SEEN.clear()
            key = new_key()
            first = post(orders_app(connect), key, b'{"item": "book"}')
            again = post(orders_app(connect), key, b'{"item": "book"}')
            self.assertEqual((first[0], again[0], again[1]["Idempotent-Replayed"]),
                             (201, 201, "true"), driver)
            self.assertTrue(SEEN and all(issubclass(seen, flask.Request) for seen in SEEN), SEEN)
        self.assertEqual(order_count("book"), 2)

    def test_a_method_not_protected_calls_the_view_without_a_context(self):
        status, _, body = post(orders_app(DRIVERS["psycopg"]), new_key(), b'{"item": "x"}', "PUT")
        self.assertEqual((status, json.loads(body)), (200, {"protected": False}))

    def test_a_connection_that_cannot_be_had_answers_500_problem_json(self):
        def connect():
            raise OSError("no database here")

        status, headers, body = post(orders_app(connect), new_key(), b'{"item": "book"}')
        self.assertEqual((status, headers["Content-Type"], json.loads(body)["status"]),
                         (500, "application/problem+json", 500))

    def test_on_outcome_gets_each_outcome_once_with_flask_request(self):
        seen = []

        def on_outcome(outcome, native):
            seen.append((outcome, type(native)))
            raise RuntimeError("the hook fails: logged, not answered")

        app = orders_app(DRIVERS["psycopg"], on_outcome=on_outcome)
        key = new_key()
        statuses = [post(app, key, b'{"item": "told"}')[0], post(app, key, b'{"item": "told"}')[0],
                    post(app, key, b'{"item": "other"}')[0], post(app, new_key(), b"x" * (2 << 20))[0]]
        # The view raises (get_json: BadRequest), answered by Flask after the claim's outcome.
        statuses.append(post(app, new_key(), b'not json')[0])

        def connect():
            raise OSError("no database here")
        statuses.append(post(orders_app(connect, on_outcome=on_outcome), new_key(), b"{}")[0])
        self.assertEqual(statuses, [201, 201, 422, 413, 400, 500])
        self.assertEqual([outcome for outcome, _ in seen],
                         ["claimed", "replayed", "mismatch", "too_large", "claimed", "error"])
        self.assertTrue(all(issubclass(kind, flask.Request) for _, kind in seen), seen)


if __name__ == "__main__":
    unittest.main()
