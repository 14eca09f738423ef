-- The keys' primary key is the digest alone, a 128-bit keyed hash of
-- (tenant, scope, key) under a secret of the database (src/key_digest.hpp),
-- the tenant by its number in idempotency.tenants (src/tenants.hpp): the
-- secret, the function that computes a digest, the tenants' numbers -- never
-- one that a rollback took away -- and a collision -- forced with
-- idempotency.inject_fault = weak_digest, a test hook that leaves a scope 16
-- digests -- which is an error (IK008), never an answer about the other key.
SET client_min_messages = error;
CREATE EXTENSION idempotency;
RESET client_min_messages;

-- (Helpers in a schema of their own: they outlive the \c below.)
CREATE SCHEMA regress_digest;
GRANT USAGE ON SCHEMA regress_digest TO PUBLIC;
CREATE FUNCTION regress_digest.try(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

CREATE FUNCTION regress_digest.serve(scope text, key text, body jsonb) RETURNS text
    LANGUAGE plpgsql AS $$
DECLARE
    outcome text;
BEGIN
    outcome := (idempotency_begin(scope, key, request_hash('r'::text))).outcome;
    IF outcome = 'claimed' THEN
        PERFORM idempotency_complete(scope, key, 201, body);
    END IF;
    RETURN outcome;
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END
$$;

--
-- The secret: one row of 16 bytes, made by CREATE EXTENSION, which pg_dump
-- keeps with the keys; a row inserted (a restore's) replaces it.
--
SELECT count(*) AS secrets, min(octet_length(secret)) AS bytes FROM idempotency.digest_secret;
SELECT outcome FROM idempotency_lookup('shop', 'k1') AS l(outcome);
SELECT regress_digest.serve('shop', 'k1', '{"n": 1}');
SELECT 'idempotency.digest_secret'::regclass = ANY (extconfig) AS dumped
  FROM pg_extension WHERE extname = 'idempotency';
BEGIN;
INSERT INTO idempotency.digest_secret VALUES ('0123456789abcdef');
SELECT count(*) AS secrets, string_agg(encode(secret, 'escape'), ',') AS secret FROM idempotency.digest_secret;
ROLLBACK;

--
-- idempotency.key_digest is the digest the library stores a key under;
-- a tenant's keys of a scope share the first four bytes; two tenants' keys
-- of one scope and key are two records, under two digests.
--
SELECT regress_digest.serve('shop', 'k' || g, '{}') FROM generate_series(2, 4) AS g;
SELECT bool_and(digest = idempotency.key_digest(tenant, scope, key)) AS same_digest,
       count(DISTINCT substr(uuid_send(digest), 1, 4)) AS scope_prefixes
  FROM idempotency.keys WHERE scope = 'shop';
SELECT idempotency.key_digest('-', 'shop', 'k1') <> idempotency.key_digest('-', 'shopk', '1') AS boundary_kept,
       idempotency.key_digest('-', 'shop', 'k1') = idempotency.key_digest(0, 'shop', 'k1') AS no_tenant_is_0;
SELECT has_function_privilege('public', 'idempotency.key_digest(regrole, text, text)', 'EXECUTE') AS public_may_call;
-- Without tenants, nothing is numbered.
SELECT count(*) AS numbered FROM idempotency.tenants;
CREATE ROLE regress_digest_tenant;
CREATE ROLE regress_digest_other;
GRANT EXECUTE ON FUNCTION idempotency_begin, idempotency_complete, idempotency_lookup,
      idempotency_keys TO regress_digest_tenant, regress_digest_other;
SET idempotency.tenant_isolation = role;
SET ROLE regress_digest_tenant;
-- A lookup of a tenant with no number reads nothing and numbers nothing.
SELECT count(*) AS found FROM idempotency_lookup('shop', 'k1');
SELECT count(*) AS listed FROM idempotency_keys('shop');
RESET ROLE;
SELECT count(*) AS numbered FROM idempotency.tenants;
SET ROLE regress_digest_tenant;
-- Its first key numbers it.
SELECT regress_digest.serve('shop', 'k1', '{"n": "tenant"}');
SELECT outcome, response_body FROM idempotency_begin('shop', 'k1', request_hash('r'::text));
SELECT key FROM idempotency_keys('shop');
RESET ROLE;
SELECT number, role FROM idempotency.tenants ORDER BY number;
RESET idempotency.tenant_isolation;
SELECT tenant::text = '-' AS no_tenant, response_body,
       digest = idempotency.key_digest(tenant, scope, key) AS same_digest
  FROM idempotency.keys
 WHERE scope = 'shop' AND key = 'k1' ORDER BY tenant::text = '-';
SELECT count(DISTINCT substr(uuid_send(digest), 1, 4)) AS prefixes_of_two_tenants
  FROM idempotency.keys WHERE scope = 'shop' AND key = 'k1';

--
-- A number that a rollback took away is never used again: the tenant's next
-- key numbers it anew, and its keys are found under that number by every
-- backend -- after a ROLLBACK, a ROLLBACK TO SAVEPOINT, an error in the
-- statement that numbered it and a PL/pgSQL exception block, with the
-- backend's caches (the session that numbered it) and without them.  Each
-- time the role starts without a number (its row deleted, as the sweep does
-- for a dropped role), in a fresh session; a fresh session (\c) reads the
-- numbers from the table, as every other backend would.
--
CREATE FUNCTION regress_digest.numbers() RETURNS text LANGUAGE sql AS $$
    SELECT coalesce(string_agg(number || '=' || role::text, ' ' ORDER BY number), 'none')
      FROM idempotency.tenants WHERE role::oid = 'regress_digest_other'::regrole::oid
$$;
CREATE FUNCTION regress_digest.found_by_every_backend() RETURNS text LANGUAGE sql AS $$
    SELECT count(*) || ' keys, ' || count(*) FILTER (WHERE digest = idempotency.key_digest(tenant, scope, key))
           || ' under the number in the table'
      FROM idempotency.keys WHERE tenant::oid = 'regress_digest_other'::regrole::oid
$$;
CREATE FUNCTION regress_digest.unnumber() RETURNS void LANGUAGE sql AS $$
    DELETE FROM idempotency.keys WHERE tenant::oid = 'regress_digest_other'::regrole::oid;
    DELETE FROM idempotency.tenants WHERE role::oid = 'regress_digest_other'::regrole::oid;
$$;
SELECT last_value AS last_number FROM idempotency.tenant_numbers;
-- ROLLBACK.
SET idempotency.tenant_isolation = role;
SET ROLE regress_digest_other;
BEGIN;
SELECT outcome FROM idempotency_begin('rb', 'a', request_hash('r'::text));
ROLLBACK;
SELECT regress_digest.serve('rb', 'b', '{}');
SELECT outcome FROM idempotency_begin('rb', 'b', request_hash('r'::text));
RESET ROLE;
SELECT regress_digest.numbers() AS numbers;
\c
SELECT regress_digest.found_by_every_backend();
SELECT regress_digest.unnumber();
\c
-- ROLLBACK TO SAVEPOINT.
SET idempotency.tenant_isolation = role;
SET ROLE regress_digest_other;
BEGIN;
SAVEPOINT s;
SELECT outcome FROM idempotency_begin('rb', 'c', request_hash('r'::text));
ROLLBACK TO SAVEPOINT s;
SELECT regress_digest.serve('rb', 'd', '{}');
COMMIT;
SELECT outcome FROM idempotency_begin('rb', 'd', request_hash('r'::text));
RESET ROLE;
SELECT regress_digest.numbers() AS numbers;
\c
SELECT regress_digest.found_by_every_backend();
SELECT regress_digest.unnumber();
\c
-- An error in the statement that numbered it.
SET idempotency.tenant_isolation = role;
SET ROLE regress_digest_other;
BEGIN;
SELECT outcome, 1 / (attempt - 1) AS fails FROM idempotency_begin('rb', 'e', request_hash('r'::text));
ROLLBACK;
SELECT outcome, 1 / (attempt - 1) AS fails FROM idempotency_begin('rb', 'e', request_hash('r'::text));
SELECT regress_digest.serve('rb', 'f', '{}');
SELECT outcome FROM idempotency_begin('rb', 'f', request_hash('r'::text));
RESET ROLE;
SELECT regress_digest.numbers() AS numbers;
\c
SELECT regress_digest.found_by_every_backend();
SELECT regress_digest.unnumber();
\c
-- A PL/pgSQL exception block that caught an error after the numbering.
SET idempotency.tenant_isolation = role;
SET ROLE regress_digest_other;
DO $$
BEGIN
    PERFORM idempotency_begin('rb', 'g', request_hash('r'::text), lease => '1 hour');
    RAISE EXCEPTION 'rolled back';
EXCEPTION WHEN raise_exception THEN
    NULL;
END
$$;
SELECT regress_digest.serve('rb', 'h', '{}');
SELECT outcome FROM idempotency_begin('rb', 'h', request_hash('r'::text));
RESET ROLE;
SELECT regress_digest.numbers() AS numbers;
\c
SELECT regress_digest.found_by_every_backend();
SELECT regress_digest.unnumber();
\c
-- Without the backend's caches: ROLLBACK, then ROLLBACK TO SAVEPOINT.
SET idempotency.inject_fault = no_caches;
SET idempotency.tenant_isolation = role;
SET ROLE regress_digest_other;
BEGIN;
SELECT outcome FROM idempotency_begin('rb', 'i', request_hash('r'::text));
ROLLBACK;
BEGIN;
SAVEPOINT s;
SELECT outcome FROM idempotency_begin('rb', 'j', request_hash('r'::text));
ROLLBACK TO SAVEPOINT s;
SELECT regress_digest.serve('rb', 'k', '{}');
COMMIT;
SELECT outcome FROM idempotency_begin('rb', 'k', request_hash('r'::text));
RESET ROLE;
SELECT regress_digest.numbers() AS numbers;
\c
SELECT regress_digest.found_by_every_backend();
SELECT last_value AS last_number FROM idempotency.tenant_numbers;

--
-- Numbering needs a writable transaction and a role that exists, and a
-- number is never 0.  A dropped role's row stays until the sweep deletes
-- it; a dump leaves it out meanwhile (the table's dump condition, run here
-- as pg_dump runs it): a restore reads each role by its name, and a dropped
-- one has none.
--
BEGIN READ ONLY;
SELECT idempotency.key_digest('regress_digest_tenant', 'shop', 'k1') IS NOT NULL AS numbered_already;
SELECT idempotency.key_digest('pg_monitor', 'shop', 'k1');
ROLLBACK;
SELECT idempotency.key_digest(4000000000::oid::regrole, 'shop', 'k1');
SELECT regress_digest.try($$INSERT INTO idempotency.tenants VALUES (0, 'pg_monitor')$$) AS number_0;
CREATE ROLE regress_digest_dropped;
SELECT idempotency.key_digest('regress_digest_dropped', 'shop', 'k1') IS NOT NULL AS numbered;
SELECT 'regress_digest_dropped'::regrole::oid AS dropped_oid \gset
DROP ROLE regress_digest_dropped;
SELECT count(*) AS rows_of_the_dropped_role FROM idempotency.tenants WHERE role::oid = :dropped_oid;
SELECT format('SELECT * FROM idempotency.tenants %s',
              extcondition[array_position(extconfig, 'idempotency.tenants'::regclass)]) AS dump_query
  FROM pg_extension WHERE extname = 'idempotency' \gset
SELECT (SELECT count(*) FROM (:dump_query) AS d) AS dumped,
       (SELECT count(*) FROM idempotency.tenants) AS stored;
SELECT idempotency_expire() >= 0 AS swept;
SELECT count(*) AS rows_of_the_dropped_role FROM idempotency.tenants WHERE role::oid = :dropped_oid;

--
-- A forced collision.  Under weak digests, 17 keys of a scope include two
-- with one digest: the first is served, each later one that shares its
-- digest fails with IK008 -- begin, lookup and forget alike -- and the
-- first still replays its own answer.
--
SET idempotency.inject_fault = weak_digest;
CREATE TEMP TABLE served AS
SELECT g, regress_digest.serve('weak', 'w' || g, jsonb_build_object('n', g)) AS outcome
  FROM generate_series(1, 40) AS g;
SELECT outcome, count(*) > 0 AS some FROM served GROUP BY outcome ORDER BY outcome;
SELECT bool_and(NOT EXISTS (SELECT FROM idempotency.keys AS k WHERE k.scope = 'weak' AND k.key = 'w' || s.g))
           AS no_collided_key_stored
  FROM served AS s
 WHERE s.outcome = 'IK008';
-- The earliest colliding key, and the stored key whose digest it has.
SELECT min(g) AS loser FROM served WHERE outcome = 'IK008' \gset
SELECT key AS winner FROM idempotency.keys
 WHERE scope = 'weak' AND digest = idempotency.key_digest('-', 'weak', 'w' || :loser) \gset
-- (The key's name in the message depends on the secret: shown as w?.)
SELECT regexp_replace(regress_digest.try(format(statement, 'w' || :loser)), '"w[0-9]+"', '"w?"') AS answer
  FROM (VALUES ($$ SELECT idempotency_begin('weak', %L, request_hash('r'::text)) $$),
               ($$ SELECT idempotency_lookup('weak', %L) $$),
               ($$ SELECT idempotency_forget('weak', %L) $$),
               ($$ SELECT idempotency_complete('weak', %L, 200) $$)) AS calls(statement);
SELECT outcome, response_body = jsonb_build_object('n', substr(:'winner', 2)::integer) AS own_answer
  FROM idempotency_begin('weak', :'winner', request_hash('r'::text));
SELECT count(*) = (SELECT count(*) FROM idempotency.keys WHERE scope = 'weak') AS lists_every_stored_key
  FROM idempotency_keys('weak');
RESET idempotency.inject_fault;
-- Keys written under weak digests are not found without them: the hook is
-- for tests only.
SELECT outcome FROM idempotency_lookup('weak', :'winner') AS l(outcome);
DELETE FROM idempotency.keys WHERE scope = 'weak';

--
-- A secret that went missing while keys remain is never replaced: the keys
-- would be unreachable, and claimed anew.
--
-- (A backend that read the secret keeps it: a new session reads the table.)
CREATE TABLE saved_secret AS SELECT secret FROM idempotency.digest_secret;
DELETE FROM idempotency.digest_secret;
\c
-- (A fresh claim's row is written when its transaction commits: the commit fails.)
SELECT outcome FROM idempotency_begin('shop', 'k9', request_hash('r'::text), lease => '1 hour');
SELECT count(*) AS secrets FROM idempotency.digest_secret;
INSERT INTO idempotency.digest_secret SELECT secret FROM saved_secret;
DROP TABLE saved_secret;
\c
SELECT outcome FROM idempotency_begin('shop', 'k1', request_hash('r'::text));

SET client_min_messages = warning;
DROP EXTENSION idempotency;
DROP SCHEMA regress_digest CASCADE;
RESET client_min_messages;
DROP OWNED BY regress_digest_tenant, regress_digest_other;
DROP ROLE regress_digest_tenant, regress_digest_other;
