#!/usr/bin/python3
"""Cross-edition differential test of request_hash: the extension and the SQL
edition (edition/, doc/sql-edition.md) must give the same digest, or the same
SQLSTATE, for every input.

Random inputs from a seeded generator -- JSON documents with numbers of every
scale and exponent (beyond numeric's range too), strings with escapes and
every plane of Unicode, duplicate and odd keys, nesting; bodies of JSON and
other media types, valid and not, nested around the 128 limit, with NUL,
invalid UTF-8, \\u0000, lone surrogates and the reserved prefix; request parts
with NULL and empty parts; text, varchar, char(n), bytea -- and the hostile
bodies of issue 41: 4,000 numbers 1e131000, nesting of 129, 1,000 and 5,000
levels, the prefix "idempotency.request_hash." -- go through every
constructor on both servers.

Usage: digests.py --extension DSN --edition DSN [--count N] [--seed N]
Prints one summary line; exits 1 on a difference, showing the input.
"""
import argparse
import json
import random
import sys

import psycopg

RESERVED_PREFIX = b'idempotency.request_hash.'


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------

def random_number(rng):
    kind = rng.random()
    if kind < 0.3:
        return str(rng.randint(-10**6, 10**6))
    if kind < 0.5:
        return f'{rng.randint(-10**6, 10**6)}.{rng.randint(0, 10**4):04d}{"0" * rng.randint(0, 3)}'
    if kind < 0.6:
        # around the short form's edges: 64 digits, 64 decimals
        digits = rng.choice([63, 64, 65])
        if rng.random() < 0.5:
            return '9' * digits
        return '0.' + '0' * (digits - 1) + str(rng.randint(1, 9))
    if kind < 0.8:
        return f'{rng.randint(1, 99)}e{rng.choice([-1, 1]) * rng.randint(0, 300)}'
    if kind < 0.95:
        return f'{rng.choice(["", "-"])}{rng.randint(1, 9)}.{rng.randint(0, 999)}e{rng.choice([-1, 1]) * rng.randint(60, 131000)}'
    return f'1e{rng.choice([131072, 200000, -200000])}'  # beyond numeric: 22003


def random_string(rng):
    alphabet = ['a', 'Z', ' ', '"', '\\', '/', '\t', '\n', '\x01', '\x7f', 'é', 'ß', '€', '日', '\U0001F680', '\uffff']
    text = ''.join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
    return json.dumps(text, ensure_ascii=rng.random() < 0.5)


