#!/usr/bin/python3
"""The HTTP conformance cases (test/conformance/README.md), against one running setup.

Speaks plain HTTP to the server and reads the database only to hold the handlers' gates
(advisory locks), to see who waits, and to count business rows.  Prints one "ok - ..." or
"not ok - ..." line per check, "# ..." lines of diagnostics, and a last line
"N passed, N failed"; exits 1 when any check failed.
"""
import argparse
import gzip
import http.client
import json
import threading
import time
import urllib.parse
import uuid

import psycopg

ANSWER_TIMEOUT = 90  # seconds an answer may take: a hang fails the check, not the suite
CONDITION_TIMEOUT = 60  # seconds to wait for a condition the server must reach
LARGE = 5 * 1024 * 1024
MEDIUM = 200 * 1000
DUPLICATES = 200
OPTIONS_LIMIT = 1024  # the options application's max_request_bytes
OPTIONS_HEADER = "Request-Key"  # and its header


class Answer:
    def __init__(self, status, headers, body, error=None):
        self.status = status
        self.headers = headers  # lower-case name -> value
        self.body = body
        self.error = error  # why no answer came, or None

    def replayed(self):
        return self.headers.get("idempotent-replayed") == "true"

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def __repr__(self):
        if self.error:
            return f"<no answer: {self.error}>"
        body = self.body if len(self.body) <= 300 else self.body[:300] + b"..."
        return f"<{self.status} {self.headers} {body!r}>"


