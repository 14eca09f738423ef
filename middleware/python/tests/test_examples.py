"""The examples of the READMEs (middleware/python/examples), run as written: a new request
is created once, its retry replays it."""
import os
import sys
import unittest

from support import new_key, order_count, reset_orders

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "examples"))


class Examples(unittest.TestCase):
    def setUp(self):
        reset_orders()

    def check(self, post):
        key = new_key()
        first = post(key)
        again = post(key)
        self.assertEqual((first[0], again[0]), (201, 201))
        self.assertEqual(again[2], first[2])
        self.assertEqual(again[1].get("idempotent-replayed"), "true")
        self.assertEqual(order_count("book"), 1)

    def test_flask(self):
        from flask_orders import app

        def post(key):
            answer = app.test_client().post("/orders", json={"item": "book"},
                                            headers={"Idempotency-Key": key})
            return answer.status_code, {k.lower(): v for k, v in answer.headers.items()}, answer.data

        self.check(post)

    def test_fastapi(self):
        from fastapi_orders import app
        from starlette.testclient import TestClient

        def post(key):
            answer = TestClient(app).post("/orders", json={"item": "book"},
                                          headers={"Idempotency-Key": key})
            return answer.status_code, dict(answer.headers), answer.content

        self.check(post)

    def test_django(self):
        import test_django  # settings, with this view routed too
        from django.test import Client
        from django.urls import path

        from django_orders import create_order
        test_django.urlpatterns.append(path("example/orders", create_order))

        def post(key):
            answer = Client().post("/example/orders", data={"item": "book"},
                                   content_type="application/json", HTTP_IDEMPOTENCY_KEY=key)
            return answer.status_code, {k.lower(): v for k, v in answer.items()}, answer.content

        self.check(post)


if __name__ == "__main__":
    unittest.main()
