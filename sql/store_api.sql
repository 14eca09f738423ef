-- The operations of a complete idempotency store, single session: forgetting
-- a key, replacing a stored response, reading the newest state, claim data,
-- taking over a dead claim of another request, expiry to the microsecond,
-- composite keys, and listing a scope.
-- (Quietly: without shared_preload_libraries it warns; t/001_preload.pl tests that.)
SET client_min_messages = error;
CREATE EXTENSION idempotency;
RESET client_min_messages;

-- Runs a statement and shows "SQLSTATE: message" (or "ok").
CREATE FUNCTION pg_temp.try(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

CREATE FUNCTION pg_temp.serve(scope text, key text, request text, body jsonb) RETURNS boolean
    LANGUAGE sql AS $$
    SELECT (idempotency_begin(scope, key, request_hash(request))).outcome = 'claimed'
       AND idempotency_complete(scope, key, 201, body);
$$;

--
-- idempotency_forget: a completed record goes, and the key is new again.
--
SELECT pg_temp.serve('shop', 'done', 'POST /orders', '{"order": 1}');
SELECT idempotency_forget('shop', 'done') AS forgotten;
SELECT count(*) AS left FROM idempotency.keys WHERE key = 'done';
SELECT idempotency_forget('shop', 'done') AS forgotten_again, idempotency_forget('shop', 'never') AS never_there;
BEGIN;
SELECT outcome, attempt FROM idempotency_begin('shop', 'done', request_hash('POST /orders'::text));
ROLLBACK;
-- The caller's own claim, in its own transaction, needs no attempt (as a
-- rollback would undo it); a committed unfinished claim is fenced: 55006
-- without its attempt, IK003 with a stale one.
BEGIN;
SELECT outcome FROM idempotency_begin('shop', 'own', request_hash('r'::text));
SELECT idempotency_forget('shop', 'own') AS forgotten;
COMMIT;
SELECT count(*) AS left FROM idempotency.keys WHERE key = 'own';
SELECT outcome, attempt FROM idempotency_begin('pay', 'held', request_hash('r'::text), lease => '1 hour');
SELECT pg_temp.try($$ SELECT idempotency_forget('pay', 'held') $$);
SELECT pg_temp.try($$ SELECT idempotency_forget('pay', 'held', attempt => 2) $$);
SELECT idempotency_forget('pay', 'held', attempt => 1) AS forgotten;
-- Read-only, or without the privilege: refused.
BEGIN READ ONLY;
SELECT pg_temp.try($$ SELECT idempotency_forget('pay', 'held') $$);
ROLLBACK;

--
-- Replacing a stored response: only on purpose (replace), fenced by the
-- attempt that completed it; a server error never replaces one.
--
SELECT pg_temp.serve('shop', 'again', 'POST /orders', '{"status": "first"}');
SELECT pg_temp.try($$ SELECT idempotency_complete('shop', 'again', 200, '{"status": "second"}') $$);
SELECT pg_temp.try($$ SELECT idempotency_complete('shop', 'again', 200, '{"status": "second"}', replace => true) $$);
SELECT pg_temp.try($$ SELECT idempotency_complete('shop', 'again', 200, '{"status": "second"}', attempt => 2, replace => true) $$);
SELECT pg_temp.try($$ SELECT idempotency_complete('shop', 'again', 503, '{"status": "down"}', attempt => 1, replace => true) $$);
SELECT idempotency_complete('shop', 'again', 200, '{"status": "second"}', attempt => 1, replace => true) AS replaced;
SELECT outcome, attempt, response_status, response_body
  FROM idempotency_begin('shop', 'again', request_hash('POST /orders'::text));

--
-- Answers say what the key holds: status, attempt and lease end for
-- in_progress and mismatch too; never the other request's data or body.
--
SELECT outcome, status, attempt, lease_expires_at > now() AS leased, claim_data, response_body
  FROM idempotency_begin('pay', 'card', request_hash('charge 10'::text), lease => '1 hour',
                         claim_data => '{"worker": "w1", "trace": "abc"}');
SELECT outcome, status, attempt, lease_expires_at > now() AS leased, claim_data, retry_after > '0' AS retry_later
  FROM idempotency_begin('pay', 'card', request_hash('charge 10'::text));
SELECT outcome, status, attempt, lease_expires_at > now() AS leased, claim_data, response_body
  FROM idempotency_begin('pay', 'card', request_hash('charge 20'::text));
SELECT outcome, status, attempt, claim_data, response_body
  FROM idempotency_begin('shop', 'again', request_hash('DELETE /orders'::text));
-- lookup shows the claim data; claim data is limited like a recovery point.
SELECT status, attempt, claim_data, committed FROM idempotency_lookup('pay', 'card');
SET idempotency.max_response_bytes = 20;
SELECT pg_temp.try($$ SELECT idempotency_begin('pay', 'big', request_hash('r'::text), claim_data => '{"a": "0123456789012345"}') $$);
RESET idempotency.max_response_bytes;

--
-- A dead claim (lease ended) of another request blocks its key until it
-- expires -- unless the caller asks to take it over: attempt + 1, its
-- request, its claim data, and not the other request's recovery point.
--
SELECT idempotency_checkpoint('pay', 'card', 'charged ch_1') IS NOT NULL AS checkpointed;
SELECT idempotency_release('pay', 'card');
SELECT outcome, attempt FROM idempotency_begin('pay', 'card', request_hash('charge 20'::text));
SELECT outcome, attempt, recovery_point, claim_data
  FROM idempotency_begin('pay', 'card', request_hash('charge 20'::text), lease => '1 hour',
                         claim_data => '{"worker": "w2"}', take_over_mismatch => true);
