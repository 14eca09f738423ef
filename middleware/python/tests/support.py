"""What the suites share: connections from libpq's environment (PGHOST, PGPORT,
PGDATABASE, PGUSER), a fresh orders table, and the tenant hook that records the
framework's request it gets.  The behaviour every package shares is the conformance
suite's (test/conformance, test/t/056); these suites test each adapter's glue."""
import json
import uuid

import psycopg
import psycopg2

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
    answer."""
    cur.execute("INSERT INTO orders (item) VALUES (%s) RETURNING id", (data["item"],))
    (order_id,) = cur.fetchone()
    return order_id, json.dumps({"order": order_id}).encode()


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


def new_key():
    return str(uuid.uuid4())
