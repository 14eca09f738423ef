-- Every outcome of idempotency_begin and the life of a key, single session.
-- (Quietly: without shared_preload_libraries it warns; t/001_preload.pl tests that.)
SET client_min_messages = error;
CREATE EXTENSION idempotency;
RESET client_min_messages;
CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL);

-- A new request is claimed; the work and the response commit together.
BEGIN;
SELECT outcome, attempt, response_status, response_body, recovery_point, retry_after,
       expires_at - created_at BETWEEN '1 day' AND '1 day 1 second' AS expires_in_a_day
  FROM idempotency_begin('shop', 'key-1', request_hash('{"item": "book"}'::jsonb));
INSERT INTO orders (item) VALUES ('book');
SELECT idempotency_complete('shop', 'key-1', 201, '{"order": 1}', '{"Location": "/orders/1"}');
COMMIT;

-- A retry with the same request replays the stored response.
SELECT outcome, attempt, response_status, response_body, response_headers, retry_after
  FROM idempotency_begin('shop', 'key-1', request_hash('{ "item" : "book" }'::jsonb));
-- ... and writes nothing: the row is untouched.
SELECT xmin = (SELECT xmin FROM idempotency.keys WHERE key = 'key-1') AS row_unchanged
  FROM idempotency.keys WHERE key = 'key-1';

-- The same key with another request is a mismatch; nothing of the stored
-- response is revealed.
SELECT outcome, attempt, response_status, response_body, response_headers, created_at IS NOT NULL AS has_created_at
  FROM idempotency_begin('shop', 'key-1', request_hash('{"item": "car"}'::jsonb));

-- Scopes are separate namespaces; keys compare byte-wise.
BEGIN;
SELECT outcome FROM idempotency_begin('other-shop', 'key-1', request_hash('x'::text));
SELECT outcome FROM idempotency_begin('shop', 'KEY-1', request_hash('x'::text));
SELECT outcome FROM idempotency_begin('shop', 'key-1 ', request_hash('x'::text));
ROLLBACK;

-- A claim outside a transaction block must be settled in its own statement
-- (complete or release), or be meant to outlive it (an explicit lease): a
-- forgotten BEGIN fails with IK004 at commit, and the claim rolls back.
\set VERBOSITY sqlstate
SELECT outcome FROM idempotency_begin('shop', 'no-begin', request_hash('r'::text));
\set VERBOSITY default
SELECT count(*) AS rolled_back FROM idempotency.keys WHERE key = 'no-begin';
SELECT (idempotency_begin('shop', 'no-begin', request_hash('r'::text))).outcome,
       idempotency_complete('shop', 'no-begin', 201);
SELECT outcome FROM idempotency_begin('shop', 'no-begin-2', request_hash('r'::text), lease => '1 minute');
DO $$
BEGIN
    PERFORM idempotency_begin('shop', 'no-begin-3', request_hash('r'::text));
    PERFORM idempotency_release('shop', 'no-begin-3');
END $$;
SELECT key, status FROM idempotency.keys WHERE key LIKE 'no-begin%' ORDER BY key;
-- A savepoint that rolls back takes the claim with it.
DO $$
BEGIN
    BEGIN
        PERFORM idempotency_begin('shop', 'no-begin-4', request_hash('r'::text));
        RAISE EXCEPTION 'undo';
    EXCEPTION WHEN raise_exception THEN
    END;
END $$;

-- Begin twice in one transaction: the same claim, the same attempt.
BEGIN;
SELECT outcome, attempt FROM idempotency_begin('shop', 'key-2', request_hash('r'::text));
SELECT outcome, attempt FROM idempotency_begin('shop', 'key-2', request_hash('r'::text));
-- Begin and complete in one statement work too.
SELECT (idempotency_begin('shop', 'key-3', request_hash('r'::text))).outcome,
       idempotency_complete('shop', 'key-3', 200);
ROLLBACK;
-- The rollback undid the claims: as if never made.
SELECT count(*) FROM idempotency.keys WHERE key IN ('key-2', 'key-3');
SELECT * FROM idempotency_lookup('shop', 'key-2');

