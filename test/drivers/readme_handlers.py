#!/usr/bin/python3
"""The Python handlers of doc/handlers.md, run as an application runs them.

Usage: readme_handlers.py doc/handlers.md DSN MODE [SCENARIO ...]

Takes the code blocks of doc/handlers.md marked "<!-- tested: handler.py -->" and
"<!-- tested: pay.py -->", and drives them against the server at DSN (directly
or through a connection pooler), as the role the DSN names:

  psycopg             psycopg 3 with its defaults: server-side binding, and named
                      prepared statements for a query run 5 times on a connection
  psycopg-unprepared  psycopg 3 with prepare_threshold=None: no named statements
  psycopg2            psycopg2: parameters bound on the client, no prepared
                      statements; the handler's twin, with the document's SQL

Prints one TAP line per check ("ok - ..." or "not ok - ...: detail"); test/t/
050_readme_and_drivers.pl passes them on.  Exit status 0 unless the script
itself could not run.
"""
import json
import re
import sys
import threading
import uuid

CLIENTS = 50


def readme_blocks(path):
    """The fenced code blocks of a Markdown file that follow a "tested" marker."""
    text = open(path, encoding="utf-8").read()
    pattern = r"<!-- tested: (\S+) -->\n```\w*\n(.*?)\n```"
    return {name: code for name, code in re.findall(pattern, text, re.S)}


def report(ok, name, detail=""):
    print(("ok - " if ok else "not ok - ") + name + ("" if ok else f": {detail}"), flush=True)


class Psycopg3:
    """The documented handlers as written, on psycopg 3."""

    def __init__(self, readme, dsn, prepare):
        import psycopg

        self.psycopg = psycopg
        self.ns = {}
        blocks = readme_blocks(readme)
        exec(blocks["handler.py"], self.ns)
        exec(blocks["pay.py"], self.ns)
        self.dsn = dsn
        self.options = {} if prepare else {"prepare_threshold": None}

    def connect(self):
        return self.psycopg.connect(self.dsn, autocommit=True, **self.options)

    def create_order(self, conn, client, key, body):
        return self.ns["create_order"](conn, client, key, body)

    def pay(self, conn, client, key, body, provider):
        return self.ns["pay"](conn, client, key, body, provider)

    def sql(self, conn, query, params=()):
        return conn.execute(query, params).fetchall()

    def sqlstate(self, error):
        return error.sqlstate

    def error(self):
        return self.psycopg.Error


class Psycopg2:
    """The same handler on psycopg2, with the documented SQL statements."""

    def __init__(self, readme, dsn):
        import psycopg2
        import psycopg2.extras

        self.psycopg2 = psycopg2
        self.extras = psycopg2.extras
        self.ns = {}
        exec(readme_blocks(readme)["handler.py"], self.ns)
        self.dsn = dsn

    def connect(self):
        conn = self.psycopg2.connect(self.dsn)
        conn.autocommit = True
        return conn

    def create_order(self, conn, client, key, body):
        scope = f"orders:{client}"
        conn.autocommit = False
        try:
            with conn, conn.cursor() as cur:  # one transaction, committed on success
                cur.execute(self.ns["BEGIN"], (scope, key, body.decode()))
                outcome, status, headers, stored, retry_after = cur.fetchone()
                if outcome != "claimed":
                    stored = None if stored is None else bytes(stored)
                    return self.ns["answer_unclaimed"](outcome, status, headers, stored, retry_after)
                request = json.loads(body)
                cur.execute(
                    "INSERT INTO orders (item, qty) VALUES (%s, %s) RETURNING id",
                    (request["item"], request.get("qty", 1)),
                )
                (order_id,) = cur.fetchone()
                status, headers = 201, {"Location": f"/orders/{order_id}"}
                response = json.dumps({"order": order_id, "item": request["item"]}).encode()
                cur.execute(
                    self.ns["COMPLETE"],
                    (scope, key, status, self.extras.Json(headers), self.psycopg2.Binary(response)),
                )
            return status, headers, response
        finally:
            conn.autocommit = True

    def sql(self, conn, query, params=()):
        with conn.cursor() as cur:
            cur.execute(query, params)
            return cur.fetchall()

    def sqlstate(self, error):
        return error.pgcode

    def error(self):
        return self.psycopg2.Error


