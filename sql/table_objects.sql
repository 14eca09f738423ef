-- What a DBA may add to idempotency.keys is honoured by every write, as by
-- an ordinary INSERT, UPDATE or DELETE: indexes get their entries, row
-- triggers fire, constraints are checked -- and errors those raise do not
-- print the row (scope, key, response) in their DETAIL.
-- (Quietly: without shared_preload_libraries it warns; t/001_preload.pl tests that.)
SET client_min_messages = error;
CREATE EXTENSION idempotency;
RESET client_min_messages;

-- Runs a statement and shows "SQLSTATE: message" and the DETAIL, if any.
CREATE FUNCTION pg_temp.try(statement text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    detail text;
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
    RETURN SQLSTATE || ': ' || SQLERRM || coalesce(E'\nDETAIL: ' || nullif(detail, ''), '');
END
$$;

-- An index added by hand is maintained by claims, completions and expiry.
CREATE INDEX keys_request_idx ON idempotency.keys (request);
BEGIN;
SELECT outcome FROM idempotency_begin('s', 'indexed', request_hash('r'::text));
SELECT idempotency_complete('s', 'indexed', 201, '{"order": 1}');
COMMIT;
SET enable_seqscan = off;
SELECT key FROM idempotency.keys WHERE request = request_hash('r'::text);
RESET enable_seqscan;
DROP INDEX idempotency.keys_request_idx;

-- AFTER ROW triggers fire for every write, the sweep's deletes included (the
-- way trigger-based tools such as pg_repack follow the table).  A claim
-- completed in its own transaction is one INSERT of the completed row where
-- claims are deferred (the library preloaded, with slots); with
-- idempotency.defer_claims off, or without the preload, the claim's INSERT
-- and the completion's UPDATE.
CREATE TABLE key_changes (n serial, op text, key text, status "char");
CREATE FUNCTION log_key_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO key_changes (op, key, status) VALUES (TG_OP, OLD.key, OLD.status);
    ELSE
        INSERT INTO key_changes (op, key, status) VALUES (TG_OP, NEW.key, NEW.status);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER log_changes AFTER INSERT OR UPDATE OR DELETE ON idempotency.keys
    FOR EACH ROW EXECUTE FUNCTION log_key_change();
BEGIN;
SELECT outcome FROM idempotency_begin('s', 'logged', request_hash('r'::text), ttl => '1 hour');
SELECT idempotency_complete('s', 'logged', 201);
COMMIT;
BEGIN;
SET LOCAL idempotency.defer_claims = off;
SELECT outcome FROM idempotency_begin('s', 'logged at once', request_hash('r'::text));
SELECT idempotency_complete('s', 'logged at once', 201);
COMMIT;
SELECT outcome FROM idempotency_begin('s', 'two-phase', request_hash('r'::text), lease => '1 hour');
SELECT idempotency_checkpoint('s', 'two-phase', 'charged') > now() AS lease_renewed;
-- (One transaction, so that the background worker cannot expire it first.)
BEGIN;
UPDATE idempotency.keys SET expires_at = now() - interval '1 second' WHERE key = 'logged';
SELECT idempotency_expire() AS expired;
COMMIT;
SELECT op, key, status FROM key_changes WHERE key <> 'logged' ORDER BY n;
SELECT string_agg(op || ' ' || status::text, ', ' ORDER BY n)
       = CASE WHEN coalesce(current_setting('idempotency.max_deferred_claims', true), '0')::int > 0
              THEN 'INSERT c, UPDATE c, DELETE c'
              ELSE 'INSERT p, UPDATE c, UPDATE c, DELETE c' END AS logged_as_expected
  FROM key_changes WHERE key = 'logged';
DROP TRIGGER log_changes ON idempotency.keys;

-- A BEFORE ROW trigger that suppresses the write would leave a claim or a
-- response silently unwritten: 09000, and nothing is written -- whether the
-- write is the completed row or (idempotency.defer_claims off) the claim's.
CREATE FUNCTION drop_writes() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER drop_writes BEFORE INSERT ON idempotency.keys
    FOR EACH ROW EXECUTE FUNCTION drop_writes();
SELECT pg_temp.try($$ SELECT idempotency_begin('s', 'suppressed', request_hash('r'::text)),
                             idempotency_complete('s', 'suppressed', 200) $$);
SET idempotency.defer_claims = off;
SELECT pg_temp.try($$ SELECT idempotency_begin('s', 'suppressed', request_hash('r'::text)) $$);
RESET idempotency.defer_claims;
DROP TRIGGER drop_writes ON idempotency.keys;
SELECT count(*) AS suppressed FROM idempotency.keys WHERE key = 'suppressed';

