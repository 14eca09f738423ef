-- A hostile search_path: a schema placed before pg_catalog shadows the
-- operators and functions an extension might use by name, and holds tables
-- named like its storage.  Creating the extension and calling every function
-- under that path runs none of that code, touches none of those tables and
-- gives the right answers.
--
-- Every trap records itself in evil.probe; nothing may be recorded.  Until the
-- path is reset, the queries below use no unqualified operator or function of
-- their own (they would be caught too), so they only print results.

CREATE SCHEMA evil;
CREATE TABLE evil.probe (trap text);

-- Each trap notes its name and then does what the real one would do.  Its own
-- search_path keeps it from calling itself.
CREATE FUNCTION evil.caught(trap text) RETURNS void LANGUAGE sql
    SET search_path = pg_catalog AS $$ INSERT INTO evil.probe VALUES (trap) $$;
CREATE FUNCTION evil.text_eq(a text, b text) RETURNS boolean LANGUAGE plpgsql
    SET search_path = pg_catalog AS $$
BEGIN PERFORM evil.caught('= (text, text)'); RETURN a OPERATOR(pg_catalog.=) b; END $$;
CREATE FUNCTION evil.char_eq(a "char", b "char") RETURNS boolean LANGUAGE plpgsql
    SET search_path = pg_catalog AS $$
BEGIN PERFORM evil.caught('= ("char", "char")'); RETURN a OPERATOR(pg_catalog.=) b; END $$;
CREATE FUNCTION evil.bytea_eq(a bytea, b bytea) RETURNS boolean LANGUAGE plpgsql
    SET search_path = pg_catalog AS $$
BEGIN PERFORM evil.caught('= (bytea, bytea)'); RETURN a OPERATOR(pg_catalog.=) b; END $$;
CREATE FUNCTION evil.timestamptz_le(a timestamptz, b timestamptz) RETURNS boolean LANGUAGE plpgsql
    SET search_path = pg_catalog AS $$
BEGIN PERFORM evil.caught('<= (timestamptz, timestamptz)'); RETURN a OPERATOR(pg_catalog.<=) b; END $$;
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.text_eq);
CREATE OPERATOR evil.= (LEFTARG = "char", RIGHTARG = "char", FUNCTION = evil.char_eq);
CREATE OPERATOR evil.= (LEFTARG = bytea, RIGHTARG = bytea, FUNCTION = evil.bytea_eq);
CREATE OPERATOR evil.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = evil.timestamptz_le);

CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE plpgsql
    SET search_path = pg_catalog AS $$
BEGIN PERFORM evil.caught('now()'); RETURN pg_catalog.now(); END $$;
CREATE FUNCTION evil.lower(t text) RETURNS text LANGUAGE plpgsql
    SET search_path = pg_catalog AS $$
BEGIN PERFORM evil.caught('lower(text)'); RETURN pg_catalog.lower(t); END $$;
CREATE FUNCTION evil.jsonb_build_object(VARIADIC args text[]) RETURNS jsonb LANGUAGE plpgsql
    SET search_path = pg_catalog AS $$
BEGIN PERFORM evil.caught('jsonb_build_object(text[])'); RETURN pg_catalog.jsonb_object(args); END $$;
CREATE FUNCTION evil.pg_extension_config_dump(regclass, text) RETURNS void LANGUAGE plpgsql
    SET search_path = pg_catalog AS $$
BEGIN PERFORM evil.caught('pg_extension_config_dump'); END $$;
-- The aggregates idempotency_scope_stats_refresh() uses.
CREATE FUNCTION evil.count_step(n bigint) RETURNS bigint LANGUAGE plpgsql
    SET search_path = pg_catalog AS $$
BEGIN PERFORM evil.caught('count(*)'); RETURN n + 1; END $$;
CREATE AGGREGATE evil.count(*) (SFUNC = evil.count_step, STYPE = bigint, INITCOND = '0');
CREATE FUNCTION evil.min_step(m timestamptz, t timestamptz) RETURNS timestamptz LANGUAGE plpgsql
    SET search_path = pg_catalog AS $$
BEGIN PERFORM evil.caught('min(timestamptz)');
RETURN CASE WHEN m IS NULL OR t OPERATOR(pg_catalog.<) m THEN t ELSE m END; END $$;
CREATE AGGREGATE evil.min(timestamptz) (SFUNC = evil.min_step, STYPE = timestamptz);
CREATE AGGREGATE evil.max(timestamptz) (SFUNC = evil.min_step, STYPE = timestamptz);
-- What idempotency_scope_stats() computes the ages with.
CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql
    SET search_path = pg_catalog AS $$
