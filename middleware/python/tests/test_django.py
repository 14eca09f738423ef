"""pg_idempotency.django on Django's test client (psycopg2, Django's driver)."""
import os
import threading
import unittest

import django
from django.conf import settings

from support import Checks

if not settings.configured:
    settings.configure(
        DEBUG=False, ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"], SECRET_KEY="tests only",
        LOGGING_CONFIG=None,
        MIDDLEWARE=["pg_idempotency.django.IdempotencyMiddleware"],
        DATABASES={"default": {"ENGINE": "django.db.backends.postgresql",
                               "NAME": os.environ.get("PGDATABASE", "postgres"),
                               "HOST": os.environ.get("PGHOST", ""),
                               "PORT": os.environ.get("PGPORT", ""),
                               "USER": os.environ.get("PGUSER", "")}},
        IDEMPOTENCY={"methods": ["POST"]})
    django.setup()

from django.db import connection, connections  # noqa: E402
from django.http import JsonResponse  # noqa: E402
from django.test import Client  # noqa: E402
from django.urls import path  # noqa: E402
from django.views.decorators.csrf import csrf_exempt  # noqa: E402


@csrf_exempt
def create_order(request):
    import json
    item = json.loads(request.body)["item"]
    with connection.cursor() as cur:
        cur.execute("INSERT INTO orders (item) VALUES (%s) RETURNING id", [item])
        (order_id,) = cur.fetchone()
    if item == "boom":
        raise RuntimeError("the view failed")
    if item == "fail":
        return JsonResponse({"error": "upstream down"}, status=503)
    response = JsonResponse({"order": order_id}, status=201)
    response["Location"] = f"/orders/{order_id}"
    return response


urlpatterns = [path("orders", create_order)]


class DjangoMiddleware(Checks, unittest.TestCase):
    route = "orders"  # Django's route pattern

    def post(self, key, body):
        extra = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
        try:
            answer = Client(raise_request_exception=False).post(
                "/orders", data=body, content_type="application/json", **extra)
        finally:
            if threading.current_thread() is not threading.main_thread():
                connections.close_all()
        return (answer.status_code, {k.lower(): v for k, v in answer.items()},
                answer.content)

    def post_raising(self, key, body):
        return self.post(key, body)[0]


if __name__ == "__main__":
    unittest.main()