-- Savepoints.  A claim rolled back to a savepoint is gone, so complete finds
-- nothing to complete; a claim in a released savepoint belongs to the
-- transaction, and complete finds it even after another savepoint rolled
-- back.  Completing several claims in any order finds each one.
BEGIN;
SAVEPOINT a;
SELECT outcome FROM idempotency_begin('sp', 'undone', request_hash('r'::text));
ROLLBACK TO SAVEPOINT a;
SAVEPOINT b;
SELECT idempotency_complete('sp', 'undone', 200);
ROLLBACK TO SAVEPOINT b;
SAVEPOINT c;
SELECT outcome FROM idempotency_begin('sp', 'kept', request_hash('r'::text));
RELEASE SAVEPOINT c;
SAVEPOINT d;
SELECT 1 / 0;
ROLLBACK TO SAVEPOINT d;
SELECT idempotency_complete('sp', 'kept', 201, '{"kept": true}');
SELECT outcome FROM idempotency_begin('sp', 'first', request_hash('r'::text));
SELECT outcome FROM idempotency_begin('sp', 'second', request_hash('r'::text));
SELECT idempotency_complete('sp', 'first', 201, '{"n": 1}');
SELECT idempotency_complete('sp', 'second', 201, '{"n": 2}');
COMMIT;
SELECT k.key, l.status, l.response_body FROM idempotency.keys k, idempotency_lookup('sp', k.key) l
 WHERE scope = 'sp' ORDER BY key;

-- lookup shows the record as the snapshot sees it.
SELECT status, request = request_hash('{"item": "book"}'::jsonb) AS same_request, attempt,
       response_status, response_body, response_headers, recovery_point,
       lease_expires_at, completed_at >= created_at AS completed_after_created,
       expires_at > completed_at AS expires_later
  FROM idempotency_lookup('shop', 'key-1');

-- Two-phase use: the claim commits as in progress with a lease.
SELECT outcome, attempt FROM idempotency_begin('pay', 'charge-1', request_hash('10 EUR'::text), lease => '1 hour');
SELECT outcome, attempt, retry_after BETWEEN '59 minutes' AND '1 hour' AS retry_after_lease
  FROM idempotency_begin('pay', 'charge-1', request_hash('10 EUR'::text));
-- retry_after_seconds: the same in whole seconds, rounded up, for Retry-After;
-- NULL with every other outcome.
SELECT retry_after_seconds = ceil(extract(epoch FROM retry_after)) AS rounded_up,
       retry_after_seconds BETWEEN 3540 AND 3600 AS seconds_of_lease
  FROM idempotency_begin('pay', 'charge-1', request_hash('10 EUR'::text));
SELECT outcome, retry_after_seconds
  FROM idempotency_begin('shop', 'key-1', request_hash('{"item": "book"}'::jsonb));
SELECT idempotency_checkpoint('pay', 'charge-1', 'provider-called', lease => '2 hours', attempt => 1)
       BETWEEN now() + '119 minutes' AND now() + '2 hours 1 minute' AS lease_extended;
SELECT status, attempt, recovery_point FROM idempotency_lookup('pay', 'charge-1');
-- A heartbeat without a recovery point keeps the last one.
SELECT idempotency_checkpoint('pay', 'charge-1', NULL) IS NOT NULL AS heartbeat;
SELECT recovery_point FROM idempotency_lookup('pay', 'charge-1');
-- Release ends the lease: the next begin takes over with attempt + 1 and the
-- recovery point.
SELECT idempotency_release('pay', 'charge-1', attempt => 1);
SELECT outcome, attempt, recovery_point FROM idempotency_begin('pay', 'charge-1', request_hash('10 EUR'::text), lease => '1 hour');
SELECT idempotency_complete('pay', 'charge-1', 200, '{"charged": true}', attempt => 2);
SELECT outcome, attempt, response_body FROM idempotency_begin('pay', 'charge-1', request_hash('10 EUR'::text));
-- The same within one transaction: a claim released there (or dropped by a
-- server error) and claimed again is taken over with attempt + 1 and a new
-- lease, which its commit keeps; answering claimed without renewing it would
-- hand the key to the next caller once the transaction commits.
BEGIN;
SELECT outcome, attempt FROM idempotency_begin('pay', 'charge-2', request_hash('10 EUR'::text), lease => '1 hour');
SELECT idempotency_release('pay', 'charge-2');
SELECT outcome, attempt, lease_expires_at > clock_timestamp() + interval '59 minutes' AS lease_renewed
  FROM idempotency_begin('pay', 'charge-2', request_hash('10 EUR'::text), lease => '1 hour');