class Suite:
    def __init__(self, base_url, dsn):
        url = urllib.parse.urlsplit(base_url)
        self.host, self.port = url.hostname, url.port
        self.db = psycopg.connect(dsn, autocommit=True)
        self.passed = 0
        self.failed = 0
        self.run_id = uuid.uuid4().hex[:8]
        self.serial = 0
        self.gates = int.from_bytes(uuid.uuid4().bytes[:3], "big") * 16

    # ------------------------------------------------------------- reporting

    def check(self, ok, name, *details):
        if ok:
            self.passed += 1
            print(f"ok - {name}", flush=True)
        else:
            self.failed += 1
            print(f"not ok - {name}", flush=True)
            for detail in details:
                for line in str(detail).splitlines() or [""]:
                    print(f"#   {line}", flush=True)
        return ok

    # ------------------------------------------------------------- requests

    def fresh(self, what):
        """A name no earlier case or run used: for keys and items."""
        self.serial += 1
        return f"{what}-{self.run_id}-{self.serial}"

    def post(self, path, body, key=None, headers=None, method="POST", chunked=False,
             key_header="Idempotency-Key"):
        """POSTs `body` (JSON unless bytes) with `key` as the `key_header`: text is sent as
        its UTF-8 bytes, bytes as they are; `chunked` sends the body without a
        Content-Length, in chunks."""
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        if isinstance(key, str):
            key = key.encode()
        sent = {"Content-Type": "application/json", **(headers or {})}
        if key is not None:
            sent[key_header] = key
        conn = http.client.HTTPConnection(self.host, self.port, timeout=ANSWER_TIMEOUT)
        try:
            if chunked:
                conn.request(method, path, iter([payload[:len(payload) // 2],
                                                 payload[len(payload) // 2:]]),
                             sent, encode_chunked=True)
            else:
                conn.request(method, path, payload, sent)
            response = conn.getresponse()
            body = response.read()
            return Answer(response.status,
                          {name.lower(): value for name, value in response.getheaders()}, body)
        except (OSError, http.client.HTTPException) as error:
            return Answer(None, {}, b"", error=f"{type(error).__name__}: {error}")
        finally:
            conn.close()

    def post_in_background(self, *args, **kwargs):
        result = {}
        thread = threading.Thread(target=lambda: result.setdefault("answer",
                                                                   self.post(*args, **kwargs)))
        thread.start()

        def join():
            thread.join(ANSWER_TIMEOUT + 10)
            return result.get("answer", Answer(None, {}, b"", error="no answer in time"))
        return join

    # ------------------------------------------------------------- the database

    def query(self, sql, params=()):
        return self.db.execute(sql, params).fetchone()[0]

    def orders(self, item):
        return self.query("SELECT count(*) FROM orders WHERE item = %s", (item,))

    def new_gate(self):
        self.gates += 1
        self.query("SELECT pg_advisory_lock(%s)", (self.gates,))
        return self.gates

    def open_gate(self, gate):
        self.query("SELECT pg_advisory_unlock(%s)", (gate,))

    def wait_for(self, what, condition):
        deadline = time.monotonic() + CONDITION_TIMEOUT
        while time.monotonic() < deadline:
            if condition():
                return True
            time.sleep(0.02)
        print(f"# gave up waiting for {what} after {CONDITION_TIMEOUT} s", flush=True)
        return False

    def held_at_gate(self, gate):
        """Whether a handler waits at `gate`: it is inside its handler."""
        return self.wait_for(f"a handler at gate {gate}", lambda: self.query(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            " AND classid = 0 AND objid = %s AND objsubid = 1", (gate,)) > 0)

    def in_progress_answers(self):
        return self.query("SELECT in_progress FROM idempotency_stats()")

    def waiting_duplicate(self, in_progress_before):
        """Whether a duplicate is waiting for the request in flight: waiting on its
        transaction in the database (the SQL edition: on the key's advisory lock,
        objsubid 2, doc/sql-edition.md; the gates are objsubid 1), or polling (each
        poll an in_progress answer, where idempotency_stats() counts)."""
        def waiting():
            if self.query("SELECT count(*) FROM pg_locks WHERE NOT granted"
                          " AND (locktype = 'transactionid'"
                          " OR locktype = 'advisory' AND objsubid = 2)") > 0:
                return True
            now = self.in_progress_answers()
            return now is not None and now > in_progress_before
        return self.wait_for("a waiting duplicate", waiting)

    # ------------------------------------------------------------- answers

    def is_problem(self, answer, status):
        document = answer.json()
        return (answer.status == status
                and answer.headers.get("content-type", "").startswith("application/problem+json")
                and isinstance(document, dict) and document.get("status") == status
                and bool(document.get("title")))

    def is_first(self, answer, status=201):
        document = answer.json()
        return (answer.status == status and not answer.replayed()
                and isinstance(document, dict) and "order" in document
                and answer.headers.get("location") == f"/orders/{document['order']}")

    def scopes(self, key):
        return sorted(row[0] for row in self.db.execute(
            "SELECT scope FROM idempotency.keys WHERE key = %s", (key,)))

    def is_replay_of(self, answer, first):
        return (answer.status == first.status and answer.replayed()
                and answer.body == first.body
                and answer.headers.get("content-type") == first.headers.get("content-type")
                and answer.headers.get("location") == first.headers.get("location")
                and answer.headers.get("content-length") == str(len(answer.body)))

    # ------------------------------------------------------------- the cases

    def first_answer_and_replay(self):
        key, item = self.fresh("key"), self.fresh("item")
        first = self.post("/orders", {"item": item}, key)
        self.check(self.is_first(first), "a new request answers 201 with its order", first)
        retry = self.post("/orders", {"item": item}, key)
        self.check(self.is_replay_of(retry, first),
                   "its retry replays it byte for byte, stored headers and Content-Length too",
                   f"first: {first}", f"retry: {retry}")
        self.check(self.orders(item) == 1, "the order was made once", self.orders(item))

    def keys(self):
        for name, key in (("a missing", None), ("an empty", ""), ("an oversized", "k" * 2000)):
            item = self.fresh("item")
            answer = self.post("/orders", {"item": item}, key)
            self.check(self.is_problem(answer, 400) and self.orders(item) == 0,
                       f"{name} key answers 400 and runs nothing", answer)

    def key_bytes(self):
        """A key is the header's bytes read as UTF-8 in every package, so that a retry moved
        from one package to another finds its key.  The key below is the same in every
        setup of a run, against one database: the first setup makes its order, and every
        later one -- another package's included -- replays it."""
        key, item = "moved-\u00e9-\U0001F642", "moved-between-packages"
        made = self.orders(item)
        answer = self.post("/orders", {"item": item}, key)
        rows = [row[0] for row in self.db.execute(
            "SELECT id FROM orders WHERE item = %s", (item,))]
        document = answer.json()
        stored = self.query("SELECT count(*) FROM idempotency.keys WHERE key = %s", (key,))
        if made == 0:
            ok = self.is_first(answer) and len(rows) == 1
        else:
            ok = (answer.status == 201 and answer.replayed() and len(rows) == 1
                  and isinstance(document, dict) and document.get("order") == rows[0]
                  and answer.headers.get("location") == f"/orders/{rows[0]}")
        self.check(ok and stored == 1,
                   "a key with an accent and an emoji is its UTF-8 text: one order, made by "
                   "the first setup of the run and replayed by every other package",
                   f"orders before: {made}, after: {rows}, keys stored: {stored}", answer)
        for name, raw in (("the byte 0xFF", b"\xff"), ("Latin-1 text", b"caf\xe9")):
            item = self.fresh("item")
            answer = self.post("/orders", {"item": item}, raw + b"-" + item.encode())
            self.check(self.is_problem(answer, 400) and self.orders(item) == 0,
                       f"a key that is not UTF-8 ({name}) answers 400 and runs nothing", answer)

    def another_request(self):
        key, item = self.fresh("key"), self.fresh("item")
        first = self.post("/orders", {"item": item}, key)
        other_body = self.post("/orders", {"item": item + "-other"}, key)
        self.check(self.is_first(first) and self.is_problem(other_body, 422)
                   and self.orders(item + "-other") == 0,
                   "the same key with another body answers 422", first, other_body)
        other_route = self.post("/refunds", {"item": item}, key)
        self.check(self.is_problem(other_route, 422) and self.orders(item) == 1,
                   "the same key on another route answers 422 and runs nothing", other_route)
        key, item = self.fresh("key"), self.fresh("item")
        first = self.post("/orders?x=1", {"item": item}, key)
        other_query = self.post("/orders?x=2", {"item": item}, key)
        self.check(self.is_first(first) and self.is_problem(other_query, 422),
                   "the same key with another query string answers 422", first, other_query)
        same_query = self.post("/orders?x=1", {"item": item}, key)
        self.check(self.is_replay_of(same_query, first) and self.orders(item) == 1,
                   "the same query string again replays", same_query)

    def json_bodies(self):
        key, item = self.fresh("key"), self.fresh("item")
        first = self.post("/orders", f'{{"item": "{item}", "colour": "red"}}'.encode(), key)
        respelled = self.post("/orders", f'{{ "colour":"red",\n  "item":"{item}" }}'.encode(), key)
        self.check(self.is_first(first) and self.is_replay_of(respelled, first)
                   and self.orders(item) == 1,
                   "a JSON body is fingerprinted by its value: respelled, it replays",
                   first, respelled)
        # Valid JSON that jsonb refuses (a lone surrogate): hashed by its bytes, not refused.
        key, item = self.fresh("key"), self.fresh("item")
        body = f'{{"item": "{item}", "note": "\\ud800"}}'.encode()
        first = self.post("/orders", body, key)
        retry = self.post("/orders", body, key)
        self.check(self.is_first(first) and self.is_replay_of(retry, first)
                   and self.orders(item) == 1,
                   "a JSON body that jsonb refuses is served, and its retry replays", first, retry)

    def in_flight(self):
        key, item = self.fresh("key"), self.fresh("item")
        gate = self.new_gate()
        try:
            first = self.post_in_background("/orders", {"item": item, "gate": gate}, key)
            if not self.check(self.held_at_gate(gate), "a request is held in its handler"):
                return
            duplicate = self.post("/orders", {"item": item, "gate": gate}, key)
            self.check(self.is_problem(duplicate, 409)
                       and duplicate.headers.get("retry-after", "").isdigit(),
                       "a duplicate in flight answers 409 with Retry-After", duplicate)
        finally:
            self.open_gate(gate)
        first = first()
        self.check(self.is_first(first), "the held request then answers 201", first)
        retry = self.post("/orders", {"item": item, "gate": gate}, key)
        self.check(self.is_replay_of(retry, first) and self.orders(item) == 1,
                   "and its retry replays it", retry)

    def waiting(self):
        key, item = self.fresh("key"), self.fresh("item")
        body = {"item": item, "gate": self.new_gate()}
        try:
            first = self.post_in_background("/waiting/orders", body, key)
            if not self.check(self.held_at_gate(body["gate"]),
                              "with wait: a request is held in its handler"):
                return
            before = self.in_progress_answers()
            duplicate = self.post_in_background("/waiting/orders", body, key)
            self.check(self.waiting_duplicate(before), "with wait: a duplicate waits")
        finally:
            self.open_gate(body["gate"])
        first, duplicate = first(), duplicate()
        self.check(self.is_first(first) and self.is_replay_of(duplicate, first)
                   and self.orders(item) == 1,
                   "with wait: the duplicate gets the replay once the first completes",
                   first, duplicate)

    def large_responses(self):
        key, item = self.fresh("key"), self.fresh("item")
        first = self.post("/orders", {"item": item, "size": MEDIUM}, key)
        retry = self.post("/orders", {"item": item, "size": MEDIUM}, key)
        self.check(self.is_first(first) and len(first.body) > MEDIUM
                   and self.is_replay_of(retry, first) and self.orders(item) == 1,
                   "a 200 kB response is stored and replayed whole", first, retry)
        for stream in (False, True):
            key, item, how = self.fresh("key"), self.fresh("item"), "streamed " if stream else ""
            body = {"item": item, "size": LARGE, "stream": stream}
            first = self.post("/orders", body, key)
            retry = self.post("/orders", body, key)
            if first.status == 201:
                self.check(self.is_first(first) and len(first.body) > LARGE
                           and self.is_replay_of(retry, first) and self.orders(item) == 1,
                           f"a {how}5 MB response is stored and replayed whole", first, retry)
            else:
                named = all(b"idempotency.max_response_bytes" in answer.body
                            for answer in (first, retry))
                self.check(first.status is not None and first.status >= 500
                           and self.is_problem(first, first.status)
                           and self.is_problem(retry, first.status) and named
                           and self.orders(item) == 0,
                           f"a {how}5 MB response is refused with a 5xx that names "
                           "idempotency.max_response_bytes, its work and its retry's rolled back",
                           first, retry, f"orders: {self.orders(item)}")

    def streamed_response(self):
        key, item = self.fresh("key"), self.fresh("item")
        body = {"item": item, "stream": True, "size": 50000}
        first = self.post("/orders", body, key)
        retry = self.post("/orders", body, key)
        self.check(self.is_first(first) and len(first.body) > 50000
                   and self.is_replay_of(retry, first) and self.orders(item) == 1,
                   "a streamed response is stored and replayed byte for byte", first, retry)

    def compression(self):
        """/compressed/orders is behind the setup's usual compression, in its natural order
        (inside the middleware, or outside it): whichever coding a client accepts, a replay
        decodes to the first body."""
        def decoded(answer):
            coding = answer.headers.get("content-encoding", "identity").lower()
            try:
                body = gzip.decompress(answer.body) if coding in ("gzip", "x-gzip") else \
                    answer.body if coding == "identity" else None
            except (OSError, EOFError):
                body = None
            return Answer(answer.status, answer.headers, body or b"", answer.error)

        def varies(answer):
            vary = answer.headers.get("vary", "").lower()
            return "content-encoding" not in answer.headers or "accept-encoding" in vary

        key, item = self.fresh("key"), self.fresh("item")
        body = {"item": item, "size": 4000}
        first = self.post("/compressed/orders", body, key, headers={"Accept-Encoding": "gzip"})
        plain = self.post("/compressed/orders", body, key, headers={"Accept-Encoding": "identity"})
        coded = self.post("/compressed/orders", body, key, headers={"Accept-Encoding": "gzip"})
        print(f"# the replays' Content-Encoding: {plain.headers.get('content-encoding', 'none')},"
              f" {coded.headers.get('content-encoding', 'none')}", flush=True)
        self.check(first.headers.get("content-encoding") == "gzip"
                   and self.is_first(decoded(first)) and varies(first),
                   "compression: a client that accepts gzip is sent gzip, with Vary: Accept-Encoding",
                   first)
        self.check(all(a.replayed() and a.status == first.status and varies(a)
                       and decoded(a).body == decoded(first).body
                       and a.headers.get("location") == first.headers.get("location")
                       for a in (plain, coded)) and self.orders(item) == 1,
                   "compression: a replay decodes to the first body, to a client that accepts no "
                   "coding and to one that accepts gzip, and names its coding in Vary", plain, coded,
                   f"orders: {self.orders(item)}")

    def failures(self):
        for how in ("sync", "async"):
            key, item = self.fresh("key"), self.fresh("item")
            body = {"item": item, "fail": how}
            first = self.post("/orders", body, key)
            retry = self.post("/orders", body, key)
            self.check(first.status == 500 and retry.status == 500 and not retry.replayed()
                       and self.orders(item) == 0,
                       f"a handler that fails ({how}) answers 500, rolled back, and its retry "
                       "runs again", first, retry, f"orders: {self.orders(item)}")
        key, item = self.fresh("key"), self.fresh("item")
        body = {"item": item, "status": 500}
        first = self.post("/orders", body, key)
        retry = self.post("/orders", body, key)
        self.check(first.status == 500 and retry.status == 500 and not retry.replayed()
                   and self.orders(item) == 0,
                   "a 500 the handler answers is not stored: rolled back, and its retry runs "
                   "again", first, retry)
        item = self.fresh("item")
        answer = self.post("/orders", {"item": item}, self.fresh("key"), {"X-Tenant": "fail"})
        self.check(self.is_problem(answer, 500) and self.orders(item) == 0,
                   "a tenant hook that fails answers 500 problem+json and runs nothing", answer)

    def database_error(self):
        """An error of the middleware's own statement that no SQLSTATE of the map answers:
        a scope longer than idempotency.max_key_length (22001), from the tenant hook."""
        item = self.fresh("item")
        answer = self.post("/orders", {"item": item}, self.fresh("key"), {"X-Tenant": "t" * 2000})
        self.check(self.is_problem(answer, 500) and self.orders(item) == 0,
                   "a database error of the middleware's own answers 500 problem+json, never "
                   "the framework's error page, and runs nothing", answer)

    def content_type_bytes(self):
        """A Content-Type whose bytes are not UTF-8 (Latin-1 in a parameter) is the header's
        bytes a character each (ISO-8859-1) in every package: the request is served, its
        fingerprint is the one the client computes that way, and the same request sent to
        every setup of a run, against one database, is made by the first and replayed by
        every other."""
        content_type = b'application/json; note="caf\xe9"'
        for key, item, label in ((self.fresh("key"), self.fresh("item"), "in this setup"),
                                 ("moved-content-type", "moved-content-type",
                                  "moved between packages")):
            made = self.orders(item)
            body = json.dumps({"item": item}).encode()
            answer = self.post("/orders", body, key, {"Content-Type": content_type})
            expected = self.query(
                "SELECT request_hash_parts('POST', '/orders', '/orders', '',"
                " request_hash_body(convert_from(%s, 'LATIN1'), %s)::text)::text",
                (content_type, body))
            stored = self.query(
                "SELECT (SELECT request::text FROM idempotency.keys"
                " WHERE scope = 'public' AND key = %s)", (key,))
            # The SQL edition keeps the request as its digest's bytes (bytea, whose
            # text is \x and the same hex: doc/sql-edition.md's table).
            if stored is not None and stored.startswith("\\x"):
                stored = stored[2:]
            served = (self.is_first(answer) if made == 0 else
                      answer.status == 201 and answer.replayed())
            self.check(served and stored == expected and self.orders(item) == 1,
                       "a Content-Type whose bytes are not UTF-8 is served and fingerprinted as"
                       f" its bytes read as ISO-8859-1 ({label})",
                       f"stored {stored}, expected {expected}, orders {self.orders(item)}",
                       answer)

    def split_transaction(self):
        """A pooler in transaction mode can end a request's transaction early (a driver's
        named statement run as another client's COMMIT) and run the rest in another one;
        the handler's "split" does that with a COMMIT after its insert.  The request is
        never acknowledged: 500, a problem that names the pooler's and the drivers'
        settings."""
        key, item = self.fresh("key"), self.fresh("item")
        answer = self.post("/orders", {"item": item, "split": True}, key)
        self.check(self.is_problem(answer, 500) and not answer.replayed()
                   and b"pooler" in answer.body and b"max_prepared_statements" in answer.body,
                   "a request whose transaction ends early (a pooler's split) answers 500 "
                   "naming the settings, never its 201", answer)

    def parser_first(self):
        key, item = self.fresh("key"), self.fresh("item")
        first = self.post("/parsed/orders", {"item": item}, key)
        if first.status == 201:
            retry = self.post("/parsed/orders", {"item": item}, key)
            self.check(self.is_first(first) and self.is_replay_of(retry, first)
                       and self.orders(item) == 1,
                       "with a body parser first: it works as without", first, retry)
        else:
            self.check(self.is_problem(first, 500) and b"body" in first.body.lower()
                       and self.orders(item) == 0,
                       "with a body parser first: 500 saying what to change, nothing run",
                       first)

    def tenants(self):
        key, item = self.fresh("key"), self.fresh("item")
        one = self.post("/orders", {"item": item}, key, {"X-Tenant": "t1"})
        two = self.post("/orders", {"item": item}, key, {"X-Tenant": "t2"})
        self.check(self.is_first(one) and self.is_first(two) and one.body != two.body
                   and self.orders(item) == 2,
                   "two tenants with one key and one body get two orders", one, two)
        again_one = self.post("/orders", {"item": item}, key, {"X-Tenant": "t1"})
        again_two = self.post("/orders", {"item": item}, key, {"X-Tenant": "t2"})
        self.check(self.is_replay_of(again_one, one) and self.is_replay_of(again_two, two),
                   "each tenant's retry gets its own response", again_one, again_two)

    # ------------------------------------------------------------- the options application

    def opt(self, *args, **kwargs):
        """A request to the options application, its key in OPTIONS_HEADER."""
        return self.post(*args, key_header=OPTIONS_HEADER, **kwargs)

    def options_two_phase(self):
        """Two-phase mode (lease): the claim commits at once; the handler's checkpoint
        commits; once the lease has ended, a retry takes the key over (attempt 2) and sees
        the recovery point; the first attempt, released, is fenced off (409) and its work
        rolled back; a later retry replays the takeover's answer."""
        key, item = self.fresh("key"), self.fresh("item")
        body = {"item": item, "gate": self.new_gate(), "checkpoint": "step-1"}
        try:
            first = self.post_in_background("/options/orders/1", body, key,
                                            key_header=OPTIONS_HEADER)
            if not self.check(self.held_at_gate(body["gate"]),
                              "two-phase: a request is held in its handler"):
                return
            self.check(self.wait_for("its checkpoint", lambda: self.query(
                "SELECT count(*) FROM idempotency.keys WHERE key = %s AND status = 'p'"
                " AND recovery_point = 'step-1'", (key,)) == 1),
                "two-phase: the claim and the handler's checkpoint are committed while it runs")
            if not self.check(self.wait_for("the lease's end", lambda: self.query(
                    "SELECT count(*) FROM idempotency.keys WHERE key = %s"
                    " AND lease_expires_at < pg_catalog.clock_timestamp()", (key,)) == 1),
                    "two-phase: the lease ends while the handler is held"):
                return
            takeover = self.opt("/options/orders/1", body, key)
            document = takeover.json() or {}
            self.check(self.is_first(takeover) and document.get("attempt") == 2
                       and document.get("recovered") == "step-1",
                       "two-phase: a retry after the lease takes the key over (attempt 2) and "
                       "sees the recovery point", takeover)
        finally:
            self.open_gate(body["gate"])
        first = first()
        self.check(self.is_problem(first, 409) and first.headers.get("retry-after", "").isdigit()
                   and self.orders(item) == 1,
                   "two-phase: the first attempt, taken over, is fenced off: 409 with "
                   "Retry-After, its work rolled back", first, f"orders: {self.orders(item)}")
        retry = self.opt("/options/orders/1", body, key)
        self.check(self.is_replay_of(retry, takeover) and self.orders(item) == 1,
                   "two-phase: a later retry replays the takeover's answer", retry)

    def options_body_limit(self):
        item = self.fresh("item")
        body = {"item": item, "pad": "p" * OPTIONS_LIMIT}
        for chunked, how in ((False, "with its Content-Length"), (True, "chunked")):
            answer = self.opt("/options/orders/1", body, self.fresh("key"), chunked=chunked)
            self.check(self.is_problem(answer, 413) and self.orders(item) == 0,
                       f"a body over max_request_bytes ({OPTIONS_LIMIT}) answers 413 and runs "
                       f"nothing, sent {how}", answer)
        answer = self.opt("/options/orders/1", {"item": item}, self.fresh("key"), chunked=True)
        self.check(self.is_first(answer) and self.orders(item) == 1,
                   "a body within max_request_bytes, chunked, is served", answer)

    def options_per_route(self):
        """scope_per_route: the scope is "<tenant> <METHOD> <route>", the route in its
        canonical form, whatever the framework's syntax for a parameter."""
        key, item = self.fresh("key"), self.fresh("item")
        orders = self.opt("/options/orders/7", {"item": item}, key)
        refunds = self.opt("/options/refunds/7", {"item": item}, key)
        self.check(self.is_first(orders) and self.is_first(refunds) and self.orders(item) == 2,
                   "scope_per_route: the same key on another route is another request", orders,
                   refunds)
        scopes = self.scopes(key)
        self.check(scopes == ["public POST /options/orders/{id}", "public POST /options/refunds/{id}"],
                   "scope_per_route: the scope names the route's canonical pattern", scopes)
        again = self.opt("/options/orders/8", {"item": item}, key)
        self.check(self.is_problem(again, 422) and self.orders(item) == 2,
                   "scope_per_route: the same key on the same route, another path, is 422", again)

    def options_moved(self):
        """A per-route request moved between packages: the same key, route and request sent
        to every setup of a run, against one database; the first setup makes its order, and
        every later one -- another package's included -- replays it."""
        key, item = "moved-per-route", "moved-per-route"
        made = self.orders(item)
        answer = self.opt("/options/orders/42", {"item": item}, key)
        rows = [row[0] for row in self.db.execute(
            "SELECT id FROM orders WHERE item = %s", (item,))]
        document = answer.json()
        if made == 0:
            ok = self.is_first(answer)
        else:
            ok = (answer.status == 201 and answer.replayed() and isinstance(document, dict)
                  and document.get("order") in rows)
        self.check(ok and len(rows) == 1 and self.scopes(key) == ["public POST /options/orders/{id}"],
                   "scope_per_route on a route with a parameter: one order, made by the first "
                   "setup of the run and replayed by every other package",
                   f"orders before: {made}, after: {rows}, scopes: {self.scopes(key)}", answer)

    def options_server_errors(self):
        key, item = self.fresh("key"), self.fresh("item")
        first = self.opt("/options/orders/1", {"item": item, "status": 503}, key)
        retry = self.opt("/options/orders/1", {"item": item, "status": 503}, key)
        self.check(first.status == 503 and not first.replayed()
                   and self.is_replay_of(retry, first) and self.orders(item) == 1,
                   "store_server_errors: a 503 is stored, and its retry replays it, whatever the "
                   "server's idempotency.store_server_errors", first, retry)

    def options_methods(self):
        key, item = self.fresh("key"), self.fresh("item")
        first = self.opt("/options/orders/5", {"item": item}, key, method="PUT")
        retry = self.opt("/options/orders/5", {"item": item}, key, method="PUT")
        self.check(self.is_first(first) and self.is_replay_of(retry, first)
                   and self.orders(item) == 1,
                   "methods with PUT: a PUT is protected, and its retry replays", first, retry)
        key, item = self.fresh("key"), self.fresh("item")
        answers = [self.opt("/options/orders/5", {"item": item}, key, method="PATCH")
                   for _ in range(2)]
        self.check(all(self.is_first(a) for a in answers) and self.orders(item) == 2,
                   "methods without PATCH: a PATCH passes through, run each time", *answers)

    def options_omitted_body(self):
        """A record stored without its body (by another caller, over the limit with
        omit_oversized) replays as 500 naming the setting, never as an empty body."""
        key, item = self.fresh("key"), self.fresh("item")
        first = self.opt("/options/orders/1", {"item": item}, key)
        self.db.execute("UPDATE idempotency.keys SET response_body_bytes = NULL,"
                        " response_body_omitted = true WHERE key = %s", (key,))
        retry = self.opt("/options/orders/1", {"item": item}, key)
        self.check(self.is_first(first) and self.is_problem(retry, 500)
                   and b"idempotency.max_response_bytes" in retry.body
                   and self.orders(item) == 1,
                   "a replay of a record stored without its body answers 500 naming "
                   "idempotency.max_response_bytes, never an empty body", first, retry)

    def options_header_and_ttl(self):
        """header, required, stored_headers and ttl: the key is read from the header named,
        a request without it runs unprotected, the headers named are stored and replayed,
        and the key keeps the ttl given."""
        key, item = self.fresh("key"), self.fresh("item")
        first = self.opt("/options/orders/1", {"item": item}, key)
        retry = self.opt("/options/orders/1", {"item": item}, key)
        ttl = self.query("SELECT (SELECT ttl::text FROM idempotency.keys WHERE key = %s)", (key,))
        self.check(self.is_first(first) and self.is_replay_of(retry, first)
                   and retry.headers.get("x-order") == first.headers.get("x-order") is not None
                   and ttl == "01:00:00" and self.orders(item) == 1,
                   "header, stored_headers and ttl: the key is the header named, the headers "
                   "named are replayed, the key keeps its ttl", first, retry, f"ttl {ttl}")
        item = self.fresh("item")
        answers = [self.post("/options/orders/1", {"item": item}, self.fresh("key"))
                   for _ in range(2)]
        self.check(all(self.is_first(a) for a in answers) and self.orders(item) == 2,
                   "required off: a request without the key header named (an Idempotency-Key is "
                   "another header) runs unprotected, each time", *answers)
        item = self.fresh("item")
        answer = self.opt("/options/orders/1", {"item": item}, b"\xff-" + item.encode())
        self.check(self.is_problem(answer, 400)
                   and (answer.json() or {}).get("title")
                   == f"The {OPTIONS_HEADER} header is not valid UTF-8"
                   and self.orders(item) == 0,
                   "a key that is not UTF-8 answers 400, its title naming the header", answer)

    def outcome_counts(self):
        """The options application's counts of its on_outcome hook's calls, by outcome."""
        answer = self.post("/options/outcomes", b"", method="GET")
        return answer.json() if answer.status == 200 else None

    def options_outcomes(self):
        """on_outcome: called once per protected request, before its answer is sent, with
        its outcome; not for a request that passes through."""
        before = self.outcome_counts()
        key, item = self.fresh("key"), self.fresh("item")
        answers = [
            self.opt("/options/orders/1", {"item": item}, key),  # claimed
            self.opt("/options/orders/1", {"item": item}, key),  # replayed
            self.opt("/options/orders/1", {"item": self.fresh("item")}, key),  # mismatch
            self.post("/options/orders/1", {"item": self.fresh("item")}),  # unprotected
            self.opt("/options/orders/1", {"item": "x" * 2000}, self.fresh("key")),  # too_large
            self.opt("/options/orders/1", {"item": item}, b"\xff"),  # refused
            self.opt("/options/orders/1", {"item": item}, self.fresh("key"),
                     headers={"X-Tenant": "fail"}),  # error
            self.opt("/options/orders/1", {"item": self.fresh("item")}, self.fresh("key"),
                     method="PATCH"),  # passes through: no outcome
        ]
        after = self.outcome_counts()
        want = {"claimed": 1, "replayed": 1, "mismatch": 1, "unprotected": 1, "too_large": 1,
                "refused": 1, "error": 1}
        got = None
        if isinstance(before, dict) and isinstance(after, dict):
            got = {name: after.get(name, 0) - before.get(name, 0)
                   for name in set(before) | set(after)}
            got = {name: n for name, n in got.items() if n}
        statuses = [a.status for a in answers]
        self.check(got == want and statuses == [201, 201, 422, 201, 413, 400, 500, 201],
                   "on_outcome: each protected request's outcome, once, before its answer; "
                   "none for a request that passes through",
                   f"outcomes {got}, want {want}", f"statuses {statuses}")

    def concurrent(self, path, waits):
        key, item = self.fresh("key"), self.fresh("item")
        start = threading.Barrier(DUPLICATES)
        answers = [None] * DUPLICATES

        def one(n):
            start.wait()
            answers[n] = self.post(path, {"item": item}, key)
        threads = [threading.Thread(target=one, args=(n,)) for n in range(DUPLICATES)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(ANSWER_TIMEOUT + 30)
        firsts = [a for a in answers if a is not None and self.is_first(a)]
        label = f"{DUPLICATES} concurrent duplicates on {path}"
        if not self.check(len(firsts) == 1 and self.orders(item) == 1,
                          f"{label}: one order, one first answer",
                          f"first answers: {len(firsts)}, orders: {self.orders(item)}"):
            return
        others = [a for a in answers if a is not firsts[0]]
        allowed = (lambda a: a is not None and self.is_replay_of(a, firsts[0])) if waits else \
            (lambda a: a is not None and (self.is_replay_of(a, firsts[0])
                                          or self.is_problem(a, 409)))
        wrong = [a for a in others if not allowed(a)]
        self.check(not wrong, f"{label}: every other answer is "
                   + ("the replay" if waits else "the replay or 409"),
                   f"{len(wrong)} others, such as {wrong[:3]}")

    def run(self):
        for case in (self.first_answer_and_replay, self.keys, self.key_bytes, self.another_request,
                     self.json_bodies, self.content_type_bytes, self.in_flight, self.waiting,
                     self.large_responses, self.streamed_response, self.compression, self.failures,
                     self.database_error, self.split_transaction, self.parser_first, self.tenants,
                     self.options_two_phase, self.options_body_limit, self.options_per_route,
                     self.options_moved, self.options_server_errors, self.options_methods,
                     self.options_omitted_body, self.options_header_and_ttl, self.options_outcomes,
                     lambda: self.concurrent("/orders", waits=False),
                     lambda: self.concurrent("/waiting/orders", waits=True)):
            try:
                case()
            except Exception as error:  # a broken case is a failed check, and the rest run
                self.check(False, f"{getattr(case, '__name__', 'case')} ran to its end",
                           f"{type(error).__name__}: {error}")
        print(f"{self.passed} passed, {self.failed} failed", flush=True)
        return self.failed == 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the setup's base URL, http://host:port")
    parser.add_argument("--dsn", default="", help="libpq connection string of its database "
                        "(default: libpq's environment)")
    args = parser.parse_args()
    raise SystemExit(0 if Suite(args.url, args.dsn).run() else 1)


if __name__ == "__main__":
    main()