BEGIN PERFORM evil.caught('clock_timestamp()'); RETURN pg_catalog.clock_timestamp(); END $$;
CREATE FUNCTION evil.date_part(f text, i interval) RETURNS double precision LANGUAGE plpgsql
    SET search_path = pg_catalog AS $$
BEGIN PERFORM evil.caught('date_part(text, interval)'); RETURN pg_catalog.date_part(f, i); END $$;

-- Look-alike storage holding a completed response for the key used below: if
-- the extension read these tables, begin would replay instead of claiming.
-- Any write to them is caught too.
CREATE TABLE evil.keys (
    scope text, key text, request bytea, created_at timestamptz, ttl interval,
    expires_at timestamptz, status "char", attempt integer, lease_expires_at timestamptz,
    completed_at timestamptz, response_status integer, recovery_point text,
    response_body jsonb, response_headers jsonb);
INSERT INTO evil.keys VALUES ('shop', 'k1', sha256('r'), now(), '1 day', now() + '1 day', 'c', 1,
    NULL, now(), 200, NULL, '{"from": "evil"}', NULL);
CREATE TABLE evil.idempotency_keys (key text, request bytea, response jsonb);
INSERT INTO evil.idempotency_keys VALUES ('k1', sha256('r'), '{"from": "evil"}');
CREATE FUNCTION evil.write_caught() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog AS $$
BEGIN PERFORM evil.caught(TG_OP || ' on ' || TG_TABLE_NAME); RETURN NULL; END $$;
CREATE TRIGGER caught AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON evil.keys
    FOR EACH STATEMENT EXECUTE FUNCTION evil.write_caught();
CREATE TRIGGER caught AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON evil.idempotency_keys
    FOR EACH STATEMENT EXECUTE FUNCTION evil.write_caught();

SET search_path = evil, pg_catalog, public;

-- The traps work: unqualified names in plain SQL do reach them.
SELECT 'a'::text = 'a'::text AS text_equal, 'p'::"char" = 'p'::"char" AS char_equal,
       '\x00'::bytea = '\x00'::bytea AS bytea_equal, now() <= now() AS not_later,
       lower('A') AS lowered, jsonb_build_object('a', 'b') AS built;
SELECT count(*) AS counted, min(t) IS NOT NULL AS has_min FROM (VALUES (now())) AS v(t);
SELECT DISTINCT trap FROM evil.probe ORDER BY trap;
TRUNCATE evil.probe;

--
-- Under that path: install, then call everything.
--
CREATE SCHEMA app;
-- (Quietly: without shared_preload_libraries it warns; t/001_preload.pl tests that.)
SET client_min_messages = error;
CREATE EXTENSION idempotency SCHEMA app;
RESET client_min_messages;

-- Now that the type exists, a trap for its = too; app is not on the path, so
-- an unqualified = between two hashes finds the trap.
CREATE FUNCTION evil.hash_eq(a app.request_hash, b app.request_hash) RETURNS boolean
    LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN PERFORM evil.caught('= (request_hash, request_hash)'); RETURN a OPERATOR(app.=) b; END $$;
CREATE OPERATOR evil.= (LEFTARG = app.request_hash, RIGHTARG = app.request_hash,
                        FUNCTION = evil.hash_eq);
SELECT app.request_hash('a'::text) = app.request_hash('a'::text) AS hash_equal;
SELECT trap FROM evil.probe;
TRUNCATE evil.probe;

-- The constructors and the text form (known answers: SHA-256 of "abc", and
-- the pinned canonical hash of {"a":1} from the type test).
SELECT app.request_hash('abc'::text) AS from_text,
       app.request_hash('\x616263'::bytea) AS from_bytea;
SELECT app.request_hash('{"a":1}'::jsonb) AS from_jsonb;
SELECT app.request_hash('GET', '/orders', NULL) AS from_parts,
       app.request_hash(VARIADIC ARRAY['GET', '/orders', NULL]) AS from_array;
SELECT 'BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD'::app.request_hash
           AS text_input,
       app.request_hash('abc'::text)::bytea AS cast_to_bytea,
       '\xba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad'::bytea::app.request_hash
           AS cast_from_bytea,
       app.request_hash_digest(app.request_hash_from_digest(sha256('abc'))) AS digest_round_trip;
SELECT app.request_hash_send(app.request_hash('abc'::text)) AS sent;
-- Operators, comparison and hash support.
SELECT app.request_hash('a'::text) OPERATOR(app.=) app.request_hash('a'::text) AS eq,
       app.request_hash('a'::text) OPERATOR(app.<>) app.request_hash('b'::text) AS ne,
       app.request_hash('a'::text) OPERATOR(app.<) app.request_hash('b'::text) AS lt,
       app.request_hash('a'::text) OPERATOR(app.<=) app.request_hash('b'::text) AS le,
       app.request_hash('a'::text) OPERATOR(app.>) app.request_hash('b'::text) AS gt,
       app.request_hash('a'::text) OPERATOR(app.>=) app.request_hash('b'::text) AS ge,
       app.request_hash_cmp(app.request_hash('a'::text), app.request_hash('b'::text)) AS cmp,
       app.request_hash_hash(app.request_hash('a'::text)) IS NOT NULL AS hashed,
       app.request_hash_hash_extended(app.request_hash('a'::text), 1) IS NOT NULL AS hashed_extended;
