"""pg_idempotency.django on Django's test client (psycopg2, Django 3.2's driver)."""
import json
import os
import threading
import unittest

import django
from django.conf import settings

from support import Checks, new_key, order_count, pieces, place_order

if not settings.configured:
    settings.configure(
        DEBUG=False, ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"], SECRET_KEY="tests only",
        LOGGING_CONFIG=None,
        # Last, as the README says: X-Frame-Options reaches replays too.
        MIDDLEWARE=["django.middleware.clickjacking.XFrameOptionsMiddleware",
                    "pg_idempotency.django.IdempotencyMiddleware"],
        DATABASES={"default": {"ENGINE": "django.db.backends.postgresql",
                               "NAME": os.environ.get("PGDATABASE", "postgres"),
                               "HOST": os.environ.get("PGHOST", ""),
                               "PORT": os.environ.get("PGPORT", ""),
                               "USER": os.environ.get("PGUSER", "")}},
        IDEMPOTENCY={"methods": ["POST"], "tenant": "support.tenant"})
    django.setup()

from asgiref.sync import sync_to_async  # noqa: E402
from django.db import connection, connections  # noqa: E402
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse  # noqa: E402
from django.test import Client  # noqa: E402
from django.urls import path  # noqa: E402
from django.views.decorators.csrf import csrf_exempt  # noqa: E402

from pg_idempotency.django import route_options  # noqa: E402


def order(data):
    with connection.cursor() as cur:
        order_id, body = place_order(cur, data)
    if data["item"] == "boom":
        raise RuntimeError("the view failed")
    if data["item"] == "fail":
        return JsonResponse({"error": "upstream down"}, status=503)
    if data.get("stream"):
        response = StreamingHttpResponse(pieces(body), status=201, content_type="application/json")
    else:
        response = HttpResponse(body, status=201, content_type="application/json")
    response["Location"] = f"/orders/{order_id}"
    return response


@csrf_exempt
def create_order(request):
    return order(json.loads(request.body))


async def create_order_async(request):  # csrf_exempt is sync-only in Django 3.2
    """An async view: its statements in the request's thread (thread_sensitive), so on
    the connection of the claim's transaction; "boom" fails after an await."""
    return await sync_to_async(order)(json.loads(request.body))


optional = route_options(required=False)(csrf_exempt(lambda request: order(
    json.loads(request.body))))

urlpatterns = [path("orders", create_order), path("async/orders", create_order_async),
               path("optional/orders", optional)]


class DjangoMiddleware(Checks, unittest.TestCase):
    route = "/orders"  # Django's route pattern, with the "/" of every framework's
    native_type = HttpRequest
    url = "/orders"

    def post(self, key, body, headers=None, url=None):
        extra = {f"HTTP_{name.upper().replace('-', '_')}": value
                 for name, value in (headers or {}).items()}
        if key is not None:
            extra["HTTP_IDEMPOTENCY_KEY"] = key
        try:
            answer = Client(raise_request_exception=False).post(
                url or self.url, data=body, content_type="application/json", **extra)
        finally:
            if threading.current_thread() is not threading.main_thread():
                connections.close_all()
        content = b"".join(answer.streaming_content) if answer.streaming else answer.content
        return (answer.status_code, {k.lower(): v for k, v in answer.items()}, content)

    def post_raising(self, key, body):
        return self.post(key, body)[0]

    def test_replay_keeps_the_headers_of_middleware_around_it(self):
        key = new_key()
        first = self.post(key, b'{"item": "book"}')
        again = self.post(key, b'{"item": "book"}')
        self.assertEqual(again[1]["idempotent-replayed"], "true")
        self.assertEqual(again[1]["x-frame-options"], first[1]["x-frame-options"])

    def test_route_options_replace_the_middlewares(self):
        self.assertEqual(self.post(None, b'{"item": "book"}')[0], 400)
        self.assertEqual(self.post(None, b'{"item": "free"}', url="/optional/orders")[0], 201)
        self.assertEqual(order_count("free"), 1)


class DjangoAsyncView(DjangoMiddleware):
    route = "/async/orders"
    path = url = "/async/orders"


if __name__ == "__main__":
    unittest.main()
