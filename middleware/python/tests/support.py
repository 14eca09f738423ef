"""What the suites share: connections from libpq's environment (PGHOST, PGPORT,
PGDATABASE, PGUSER), a fresh orders table, and the checks every framework must pass."""
import json
import threading
import uuid

import psycopg
import psycopg2

from pg_idempotency.core import Options, Request, begin_query, execute

DRIVERS = {"psycopg": lambda: psycopg.connect(""), "psycopg2": lambda: psycopg2.connect("")}


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


class Checks:
    """The behaviour every adapter must show, for a POST /orders route that inserts the
    JSON body's item and answers 201 {"order": id} with a Location header; item "boom"
    raises, item "fail" answers 503.  A subclass sets `post(key, body, headers=None)`
    returning (status, headers as a dict with lower-case names, body bytes), and `scope`."""

    scope = ""  # the default: no tenant hook, one namespace
    route = "/orders"

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
        holder = hold_claim(self.scope, "POST", self.route, "/orders", key, b'{"item": "book"}')
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
