"""The conformance application on Django (gunicorn, threads) with psycopg2, Django 3.2's
driver.  Settings, URLs and the WSGI application in one module.  Its views are sync, as
the middleware is: "fail": "async" fails as "sync" does."""
import json
import os

import django
from django.conf import settings
from django.db import connection
from django.http import HttpResponse, StreamingHttpResponse
from django.urls import path

from orders import (OPTIONS, answer, fail_if_asked, location, options_headers, options_order_on,
                    order_on, outcomes_json, pieces, tenant)

settings.configure(
    DEBUG=False, ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"], SECRET_KEY="conformance only",
    # The idempotency middleware last: the others' headers reach replays too.
    MIDDLEWARE=["django.middleware.security.SecurityMiddleware",
                "django.middleware.common.CommonMiddleware",
                "django.middleware.clickjacking.XFrameOptionsMiddleware",
                "django_app.ParsedFirst",
                "pg_idempotency.django.IdempotencyMiddleware",
                # After it, so inside it: it compresses what a client that accepts gzip is
                # sent (/compressed/orders), and the middleware stores those bytes.
                "django.middleware.gzip.GZipMiddleware"],
    DATABASES={"default": {"ENGINE": "django.db.backends.postgresql",
                           "NAME": os.environ.get("PGDATABASE", ""),
                           "HOST": os.environ.get("PGHOST", ""),
                           "PORT": os.environ.get("PGPORT", ""),
                           "USER": os.environ.get("PGUSER", "")}},
    IDEMPOTENCY={"tenant": tenant})
django.setup()


class ParsedFirst:
    """On /parsed/: the JSON body parsed before the idempotency middleware runs."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith("/parsed/"):
            request.json = json.loads(request.body)
        return self.get_response(request)


def health(request):
    return HttpResponse("ok")


def outcomes(request):
    return HttpResponse(outcomes_json(), content_type="application/json")


def make_order():
    def order(request):
        data = json.loads(request.body)
        number = order_on(connection, data)
        fail_if_asked(data)
        body = answer(number, data)
        status = data.get("status", 201)
        if data.get("stream"):
            response = StreamingHttpResponse(pieces(body), status=status,
                                             content_type="application/json")
        else:
            response = HttpResponse(body, status=status, content_type="application/json")
        response["Location"] = location(number)
        return response
    return order


def options_order(request, id):
    """The options application's handler: in the middleware's transaction, or (a request
    it let pass: PATCH) in autocommit."""
    data = json.loads(request.body)
    status, body = options_order_on(connection, getattr(request, "idempotency", None), data)
    response = HttpResponse(body, status=status, content_type="application/json")
    for name, value in options_headers(json.loads(body)["order"]).items():
        response[name] = value
    return response


from pg_idempotency.django import route_options  # noqa: E402 - after django.setup()
from django.core.wsgi import get_wsgi_application  # noqa: E402

urlpatterns = [path("health", health), path("options/outcomes", outcomes)] + [
    path(route, make_order()) for route in ("orders", "refunds", "parsed/orders", "compressed/orders")] + [
    path("waiting/orders", route_options(wait=30)(make_order())),
    path("options/orders/<int:id>", route_options(**OPTIONS)(options_order)),
    path("options/refunds/<int:id>", route_options(**OPTIONS)(options_order))]

application = get_wsgi_application()
