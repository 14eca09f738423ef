-- Tables and helpers shared by the benchmark workloads (test/pgbench/run) and
-- the demo (test/demo).  Run once in a fresh database, as a superuser.

CREATE EXTENSION idempotency;

-- The secret of the key digests (idempotency.digest_secret), fixed: it
-- replaces the random one CREATE EXTENSION made.  With it, two runs store the same digests,
-- so that the primary key's page splits -- and the WAL they write -- fall the
-- same way in each (make bench-cost compares runs to the byte).
INSERT INTO idempotency.digest_secret VALUES ('\x000102030405060708090a0b0c0d0e0f');

-- The business table every "new request" writes one row to.  idem_key lets
-- the contention check count business rows per idempotency key; it has no
-- index, so it costs every workload the same.
CREATE TABLE orders (
    id         bigserial PRIMARY KEY,
    idem_key   text NOT NULL,
    item       text NOT NULL,
    qty        integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The hand-written table the usual articles recommend: the plain-SQL baseline.
CREATE TABLE idempotency_keys_plain (
    key             text PRIMARY KEY,
    request_hash    bytea,
    status          text,
    response_status int,
    response_body   jsonb,
    created_at      timestamptz DEFAULT now()
);

-- Keys.  Fresh keys are UUID-shaped text built from two pgbench random
-- numbers (pgbench has no string variables, so a key that several statements
-- of one transaction share has to be rebuilt from numbers in each).  Known
-- keys, the prepopulated ones, and pending keys look random too (md5), so
-- lookups spread over the whole index as real UUIDs would.  Hot keys are the contention
-- workloads' 100 keys, fresh for each run.  All three are SQL functions the
-- planner inlines.
CREATE FUNCTION bench_fresh_key(hi bigint, lo bigint) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN (lpad(to_hex(hi), 16, '0') || lpad(to_hex(lo), 16, '0'))::uuid::text;

CREATE FUNCTION bench_known_key(i integer) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN md5('known-' || i::text)::uuid::text;

CREATE FUNCTION bench_hot_key(run integer, k integer) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN 'hot-' || run::text || '-' || k::text;

-- Keys of requests still in progress: committed claims whose lease runs
-- (make bench-cost's ext_in_progress workload; populated by cost.sql).
CREATE FUNCTION bench_pending_key(i integer) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN md5('pending-' || i::text)::uuid::text;

-- The request every workload sends, and another one for mismatches.  As
-- constants they are hashed once, when the prepared statement is planned, in
-- both the extension's and the plain workloads.
CREATE FUNCTION bench_request() RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 'POST /orders {"item": "book", "qty": 1}';

CREATE FUNCTION bench_other_request() RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 'POST /orders {"item": "car", "qty": 1}';

-- The plain table's fingerprint of bench_request(): SHA-256 of its UTF-8
-- bytes.  convert_to is only STABLE; declared IMMUTABLE here (true in a UTF-8
-- database) so that it too is folded at planning.
CREATE FUNCTION bench_request_digest() RETURNS bytea
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN sha256(convert_to(bench_request(), 'UTF8'));

-- Raises: a script calls it on the branch where its own check failed, so that
-- the transaction fails and the run with it.  VOLATILE, so the planner never
-- evaluates it early.
CREATE FUNCTION bench_fail(what text) RETURNS integer
    LANGUAGE plpgsql VOLATILE
    AS $$
BEGIN
    RAISE EXCEPTION 'benchmark check failed: %', what;
END
$$;

-- The plain-SQL baseline of a new request in one round trip, as the usual
-- articles write it: claim with INSERT ... ON CONFLICT DO NOTHING; when the key
-- exists, lock its row and compare hashes; else do the work and store the
-- response.  Returns created, replay, in_progress or mismatch.
CREATE FUNCTION plain_new_request(p_key text, p_request bytea) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    claimed text;
    existing idempotency_keys_plain;
BEGIN
    INSERT INTO idempotency_keys_plain (key, request_hash, status)
        VALUES (p_key, p_request, 'started')
        ON CONFLICT DO NOTHING
        RETURNING key INTO claimed;
    IF claimed IS NULL THEN
        SELECT * INTO existing FROM idempotency_keys_plain WHERE key = p_key FOR UPDATE;
        IF existing.request_hash <> p_request THEN
            RETURN 'mismatch';
        ELSIF existing.status = 'completed' THEN
            RETURN 'replay';
        END IF;
        RETURN 'in_progress';
    END IF;
    INSERT INTO orders (idem_key, item, qty) VALUES (p_key, 'book', 1);
    UPDATE idempotency_keys_plain
       SET status = 'completed', response_status = 201, response_body = '{"order": "created"}'
     WHERE key = p_key;
    RETURN 'created';
END
$$;

-- The cheapest correct new request a user could write by hand, the floor an
-- idempotency layer is measured against (make bench-cost): the business
-- INSERT and one INSERT of the completed key row, in one transaction, and
-- nothing else -- no claim row to update, no lookup first.  A key that exists
-- fails the second INSERT with unique_violation, which rolls the business row
-- back; the client then has to read the stored answer itself.  minimal_new.sql
-- is the same as one SQL statement.
CREATE FUNCTION minimal_new_request(p_key text, p_request bytea) RETURNS text
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO orders (idem_key, item, qty) VALUES (p_key, 'book', 1);
    INSERT INTO idempotency_keys_plain (key, request_hash, status, response_status, response_body)
        VALUES (p_key, p_request, 'completed', 201, '{"order": "created"}');
    RETURN 'created';
END
$$;

-- The cheapest correct new request that keeps the extension's contract, the
-- fair floor of a new request in one round trip (make bench-cost): the
-- minimum above with the lookup the contract requires first -- a retry gets
-- the stored answer, a mismatch is told, and nothing runs twice -- then the
-- business INSERT and one INSERT of the completed key row.  (Unlike the
-- extension it holds no claim while the work runs: two concurrent first
-- tries both run, and the second fails with unique_violation.)
CREATE FUNCTION contract_new_request(p_key text, p_request bytea) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    existing idempotency_keys_plain;
BEGIN
    SELECT * INTO existing FROM idempotency_keys_plain WHERE key = p_key;
    IF FOUND THEN
        IF existing.request_hash <> p_request THEN
            RETURN 'mismatch';
        ELSIF existing.status = 'completed' THEN
            RETURN 'replay';
        END IF;
        RETURN 'in_progress';
    END IF;
    INSERT INTO orders (idem_key, item, qty) VALUES (p_key, 'book', 1);
    INSERT INTO idempotency_keys_plain (key, request_hash, status, response_status, response_body)
        VALUES (p_key, p_request, 'completed', 201, '{"order": "created"}');
    RETURN 'created';
END
$$;

-- The extension's new request in one round trip: begin, the business INSERT
-- and complete in one function call.  Same contract as plain_new_request.
-- The calls are PL/pgSQL assignments, as the README recommends: PL/pgSQL
-- evaluates them as simple expressions, without starting an executor for
-- each statement.
CREATE FUNCTION ext_new_request(p_key text, p_request request_hash) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    answer idempotency_begin_result;
BEGIN
    answer := idempotency_begin('bench', p_key, p_request);
    IF answer.outcome <> 'claimed' THEN
        RETURN answer.outcome::text;
    END IF;
    INSERT INTO orders (idem_key, item, qty) VALUES (p_key, 'book', 1);
    IF NOT idempotency_complete('bench', p_key, 201, '{"order": "created"}') THEN
        RETURN 'not stored';
    END IF;
    RETURN 'created';
END
$$;

-- Business rows per hot key of one contention run: a key with more than one
-- row ran twice (the failure an idempotency layer exists to prevent); a key
-- completed without a row lost its work.
CREATE FUNCTION bench_contention_report(run integer, ext boolean,
    OUT duplicated_keys bigint, OUT completed_keys bigint, OUT keys_with_rows bigint)
    LANGUAGE sql STABLE
    BEGIN ATOMIC
    WITH rows_per_key AS (
        SELECT idem_key, count(*) AS n
          FROM orders
         WHERE idem_key LIKE 'hot-' || run::text || '-%'
         GROUP BY idem_key),
    completed AS (
        SELECT bench_hot_key(run, k) AS key
          FROM generate_series(1, 100) AS k
         WHERE CASE WHEN ext
                    THEN EXISTS (SELECT FROM idempotency_lookup('bench', bench_hot_key(run, k)) AS l
                                  WHERE l.status = 'completed')
                    ELSE EXISTS (SELECT FROM idempotency_keys_plain AS p
                                  WHERE p.key = bench_hot_key(run, k) AND p.status = 'completed')
               END)
    SELECT (SELECT count(*) FROM rows_per_key WHERE n > 1),
           (SELECT count(*) FROM completed),
           (SELECT count(*) FROM rows_per_key JOIN completed ON completed.key = rows_per_key.idem_key);
    END;
