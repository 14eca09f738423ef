"""What the conformance applications share (test/conformance/README.md): the tenant hook
and the order handler's answer, apart from what each framework does its own way."""
import json
import os
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple


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


# The options application's outcomes (its on_outcome hook), which GET /options/outcomes
# answers (outcomes_json): a line each in a file beside the application, appended whole
# (O_APPEND), since gunicorn's workers are processes of their own.
OUTCOMES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "outcomes.log")


def count_outcome(outcome: str, request: Any) -> None:
    descriptor = os.open(OUTCOMES_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, (outcome + "\n").encode())
    finally:
        os.close(descriptor)


def outcomes_json() -> bytes:
    counts: Dict[str, int] = {}
    try:
        with open(OUTCOMES_FILE) as lines:
            for line in lines:
                counts[line.strip()] = counts.get(line.strip(), 0) + 1
    except FileNotFoundError:
        pass
    return json.dumps(counts).encode()


# The options application's options (test/conformance/README.md, "The options
# application"), over the tenant hook, for every route under /options.
OPTIONS: Dict[str, Any] = {"header": "Request-Key", "required": False,
                           "stored_headers": ("Content-Type", "Location", "X-Order"),
                           "ttl": "1 hour", "lease": "1 second", "scope_per_route": True,
                           "store_server_errors": True, "methods": ("POST", "PUT"),
                           "max_request_bytes": 1024, "on_outcome": count_outcome}


def options_headers(number: int) -> Dict[str, str]:
    """The options answer's headers, but its Content-Type."""
    return {"Location": location(number), "X-Order": str(number)}


def options_first(idem: Any, data: Mapping[str, Any]) -> Tuple[bool, Optional[str]]:
    """What the options handler does before its writes: whether it takes the gate, and the
    recovery point it started from.  A checkpoint and the gate only on a claim without a
    recovery point (a takeover resumes after them); `idem` None: the request passed
    through, unprotected."""
    recovered = idem.recovery_point if idem is not None else None
    return data.get("gate") is not None and recovered is None, recovered


def options_answer(idem: Any, number: int, data: Mapping[str, Any],
                   recovered: Optional[str]) -> Tuple[int, bytes]:
    document = {"order": number, "item": data["item"],
                "attempt": idem.attempt if idem is not None else None, "recovered": recovered}
    return data.get("status", 201), json.dumps(document).encode()


def options_order_on(conn: Any, idem: Any, data: Mapping[str, Any]) -> Tuple[int, bytes]:
    """The options handler on a blocking connection: (status, body)."""
    gate, recovered = options_first(idem, data)
    if idem is not None and data.get("checkpoint") is not None and recovered is None:
        idem.checkpoint(data["checkpoint"])
    cur = conn.cursor()
    if gate:
        cur.execute(GATE, (data["gate"],))
    cur.execute(INSERT, (data["item"],))
    number = int(cur.fetchone()[0])
    return options_answer(idem, number, data, recovered)
