"""Flask: a decorator for views.

    @app.post("/orders")
    @idempotent(psycopg.connect)
    def create_order(idem):  # idem.conn: the connection, in the claim's transaction
        ...
"""
import functools
from typing import Any, Callable, Iterable, Optional, TypeVar

import flask
from flask import make_response, request

from .core import (Context, Hook, Options, Request, Response, ResponseTooLarge, admit,
                   canonical_route, database_error, handle, log, told)

__all__ = ["idempotent"]

View = TypeVar("View", bound=Callable[..., Any])


def idempotent(connect: Callable[[], Any], release: Optional[Callable[[Any], None]] = None,
               methods: Optional[Iterable[str]] = None, *,
               tenant: Optional[Hook[flask.Request]] = None,
               scope: Optional[Hook[flask.Request]] = None,
               **options: Any) -> Callable[[View], View]:
    """`connect()` returns a blocking psycopg 3 or psycopg2 connection, which `release(conn)`
    gives back after the request (default: conn.close(); pass a pool's putconn instead).
    Requests of `methods` (Options.methods: POST and PATCH by default) get the view called
    with a pg_idempotency.Context first: its `conn` is in the claim's transaction, which
    the middleware commits (others with None).  `tenant` and `scope` receive the
    flask.Request; `options` are pg_idempotency.Options' fields."""
    if methods is not None:
        options["methods"] = tuple(methods)
    settings: Options[flask.Request] = Options(tenant=tenant, scope=scope, **options)

    def decorate(view: View) -> View:
        @functools.wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            native: flask.Request = request._get_current_object()  # type: ignore[attr-defined]
            if not settings.protects(native.method):
                return view(None, *args, **kwargs)  # passes through, with no context
            assert native.url_rule is not None
            route = canonical_route("angle", native.url_rule.rule)
            body = read_body(native, settings.max_request_bytes)
            refused, namespace, key = admit(settings, native, native.method, route, body,
                                            native.headers.get(settings.header))
            if refused is not None:
                return to_flask(refused)
            assert body is not None  # else refused (413)
            incoming = Request(method=native.method, route=route, path=native.path,
                               query=native.query_string.decode("latin-1"), body=body,
                               key=key, content_type=native.content_type or "")

            def run(context: Context) -> Response:
                answer = make_response(view(context, *args, **kwargs))
                body = buffered(answer, context.max_response_bytes)
                return Response(answer.status_code, list(answer.headers.items()), body,
                                native=answer)

            try:
                conn = connect()
            except Exception:  # noqa: BLE001 - answered 500 problem+json, and logged
                log.exception("pg_idempotency: connect() failed")
                return to_flask(told(settings, native, database_error()))
            try:
                result = handle(conn, incoming, run, settings, namespace, native)
            finally:
                (release or type(conn).close)(conn)
            return result.native if result.native is not None else to_flask(result)

        return wrapper  # type: ignore[return-value]

    return decorate


def read_body(native: flask.Request, limit: int) -> Optional[bytes]:
    """The request's body; None when it is over `limit` bytes."""
    if native.content_length is not None and native.content_length > limit:
        return None
    body = native.get_data(cache=True)  # the view reads it again, from the cache
    return body if len(body) <= limit else None


def buffered(answer: flask.Response, limit: Optional[int]) -> bytes:
    """The response's body; a streamed one (a generator) is read up to `limit` bytes and
    then answered whole, or refused with ResponseTooLarge."""
    if not answer.is_streamed:
        return answer.get_data()
    chunks, size = [], 0
    for chunk in answer.iter_encoded():
        size += len(chunk)
        if limit is not None and size > limit:
            answer.close()
            raise ResponseTooLarge()
        chunks.append(chunk)
    body = b"".join(chunks)
    answer.set_data(body)
    return body


def to_flask(response: Response) -> flask.Response:
    return flask.Response(response.body, status=response.status, headers=response.headers)
