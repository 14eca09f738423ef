"""What the suites share: connections from libpq's environment (PGHOST, PGPORT,
PGDATABASE, PGUSER), a fresh orders table, and the checks every framework must pass."""
import json
import threading
import uuid

import psycopg
import psycopg2

from pg_idempotency.core import Options, Request, begin_query, execute

DRIVERS = {"psycopg": lambda: psycopg.connect(""), "psycopg2": lambda: psycopg2.connect("")}

# The classes of the requests the tenant hook was given, latest last.
SEEN = []


def tenant(request):
    """The test applications' tenant hook: the X-Tenant header of the framework's request
    ("public" without one); "fail" makes it raise."""
    SEEN.append(type(request))
    value = request.headers.get("X-Tenant") or "public"
    if value == "fail":
        raise RuntimeError("the tenant hook failed")
    return value


def place_order(cur, data):
    """The test handlers' writes, on a blocking cursor: returns the order's id and its JSON
    answer.  "limit" lowers idempotency.max_response_bytes for this transaction (the tests
    run as a superuser), "size" pads the answer."""
    if data.get("limit"):
        cur.execute("SELECT set_config('idempotency.max_response_bytes', %s, true)",
                    (str(data["limit"]),))
    cur.execute("INSERT INTO orders (item) VALUES (%s) RETURNING id", (data["item"],))
    (order_id,) = cur.fetchone()
    document = {"order": order_id}
    if data.get("size"):
        document["pad"] = "x" * data["size"]
    return order_id, json.dumps(document).encode()


def pieces(body):
    """A streamed answer: the body in three pieces."""
    third = len(body) // 3 + 1
    return (body[i:i + third] for i in range(0, len(body), third))


def admin():
    return psycopg.connect("", autocommit=True)


def reset_orders():
    with admin() as conn:
        conn.execute("DROP TABLE IF EXISTS orders")
        conn.execute("CREATE TABLE orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
                     " item text NOT NULL)")


def order_count(item=None):
    with admin() as conn:
        if item is None:
            return conn.execute("SELECT count(*) FROM orders").fetchone()[0]
        return conn.execute("SELECT count(*) FROM orders WHERE item = %s", (item,)).fetchone()[0]


def key_status(scope, key):
    with admin() as conn:
        row = conn.execute("SELECT status FROM idempotency_lookup(%s, %s)", (scope, key)).fetchone()
        return row[0] if row else None


def new_key():
    return str(uuid.uuid4())


def hold_claim(scope, method, route, path, key, body):
    """Another request with the same key, claimed and not committed: the returned
    connection holds it until it rolls back (or commits)."""
    conn = psycopg.connect("")
    request = Request(method=method, route=route, path=path, query="", body=body, key=key,
                      content_type="application/json")
    step = begin_query(scope, request, Options(), None, None)
    outcome = execute(conn, step.sql, step.params).fetchone()[0]
    assert outcome == "claimed", outcome
    return conn


def complete_without_body(scope, route, path, key, body):
    """The record another caller stored without its body (over the limit, with
    omit_oversized): completed, flagged response_body_omitted."""
    holder = hold_claim(scope, "POST", route, path, key, body)
    execute(holder, "SELECT set_config('idempotency.max_response_bytes', '10', true)")
    execute(holder, "SELECT idempotency_complete(%s, %s, 201, response_body_bytes => %s,"
            " omit_oversized => true)", (scope, key, b"x" * 100))
    holder.commit()
    holder.close()


def server_setting_off():
    """Whether idempotency.store_server_errors is off, as the tests below need it."""
    with admin() as conn:
        return conn.execute("SHOW idempotency.store_server_errors").fetchone()[0] == "off"