SELECT idempotency_complete('pay', 'charge-2', 503);
SELECT outcome, attempt FROM idempotency_begin('pay', 'charge-2', request_hash('10 EUR'::text), lease => '1 hour');
COMMIT;
SELECT outcome, attempt FROM idempotency_begin('pay', 'charge-2', request_hash('10 EUR'::text), lease => '1 hour');

-- Server errors are not stored by default: the claim is dropped so that a
-- retry runs again, with the next attempt.
BEGIN;
SELECT outcome FROM idempotency_begin('shop', 'flaky', request_hash('r'::text));
SELECT idempotency_complete('shop', 'flaky', 503, '{"error": "unavailable"}');
COMMIT;
BEGIN;
SELECT outcome, attempt, response_status FROM idempotency_begin('shop', 'flaky', request_hash('r'::text));
-- ... unless idempotency.store_server_errors is on.
SET LOCAL idempotency.store_server_errors = on;
SELECT idempotency_complete('shop', 'flaky', 500, '{"error": "boom"}');
COMMIT;
SELECT outcome, attempt, response_status, response_body FROM idempotency_begin('shop', 'flaky', request_hash('r'::text));

-- Client errors (4xx) are stored and replayed like any response.
BEGIN;
SELECT outcome FROM idempotency_begin('shop', 'bad', request_hash('r'::text));
SELECT idempotency_complete('shop', 'bad', 422, '{"error": "invalid"}');
COMMIT;
SELECT outcome, response_status FROM idempotency_begin('shop', 'bad', request_hash('r'::text));

-- A record past its expiry is treated as absent.
BEGIN;
SELECT outcome FROM idempotency_begin('shop', 'short', request_hash('r'::text), ttl => '1 second');
SELECT idempotency_complete('shop', 'short', 200, '{"v": 1}');
COMMIT;
SELECT outcome FROM idempotency_begin('shop', 'short', request_hash('r'::text));
UPDATE idempotency.keys SET expires_at = now() - interval '1 second' WHERE key = 'short';
SELECT * FROM idempotency_lookup('shop', 'short');
SELECT outcome, attempt, response_body FROM idempotency_begin('shop', 'short', request_hash('another'::text), lease => '1 minute');

-- Defaults come from the settings.
SHOW idempotency.default_ttl;
SHOW idempotency.default_lease;
SHOW idempotency.default_wait;
SHOW idempotency.max_key_length;
SHOW idempotency.max_response_bytes;
SHOW idempotency.store_server_errors;
BEGIN;
SET LOCAL idempotency.default_ttl = '1h';
SET LOCAL idempotency.default_lease = '5s';
SELECT outcome, expires_at - created_at BETWEEN '1 hour' AND '1 hour 1 second' AS ttl_from_setting
  FROM idempotency_begin('shop', 'defaults', request_hash('r'::text));
SELECT lease_expires_at - created_at BETWEEN '5 seconds' AND '6 seconds' AS lease_from_setting
  FROM idempotency_lookup('shop', 'defaults');
COMMIT;

-- A checkpoint without a lease renews the claim's own lease length, not the
-- setting's.
SELECT outcome FROM idempotency_begin('pay', 'long', request_hash('r'::text), lease => '2 hours');
SELECT idempotency_checkpoint('pay', 'long', 'step 1') BETWEEN now() + '119 minutes' AND now() + '121 minutes'
       AS renewed_by_own_lease;

-- A claim completed in its own transaction is written once, completed: its
-- claim waits in shared memory until then (claims.hpp), so begin and
-- complete make one INSERT and no UPDATE -- when the library is preloaded;
-- without the shared table, the claim's row comes first.
BEGIN;
SELECT n_tup_ins AS inserts_before, n_tup_upd AS updates_before
  FROM pg_stat_xact_user_tables WHERE relid = 'idempotency.keys'::regclass \gset
SELECT outcome FROM idempotency_begin('shop', 'once', request_hash('r'::text));
SELECT idempotency_complete('shop', 'once', 200, '{"ok": true}');
SELECT n_tup_ins - :inserts_before = 1
       AND n_tup_upd - :updates_before = CASE WHEN s.preloaded THEN 0 ELSE 1 END
       AS written_once_when_preloaded
  FROM pg_stat_xact_user_tables, idempotency_stats() AS s
 WHERE relid = 'idempotency.keys'::regclass;