# ---------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------


def new_then_replay(api):
    """A new request, its retries, a respelled body and another request, ten times over
    one connection (so that psycopg 3 prepares its statements)."""
    conn = api.connect()
    client = uuid.uuid4().hex
    failures = []
    for i in range(10):
        key = str(uuid.uuid4())
        body = json.dumps({"item": f"book {i}", "qty": 1}).encode()
        first = api.create_order(conn, client, key, body)
        again = api.create_order(conn, client, key, body)
        respelled = api.create_order(conn, client, key, b'{ "qty" : 1.0, "item" : "book %d" }' % i)
        other = api.create_order(conn, client, key, json.dumps({"item": "car"}).encode())
        if first[0] != 201:
            failures.append(f"new request answered {first}")
        elif (again[0], again[2]) != (201, first[2]) or again[1].get("Idempotent-Replayed") != "true":
            failures.append(f"retry answered {again}, first {first}")
        elif respelled[2] != first[2]:
            failures.append(f"respelled retry answered {respelled}")
        elif other[0] != 422:
            failures.append(f"another request with the key answered {other}")
    conn.close()
    report(not failures, "new request, retry, respelled retry and mismatch, 10 times", failures[:1])


def prepared_concurrently(api):
    """Eight clients, each sending ten new requests over its own connection at once:
    psycopg 3 prepares its statements after five, and through a transaction pooler with
    fewer server connections than clients, each transaction may run on another one."""
    failures = []

    def client():
        try:
            conn = api.connect()
            who = uuid.uuid4().hex
            for i in range(10):
                answer = api.create_order(conn, who, str(uuid.uuid4()), b'{"item": "cup", "qty": %d}' % i)
                if answer[0] != 201:
                    failures.append(f"answered {answer}")
            conn.close()
        except Exception as e:
            failures.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=client) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report(not failures, "8 clients with 10 new requests each, over their own connections", failures[:1])


def byte_exact(api):
    """A response stored as bytes comes back as exactly those bytes."""
    conn = api.connect()
    scope, key = "bytes", str(uuid.uuid4())
    stored = b'{"id": 9007199254740993, "price": 10.10,  "z": [1.0, 1e3], "a": "\\u00e9"}'
    body = b'{"n": 1}'
    ns = api.ns
    conn.autocommit = False
    if isinstance(api, Psycopg2):
        headers, binary = api.extras.Json({"Content-Type": "application/json"}), api.psycopg2.Binary(stored)
    else:
        from psycopg.types.json import Jsonb

        headers, binary = Jsonb({"Content-Type": "application/json"}), stored
    api.sql(conn, ns["BEGIN"], (scope, key, body.decode()))
    api.sql(conn, ns["COMPLETE"], (scope, key, 200, headers, binary))
    conn.commit()
    conn.autocommit = True
    replayed = api.sql(conn, ns["BEGIN"], (scope, key, body.decode()))[0]
    conn.close()
    got = bytes(replayed[3])
    report(replayed[0] == "replay" and got == stored, "a replay is the stored bytes, byte for byte",
           f"{replayed[0]} {got!r}")