def check_server_error_stored(test, post):
    """With store_server_errors and the server's setting off, a 503 runs once: stored and
    replayed, never committed without its response.  `post(key, body)` answers (status,
    headers with lower-case names, body) from an application with that option."""
    test.assertTrue(server_setting_off())
    key, body = new_key(), b'{"item": "fail"}'
    first = post(key, body)
    test.assertEqual(first[0], 503)
    test.assertNotIn("idempotent-replayed", first[1])
    again = post(key, body)
    test.assertEqual((again[0], again[2], again[1].get("idempotent-replayed")),
                     (503, first[2], "true"))
    test.assertEqual(order_count("fail"), 1)


class Checks:
    """The behaviour every adapter must show, for a POST /orders route that inserts the
    JSON body's item and answers 201 {"order": id} with a Location header; item "boom"
    raises, item "fail" answers 503.  A subclass sets `post(key, body, headers=None)`
    returning (status, headers as a dict with lower-case names, body bytes), `route` and
    `native_type`; the route has the tenant hook above and reads the body's "limit", "size"
    and "stream" (an answer in three pieces)."""

    scope = "public"  # the tenant hook's answer without X-Tenant
    route = "/orders"
    path = "/orders"
    native_type = None  # the framework's request class, which the hooks get

    def setUp(self):
        reset_orders()

    def test_new_request_then_byte_exact_replay(self):
        key = new_key()
        status, headers, body = self.post(key, b'{"item": "book"}')
        self.assertEqual(status, 201)
        self.assertNotIn("idempotent-replayed", headers)
        again = self.post(key, b'{"item":   "book"}')  # the same JSON, spelled otherwise
        self.assertEqual(again[0], 201)
        self.assertEqual(again[2], body)
        self.assertEqual(again[1]["idempotent-replayed"], "true")
        self.assertEqual(again[1]["location"], headers["location"])
        self.assertEqual(order_count("book"), 1)

    def test_changed_body_is_422(self):
        key = new_key()
        self.assertEqual(self.post(key, b'{"item": "book"}')[0], 201)
        status, headers, body = self.post(key, b'{"item": "pen"}')
        self.assertEqual(status, 422)
        self.assertEqual(headers["content-type"], "application/problem+json")
        self.assertEqual(json.loads(body)["status"], 422)
        self.assertEqual(order_count(), 1)

    def test_missing_key_is_400(self):
        status, _, body = self.post(None, b'{"item": "book"}')
        self.assertEqual(status, 400)
        self.assertIn("Idempotency-Key", json.loads(body)["title"])
        self.assertEqual(order_count(), 0)

    def test_bad_key_is_400(self):
        self.assertEqual(self.post("", b'{"item": "book"}')[0], 400)
        self.assertEqual(self.post("k" * 5000, b'{"item": "book"}')[0], 400)
        self.assertEqual(order_count(), 0)

    def test_in_flight_duplicate_is_409_with_retry_after(self):
        key = new_key()
        holder = hold_claim(self.scope, "POST", self.route, self.path, key, b'{"item": "book"}')
        try:
            status, headers, _ = self.post(key, b'{"item": "book"}')
            self.assertEqual(status, 409)
            self.assertGreaterEqual(int(headers["retry-after"]), 1)
        finally:
            # An explicit ROLLBACK, answered once the server has rolled back:
            # through PgBouncer a mere disconnect is rolled back later, and
            # the next request could still find the claim.
            holder.rollback()
            holder.close()
        self.assertEqual(self.post(key, b'{"item": "book"}')[0], 201)

    def test_server_error_is_not_stored(self):
        key = new_key()
        self.assertEqual(self.post(key, b'{"item": "fail"}')[0], 503)
        self.assertIsNone(key_status(self.scope, key))
        self.assertEqual(self.post(key, b'{"item": "fail"}')[0], 503)  # ran again
        self.assertEqual(order_count(), 0)

    def test_handler_exception_rolls_back(self):
        key = new_key()
        status = self.post_raising(key, b'{"item": "boom"}')
        self.assertEqual(status, 500)
        self.assertIsNone(key_status(self.scope, key))
        self.assertEqual(order_count(), 0)

    def test_concurrent_duplicates_write_one_order(self):
        key, results = new_key(), []

        def client():
            results.append(self.post(key, b'{"item": "once"}')[0])

        threads = [threading.Thread(target=client) for _ in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(order_count("once"), 1)
        self.assertTrue(set(results) <= {201, 409}, results)
        self.assertIn(201, results)

    def is_problem(self, answer, status):
        return (answer[0] == status and answer[1]["content-type"] == "application/problem+json"
                and json.loads(answer[2])["status"] == status)

    def test_tenants_do_not_share_a_key(self):
        key, body = new_key(), b'{"item": "shared"}'
        one = self.post(key, body, {"X-Tenant": "t1"})
        two = self.post(key, body, {"X-Tenant": "t2"})
        self.assertEqual((one[0], two[0]), (201, 201))
        self.assertNotEqual(one[2], two[2])
        self.assertEqual(order_count("shared"), 2)
        again_one = self.post(key, body, {"X-Tenant": "t1"})
        again_two = self.post(key, body, {"X-Tenant": "t2"})
        self.assertEqual((again_one[2], again_one[1]["idempotent-replayed"]), (one[2], "true"))
        self.assertEqual((again_two[2], again_two[1]["idempotent-replayed"]), (two[2], "true"))
        self.assertEqual((key_status("t1", key), key_status("t2", key)), ("completed",) * 2)

    def test_hooks_get_the_frameworks_request(self):
        SEEN.clear()
        self.assertEqual(self.post(new_key(), b'{"item": "book"}')[0], 201)
        self.assertTrue(SEEN and issubclass(SEEN[-1], self.native_type), SEEN)

    def test_failing_hook_answers_500_and_runs_nothing(self):
        answer = self.post(new_key(), b'{"item": "book"}', {"X-Tenant": "fail"})
        self.assertTrue(self.is_problem(answer, 500), answer)
        self.assertEqual(order_count(), 0)

    def test_body_over_the_limit_is_413(self):
        body = json.dumps({"item": "big", "x": "x" * (1024 * 1024)}).encode()
        self.assertTrue(self.is_problem(self.post(new_key(), body), 413))
        self.assertEqual(order_count(), 0)

    def test_record_stored_without_its_body_is_not_replayed_empty(self):
        key, body = new_key(), b'{"item": "book"}'
        complete_without_body(self.scope, self.route, self.path, key, body)
        answer = self.post(key, body)
        self.assertTrue(self.is_problem(answer, 500), answer)
        self.assertIn(b"idempotency.max_response_bytes", answer[2])
        self.assertNotIn("idempotent-replayed", answer[1])

    def test_response_over_the_limit_is_rolled_back(self):
        for stream in (False, True):
            key = new_key()
            body = json.dumps({"item": "large", "size": 5000, "limit": 1000,
                               "stream": stream}).encode()
            for attempt in (1, 2):  # the retry runs again, and is refused again
                answer = self.post(key, body)
                self.assertTrue(self.is_problem(answer, 500), (stream, attempt, answer))
                self.assertIn(b"idempotency.max_response_bytes", answer[2])
            self.assertEqual(order_count("large"), 0)
            self.assertIsNone(key_status(self.scope, key))

    def test_streamed_response_is_stored_and_replayed(self):
        key, body = new_key(), b'{"item": "streamed", "size": 3000, "stream": true}'
        first = self.post(key, body)
        again = self.post(key, body)
        self.assertEqual((first[0], again[0]), (201, 201))
        self.assertGreater(len(first[2]), 3000)
        self.assertEqual(again[2], first[2])
        self.assertEqual(again[1]["idempotent-replayed"], "true")
        self.assertEqual(again[1]["content-length"], str(len(first[2])))
        self.assertEqual(order_count("streamed"), 1)
