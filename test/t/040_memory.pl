# Backend memory stays flat over a million calls (issue 4).
#
# One backend makes 1,000,000 calls of the extension's SQL functions: every
# outcome of idempotency_begin (claimed on a new key, on its own claim and by
# takeover; replay; mismatch; in_progress from a running lease and from an
# uncommitted holder, with and without a wait), complete (stored, a dropped
# server error), checkpoint, release, lookup, stats and expire (deleting),
# every request_hash constructor, its text and binary I/O, casts and
# comparisons, and error paths: invalid arguments, IK001 to IK003, lock
# timeouts, C++ exceptions caught at the error boundary
# (idempotency.inject_fault), each in a PL/pgSQL exception block, that is a
# subtransaction.  Each iteration of about 80 calls checks every answer.
#
# A PL/pgSQL procedure commits about every thousand calls, about a thousand
# transactions in all; the last 100,000 calls run in one long transaction.
# The backend samples itself: the sum of its memory contexts
# (pg_backend_memory_contexts, total and used bytes), which shows palloc into
# a context that outlives the call, and its RssAnon from /proc/self/status,
# which also shows malloc and C++ new that are never freed (exceptions,
# libstdc++, OpenSSL).  Checked: from the end of a 300,000-call warm-up to
# the end of the transactions (600,000 calls) the contexts and RssAnon, and
# within the long transaction the contexts.
#
# Limits.  The smallest leak is one palloc chunk (24 bytes with its header)
# or one malloc chunk (32 bytes).  Every function but the once-per-batch
# ones runs in every iteration, so such a leak in any one of them adds at
# least 24 bytes per 70 calls: 200 kB over the 600,000 measured calls (the
# limits: 64 kB of contexts, 128 kB of RssAnon), 34 kB over the long
# transaction (limit 16 kB).  A leak-free run on a 2-core machine, the same
# figures run after run: contexts -14 kB total and -17 kB used, RssAnon
# +24 kB, and in the long transaction the contexts +0 kB total and -7 kB used;
# one palloc(1) or malloc(1) per idempotency_release call added 197 kB of
# contexts or 254 kB of RssAnon, and one in TopTransactionContext 28 kB to
# the long transaction (each failed the test).  RssAnon keeps rising for the
# first ~300,000 calls (about 700 kB; glibc's in-use bytes, read with gdb,
# grow no more than the contexts): the heap settling, hence the warm-up.
# RssAnon is not checked in the long transaction: malloc does not end with a
# transaction, and PostgreSQL's own per-transaction arrays (see
# memory_grow_transaction_arrays) grow there.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

# A little over a million: the functions called once every tenth round (about
# 102 calls) are called a thousand times too.
my $total_calls = 1_050_000;
my $warmup_calls = 300_000;
my $sample_every = 100_000;
my $long_transaction_calls = 100_000;
my $iterations_per_commit = 15;    # about a thousand calls per transaction

# Growth allowed between samples, in bytes (see "Limits" above).
my %limit = (
	session_contexts => 64 * 1024,
	session_rss => 128 * 1024,
	transaction_contexts => 16 * 1024,);

my $node = new_node(
	'memory',
	conf => [
		# An uncommitted claim held by a prepared transaction, so that the
		# one measured backend also meets a key held by another transaction.
		'max_prepared_transactions = 2',
		# Only the measured backend deletes keys.
		'idempotency.worker_enabled = off',
		# Call counts per function, to show what the run covered.
		'track_functions = all',
		# No run depends on when autovacuum happens to analyze a table (the
		# planner's first look at statistics adds to the caches once);
		# memory_batch sends the storage's invalidations itself.
		'autovacuum = off',
	]);
my $db = 'postgres';
my $dir = $node->data_dir;

sub query { return $node->safe_psql($db, shift); }

query(<<'SQL');
SET track_functions = none;
CREATE EXTENSION idempotency;

CREATE TABLE memory_samples (
    label text PRIMARY KEY,
    pid integer NOT NULL,
    calls bigint NOT NULL,
    context_bytes bigint NOT NULL,
    context_used_bytes bigint NOT NULL,
    rss_anon_bytes bigint NOT NULL,
    vm_data_bytes bigint NOT NULL,
    contexts jsonb NOT NULL,
    contexts_used jsonb NOT NULL);
CREATE TABLE hash_copies (h request_hash);
CREATE TABLE combo_fill (x integer);
CREATE ROLE memory_reader;

