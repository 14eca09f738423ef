"""What the conformance applications share (test/conformance/README.md): the tenant hook
and the order handler's answer, apart from what each framework does its own way."""
import json
from typing import Any, Iterator, Mapping


class TenantHookFailed(Exception):
    pass


def tenant(request: Any) -> str:
    """The tenant hook, on any framework's own request: its X-Tenant header."""
    value = request.headers.get("X-Tenant") or "public"
    if value == "fail":
        raise TenantHookFailed("X-Tenant: fail")
    return value


def answer(order: int, data: Mapping[str, Any]) -> bytes:
    document = {"order": order, "item": data["item"]}
    if data.get("size") is not None:
        document["pad"] = "x" * int(data["size"])
    return json.dumps(document).encode()


def location(order: int) -> str:
    return f"/orders/{order}"


def pieces(body: bytes, count: int = 4) -> Iterator[bytes]:
    """The body in `count` pieces, for a streamed answer."""
    step = -(-len(body) // count)
    for start in range(0, len(body), step):
        yield body[start:start + step]


class HandlerFailed(Exception):
    pass


INSERT = "INSERT INTO orders (item) VALUES (%s) RETURNING id"
GATE = "SELECT pg_advisory_xact_lock_shared(%s)"


SPLIT = "COMMIT"  # with "split": the transaction ends early, as a pooler that splits it


def order_on(conn: Any, data: Mapping[str, Any]) -> int:
    """The handler's writes on a blocking connection, in the request's transaction."""
    cur = conn.cursor()
    if data.get("gate") is not None:
        cur.execute(GATE, (data["gate"],))
    cur.execute(INSERT, (data["item"],))
    number = int(cur.fetchone()[0])
    if data.get("split"):
        cur.execute(SPLIT)
    return number


def fail_if_asked(data: Mapping[str, Any]) -> None:
    """After the insert: "fail" makes the handler raise."""
    if data.get("fail"):
        raise HandlerFailed(f"the order handler fails ({data['fail']})")


def asgi_response(number: int, data: Mapping[str, Any]) -> Any:
    """The answer of a Starlette or FastAPI endpoint (FastAPI's responses are Starlette's):
    streamed through a StreamingResponse with "stream"."""
    from starlette.responses import Response, StreamingResponse

    body = answer(number, data)
    headers = {"Location": location(number)}
    status = data.get("status", 201)
    if data.get("stream"):
        return StreamingResponse(pieces(body), status, headers, media_type="application/json")
    return Response(body, status, headers, media_type="application/json")
