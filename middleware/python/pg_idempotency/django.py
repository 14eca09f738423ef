"""Django: a middleware, in settings.MIDDLEWARE after SessionMiddleware and
AuthenticationMiddleware (so that a tenant hook can read request.user):

    MIDDLEWARE = [..., "pg_idempotency.django.IdempotencyMiddleware"]
    IDEMPOTENCY = {"methods": ["POST", "PATCH"]}   # and pg_idempotency.Options' fields

Requests of those methods run their view inside transaction.atomic() on the database
`using` (default "default"), with the claim; the view's ORM writes are part of it.  The
tenant and scope hooks get the Django request as Request.raw.
"""
from django.conf import settings
from django.db import connections, transaction
from django.http import HttpResponse
from django.urls import resolve

from .core import Options, Request, Response, handle


class AtomicConnection:
    """The connection interface core needs (cursor, commit, rollback), over one
    transaction.atomic() block of Django's connection `using`."""

    def __init__(self, using):
        self.using = using
        self.block = None

    def cursor(self):
        if self.block is None:
            self.block = transaction.atomic(using=self.using)
            self.block.__enter__()
        return connections[self.using].cursor()

    def _end(self, rollback):
        block, self.block = self.block, None
        if block is not None:
            if rollback:
                transaction.set_rollback(True, using=self.using)
            block.__exit__(None, None, None)

    def commit(self):
        self._end(rollback=False)

    def rollback(self):
        self._end(rollback=True)


class IdempotencyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response
        config = dict(getattr(settings, "IDEMPOTENCY", {}))
        self.methods = {m.upper() for m in config.pop("methods", ["POST", "PATCH"])}
        self.using = config.pop("using", "default")
        self.options = Options(**config)

    def __call__(self, request):
        if request.method not in self.methods:
            return self.get_response(request)
        incoming = Request(method=request.method, route=resolve(request.path_info).route,
                           path=request.path, body=request.body,
                           key=request.headers.get(self.options.header),
                           content_type=request.content_type or "")
        incoming.raw = request
        handled = {}

        def run(context):
            request.idempotency = context
            response = handled["response"] = self.get_response(request)
            return Response(response.status_code, list(response.items()), response.content)

        conn = AtomicConnection(self.using)
        try:
            result = handle(conn, incoming, run, self.options)
        finally:
            conn.rollback()  # no-op unless an error left the block open
        if "response" in handled and result.status == handled["response"].status_code \
                and "Idempotent-Replayed" not in dict(result.headers):
            return handled["response"]  # the view's own, cookies and all
        response = HttpResponse(result.body, status=result.status)
        for name, value in result.headers:
            response[name] = value
        return response
