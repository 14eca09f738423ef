-- Bad input gets a clear error with a documented SQLSTATE, and nothing changes.
-- (Quietly: without shared_preload_libraries it warns; t/001_preload.pl tests that.)
SET client_min_messages = error;
CREATE EXTENSION idempotency;
RESET client_min_messages;

-- Runs a statement and shows "SQLSTATE: message" (or "ok").  The exception
-- block is a savepoint, so a failed call leaves nothing behind.
CREATE FUNCTION pg_temp.try(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

BEGIN;
SELECT outcome FROM idempotency_begin('s', 'done', request_hash('r'::text));
SELECT idempotency_complete('s', 'done', 200, '{"secret": "response body"}');
COMMIT;
SELECT outcome FROM idempotency_begin('s', 'held', request_hash('r'::text), lease => '1 hour');
CREATE TABLE before AS SELECT * FROM idempotency.keys;

-- 22004: a required argument is NULL (no function returns NULL silently)
SELECT pg_temp.try($$ SELECT idempotency_begin(NULL, 'k', request_hash('r'::text)) $$);
SELECT pg_temp.try($$ SELECT idempotency_begin('s', NULL, request_hash('r'::text)) $$);
SELECT pg_temp.try($$ SELECT idempotency_begin('s', 'k', NULL) $$);
SELECT pg_temp.try($$ SELECT idempotency_complete(NULL, 'held', 200) $$);
SELECT pg_temp.try($$ SELECT idempotency_complete('s', 'held', NULL) $$);
SELECT pg_temp.try($$ SELECT idempotency_checkpoint('s', NULL, 'p') $$);
SELECT pg_temp.try($$ SELECT idempotency_release(NULL, 'held') $$);
SELECT pg_temp.try($$ SELECT * FROM idempotency_lookup('s', NULL) $$);
SELECT pg_temp.try($$ SELECT * FROM idempotency_lookup(NULL, 'k') $$);

-- IK006, the client's key (HTTP 400): empty; 22023, the handler's arguments
-- (HTTP 500): ttl, lease or wait out of range; status out of range
SELECT pg_temp.try($$ SELECT idempotency_begin('s', '', request_hash('r'::text)) $$);
SELECT pg_temp.try($$ SELECT * FROM idempotency_lookup('s', '') $$);
SELECT pg_temp.try($$ SELECT idempotency_begin('s', 'k', request_hash('r'::text), ttl => '0') $$);
SELECT pg_temp.try($$ SELECT idempotency_begin('s', 'k', request_hash('r'::text), ttl => '-1 day') $$);
SELECT pg_temp.try($$ SELECT idempotency_begin('s', 'k', request_hash('r'::text), ttl => '3651 days') $$);
SELECT pg_temp.try($$ SELECT idempotency_begin('s', 'k2', request_hash('r'::text), lease => '0 seconds') $$);
SELECT pg_temp.try($$ SELECT idempotency_begin('s', 'k2', request_hash('r'::text), lease => '11 years') $$);
SELECT pg_temp.try($$ SELECT idempotency_begin('s', 'k2', request_hash('r'::text), wait => '-1 ms') $$);
SELECT pg_temp.try($$ SELECT idempotency_begin('s', 'k2', request_hash('r'::text), wait => '1 hour 1 second') $$);
SELECT pg_temp.try($$ SELECT idempotency_checkpoint('s', 'held', 'p', lease => '-5 minutes') $$);
-- ... by their effect on a time: no negative part (a month is 28 to 31 days,
-- a day 23 to 25 hours, so a mix of signs ends before it starts on some
-- dates), ending after now and at most 3650 days later
SELECT pg_temp.try($$ SELECT idempotency_begin('s', 'k', request_hash('r'::text), ttl => '-1 mon 30 days 23 hours') $$);
SELECT pg_temp.try($$ SELECT idempotency_begin('s', 'k', request_hash('r'::text), ttl => '1 day -1 hour') $$);
SELECT pg_temp.try($$ SELECT idempotency_begin('s', 'k2', request_hash('r'::text), lease => '-1 mon 30 days 23 hours') $$);
SELECT pg_temp.try($$ SELECT idempotency_checkpoint('s', 'held', 'p', lease => '1 mon -27 days') $$);
SELECT pg_temp.try($$ SELECT idempotency_begin('s', 'k', request_hash('r'::text), ttl => '10 years') $$);
SELECT pg_temp.try($$ SELECT idempotency_begin('s', 'k', request_hash('r'::text), ttl => '1000000 years') $$);
SELECT pg_temp.try($$ SELECT idempotency_complete('s', 'held', 99) $$);
SELECT pg_temp.try($$ SELECT idempotency_complete('s', 'held', 600) $$);
SELECT pg_temp.try($$ SELECT idempotency_expire(-1) $$);

-- IK006 for an over-long key, 22001 for a scope (idempotency.max_key_length bytes, multibyte
-- characters count as their UTF-8 bytes); the message shows a prefix only
SET idempotency.max_key_length = 8;
SELECT pg_temp.try($$ SELECT idempotency_begin('s', '123456789', request_hash('r'::text)) $$);
SELECT pg_temp.try($$ SELECT idempotency_begin('s', 'éééée', request_hash('r'::text)) $$);
SELECT pg_temp.try($$ SELECT idempotency_begin('long scope', 'k', request_hash('r'::text)) $$);
-- at the limit is fine
BEGIN;
SELECT outcome FROM idempotency_begin('s', '12345678', request_hash('r'::text));
SELECT outcome FROM idempotency_begin('s', 'éééé', request_hash('r'::text));
ROLLBACK;
RESET idempotency.max_key_length;
SELECT pg_temp.try($$ SELECT idempotency_begin('s', repeat('x', 1100), request_hash('r'::text)) $$);
SELECT pg_temp.try($$ SELECT idempotency_begin('s', repeat('é', 600), request_hash('r'::text)) $$);

-- 22P02: a malformed request_hash
SELECT pg_temp.try($$ SELECT idempotency_begin('s', 'k', 'not a hash') $$);
SELECT pg_temp.try($$ SELECT idempotency_begin('s', 'k', '\x00'::bytea::request_hash) $$);

-- 22023: a body given both as jsonb and as bytes
SELECT pg_temp.try($$ SELECT idempotency_complete('s', 'held', 200, '{}', response_body_bytes => 'x') $$);

-- A response over idempotency.max_response_bytes, measured as the
-- uncompressed sizes of body and headers added up (pg_column_size of a fresh
-- value), is not an error: failing would roll the work back and every retry
-- would redo it.  The key completes without the body -- and without the
-- headers when they alone are over -- marked response_body_omitted, with a
-- WARNING.  The limit itself is accepted.
SELECT pg_column_size('{"a": "0123456789"}'::jsonb) AS body_bytes, pg_column_size('{"h": 1}'::jsonb) AS header_bytes;
BEGIN;
SET LOCAL idempotency.max_response_bytes = 54;
SELECT idempotency_complete('s', 'held', 200, '{"a": "0123456789"}', '{"h": 1}');
SELECT outcome, response_status, response_body, response_headers, response_body_omitted
  FROM idempotency_begin('s', 'held', request_hash('r'::text));
ROLLBACK;
BEGIN;
SET LOCAL idempotency.max_response_bytes = 7;
SELECT idempotency_complete('s', 'held', 200, '{"a": "0123456789"}', '{"h": 1}');
SELECT response_status, response_body, response_headers, response_body_omitted
  FROM idempotency_lookup('s', 'held');
ROLLBACK;
BEGIN;
SET LOCAL idempotency.max_response_bytes = 55;
SELECT idempotency_complete('s', 'held', 200, '{"a": "0123456789"}', '{"h": 1}');
SELECT response_body, response_headers, response_body_omitted FROM idempotency_lookup('s', 'held');
ROLLBACK;
-- With omit_oversized => false (a middleware that never acknowledges a
-- response it cannot replay byte for byte), a response over the limit is
-- refused instead (54000), nothing written: the claim is as it was.  At the
-- limit it is stored whole; the headers count, and can push it over; a body
-- given as bytes counts as a jsonb one does; omit_oversized => true (the
-- default) keeps the behaviour above.
BEGIN;
SET LOCAL idempotency.max_response_bytes = 55;
SELECT idempotency_complete('s', 'held', 200, '{"a": "0123456789"}', '{"h": 1}',
                            omit_oversized => false) AS at_the_limit;
SELECT response_body, response_headers, response_body_omitted FROM idempotency_lookup('s', 'held');
ROLLBACK;
BEGIN;
SET LOCAL idempotency.max_response_bytes = 54;
SAVEPOINT before;
SELECT idempotency_complete('s', 'held', 200, '{"a": "0123456789"}', '{"h": 1}',
                            omit_oversized => false);
ROLLBACK TO SAVEPOINT before;
SELECT status, response_status FROM idempotency_lookup('s', 'held');
SELECT idempotency_complete('s', 'held', 200, '{"a": "0123456789"}',
                            omit_oversized => false) AS body_alone_fits;
ROLLBACK;
BEGIN;
SET LOCAL idempotency.max_response_bytes = 10;
SELECT pg_temp.try($$ SELECT idempotency_complete('s', 'held', 200, response_body_bytes => '\x00112233445566778899aa', omit_oversized => false) $$);
SELECT pg_temp.try($$ SELECT idempotency_complete('s', 'held', 200, response_body_bytes => '\x00112233', response_headers => '{"Set-Cookie": "abcdefgh"}', omit_oversized => false) $$);
SELECT idempotency_complete('s', 'held', 200, response_body_bytes => '\x00112233445566778899aa',
                            omit_oversized => true) AS omitted_when_asked;
SELECT response_body_bytes, response_body_omitted FROM idempotency_lookup('s', 'held');
ROLLBACK;
-- A server error that is not stored is not refused: its body does not matter.
BEGIN;
SET LOCAL idempotency.max_response_bytes = 10;
SELECT idempotency_complete('s', 'held', 503, '{"a": "0123456789"}', omit_oversized => false)
    AS stored;
ROLLBACK;

-- 54000: a recovery point over the limit is refused (a claim in progress
-- loses nothing by it).
SELECT pg_temp.try($$ SELECT idempotency_checkpoint('s', 'held', repeat('x', 2000000)) $$);

-- IK001: complete, checkpoint or release of a key nobody holds
SELECT pg_temp.try($$ SELECT idempotency_complete('s', 'nobody', 200) $$);
SELECT pg_temp.try($$ SELECT idempotency_checkpoint('s', 'nobody', 'p') $$);
SELECT pg_temp.try($$ SELECT idempotency_release('s', 'nobody') $$);
-- IK002: ... of a key already completed
SELECT pg_temp.try($$ SELECT idempotency_complete('s', 'done', 200) $$);
SELECT pg_temp.try($$ SELECT idempotency_release('s', 'done') $$);
-- IK003: a stale attempt (another caller took the lease over)
SELECT pg_temp.try($$ SELECT idempotency_complete('s', 'held', 200, attempt => 7) $$);
SELECT pg_temp.try($$ SELECT idempotency_checkpoint('s', 'held', 'p', attempt => 0) $$);
SELECT pg_temp.try($$ SELECT idempotency_release('s', 'held', attempt => 2) $$);

-- 25006: a read-only transaction (lookup still works)
BEGIN READ ONLY;
SELECT pg_temp.try($$ SELECT idempotency_begin('s', 'k', request_hash('r'::text)) $$);
SELECT pg_temp.try($$ SELECT idempotency_complete('s', 'held', 200) $$);
SELECT pg_temp.try($$ SELECT idempotency_checkpoint('s', 'held', 'p') $$);
SELECT pg_temp.try($$ SELECT idempotency_release('s', 'held') $$);
SELECT pg_temp.try($$ SELECT idempotency_expire() $$);
SELECT status FROM idempotency_lookup('s', 'done');
ROLLBACK;

-- Nothing changed: the table is exactly as before.
SELECT count(*) AS changed_rows FROM (
    (SELECT * FROM idempotency.keys EXCEPT SELECT * FROM before)
    UNION ALL
    (SELECT * FROM before EXCEPT SELECT * FROM idempotency.keys)) AS changes;
-- ... and no message ever contained the response body.
SELECT count(*) AS leaks FROM pg_temp.try($$ SELECT idempotency_complete('s', 'done', 200) $$) AS m
 WHERE m LIKE '%secret%';

DROP TABLE before;
DROP EXTENSION idempotency;