-- Sorting and DISTINCT find the operator class through the type, not by name.
SELECT DISTINCT h FROM (VALUES (app.request_hash('b'::text)), (app.request_hash('a'::text)),
                               (app.request_hash('b'::text))) AS v(h)
 ORDER BY h;

-- The API: a one-phase request, a two-phase one, lookups, expiry, statistics.
BEGIN;
SELECT outcome, attempt FROM app.idempotency_begin('shop', 'k1', app.request_hash('r'::text));
SELECT app.idempotency_complete('shop', 'k1', 201, '{"order": 1}', '{"Location": "/orders/1"}');
COMMIT;
SELECT outcome, response_status, response_body, response_headers
  FROM app.idempotency_begin('shop', 'k1', app.request_hash('r'::text));
SELECT outcome FROM app.idempotency_begin('shop', 'k1', app.request_hash('other'::text));
SELECT outcome, attempt FROM app.idempotency_begin('pay', 'p1', app.request_hash('r'::text),
                                                   ttl => '1 hour', lease => '1 hour', wait => '0');
SELECT outcome FROM app.idempotency_begin('pay', 'p1', app.request_hash('r'::text));
SELECT app.idempotency_checkpoint('pay', 'p1', 'step 1', lease => '1 hour', attempt => 1)
       IS NOT NULL AS checkpointed;
SELECT app.idempotency_release('pay', 'p1', attempt => 1);
SELECT outcome, attempt, recovery_point
  FROM app.idempotency_begin('pay', 'p1', app.request_hash('r'::text), lease => '1 hour');
SELECT app.idempotency_complete('pay', 'p1', 503, attempt => 2) AS stored;
SELECT status, attempt, response_status, response_body, recovery_point
  FROM app.idempotency_lookup('shop', 'k1');
SELECT status FROM app.idempotency_lookup('pay', 'p1');
SELECT app.idempotency_scope_stats_refresh() AS scopes;
SELECT scope, in_progress, completed, expired, oldest_claim_age_seconds IS NOT NULL AS has_oldest,
       oldest_in_progress_age_seconds IS NOT NULL AS has_in_progress,
       summary_age_seconds IS NOT NULL AS has_age
  FROM app.idempotency_scope_stats();
SELECT preloaded OPERATOR(pg_catalog.=) (pg_catalog.current_setting('shared_preload_libraries')
           OPERATOR(pg_catalog.~) '(^|[\s,/"])idempotency(\.so)?($|[\s,"])') AS preloaded_as_configured,
       CASE WHEN preloaded THEN claims OPERATOR(pg_catalog.>) 0 ELSE claims IS NULL END AS counted
  FROM app.idempotency_stats();
-- (One transaction, so that the background worker cannot expire k1 first.)
BEGIN;
UPDATE idempotency.keys SET expires_at = pg_catalog.now() OPERATOR(pg_catalog.-) interval '1 day'
 WHERE key OPERATOR(pg_catalog.=) 'k1';
SELECT app.idempotency_scope_stats_refresh() AS scopes;
SELECT expired FROM app.idempotency_scope_stats();
SELECT app.idempotency_expire() AS expired_now, app.idempotency_expire(10) AS expired_again;
COMMIT;

RESET search_path;

--
-- Nothing of evil ran or was touched, and the results were right.
--
SELECT trap FROM evil.probe ORDER BY trap;
SELECT (SELECT count(*) FROM evil.keys) AS evil_keys,
       (SELECT count(*) FROM evil.idempotency_keys) AS evil_idempotency_keys;
SELECT scope, key, status, attempt, response_status, response_body
  FROM idempotency.keys ORDER BY scope, key;
-- No object of the extension refers to anything in evil.
SELECT pg_describe_object(classid, objid, objsubid) AS member,
       pg_describe_object(refclassid, refobjid, refobjsubid) AS refers_to
  FROM pg_depend
 WHERE (pg_identify_object(refclassid, refobjid, refobjsubid)).schema = 'evil'
   AND (pg_identify_object(classid, objid, objsubid)).schema IN ('app', 'idempotency');

SET client_min_messages = warning;
DROP SCHEMA evil CASCADE;
RESET client_min_messages;
DROP EXTENSION idempotency;
DROP SCHEMA app;