COMMIT;

-- A transaction holds at most 64 slots of the claims table: the 65th and
-- 66th claims are written at begin (when preloaded; without preloading all
-- 66 are), and all 66 are stored at commit.
BEGIN;
SELECT n_tup_ins AS inserts_before
  FROM pg_stat_xact_user_tables WHERE relid = 'idempotency.keys'::regclass \gset
SELECT count(*) FILTER (WHERE outcome = 'claimed') AS claimed
  FROM generate_series(1, 66) AS n,
       idempotency_begin('many', 'k' || n, request_hash('r'::text), lease => '1 minute');
SELECT n_tup_ins - :inserts_before = CASE WHEN s.preloaded THEN 2 ELSE 66 END
       AS only_the_overflow_written
  FROM pg_stat_xact_user_tables, idempotency_stats() AS s
 WHERE relid = 'idempotency.keys'::regclass;
COMMIT;
SELECT count(*) AS stored FROM idempotency.keys WHERE scope = 'many' AND status = 'p';

-- With idempotency.defer_claims off, the claim's row is written at begin,
-- and completing it changes no indexed column (nothing indexes the expiry),
-- so the update is HOT: one heap version added in place, no index entries.
BEGIN;
SET LOCAL idempotency.defer_claims = off;
SELECT outcome FROM idempotency_begin('shop', 'hot', request_hash('r'::text));
SELECT n_tup_upd AS updates_before, n_tup_hot_upd AS hot_before
  FROM pg_stat_xact_user_tables
 WHERE relid = 'idempotency.keys'::regclass \gset
SELECT idempotency_complete('shop', 'hot', 200, '{"ok": true}');
SELECT n_tup_upd - :updates_before AS updates, n_tup_hot_upd - :hot_before AS hot_updates
  FROM pg_stat_xact_user_tables
 WHERE relid = 'idempotency.keys'::regclass;
COMMIT;

-- idempotency_expire() deletes expired keys now: completed ones past their
-- expiry, and unfinished claims only once their lease has ended too.  (One
-- transaction, so that the background worker cannot get there first; the
-- claims are written at once, for the UPDATE to age them.)
BEGIN;
SET LOCAL idempotency.defer_claims = off;
SELECT outcome FROM idempotency_begin('gc', 'done', request_hash('r'::text));
SELECT idempotency_complete('gc', 'done', 200);
SELECT outcome FROM idempotency_begin('gc', 'leased', request_hash('r'::text), lease => '1 hour');
SELECT outcome FROM idempotency_begin('gc', 'abandoned', request_hash('r'::text));
SELECT outcome FROM idempotency_begin('gc', 'fresh', request_hash('r'::text));
UPDATE idempotency.keys SET expires_at = now() - interval '1 minute',
       lease_expires_at = CASE WHEN key = 'abandoned' THEN now() - interval '1 minute' ELSE lease_expires_at END
 WHERE scope = 'gc' AND key <> 'fresh';
SELECT idempotency_scope_stats_refresh() > 0 AS summarised;
SELECT scope, in_progress, completed, expired FROM idempotency_scope_stats() WHERE scope = 'gc';
SELECT idempotency_expire(max_rows => 1);
SELECT idempotency_expire();
SELECT idempotency_expire();
SELECT key FROM idempotency.keys WHERE scope = 'gc' ORDER BY key;
COMMIT;
-- ... every record past its expiry, to the microsecond: here one expired a
-- microsecond after its completion.
BEGIN;
SELECT outcome FROM idempotency_begin('gc', 'just-expired', request_hash('r'::text), ttl => '1 microsecond');
SELECT idempotency_complete('gc', 'just-expired', 200);
SELECT idempotency_expire();
SELECT count(*) AS left_behind FROM idempotency.keys WHERE key = 'just-expired';
COMMIT;

-- Statistics are kept when the library is preloaded, as in make test's
-- cluster, and are NULL when it is not (make installcheck on a server that
-- does not preload it).  preloaded says which.
SELECT preloaded = (current_setting('shared_preload_libraries') ~ '(^|[\s,/"])idempotency(\.so)?($|[\s,"])')
           AS preloaded_as_configured,
       CASE WHEN preloaded THEN claims > 0 ELSE claims IS NULL END AS counted
  FROM idempotency_stats();

DROP TABLE orders;
DROP EXTENSION idempotency;
