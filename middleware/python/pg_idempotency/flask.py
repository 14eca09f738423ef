"""Flask: a decorator for views.

    @app.post("/orders")
    @idempotent(get_connection)
    def create_order(idem):  # idem.conn: the connection, in the claim's transaction
        ...
"""
import functools

from flask import make_response, request

from .core import Options, Request, Response, handle


def idempotent(connect, release=None, **options):
    """`connect()` returns a psycopg (3 or 2) connection, which `release(conn)` gives back
    after the request (default: conn.close(); pass a pool's putconn instead).  The view
    gets a pg_idempotency.Context first: its `conn` is in the claim's transaction, which
    the middleware commits.  `options` are pg_idempotency.Options' fields."""
    settings = Options(**options)

    def decorate(view):
        @functools.wraps(view)
        def wrapper(*args, **kwargs):
            incoming = Request(method=request.method, route=request.url_rule.rule,
                               path=request.path, body=request.get_data(),
                               key=request.headers.get(settings.header),
                               content_type=request.content_type or "")

            def run(context):
                answer = make_response(view(context, *args, **kwargs))
                return Response(answer.status_code, list(answer.headers.items()),
                                answer.get_data())

            conn = connect()
            try:
                result = handle(conn, incoming, run, settings)
            finally:
                (release or type(conn).close)(conn)
            return result.body, result.status, list(result.headers)

        return wrapper

    return decorate
