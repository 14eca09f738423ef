"""Django: a middleware, the last entry of settings.MIDDLEWARE:

    MIDDLEWARE = [..., "pg_idempotency.django.IdempotencyMiddleware"]
    IDEMPOTENCY = {"methods": ["POST", "PATCH"], "tenant": "myapp.tenancy.tenant_of"}

Last, so that every other middleware runs around it: a replay goes through them as the
first answer did (X-Frame-Options, security headers, CORS), and the tenant hook sees what
they set (request.user).  Requests of those methods to a routed view run the view inside
transaction.atomic() on the database `using` (default "default"), with the claim; the
view's ORM writes are part of it.  The tenant and scope hooks get the HttpRequest; in
IDEMPOTENCY they are callables or dotted paths to them.  @route_options(wait=30) gives a
view options of its own.
"""
from typing import Any, Callable, Optional, cast

from django.conf import settings
from django.db import connections, transaction
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.urls import Resolver404, resolve
from django.utils.module_loading import import_string

from .core import (Context, Options, Request, Response, ResponseTooLarge, admit, handle,
                   options_of_route, route_options)

__all__ = ["IdempotencyMiddleware", "route_options"]

class AtomicConnection:
    """The connection interface core needs (cursor, commit, rollback), over one
    transaction.atomic() block of Django's connection `using`."""

    def __init__(self, using: str):
        self.using = using
        self.block: Any = None

    def cursor(self) -> Any:
        if self.block is None:
            self.block = transaction.atomic(using=self.using)
            self.block.__enter__()
        return connections[self.using].cursor()

    def _end(self, rollback: bool) -> None:
        block, self.block = self.block, None
        if block is not None:
            if rollback:
                transaction.set_rollback(True, using=self.using)
            block.__exit__(None, None, None)

    def commit(self) -> None:
        self._end(rollback=False)

    def rollback(self) -> None:
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
        self.methods = {m.upper() for m in config.pop("methods", ["POST", "PATCH"])}
        self.using = config.pop("using", "default")
        config.update({name: hook(config.get(name)) for name in ("tenant", "scope")})
        self.options: Options[HttpRequest] = Options(**config)

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        try:
            match = resolve(request.path_info) if request.method in self.methods else None
        except Resolver404:
            match = None
        if match is None:  # not protected, or its 404 is not the middleware's
            return self.get_response(request)
        options = options_of_route(self.options, match.func)
        body = read_body(request, options.max_body_bytes)
        assert request.method is not None
        # Django writes its patterns without the leading "/" that every other framework's
        # have: with it, one route ("/orders") is one part of the fingerprint and of a
        # per-route scope whichever package serves it.
        route = "/" + match.route
        refused, namespace, key = admit(options, request, request.method, route, body,
                                        request.headers.get(options.header))
        if refused is not None:
            return to_django(refused)
        assert body is not None  # else refused (413)
        incoming = Request(method=request.method, route=route, path=request.path,
                           query=request.META.get("QUERY_STRING", ""), body=body, key=key,
                           content_type=request.content_type or "")

        def run(context: Context) -> Response:
            request.idempotency = context
            answer = self.get_response(request)
            body = buffered(answer, context.max_response_bytes)
            return Response(answer.status_code, list(answer.items()), body, native=answer)

        conn = AtomicConnection(self.using)
        try:
            result = handle(conn, incoming, run, options, namespace)
        finally:
            conn.rollback()  # no-op unless an error left the block open
        return result.native if result.native is not None else to_django(result)


def read_body(request: HttpRequest, limit: int) -> Optional[bytes]:
    """The request's body; None when it is over `limit` bytes."""
    if int(request.META.get("CONTENT_LENGTH") or 0) > limit:
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
