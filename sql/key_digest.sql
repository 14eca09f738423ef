-- The keys' primary key is (digest, tenant), the digest a 128-bit keyed hash
-- of (scope, key) under a secret of the database (src/key_digest.hpp): the
-- secret, the function that
-- computes a digest, and a collision -- forced with
-- idempotency.inject_fault = weak_digest, a test hook that leaves a scope 16
-- digests -- which is an error (IK008), never an answer about the other key.
SET client_min_messages = error;
CREATE EXTENSION idempotency;
RESET client_min_messages;

CREATE FUNCTION pg_temp.try(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

CREATE FUNCTION pg_temp.serve(scope text, key text, body jsonb) RETURNS text
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
SELECT pg_temp.serve('shop', 'k1', '{"n": 1}');
SELECT 'idempotency.digest_secret'::regclass = ANY (extconfig) AS dumped
  FROM pg_extension WHERE extname = 'idempotency';
BEGIN;
INSERT INTO idempotency.digest_secret VALUES ('0123456789abcdef');
SELECT count(*) AS secrets, string_agg(encode(secret, 'escape'), ',') AS secret FROM idempotency.digest_secret;
ROLLBACK;

--
-- idempotency.key_digest is the digest the library stores a key under;
-- a scope's keys share the first four bytes; two tenants' keys of one scope
-- and key are two records.
--
SELECT pg_temp.serve('shop', 'k' || g, '{}') FROM generate_series(2, 4) AS g;
SELECT bool_and(digest = idempotency.key_digest(scope, key)) AS same_digest,
       count(DISTINCT substr(uuid_send(digest), 1, 4)) AS scope_prefixes
  FROM idempotency.keys WHERE scope = 'shop';
SELECT idempotency.key_digest('shop', 'k1') <> idempotency.key_digest('shopk', '1') AS boundary_kept;
SELECT has_function_privilege('public', 'idempotency.key_digest(text, text)', 'EXECUTE') AS public_may_call;
CREATE ROLE regress_digest_tenant;
GRANT EXECUTE ON FUNCTION idempotency_begin, idempotency_complete TO regress_digest_tenant;
SET idempotency.tenant_isolation = role;
SET ROLE regress_digest_tenant;
SELECT pg_temp.serve('shop', 'k1', '{"n": "tenant"}');
SELECT outcome, response_body FROM idempotency_begin('shop', 'k1', request_hash('r'::text));
RESET ROLE;
RESET idempotency.tenant_isolation;
SELECT tenant::text = '-' AS no_tenant, response_body FROM idempotency.keys
 WHERE scope = 'shop' AND key = 'k1' ORDER BY tenant::text = '-';

--
-- A forced collision.  Under weak digests, 17 keys of a scope include two
-- with one digest: the first is served, each later one that shares its
-- digest fails with IK008 -- begin, lookup and forget alike -- and the
-- first still replays its own answer.
--
SET idempotency.inject_fault = weak_digest;
CREATE TEMP TABLE served AS
SELECT g, pg_temp.serve('weak', 'w' || g, jsonb_build_object('n', g)) AS outcome
  FROM generate_series(1, 40) AS g;
SELECT outcome, count(*) > 0 AS some FROM served GROUP BY outcome ORDER BY outcome;
SELECT bool_and(NOT EXISTS (SELECT FROM idempotency.keys AS k WHERE k.scope = 'weak' AND k.key = 'w' || s.g))
           AS no_collided_key_stored
  FROM served AS s
 WHERE s.outcome = 'IK008';
-- The earliest colliding key, and the stored key whose digest it has.
SELECT min(g) AS loser FROM served WHERE outcome = 'IK008' \gset
SELECT key AS winner FROM idempotency.keys
 WHERE scope = 'weak' AND digest = idempotency.key_digest('weak', 'w' || :loser) \gset
-- (The key's name in the message depends on the secret: shown as w?.)
SELECT regexp_replace(pg_temp.try(format(statement, 'w' || :loser)), '"w[0-9]+"', '"w?"') AS answer
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

DROP EXTENSION idempotency;
DROP OWNED BY regress_digest_tenant;
DROP ROLE regress_digest_tenant;