SELECT request = request_hash('charge 20'::text) AS new_request, attempt, recovery_point, claim_data
  FROM idempotency_lookup('pay', 'card');
-- A live claim of another request is never taken over.
SELECT outcome, attempt FROM idempotency_begin('pay', 'card', request_hash('charge 30'::text), take_over_mismatch => true);

--
-- lookup(latest): the newest version, as begin sees it.  The caller's own
-- uncommitted claim shows as uncommitted either way.
--
BEGIN;
SELECT outcome FROM idempotency_begin('shop', 'fresh', request_hash('r'::text));
SELECT status, committed FROM idempotency_lookup('shop', 'fresh');
SELECT status, committed FROM idempotency_lookup('shop', 'fresh', latest => true);
ROLLBACK;
SELECT count(*) AS after_rollback FROM idempotency_lookup('shop', 'fresh', latest => true);

--
-- Expiry to the microsecond: a 300 ms ttl expires 300 ms after the
-- completion, not at the next whole second.  sweep_at, which 0.2.0 indexed
-- for the sweep, stays NULL, and a completed record keeps no lease.
--
BEGIN;
SELECT outcome FROM idempotency_begin('fast', 'k', request_hash('r'::text), ttl => '300 ms');
SELECT idempotency_complete('fast', 'k', 200, '{"fast": true}');
SELECT expires_at - completed_at AS ttl, sweep_at IS NULL AS sweep_at_unused,
       lease IS NULL AS completed_without_lease
  FROM idempotency.keys WHERE scope = 'fast';
COMMIT;
SELECT pg_sleep(0.35);
SELECT count(*) AS visible FROM idempotency_lookup('fast', 'k');
SELECT outcome, attempt, response_body FROM idempotency_begin('fast', 'k', request_hash('r'::text), lease => '1 minute');

--
-- Keys and scopes may be 1 kB by default: a composite key (method, path,
-- header) of 300 bytes is fine.
--
SHOW idempotency.max_key_length;
SELECT pg_temp.serve('composite', 'POST /v1/orders ' || repeat('x', 280), 'r', '{}') AS served;
SELECT pg_temp.try($$ SELECT idempotency_begin('s', repeat('k', 1025), request_hash('r'::text)) $$);

--
-- idempotency_keys: a scope's live keys, a page at a time, in the order of
-- their digests (fixed by the database's secret), without bodies; the next
-- page starts after the last key, whether or not that key is still there.
--
SELECT pg_temp.serve('list', 'k' || g, 'r', jsonb_build_object('secret', g)) FROM generate_series(1, 5) AS g;
SELECT (idempotency_begin('list', 'k6', request_hash('r'::text), lease => '1 hour')).outcome;
UPDATE idempotency.keys SET expires_at = now() - interval '1 second' WHERE scope = 'list' AND key = 'k3';
SELECT key, status, attempt, response_status, committed FROM idempotency_keys('list') ORDER BY key;
-- The order is the digests' (idempotency.key_digest), and pages of 2 walk
-- the same list: each key once.
CREATE FUNCTION pg_temp.walk(page integer) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    listed text[] := '{}';
    this_page text[];
BEGIN
    LOOP
        this_page := ARRAY(SELECT k.key FROM idempotency_keys('list', listed[cardinality(listed)], page) AS k);
        EXIT WHEN cardinality(this_page) = 0;
        listed := listed || this_page;
    END LOOP;
    RETURN listed;
END
$$;
SELECT ARRAY(SELECT key FROM idempotency_keys('list')) =
       ARRAY(SELECT key FROM idempotency.keys WHERE scope = 'list' AND key <> 'k3'
              ORDER BY digest) AS in_digest_order,
       (SELECT bool_and(digest = idempotency.key_digest(tenant, scope, key))
          FROM idempotency.keys) AS stored_under_key_digest,
       pg_temp.walk(2) = ARRAY(SELECT key FROM idempotency_keys('list')) AS pages_of_2_walk_it,
       pg_temp.walk(1) = ARRAY(SELECT key FROM idempotency_keys('list')) AS pages_of_1_too;
-- After a key that is not listed (k3, expired): the keys whose digests follow its.
SELECT ARRAY(SELECT key FROM idempotency_keys('list', after_key => 'k3')) =
       ARRAY(SELECT key FROM idempotency.keys WHERE scope = 'list' AND key <> 'k3'
                AND digest > idempotency.key_digest('-', 'list', 'k3')
              ORDER BY digest) AS after_an_unlisted_key;
SELECT count(*) AS other_scope FROM idempotency_keys('nothing here');
SELECT pg_temp.try($$ SELECT * FROM idempotency_keys('list', max_keys => 0) $$);
SELECT pg_temp.try($$ SELECT * FROM idempotency_keys('list', max_keys => 10001) $$);
SELECT pg_temp.try($$ SELECT * FROM idempotency_keys(NULL) $$);

--
-- Statistics count forgotten keys and replaced responses when the library
-- is preloaded (NULL otherwise); pg_monitor may read them.
--
SELECT CASE WHEN preloaded THEN forgets >= 3 ELSE forgets IS NULL END AS forgets_counted,
       CASE WHEN preloaded THEN responses_replaced >= 1 ELSE responses_replaced IS NULL END
           AS replacements_counted
  FROM idempotency_stats();
SELECT has_function_privilege('pg_monitor', 'idempotency_stats()', 'EXECUTE') AS pg_monitor_reads_stats;

DROP EXTENSION idempotency;
