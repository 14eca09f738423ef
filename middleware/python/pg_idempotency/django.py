"""Django: a middleware, the last entry of settings.MIDDLEWARE:

    MIDDLEWARE = [..., "pg_idempotency.django.IdempotencyMiddleware"]
    IDEMPOTENCY = {"methods": ["POST", "PATCH"], "tenant": "myapp.tenancy.tenant_of"}

Last, so that every other middleware runs around it: a replay goes through them as the
first answer did (X-Frame-Options, security headers, CORS), and the tenant hook sees what
they set (request.user).  Requests of those methods to a routed view run the view inside
transaction.atomic() on the database `using` (default "default"), with the claim; the
view's ORM writes are part of it (in two-phase mode, the writes after its last checkpoint).
The tenant and scope hooks get the HttpRequest; in IDEMPOTENCY they are callables or
dotted paths to them.  @route_options(wait=30) gives a view options of its own, its
methods too.
"""
import io
from typing import Any, Callable, Optional, cast

from django.conf import settings
from django.db import connections, transaction
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.urls import Resolver404, resolve
from django.utils.module_loading import import_string

from .core import (Context, Options, Request, Response, ResponseTooLarge, admit,
                   canonical_route, handle, options_of_route, route_options)

__all__ = ["IdempotencyMiddleware", "route_options"]

class AtomicConnection:
    """The connection interface core needs (cursor, commit, rollback), over
    transaction.atomic() blocks of Django's connection `using`: one is open from the first
    statement to close(), so that what the view writes with the ORM is in a transaction
    too -- in two-phase mode, after the claim's commit and each checkpoint's, as with
    psycopg's implicit transactions -- and a commit or rollback ends it and opens the next."""

    def __init__(self, using: str):
        self.using = using
        self.block: Any = None

    def _open(self) -> None:
        if self.block is None:
            self.block = transaction.atomic(using=self.using)
            self.block.__enter__()

    def cursor(self) -> Any:
        self._open()
        return connections[self.using].cursor()

    def _end(self, rollback: bool) -> None:
        block, self.block = self.block, None
        if block is not None:
            if rollback:
                transaction.set_rollback(True, using=self.using)
            block.__exit__(None, None, None)

    def commit(self) -> None:
        self._end(rollback=False)
        self._open()

    def rollback(self) -> None:
        self._end(rollback=True)
        self._open()

    def close(self) -> None:
        """Rolls back what is open (nothing, unless an error left it so)."""
        self._end(rollback=True)


def hook(value: Any) -> Optional[Callable[[HttpRequest], str]]:
    """A hook from settings: a callable, or the dotted path of one."""
    found: Optional[Callable[[HttpRequest], str]] = (import_string(value) if isinstance(value, str)
                                                     else value)
    return found


class IdempotencyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]):
        self.get_response = get_response
        config = dict(getattr(settings, "IDEMPOTENCY", {}))
        self.using = config.pop("using", "default")
        config.update({name: hook(config.get(name)) for name in ("tenant", "scope")})
        self.options: Options[HttpRequest] = Options(**config)

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        try:
            match = resolve(request.path_info)
        except Resolver404:
            match = None
        options = self.options if match is None else options_of_route(self.options, match.func)
        if match is None or request.method is None or not options.protects(request.method):
            return self.get_response(request)  # not protected, or its 404 is not ours
        body = read_body(request, options.max_request_bytes)
        # Django writes its patterns without the leading "/" that every other framework's
        # have: with it, one route ("/orders/{id}") is one part of the fingerprint and of a
        # per-route scope whichever package serves it.
        route = canonical_route("angle", "/" + match.route)
        refused, namespace, key = admit(options, request, request.method, route, body,
                                        request.headers.get(options.header))
        if refused is not None:
            return to_django(refused)
        assert body is not None  # else refused (413)
        incoming = Request(method=request.method, route=route, path=request.path,
                           query=request.META.get("QUERY_STRING", ""), body=body, key=key,
                           content_type=request.META.get("CONTENT_TYPE", ""))

        def run(context: Context) -> Response:
            request.idempotency = context
            answer = self.get_response(request)
            body = buffered(answer, context.max_response_bytes)
            return Response(answer.status_code, list(answer.items()), body, native=answer)

        conn = AtomicConnection(self.using)
        try:
            result = handle(conn, incoming, run, options, namespace, request)
        finally:
            conn.close()
        return result.native if result.native is not None else to_django(result)


def read_body(request: HttpRequest, limit: int) -> Optional[bytes]:
    """The request's body; None when it is over `limit` bytes.  Django reads a body sent
    without a Content-Length (chunked) as empty, which would fingerprint every such request
    alike: where the server says the body's end is marked (wsgi.input_terminated, as
    gunicorn and mod_wsgi do), it is read here, up to the limit, and given to Django as the
    request's body."""
    meta = request.META
    if not meta.get("CONTENT_LENGTH") and meta.get("wsgi.input_terminated"):
        data = meta["wsgi.input"].read(limit + 1)
        if len(data) > limit:
            return None
        request._body = data  # what request.body, and its POST parsing, then read
        request._stream = io.BytesIO(data)
        return cast(bytes, data)
    if int(meta.get("CONTENT_LENGTH") or 0) > limit:
        return None
    return request.body if len(request.body) <= limit else None


def buffered(answer: HttpResponseBase, limit: Optional[int]) -> bytes:
    """The response's body; a StreamingHttpResponse is read up to `limit` bytes and then
    sent whole, or refused with ResponseTooLarge."""
    if not answer.streaming:
        return cast(bytes, answer.content)
    chunks, size = [], 0
    for chunk in answer.streaming_content:
        size += len(chunk)
        if limit is not None and size > limit:
            raise ResponseTooLarge()
        chunks.append(chunk)
    body = b"".join(chunks)
    # Not answer.close(): it sends request_finished, which would close the connection
    # inside the claim's transaction.  Django closes it after sending.
    answer.streaming_content = [body]
    answer["Content-Length"] = str(len(body))
    return body


def to_django(response: Response) -> HttpResponse:
    answer = HttpResponse(response.body, status=response.status)
    for name, value in response.headers:
        answer[name] = value
    answer["Content-Length"] = str(len(response.body))
    return answer