-- A unique index or a check constraint that a write violates: the error
-- names the constraint, and its DETAIL does not show the row.
CREATE UNIQUE INDEX keys_key_unique ON idempotency.keys (key);
SELECT pg_temp.try($$ SELECT idempotency_begin('secret-scope', 'two-phase', request_hash('secret'::text)),
                             idempotency_complete('secret-scope', 'two-phase', 200) $$);
DROP INDEX idempotency.keys_key_unique;
ALTER TABLE idempotency.keys ADD CONSTRAINT small_responses
    CHECK (response_body IS NULL OR pg_column_size(response_body) < 100);
BEGIN;
SELECT outcome FROM idempotency_begin('s', 'big', request_hash('big'::text));
SELECT pg_temp.try($$ SELECT idempotency_complete('s', 'big', 200, jsonb_build_object('secret', repeat('x', 200))) $$);
ROLLBACK;
ALTER TABLE idempotency.keys DROP CONSTRAINT small_responses;

-- A row changed by hand to a status or attempt the library never writes is
-- refused when read (IK007), rather than taken for a claim; its key answers
-- again once the row is corrected.
BEGIN;
SELECT outcome FROM idempotency_begin('s', 'edited', request_hash('r'::text));
SELECT idempotency_complete('s', 'edited', 200);
COMMIT;
UPDATE idempotency.keys SET status = 'x' WHERE key = 'edited';
SELECT pg_temp.try($$ SELECT idempotency_begin('s', 'edited', request_hash('r'::text)) $$);
SELECT pg_temp.try($$ SELECT * FROM idempotency_lookup('s', 'edited') $$);
UPDATE idempotency.keys SET status = 'c', attempt = 0 WHERE key = 'edited';
SELECT pg_temp.try($$ SELECT idempotency_begin('s', 'edited', request_hash('r'::text)) $$);
UPDATE idempotency.keys SET attempt = 1 WHERE key = 'edited';
SELECT outcome FROM idempotency_begin('s', 'edited', request_hash('r'::text));

-- Columns changed by hand.  One added and dropped again leaves a dropped
-- attribute behind, which the table's descriptor still counts, even after
-- VACUUM FULL: the functions find their columns by name and keep working --
-- claims (deferred or not), completions, reads, listings, expiry.
ALTER TABLE idempotency.keys ADD COLUMN note text;
-- Kept, a column the functions do not write is refused (55000): their writes
-- would leave it NULL.  The hint drops it.
SELECT outcome FROM idempotency_begin('s', 'added', request_hash('r'::text), lease => '1 minute');
ALTER TABLE idempotency.keys DROP COLUMN note;
VACUUM FULL idempotency.keys;
BEGIN;
SELECT outcome FROM idempotency_begin('s', 'after_drop', request_hash('r'::text));
SELECT idempotency_complete('s', 'after_drop', 201, '{"order": 2}');
COMMIT;
SET idempotency.defer_claims = off;
BEGIN;
SELECT outcome FROM idempotency_begin('s', 'written_at_once', request_hash('r'::text), claim_data => '{"w": 1}');
SELECT idempotency_checkpoint('s', 'written_at_once', 'step 1') > now() AS renewed;
SELECT idempotency_complete('s', 'written_at_once', 202, '{"order": 3}', '{"Location": "/3"}');
COMMIT;
RESET idempotency.defer_claims;
SELECT outcome, response_status, response_body, response_headers
  FROM idempotency_begin('s', 'after_drop', request_hash('r'::text));
SELECT outcome, response_status, response_body, response_headers
  FROM idempotency_begin('s', 'written_at_once', request_hash('r'::text));
SELECT outcome FROM idempotency_begin('s', 'edited', request_hash('other'::text));
SELECT status, attempt, response_status, claim_data, recovery_point
  FROM idempotency_lookup('s', 'written_at_once');
SELECT key, status, response_status FROM idempotency_keys('s') ORDER BY key;
SELECT idempotency_forget('s', 'indexed');
BEGIN;
UPDATE idempotency.keys SET expires_at = now() - interval '1 day' WHERE key = 'edited';
SELECT idempotency_expire() AS expired;
COMMIT;
SELECT key, status FROM idempotency.keys ORDER BY key;
-- One of the functions' columns dropped is refused (55000) until it is added
-- back, at the end of the table, where the functions find it by name.
ALTER TABLE idempotency.keys DROP COLUMN claim_data;
SELECT outcome FROM idempotency_begin('s', 'moved', request_hash('r'::text), lease => '1 minute');
ALTER TABLE idempotency.keys ADD COLUMN claim_data jsonb;
SELECT outcome, claim_data FROM idempotency_begin('s', 'moved', request_hash('r'::text),
                                                 lease => '1 minute', claim_data => '{"w": 2}');
SELECT claim_data FROM idempotency.keys WHERE key = 'moved';
SELECT status, claim_data FROM idempotency_lookup('s', 'moved');

DROP TABLE key_changes;
DROP FUNCTION log_key_change(), drop_writes();
DROP EXTENSION idempotency;
