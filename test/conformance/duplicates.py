#!/usr/bin/python3
"""Concurrent duplicates through one running setup, then retries, and every answer checked
against the database (test/conformance/README.md, "Duplicates under a pooler").

For each of --keys fresh keys, --duplicates requests with the same key and body go at once
(--parallel keys at a time); a key that got no 2xx is retried up to --retries times.  Then
the database is read, and an answer is wrong when
  - it is a 2xx whose order is not a committed row of its item (acknowledged, not done),
  - its key has more than one committed row (the work ran twice), or
  - its key got 2xx answers with different bodies (a replay that is not the first answer).
Errors (5xx, 409, no answer) are allowed: they are counted by kind.  Prints one "# ..."
line per wrong answer (up to 20), then one JSON line:
  {"keys", "requests", "answers": {kind: count}, "keys_without_2xx", "wrong"}
where a kind is "first" and "replay" for 2xx answers, else the status and the problem's
title ("500 The request's transaction was split ..."), or "no answer: <why>".  Exits 1 when
an answer was wrong.
"""
import argparse
import collections
import concurrent.futures
import http.client
import json
import time
import urllib.parse
import uuid

import psycopg

ANSWER_TIMEOUT = 120  # seconds an answer may take


def post(host, port, key, item):
    conn = http.client.HTTPConnection(host, port, timeout=ANSWER_TIMEOUT)
    try:
        conn.request("POST", "/orders", json.dumps({"item": item}).encode(),
                     {"Content-Type": "application/json", "Idempotency-Key": key})
        response = conn.getresponse()
        body = response.read()
        return (response.status,
                {name.lower(): value for name, value in response.getheaders()}, body)
    except (OSError, http.client.HTTPException) as error:
        return None, {}, type(error).__name__.encode()
    finally:
        conn.close()


def succeeded(status):
    return status is not None and 200 <= status < 300


def kind(status, headers, body):
    if status is None:
        return f"no answer: {body.decode()}"
    if succeeded(status):
        return "replay" if headers.get("idempotent-replayed") == "true" else "first"
    try:
        title = json.loads(body).get("title", "")
    except (ValueError, AttributeError):
        title = ""
    return f"{status} {title}".strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the setup's base URL, http://host:port")
    parser.add_argument("--dsn", default="", help="libpq connection string of its database, "
                        "read directly (not through the pooler)")
    parser.add_argument("--keys", type=int, default=120)
    parser.add_argument("--duplicates", type=int, default=4)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--retries", type=int, default=3)
    args = parser.parse_args()
    url = urllib.parse.urlsplit(args.url)
    run = uuid.uuid4().hex[:8]
    keys = [(f"pooled-{run}-{n}", f"pooled-item-{run}-{n}") for n in range(args.keys)]

    def one_key(pair):
        key, item = pair
        with concurrent.futures.ThreadPoolExecutor(args.duplicates) as pool:
            answers = list(pool.map(lambda _: post(url.hostname, url.port, key, item),
                                    range(args.duplicates)))
        for _ in range(args.retries):
            if any(succeeded(status) for status, _, _ in answers):
                break
            time.sleep(0.2)
            answers.append(post(url.hostname, url.port, key, item))
        return key, item, answers

    with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
        results = list(pool.map(one_key, keys))

    db = psycopg.connect(args.dsn, autocommit=True)
    kinds = collections.Counter()
    wrong = []
    requests = without = 0
    for key, item, answers in results:
        rows = [row[0] for row in db.execute("SELECT id FROM orders WHERE item = %s", (item,))]
        bodies = set()
        for status, headers, body in answers:
            requests += 1
            kinds[kind(status, headers, body)] += 1
            if not succeeded(status):
                continue
            bodies.add(body)
            try:
                order = json.loads(body)["order"]
            except (ValueError, KeyError, TypeError):
                order = None
            if order not in rows:
                wrong.append(f"{key}: {status} with order {order}, which is not committed "
                             f"(rows of its item: {rows})")
        if len(rows) > 1:
            wrong.append(f"{key}: its work ran {len(rows)} times: {rows}")
        if len(bodies) > 1:
            wrong.append(f"{key}: {len(bodies)} different 2xx bodies")
        without += not bodies
    for line in wrong[:20]:
        print(f"# wrong: {line}", flush=True)
    print(json.dumps({"keys": len(keys), "requests": requests, "answers": dict(kinds),
                      "keys_without_2xx": without, "wrong": len(wrong)}), flush=True)
    raise SystemExit(1 if wrong else 0)


if __name__ == "__main__":
    main()
