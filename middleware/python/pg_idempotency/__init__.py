"""Idempotency-Key middleware over the idempotency PostgreSQL extension.

pg_idempotency.flask, pg_idempotency.starlette (FastAPI too) and pg_idempotency.django
adapt pg_idempotency.core, which runs one request through the extension's functions
(pg_idempotency.aio on an event loop).
"""
from .core import Context, Options, Request, Response, handle, route_options

__all__ = ["Context", "Options", "Request", "Response", "handle", "route_options"]
__version__ = "0.5.0"