def parallel_duplicates(api):
    """CLIENTS clients send the same new request at once: one order is written."""
    client, key = uuid.uuid4().hex, str(uuid.uuid4())
    item = f"pen {uuid.uuid4().hex}"
    body = json.dumps({"item": item, "qty": 2}).encode()
    connections = [api.connect() for _ in range(CLIENTS)]
    start = threading.Barrier(CLIENTS)
    answers = [None] * CLIENTS

    def send(i):
        start.wait()
        try:
            answers[i] = api.create_order(connections[i], client, key, body)
        except Exception as e:  # an error is an answer too: it fails the check below
            answers[i] = ("error", str(e), b"")

    threads = [threading.Thread(target=send, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (orders,) = api.sql(connections[0], "SELECT count(*) FROM orders WHERE item = %s", (item,))[0]
    for conn in connections:
        conn.close()
    statuses = sorted({a[0] for a in answers}, key=str)
    bodies = {a[2] for a in answers if a[0] == 201}
    report(orders == 1 and len(bodies) == 1 and set(statuses) <= {201, 409},
           f"{CLIENTS} simultaneous duplicates write one order; every other answer is 201 or 409",
           f"orders {orders}, statuses {statuses}, {len(bodies)} distinct bodies")


def sqlstate_of(api, conn, sql, params):
    """The SQLSTATE a statement fails with, or "none" when it succeeds."""
    try:
        api.sql(conn, sql, params)
        return "none"
    except api.error() as e:
        return api.sqlstate(e)


def untyped_hash(api):
    """request_hash() of an untyped parameter fails clearly instead of hashing text."""
    conn = api.connect()
    state = sqlstate_of(api, conn, "SELECT request_hash(%s)", ('{"item": "book"}',))
    conn.close()
    report(state == "42P18", "request_hash(%s) of an untyped parameter is refused (42P18)", state)


def forgotten_begin(api):
    """A claim outside a transaction that would commit unfinished fails with IK004."""
    conn = api.connect()
    state = sqlstate_of(api, conn, api.ns["BEGIN"], ("forgotten", str(uuid.uuid4()), '{"item": "book"}'))
    conn.close()
    report(state == "IK004", "a claim without BEGIN that would commit unfinished fails (IK004)", state)


def bad_key(api):
    """An empty key: idempotency_key_problem says why, begin raises IK006."""
    conn = api.connect()
    ((problem,),) = api.sql(conn, "SELECT idempotency_key_problem(%s, %s)", ("orders", ""))
    try:
        api.create_order(conn, "client", "", b'{"item": "book"}')
        state = "accepted"
    except api.error() as e:
        state = api.sqlstate(e)
    conn.close()
    report(problem == "key is empty" and state == "IK006",
           "an empty key: idempotency_key_problem says so, and begin raises IK006", f"{problem} / {state}")


class Provider:
    """A payment provider that charges once per idempotency key."""

    def __init__(self):
        self.charges = {}

    def charge(self, amount, idempotency_key):
        return self.charges.setdefault(idempotency_key, f"ch_{idempotency_key}_{amount}")


def two_phase(api):
    """pay(): the claim commits with its lease; a retry replays the same bytes."""
    conn = api.connect()
    provider = Provider()
    client, key = uuid.uuid4().hex, str(uuid.uuid4())
    body = b'{"amount": 10}'
    first = api.pay(conn, client, key, body, provider)
    again = api.pay(conn, client, key, body, provider)
    conn.close()
    report(first[0] == 201 and again[0] == 201 and again[2] == first[2] and len(provider.charges) == 1,
           "two-phase payment: one charge, the retry replays the same bytes", f"{first} / {again}")


SCENARIOS = {
    "new_then_replay": new_then_replay,
    "prepared_concurrently": prepared_concurrently,
    "byte_exact": byte_exact,
    "parallel_duplicates": parallel_duplicates,
    "untyped_hash": untyped_hash,
    "forgotten_begin": forgotten_begin,
    "bad_key": bad_key,
    "two_phase": two_phase,
}


def main():
    readme, dsn, mode, *names = sys.argv[1:]
    if mode == "psycopg2":
        api = Psycopg2(readme, dsn)
        names = [n for n in (names or SCENARIOS) if n != "two_phase"]  # pay() is psycopg 3 code
    else:
        api = Psycopg3(readme, dsn, prepare=(mode == "psycopg"))
    for name in names or SCENARIOS:
        try:
            SCENARIOS[name](api)
        except Exception as e:
            report(False, name, f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    main()