-- The calling backend's memory: its contexts, and what the kernel says.
CREATE FUNCTION memory_sample(label text, calls bigint) RETURNS void LANGUAGE sql AS $$
    WITH contexts AS MATERIALIZED (
        SELECT name, sum(total_bytes) AS bytes, sum(used_bytes) AS used
          FROM pg_backend_memory_contexts GROUP BY name),
    status AS (SELECT pg_read_file('/proc/self/status') AS text)
    INSERT INTO memory_samples
    SELECT label, pg_backend_pid(), calls,
           (SELECT sum(bytes) FROM contexts),
           (SELECT sum(used) FROM contexts),
           substring(text FROM 'RssAnon:\s+(\d+) kB')::bigint * 1024,
           substring(text FROM 'VmData:\s+(\d+) kB')::bigint * 1024,
           (SELECT jsonb_object_agg(name, bytes) FROM contexts),
           (SELECT jsonb_object_agg(name, used) FROM contexts)
      FROM status
$$;

-- One call site for every sample, so that no sample is the first to
-- compile the statement that takes it.
CREATE FUNCTION memory_take_sample(label text, calls bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM memory_sample(label, calls);
END
$$;

-- Completed keys to replay, and a claim whose lease runs all day.
SELECT count(*) FROM generate_series(0, 99) AS g,
  LATERAL idempotency_begin('mem', 'fixed-' || g, request_hash(('fixed ' || g)::text)) AS b,
  LATERAL idempotency_complete('mem', 'fixed-' || g, 200, '{"fixed": true}') AS c;
SELECT idempotency_begin('mem', 'leased-forever', request_hash('leased'::text), lease => '1 day');

-- One iteration: about 80 calls, each outcome checked.  leased_key is a
-- committed claim whose lease runs; lapsed_key one whose lease was released.
-- Returns the number of calls made.
CREATE FUNCTION memory_iteration(i integer, leased_key text, lapsed_key text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    calls integer := 0;
    a text := 'a' || i;
    b text := 'b' || i;
    s text := 's' || i;
    e text := 'e' || i;
    f text := 'f' || i;
    fixed text := 'fixed-' || (i % 100);
    doc jsonb := jsonb_build_object('item', 'café', 'qty', i, 'price', 12.50,
                                    'tags', jsonb_build_array('a', i, true, NULL));
    body jsonb := jsonb_build_object('order', i);
    -- Bodies for each path of the fingerprint: numbers in their binary form,
    -- whose encoding (5.7 kB) outgrows the digest's buffer and goes through
    -- a libcrypto context; a JSON body too deep for the JSON rule; a body
    -- with the reserved prefix.
    numbers_text text := '[' || repeat('1e131000,', 299) || (i % 7) || 'e131000]';
    numbers_body bytea := convert_to(numbers_text, 'UTF8');
    numbers_doc jsonb := numbers_text::jsonb;
    deep_body bytea := convert_to(repeat('[', 129) || i || repeat(']', 129), 'UTF8');
    prefixed_body bytea := convert_to('idempotency.request_hash.' || i, 'UTF8');
    -- Arguments in variables: the planner would fold a call of an immutable
    -- function with constant arguments, and run it once instead of each time.
    held_request text := 'held';
    short_digest bytea := '\x0102';
    matrix text[] := ARRAY[['a', 'b'], ['c', 'd']];
    h request_hash;
    other request_hash;
    bytes_hash request_hash;
    parts request_hash;
    r record;
    status text;
BEGIN
    -- Every tenth body is large enough to be stored out of line.
    IF i % 10 = 0 THEN
        body := jsonb_build_object('order', i, 'pad',
            (SELECT string_agg(md5(g::text), '') FROM generate_series(i, i + 200) AS g));
    END IF;

    -- request_hash: the constructors, text I/O, digest casts, comparisons (17 calls).
    h := request_hash(doc);
    other := request_hash(('other ' || i)::text);
    bytes_hash := request_hash(convert_to(a, 'UTF8'));
    parts := request_hash('POST', '/orders', a);
    IF h::text::request_hash <> h THEN RAISE EXCEPTION 'text round trip'; END IF;
    -- (IS NOT TRUE: the planner would turn NOT (x = y) into x <> y.)
    IF (request_hash_from_digest(request_hash_digest(bytes_hash)) = bytes_hash) IS NOT TRUE THEN
        RAISE EXCEPTION 'digest round trip';
    END IF;
    IF (h < other) = (h >= other) OR (h > other) = (h <= other) THEN
        RAISE EXCEPTION 'order';
    END IF;
    IF request_hash_cmp(h, other) = 0 THEN RAISE EXCEPTION 'cmp'; END IF;
    IF request_hash_hash(parts) IS NULL OR request_hash_hash_extended(parts, i) IS NULL THEN
        RAISE EXCEPTION 'hash';
    END IF;
    calls := calls + 17;

    -- The named constructors, what JDBC sends (varchar, bpchar), a body by
    -- the middleware's rule (a JSON one, and one that does not parse), and the
    -- key check (10 calls, 9 comparisons).
    IF (request_hash_jsonb(doc) = h AND request_hash_text(('other ' || i)::text) = other
        AND request_hash(('other ' || i)::varchar) = other
        AND request_hash(('other ' || i)::bpchar) = other
        AND request_hash_jsonb(doc::text) = h
        AND request_hash_bytea(convert_to(a, 'UTF8')) = bytes_hash
        AND request_hash_parts('POST', '/orders', a) = parts
        AND request_hash_body('application/json', convert_to(doc::text, 'UTF8')) = h
        AND request_hash_body('application/json', convert_to(a, 'UTF8')) = bytes_hash
        AND idempotency_key_problem('mem', a) IS NULL
        AND idempotency.key_digest('-', 'mem', a) IS NOT NULL) IS NOT TRUE THEN
        RAISE EXCEPTION 'named constructors';
    END IF;
    calls := calls + 20;
    -- The fingerprint's paths (6 calls).
    IF (request_hash_body('application/json', numbers_body) = request_hash(numbers_doc)
        AND request_hash_body('application/json', deep_body) = request_hash(deep_body)
        AND request_hash_body('text/plain', prefixed_body) <> request_hash(prefixed_body))
       IS NOT TRUE THEN
        RAISE EXCEPTION 'fingerprint paths';
    END IF;
    calls := calls + 6;
    -- An untyped literal is a constant, folded when a statement is planned:
    -- plan one every eighth iteration (often enough for a thousand calls).
    IF i % 8 = 0 THEN
        EXECUTE 'SELECT request_hash(''ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad'')'
           INTO other;
        calls := calls + 1;
    END IF;
    -- The scope summary reads the whole table (SPI): every eighth iteration.
    IF i % 8 = 4 THEN
        IF idempotency_scope_stats_refresh() < 1 THEN RAISE EXCEPTION 'scope summary'; END IF;
        PERFORM FROM idempotency_scope_stats();
        calls := calls + 2;
    END IF;

    -- A request in one transaction: claim, re-enter, complete, replay,
    -- mismatch; replay and mismatch of a committed key; lookups (11 calls).
    r := idempotency_begin('mem', a, h);
    IF r.outcome <> 'claimed' OR r.attempt <> 1 THEN
        RAISE EXCEPTION 'new key: %', r.outcome;
    END IF;
    r := idempotency_begin('mem', a, h);
    IF r.outcome <> 'claimed' THEN RAISE EXCEPTION 'own claim: %', r.outcome; END IF;
    IF NOT idempotency_complete('mem', a, 201, body, '{"Location": "/orders/1"}') THEN
        RAISE EXCEPTION 'complete';
    END IF;
    r := idempotency_begin('mem', a, h);
    IF r.outcome <> 'replay' OR r.response_status <> 201 THEN
        RAISE EXCEPTION 'replay: %', r.outcome;
    END IF;
    r := idempotency_begin('mem', a, other);
    IF r.outcome <> 'mismatch' THEN RAISE EXCEPTION 'mismatch: %', r.outcome; END IF;
    r := idempotency_begin('mem', fixed, request_hash(('fixed ' || (i % 100))::text));
    IF r.outcome <> 'replay' THEN RAISE EXCEPTION 'committed replay: %', r.outcome; END IF;
    r := idempotency_begin('mem', fixed, other);
    IF r.outcome <> 'mismatch' THEN RAISE EXCEPTION 'committed mismatch: %', r.outcome; END IF;
    SELECT l.status INTO status FROM idempotency_lookup('mem', a) AS l;
    IF status IS DISTINCT FROM 'completed' THEN RAISE EXCEPTION 'lookup: %', status; END IF;
    SELECT l.status INTO status FROM idempotency_lookup('mem', fixed) AS l;
    IF status IS DISTINCT FROM 'completed' THEN RAISE EXCEPTION 'lookup fixed: %', status; END IF;
    PERFORM FROM idempotency_lookup('mem', 'missing-' || i);
    IF FOUND THEN RAISE EXCEPTION 'lookup missing'; END IF;
    calls := calls + 11;

    -- Two-phase: claim with a lease and checkpoint (4 calls) ...
    parts := request_hash('POST', '/payments', b);
    r := idempotency_begin('mem', b, parts, lease => '1 hour');
    IF r.outcome <> 'claimed' THEN RAISE EXCEPTION 'lease claim: %', r.outcome; END IF;
    IF idempotency_checkpoint('mem', b, 'charge-' || b, attempt => 1) IS NULL THEN
        RAISE EXCEPTION 'checkpoint';
    END IF;
    IF idempotency_checkpoint('mem', b, NULL, lease => '2 hours') IS NULL THEN
        RAISE EXCEPTION 'heartbeat';
    END IF;
    calls := calls + 4;
    -- The store's operations: claim data, the newest state, a response
    -- replaced on purpose, two pages of the scope, forget (7 calls).
    r := idempotency_begin('mem', f, h, claim_data => doc);
    IF r.outcome <> 'claimed' OR r.claim_data IS DISTINCT FROM doc THEN
        RAISE EXCEPTION 'claim data: %', r.outcome;
    END IF;
    SELECT l.status INTO status FROM idempotency_lookup('mem', f, latest => true) AS l;
    IF status IS DISTINCT FROM 'in_progress' THEN RAISE EXCEPTION 'latest: %', status; END IF;
    IF NOT idempotency_complete('mem', f, 200, body) THEN RAISE EXCEPTION 'complete f'; END IF;
    IF NOT idempotency_complete('mem', f, 201, body, attempt => 1, replace => true) THEN
        RAISE EXCEPTION 'replace';
    END IF;
    -- (In digest order, e may be among the scope's last keys.)
    IF (SELECT count(*) FROM idempotency_keys('mem', after_key => e, max_keys => 2)) > 2
       OR (SELECT count(*) FROM idempotency_keys('mem', max_keys => 2)) <> 2 THEN
        RAISE EXCEPTION 'keys page';
    END IF;
    IF NOT idempotency_forget('mem', f) THEN RAISE EXCEPTION 'forget'; END IF;
    calls := calls + 7;
    -- ... a committed claim whose lease runs: in_progress, then release (4 calls) ...
    IF leased_key IS NOT NULL THEN
        parts := request_hash('POST', '/payments', leased_key);
        r := idempotency_begin('mem', leased_key, parts);
        IF r.outcome <> 'in_progress' OR r.retry_after <= interval '0' THEN
            RAISE EXCEPTION 'leased: %', r.outcome;
        END IF;
        SELECT l.status INTO status FROM idempotency_lookup('mem', leased_key) AS l;
        IF status IS DISTINCT FROM 'in_progress' THEN
            RAISE EXCEPTION 'lookup leased: %', status;
        END IF;
        PERFORM idempotency_release('mem', leased_key, 1);
        calls := calls + 4;
    END IF;
    -- ... a released one: takeover, a stale attempt, a dropped server error,
    -- the response, its replay (6 calls).
    IF lapsed_key IS NOT NULL THEN
        parts := request_hash('POST', '/payments', lapsed_key);
        r := idempotency_begin('mem', lapsed_key, parts);
        IF r.outcome <> 'claimed' OR r.attempt <> 2
           OR r.recovery_point IS DISTINCT FROM 'charge-' || lapsed_key THEN
            RAISE EXCEPTION 'takeover: % %', r.outcome, r.attempt;
        END IF;
        BEGIN
            PERFORM idempotency_complete('mem', lapsed_key, 200, attempt => 1);
            RAISE EXCEPTION 'stale attempt accepted';
        EXCEPTION WHEN SQLSTATE 'IK003' THEN NULL;
        END;
        IF idempotency_complete('mem', lapsed_key, 503, attempt => 2) THEN
            RAISE EXCEPTION 'server error stored';
        END IF;
        IF NOT idempotency_complete('mem', lapsed_key, 201, body, attempt => 2) THEN
            RAISE EXCEPTION 'complete after takeover';
        END IF;
        r := idempotency_begin('mem', lapsed_key, parts);
        IF r.outcome <> 'replay' THEN RAISE EXCEPTION 'replay after takeover: %', r.outcome; END IF;
        calls := calls + 6;
    END IF;

    -- A key that expires in a second, expiry, statistics, and the key that
    -- the prepared transaction holds (8 calls).
    r := idempotency_begin('mem', e, h, ttl => '1 second');
    IF r.outcome <> 'claimed' THEN RAISE EXCEPTION 'short claim: %', r.outcome; END IF;
    IF NOT idempotency_complete('mem', e, 204) THEN RAISE EXCEPTION 'short complete'; END IF;
    IF idempotency_expire(0) <> 0 THEN RAISE EXCEPTION 'expire(0)'; END IF;
    IF (idempotency_stats()).claims IS NULL THEN RAISE EXCEPTION 'stats'; END IF;
    r := idempotency_begin('mem', 'held', request_hash(held_request));
    IF r.outcome <> 'in_progress' THEN RAISE EXCEPTION 'held: %', r.outcome; END IF;
    r := idempotency_begin('mem', 'held', other);
    IF r.outcome <> 'mismatch' THEN RAISE EXCEPTION 'held mismatch: %', r.outcome; END IF;
    PERFORM FROM idempotency_lookup('mem', 'held');
    IF FOUND THEN RAISE EXCEPTION 'uncommitted claim visible'; END IF;
    calls := calls + 8;

    -- Errors, each caught in a subtransaction (15 calls).
    BEGIN
        PERFORM idempotency_begin('mem', '', h);
        RAISE EXCEPTION 'empty key accepted';
    EXCEPTION WHEN SQLSTATE 'IK006' THEN NULL;
    END;
    BEGIN
        PERFORM idempotency_begin(NULL, a, h);
        RAISE EXCEPTION 'null scope accepted';
    EXCEPTION WHEN SQLSTATE '22004' THEN NULL;
    END;
    BEGIN
        PERFORM idempotency_begin('mem', repeat('k', 1100), h);
        RAISE EXCEPTION 'long key accepted';
    EXCEPTION WHEN SQLSTATE 'IK006' THEN NULL;
    END;
    BEGIN
        PERFORM idempotency_begin('mem', a, h, ttl => '0 seconds');
        RAISE EXCEPTION 'zero ttl accepted';
    EXCEPTION WHEN SQLSTATE '22023' THEN NULL;
    END;
    BEGIN
        PERFORM idempotency_complete('mem', 'never-' || i, 200);
        RAISE EXCEPTION 'unclaimed key completed';
    EXCEPTION WHEN SQLSTATE 'IK001' THEN NULL;
    END;
    BEGIN
        PERFORM idempotency_complete('mem', fixed, 200);
        RAISE EXCEPTION 'completed key completed again';
    EXCEPTION WHEN SQLSTATE 'IK002' THEN NULL;
    END;
    BEGIN
        PERFORM idempotency_complete('mem', a, 600);
        RAISE EXCEPTION 'status 600 accepted';
    EXCEPTION WHEN SQLSTATE '22023' THEN NULL;
    END;
    BEGIN
        PERFORM set_config('idempotency.max_response_bytes', '64', true);
        PERFORM idempotency_checkpoint('mem', b, repeat('r', 100));
        RAISE EXCEPTION 'large recovery point accepted';
    EXCEPTION WHEN SQLSTATE '54000' THEN NULL;
    END;
    BEGIN
        h := ('zz' || i)::request_hash;
        RAISE EXCEPTION 'bad hex accepted';
    EXCEPTION WHEN SQLSTATE '22P02' THEN NULL;
    END;
    BEGIN
        h := request_hash_from_digest(short_digest);
        RAISE EXCEPTION 'short digest accepted';
    EXCEPTION WHEN SQLSTATE '22P02' THEN NULL;
    END;
    BEGIN
        h := request_hash(VARIADIC matrix);
        RAISE EXCEPTION 'matrix accepted';
    EXCEPTION WHEN SQLSTATE '22023' THEN NULL;
    END;
    BEGIN
        PERFORM set_config('idempotency.inject_fault', 'exception', true);
        h := request_hash(a::text);
        RAISE EXCEPTION 'no injected exception';
    EXCEPTION WHEN SQLSTATE 'IK000' THEN NULL;
    END;
    BEGIN
        PERFORM set_config('idempotency.inject_fault', 'out_of_memory', true);
        PERFORM idempotency_begin('mem', a, h);
        RAISE EXCEPTION 'no injected bad_alloc';
    EXCEPTION WHEN SQLSTATE '53200' THEN NULL;
    END;
    BEGIN
        PERFORM idempotency_expire(-1);
        RAISE EXCEPTION 'negative max_rows accepted';
    EXCEPTION WHEN SQLSTATE '22023' THEN NULL;
    END;
    BEGIN
        PERFORM set_config('transaction_read_only', 'on', true);
        PERFORM idempotency_begin('mem', 'ro-' || i, h);
        RAISE EXCEPTION 'claim in a read-only transaction';
    EXCEPTION WHEN SQLSTATE '25006' THEN NULL;
    END;
    calls := calls + 15;

    -- A claim and response undone by a savepoint rollback, claimed again,
    -- and completed in a subtransaction that commits (4 calls).
    BEGIN
        r := idempotency_begin('mem', s, h);
        IF r.outcome <> 'claimed' THEN RAISE EXCEPTION 'savepoint claim: %', r.outcome; END IF;
        PERFORM idempotency_complete('mem', s, 200);
        RAISE SQLSTATE 'MEM01';
    EXCEPTION WHEN SQLSTATE 'MEM01' THEN NULL;
    END;
    r := idempotency_begin('mem', s, h);
    IF r.outcome <> 'claimed' OR r.attempt <> 1 THEN
        RAISE EXCEPTION 'claim after savepoint rollback: %', r.outcome;
    END IF;
    BEGIN
        PERFORM idempotency_complete('mem', s, 200);
    EXCEPTION WHEN SQLSTATE 'MEM01' THEN NULL;
    END;
    calls := calls + 4;
    RETURN calls;
END
$$;

-- Once per transaction: binary I/O through COPY, expiry of the short keys,
-- waits that end in lock timeouts (39 calls), and with invalidate a relcache
-- invalidation of the storage, as DDL or ANALYZE send, after which the
-- extension looks its tables up again.  (Not in the long transaction, which
-- would keep every invalidation message until it commits.)
CREATE FUNCTION memory_batch(dir text, invalidate boolean) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n bigint;
    held_request text := 'held';
    leased_request text := 'leased';
BEGIN
    EXECUTE format('COPY (SELECT request_hash(g::text) FROM generate_series(1, 10) AS g) '
                   'TO %L (FORMAT binary)', dir || '/memory_hashes.bin');
    DELETE FROM hash_copies;
    EXECUTE format('COPY hash_copies FROM %L (FORMAT binary)', dir || '/memory_hashes.bin');
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n <> 10 THEN RAISE EXCEPTION 'binary copy: % rows', n; END IF;
    BEGIN
        EXECUTE format('COPY hash_copies FROM %L (FORMAT binary)', dir || '/memory_bad_hash.bin');
        RAISE EXCEPTION 'short binary hash accepted';
    EXCEPTION WHEN SQLSTATE '22P03' THEN NULL;
    END;
    IF invalidate THEN
        GRANT SELECT ON idempotency.keys TO memory_reader;
        REVOKE SELECT ON idempotency.keys FROM memory_reader;
    END IF;
    PERFORM idempotency_expire(NULL);
    r := idempotency_begin('mem', 'held', request_hash(held_request), wait => '1 ms');
    IF r.outcome <> 'in_progress' THEN RAISE EXCEPTION 'held wait: %', r.outcome; END IF;
    r := idempotency_begin('mem', 'leased-forever', request_hash(leased_request), wait => '1 ms');
    IF r.outcome <> 'in_progress' THEN RAISE EXCEPTION 'leased wait: %', r.outcome; END IF;
    BEGIN
        PERFORM set_config('lock_timeout', '1ms', true);
        PERFORM idempotency_complete('mem', 'held', 200);
        RAISE EXCEPTION 'complete of a held key did not time out';
    EXCEPTION WHEN SQLSTATE '55P03' THEN NULL;
    END;
    BEGIN
        PERFORM set_config('lock_timeout', '1ms', true);
        PERFORM idempotency_checkpoint('mem', 'held', 'x');
        RAISE EXCEPTION 'checkpoint of a held key did not time out';
    EXCEPTION WHEN SQLSTATE '55P03' THEN NULL;
    END;
    BEGIN
        PERFORM set_config('lock_timeout', '1ms', true);
        PERFORM idempotency_release('mem', 'held');
        RAISE EXCEPTION 'release of a held key did not time out';
    EXCEPTION WHEN SQLSTATE '55P03' THEN NULL;
    END;
    RETURN 39;
END
$$;

-- Committed claims for the long transaction, which commits nothing in
-- between: pool-leased-k with a running lease, pool-lapsed-k released.
CREATE FUNCTION memory_pools(size integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    leased text;
    lapsed text;
BEGIN
    FOR k IN 1 .. size LOOP
        leased := 'pool-leased-' || k;
        lapsed := 'pool-lapsed-' || k;
        PERFORM idempotency_begin('mem', leased, request_hash('POST', '/payments', leased),
                                  lease => '1 hour');
        PERFORM idempotency_begin('mem', lapsed, request_hash('POST', '/payments', lapsed));
        PERFORM idempotency_checkpoint('mem', lapsed, 'charge-' || lapsed, attempt => 1);
        PERFORM idempotency_release('mem', lapsed, 1);
    END LOOP;
    RETURN 6 * size;
END
$$;

-- PostgreSQL itself keeps, for the rest of a transaction, a combo command id
-- for each row the transaction inserts and then updates or deletes in a
-- later command, and the id of each subtransaction that commits with an
-- xid (combocid.c, xact.c), in arrays that double as they fill.  Both grow
-- with every request of the long transaction (about 7 combo ids and five
-- subtransactions per iteration: one of the test's exception blocks, and one
-- for each fresh claim beyond the transaction's 64 slots of the claims table,
-- which is written in a subtransaction -- claims.hpp, rule F).  Making them
-- large first leaves nothing but the extension's own memory to grow in the
-- long transaction: 51,300 combo ids give an array of 102,400, 16,500
-- subtransactions one of 33,000.
CREATE FUNCTION memory_grow_transaction_arrays() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    FOR k IN 1 .. 16500 LOOP
        BEGIN
            INSERT INTO combo_fill VALUES (k);
        EXCEPTION WHEN SQLSTATE 'MEM01' THEN NULL;
        END;
    END LOOP;
    FOR k IN 16501 .. 51300 LOOP
        INSERT INTO combo_fill VALUES (k);
    END LOOP;
    DELETE FROM combo_fill;
END
$$;

-- PostgreSQL 15 keeps 24 bytes in a PL/pgSQL procedure's SPI context for
-- each COMMIT of a transaction that wrote, until the procedure returns (a
-- plain INSERT does the same, without the extension).  Committing in a
-- nested procedure keeps that out of the measurement.
CREATE PROCEDURE memory_commit() LANGUAGE plpgsql AS $$
BEGIN
    COMMIT;
END
$$;

-- The whole run, in the calling backend.  The key claimed as b<i> is the
-- leased key of iteration i + batch and the lapsed key of i + 2 * batch,
-- one and two transactions later.
CREATE PROCEDURE memory_churn(warmup_calls bigint, sample_every bigint, total_calls bigint,
                              long_transaction_calls bigint, batch integer, dir text)
LANGUAGE plpgsql AS $$
DECLARE
    calls bigint := 0;
    i integer := 0;
    next_sample bigint := sample_every;
    done boolean;
    -- An iteration makes more than 30 calls: enough pool keys.
    pool integer := long_transaction_calls / 30 + 1;
BEGIN
    -- First, so that its first-time costs fall into the warm-up.
    calls := calls + memory_pools(pool);
    CALL memory_commit();

    -- The warm-up and the measured transactions: a COMMIT after each batch;
    -- a sample after the first batch, every sample_every calls and at the end.
    LOOP
        FOR n IN 1 .. batch LOOP
            i := i + 1;
            calls := calls + memory_iteration(i,
                CASE WHEN i > batch THEN 'b' || (i - batch) END,
                CASE WHEN i > 2 * batch THEN 'b' || (i - 2 * batch) END);
        END LOOP;
        calls := calls + memory_batch(dir, true);
        CALL memory_commit();
        done := calls >= total_calls - long_transaction_calls;
        IF done OR calls >= next_sample OR i = batch THEN
            PERFORM memory_take_sample(CASE WHEN done THEN 'end'
                                            WHEN i = batch THEN 'at-start'
                                            WHEN next_sample = warmup_calls THEN 'warm'
                                            ELSE 'at-' || next_sample END, calls);
            CALL memory_commit();
            IF calls >= next_sample THEN
                next_sample := next_sample + sample_every;
            END IF;
        END IF;
        EXIT WHEN done;
    END LOOP;

    -- One long transaction, measured from the end of its first batch, once
    -- the transaction's own first-time costs are paid.
    PERFORM memory_grow_transaction_arrays();
    FOR k IN 1 .. pool LOOP
        i := i + 1;
        calls := calls + memory_iteration(i, 'pool-leased-' || k, 'pool-lapsed-' || k);
        IF k % batch = 0 THEN
            calls := calls + memory_batch(dir, false);
        END IF;
        IF k = batch OR calls >= total_calls THEN
            PERFORM memory_take_sample(CASE WHEN k = batch THEN 'long-start' ELSE 'long' END,
                                       calls);
        END IF;
        EXIT WHEN calls >= total_calls;
    END LOOP;
    IF calls < total_calls THEN RAISE EXCEPTION 'pools too small'; END IF;
    CALL memory_commit();
END
$$;
SQL

# A claim that stays uncommitted through the run, and a binary request_hash
# of the wrong length.
query(q{SET track_functions = none;
	BEGIN;
	SELECT idempotency_begin('mem', 'held', request_hash('held'::text));
	PREPARE TRANSACTION 'memory_holder'});
query("COPY (SELECT '\\x0102'::bytea) TO '$dir/memory_bad_hash.bin' (FORMAT binary)");

my $started = time;
query("CALL memory_churn($warmup_calls, $sample_every, $total_calls, "
	  . "$long_transaction_calls, $iterations_per_commit, '$dir')");
my $seconds = time - $started;

# The samples; in the long transaction, without PostgreSQL's combo id hash
# (see memory_grow_transaction_arrays), which only combocid.c writes to.
my %sample;
for my $line (
	split /\n/,
	query(q{
		SELECT label, pid, calls,
		       context_bytes - CASE WHEN label LIKE 'long%'
		                       THEN coalesce((contexts->>'Combo CIDs')::bigint, 0) ELSE 0 END,
		       context_used_bytes - CASE WHEN label LIKE 'long%'
		                       THEN coalesce((contexts_used->>'Combo CIDs')::bigint, 0) ELSE 0 END,
		       rss_anon_bytes, vm_data_bytes
		  FROM memory_samples})
  )
{
	my ($label, @values) = split /\|/, $line;
	@{ $sample{$label} }{qw(pid calls contexts used rss vm_data)} = @values;
}
is(join(' ', grep { !/^at-/ } sort keys %sample),
	'end long long-start warm', 'every sample was taken');
my %pids = map { $_->{pid} => 1 } values %sample;
is(scalar(keys %pids), 1, 'all in the one backend that made the calls');
cmp_ok($sample{long}{calls}, '>=', $total_calls, "it made $total_calls calls or more");
note(sprintf('%d calls in %.0f s (%.1f us per call)',
		$sample{long}{calls}, $seconds, $seconds * 1e6 / $sample{long}{calls}));

# Checks the growth from one sample to another against its limits; notes it
# with the contexts that changed.
sub flat
{
	my ($from, $to, $what, %limits) = @_;
	my $calls = $sample{$to}{calls} - $sample{$from}{calls};
	for my $measure (sort keys %limits)
	{
		my $growth = $sample{$to}{$measure} - $sample{$from}{$measure};
		my $name = {
			contexts => 'memory contexts (total bytes)',
			used => 'memory contexts (used bytes)',
			rss => 'RssAnon'
		}->{$measure};
		note(sprintf('%s: %s %d -> %d, %+d bytes over %d calls (%.3f per call; limit %d)',
				$what, $name, $sample{$from}{$measure}, $sample{$to}{$measure},
				$growth, $calls, $growth / $calls, $limits{$measure}));
		cmp_ok($growth, '<', $limits{$measure}, "$what: $name stay flat");
	}
	note(sprintf('%s: RssAnon %+d, VmData %+d bytes', $what,
			$sample{$to}{rss} - $sample{$from}{rss},
			$sample{$to}{vm_data} - $sample{$from}{vm_data}));
	my $changed = query(qq{
		SELECT string_agg(format('%s %s/%s', t.key,
		         t.value::bigint - coalesce((f.contexts->>t.key)::bigint, 0),
		         (l.contexts_used->>t.key)::bigint - coalesce((f.contexts_used->>t.key)::bigint, 0)),
		       ', ' ORDER BY t.key)
		  FROM memory_samples AS f, memory_samples AS l, jsonb_each_text(l.contexts) AS t
		 WHERE f.label = '$from' AND l.label = '$to'
		   AND (t.value::bigint <> coalesce((f.contexts->>t.key)::bigint, 0)
		     OR (l.contexts_used->>t.key)::bigint <> coalesce((f.contexts_used->>t.key)::bigint, 0))});
	note("$what: contexts that changed (total/used bytes): " . ($changed eq '' ? 'none' : $changed));
}

note('calls, RssAnon, contexts total/used bytes, every 100,000 calls: ' . query(q{
	SELECT string_agg(format('%s %s %s/%s', calls, rss_anon_bytes, context_bytes,
	                         context_used_bytes), ', ' ORDER BY calls)
	  FROM memory_samples WHERE label NOT LIKE 'long%'}));
flat('warm', 'end', 'the transactions after the warm-up',
	contexts => $limit{session_contexts},
	used => $limit{session_contexts},
	rss => $limit{session_rss});
flat('long-start', 'long', 'the long transaction',
	contexts => $limit{transaction_contexts},
	used => $limit{transaction_contexts});

query(q{ROLLBACK PREPARED 'memory_holder'});

# What the run covered: every C function of the extension but the type's
# I/O (which track_functions does not see) and the Citus release guard that
# idempotency_distribute() asks once (without Citus it refuses), each called
# many times.  The measured backend has exited; its statistics arrive as it
# does.
$node->poll_query_until($db,
	q{SELECT calls >= 10000 FROM pg_stat_user_functions WHERE funcname = 'idempotency_release'})
  or die 'the statistics of the measured backend did not arrive';
my $coverage = q{
	FROM pg_proc AS p
	JOIN pg_depend AS d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
	 AND d.refclassid = 'pg_extension'::regclass
	 AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'idempotency')
	LEFT JOIN pg_stat_user_functions AS s ON s.funcid = p.oid
	WHERE p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'c')
	  AND p.proname NOT IN ('request_hash_in', 'request_hash_out',
	                        'request_hash_recv', 'request_hash_send', 'require_tested_citus')};
is( query("SELECT string_agg(p.oid::regprocedure::text, ', ') $coverage"
		  . ' AND coalesce(s.calls, 0) < 1000'),
	'', 'every function was called at least a thousand times');
note('calls per function (successful calls only; errors and I/O are not counted): '
	  . query("SELECT string_agg(format('%s %s', p.oid::regprocedure, s.calls), ', '"
		  . " ORDER BY s.calls DESC) $coverage"));

done_testing();
