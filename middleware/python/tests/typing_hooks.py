"""Checked by mypy in test/t/052, never run: the hooks are typed with the framework's own
request, so that a hook reading what that request does not have is a type error (the one
line marked below, which t/052 expects mypy to report, and nothing else)."""
import flask
import psycopg
from fastapi import FastAPI
from starlette.requests import Request

from pg_idempotency import Options
from pg_idempotency.flask import idempotent
from pg_idempotency.starlette import IdempotencyMiddleware

app = flask.Flask(__name__)


@app.post("/orders")
@idempotent(psycopg.connect, tenant=lambda request: request.headers["X-Tenant"])
def create(idem: object) -> str:
    return "ok"


def tenant(request: Request) -> str:
    return request.headers["x-tenant"]


api = FastAPI()
api.add_middleware(IdempotencyMiddleware, connect=psycopg.AsyncConnection.connect, tenant=tenant)
starlette_options: Options[Request] = Options(tenant=lambda request: request.url.path)
wrong = idempotent(psycopg.connect, tenant=lambda request: request.no_such_attribute)  # error
