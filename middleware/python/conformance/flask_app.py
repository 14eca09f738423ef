"""The conformance application on Flask (gunicorn, threads), psycopg 3 or psycopg2 as
CONFORMANCE_DRIVER says."""
import functools
import gzip
import json
import os

import flask
from flask import Flask, request

from orders import (OPTIONS, answer, fail_if_asked, location, options_headers, options_order_on,
                    order_on, outcomes_json, pieces, tenant)
from pg_idempotency.flask import idempotent

if os.environ["CONFORMANCE_DRIVER"] == "psycopg2":
    import psycopg2

    def connect():
        return psycopg2.connect("")
else:
    import psycopg

    def connect():
        return psycopg.connect("")

app = Flask(__name__)


@app.after_request
def compress(response):
    """On /compressed/orders, gzip for a client that accepts it, where a Flask compression
    extension (flask-compress) does: after the view and so outside the view's decorator, which
    stores the view's own bytes; a replay is compressed again as the first answer was."""
    if (request.path == "/compressed/orders" and "gzip" in request.headers.get("Accept-Encoding", "")
            and not response.direct_passthrough and "Content-Encoding" not in response.headers):
        response.set_data(gzip.compress(response.get_data()))
        response.headers["Content-Encoding"] = "gzip"
        response.vary.add("Accept-Encoding")
    return response


@app.get("/health")
def health():
    return "ok"


@app.get("/options/outcomes")
def outcomes():
    return flask.Response(outcomes_json(), mimetype="application/json")


def order(idem):
    data = request.get_json()
    number = order_on(idem.conn, data)
    fail_if_asked(data)
    body = answer(number, data)
    headers = {"Content-Type": "application/json", "Location": location(number)}
    if data.get("stream"):
        return flask.Response(pieces(body), data.get("status", 201), headers)
    return flask.Response(body, data.get("status", 201), headers)


def parsed_first(view):
    """The body parsed before the middleware runs (Flask caches it)."""
    @functools.wraps(view)
    def parse(*args, **kwargs):
        request.get_json()
        return view(*args, **kwargs)
    return parse


for path, wrap, options in (("/orders", None, {}), ("/refunds", None, {}),
                            ("/waiting/orders", None, {"wait": 30}),
                            ("/parsed/orders", parsed_first, {}),
                            ("/compressed/orders", None, {})):
    view = idempotent(connect, tenant=tenant, **options)(order)
    app.add_url_rule(path, endpoint=path, view_func=wrap(view) if wrap else view,
                     methods=["POST"])


def options_order(idem, id):
    """The options application's handler; a request that passed through (PATCH) writes on a
    connection of its own."""
    data = request.get_json()
    if idem is not None:
        status, body = options_order_on(idem.conn, idem, data)
    else:
        conn = connect()
        try:
            conn.autocommit = True
            status, body = options_order_on(conn, None, data)
        finally:
            conn.close()
    return flask.Response(body, status, {"Content-Type": "application/json",
                                         **options_headers(json.loads(body)["order"])})


protected = idempotent(connect, tenant=tenant, **OPTIONS)(options_order)
app.add_url_rule("/options/orders/<int:id>", endpoint="options-orders", view_func=protected,
                 methods=["POST", "PUT", "PATCH"])
app.add_url_rule("/options/refunds/<int:id>", endpoint="options-refunds", view_func=protected,
                 methods=["POST"])