def random_json(rng, depth=0):
    roll = rng.random()
    if depth > 5 or roll < 0.45:
        scalar = rng.random()
        if scalar < 0.4:
            return random_number(rng)
        if scalar < 0.75:
            return random_string(rng)
        return rng.choice(['true', 'false', 'null'])
    items = [random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if roll < 0.7:
        return '[' + ', '.join(items) + ']'
    keys = [random_string(rng) for _ in items]
    if keys and rng.random() < 0.2:
        keys.append(keys[0])  # a duplicate key: the last wins
        items.append(random_json(rng, depth + 1))
    return '{' + ','.join(f'{k}: {v}' for k, v in zip(keys, items)) + '}'


def nested(depth, leaf='1'):
    return '[' * depth + leaf + ']' * depth


def hostile_bodies():
    return [
        ('application/json', ('[' + ','.join(['1e131000'] * 4000) + ']').encode()),
        ('application/json', nested(128).encode()),
        ('application/json', nested(129).encode()),
        ('application/json', nested(1000).encode()),
        ('application/json', nested(5000).encode()),
        ('application/json', ('{"a":' * 200 + '1' + '}' * 200).encode()),
        ('application/json', b'idempotency.request_hash.jsonb.v1\x00[1]'),
        ('text/plain', b'idempotency.request_hash.'),
        ('text/plain', b'idempotency.request_hash.bytes\x00abc'),
        ('application/octet-stream', b'idempotency.request_hash.jsonb.v1\x00R'),
        ('application/json', b'"\\u0000"'),
        ('application/json', b'["\\ud83d"]'),
        ('application/json', b'{"a": 1}\x00'),
        ('application/json', b'\xff\xfe{}'),
        ('application/json', b'[1e999999, "\\u0000"]'),
        ('application/json', b'[1e999999'),
        ('application/json', b'[1e999999]'),
        ('application/json', b''),
        ('Application/Problem+JSON ; charset=utf-8', b'{"b": [1.0, 2.50e2]}'),
        ('application/+json', b'[1]'),
        ('text/json', b'[1]'),
    ]


def random_body(rng):
    roll = rng.random()
    content_type = rng.choice(['application/json', 'APPLICATION/JSON; charset=utf-8', 'application/vnd.api+json',
                               'text/plain', '', 'application/x-www-form-urlencoded', ' application/json '])
    if roll < 0.6:
        text = random_json(rng)
        if rng.random() < 0.3:
            text = ' \n' + text.replace(', ', ',\n  ') + '\t'
        return content_type, text.encode()
    if roll < 0.75:
        return content_type, random_json(rng).encode()[:-1]  # cut short: invalid
    if roll < 0.85:
        return content_type, nested(rng.randint(125, 132)).encode()
    if roll < 0.92:
        return content_type, RESERVED_PREFIX + bytes(rng.randrange(256) for _ in range(rng.randint(0, 8)))
    return content_type, bytes(rng.randrange(256) for _ in range(rng.randint(0, 20)))


# ---------------------------------------------------------------------------
# Both servers
# ---------------------------------------------------------------------------

QUERIES = {
    'jsonb': 'SELECT request_hash(%s::jsonb)::text',
    'jsonb_text': 'SELECT request_hash_jsonb(%s::text)::text',
    'body': 'SELECT request_hash_body(%s::text, %s::bytea)::text',
    'parts': 'SELECT request_hash_parts(VARIADIC %s::text[])::text',
    'text': 'SELECT request_hash(%s::text)::text',
    'varchar': 'SELECT request_hash(%s::varchar)::text',
    'char': 'SELECT request_hash(%s::char(12))::text',
    'bytea': 'SELECT request_hash(%s::bytea)::text',
}


def digest(conn, kind, args):
    try:
        return conn.execute(QUERIES[kind], args).fetchone()[0]
    except psycopg.Error as error:
        conn.rollback()
        return 'error ' + (error.sqlstate or '?')


def inputs(rng, count):
    for body in hostile_bodies():
        yield 'body', body
    yield 'jsonb', ('[' + ','.join(['1e131000'] * 4000) + ']',)
    yield 'jsonb', (nested(5000),)
    for _ in range(count):
        roll = rng.random()
        if roll < 0.35:
            document = random_json(rng)
            yield rng.choice(['jsonb', 'jsonb_text']), (document,)
        elif roll < 0.75:
            yield 'body', random_body(rng)
        elif roll < 0.85:
            parts = [rng.choice([None, '', 'POST', '/orders', 'é', 'a\\b', random_json(rng)])
                     for _ in range(rng.randint(0, 5))]
            yield 'parts', (parts,)
        else:
            text = json.loads(random_string(rng)).replace('\x00', '')
            kind = rng.choice(['text', 'varchar', 'char', 'bytea'])
            yield kind, (text.encode() if kind == 'bytea' else text,)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--extension', required=True)
    parser.add_argument('--edition', required=True)
    parser.add_argument('--count', type=int, default=2000)
    parser.add_argument('--seed', type=int, default=1)
    args = parser.parse_args()
    sys.setrecursionlimit(20000)
    rng = random.Random(args.seed)
    extension = psycopg.connect(args.extension)
    edition = psycopg.connect(args.edition)
    compared = errors = 0
    for kind, values in inputs(rng, args.count):
        theirs = digest(extension, kind, values)
        ours = digest(edition, kind, values)
        if theirs != ours:
            shown = repr(values)
            print(f'{kind} {shown[:300]}{"..." if len(shown) > 300 else ""}: '
                  f'the extension gives {theirs}, the SQL edition {ours}')
            return 1
        compared += 1
        errors += ours.startswith('error')
    print(f'{compared} inputs gave the same digest ({errors} the same error) in both editions')
    return 0


if __name__ == '__main__':
    sys.exit(main())
