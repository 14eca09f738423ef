-- What only the SQL edition has (doc/sql-edition.md): its privileges, tenant
-- isolation by the caller's role, the owner's limits, the numbers of the
-- fingerprint rules checked against an independent computation, its
-- statistics, the expiry in batches and its schedule.
\set SHOW_CONTEXT never
CREATE EXTENSION idempotency_sql;

-- Every object of the edition carries a comment (the primary keys' indexes,
-- the trigger's constraint and the types PostgreSQL makes implicitly aside).
SELECT pg_describe_object(d.classid, d.objid, 0) AS uncommented
  FROM pg_depend AS d
 WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'idempotency_sql') AND d.deptype = 'e'
   AND obj_description(d.objid, d.classid::regclass::name) IS NULL
   AND NOT (d.classid = 'pg_type'::regclass AND EXISTS (SELECT FROM pg_type AS t
              WHERE t.oid = d.objid AND (t.typelem <> 0 OR EXISTS (SELECT FROM pg_class AS c
                                                                   WHERE c.oid = t.typrelid AND c.relkind <> 'c'))))
 ORDER BY 1;

--
-- Privileges: EXECUTE is granted by name, as for the extension; the role then
-- needs nothing else, and cannot touch the tables or the private helpers.
--
CREATE ROLE regress_edition_app;
GRANT EXECUTE ON FUNCTION idempotency_begin, idempotency_complete, idempotency_checkpoint,
                          idempotency_release, idempotency_lookup, idempotency_forget,
                          idempotency_keys TO regress_edition_app;
SET ROLE regress_edition_app;
BEGIN;
SELECT outcome FROM idempotency_begin('app', 'k1', request_hash('r'::text));
SELECT idempotency_complete('app', 'k1', 201, '{"done": true}');
COMMIT;
SELECT outcome, response_body FROM idempotency_begin('app', 'k1', request_hash('r'::text));
\set VERBOSITY sqlstate
SELECT count(*) FROM idempotency.keys;
SELECT idempotency.lock_key(1);
SELECT idempotency.current_record(0, 'app', 'k1');
SELECT idempotency_tenant_isolation('regress_edition_app');
SELECT idempotency_expire();
UPDATE idempotency.settings SET max_key_length = 1024;
\set VERBOSITY default
-- What the type's constructors and idempotency_key_problem call is the
-- caller's to call; so are the limits, which are not secret.
SELECT request_hash_body('application/json', '{"a": 1}') = request_hash('{"a": 1}'::jsonb) AS body_hashed;
SELECT idempotency_key_problem('app', '') AS problem;
SELECT count(*) AS readable_limits FROM idempotency.settings;
RESET ROLE;
SELECT p.proname AS public_helper
  FROM pg_proc AS p
 WHERE p.pronamespace = 'idempotency'::regnamespace AND has_function_privilege('public', p.oid, 'EXECUTE')
 ORDER BY 1;
SELECT c.relname, has_table_privilege('public', c.oid, 'SELECT') AS public_reads,
       has_table_privilege('public', c.oid, 'INSERT, UPDATE, DELETE') AS public_writes
  FROM pg_class AS c
 WHERE c.relnamespace = 'idempotency'::regnamespace AND c.relkind = 'r'
 ORDER BY 1;

--
-- Tenant isolation: a role in idempotency.tenants (idempotency_tenant_isolation)
-- owns every key it claims.  The tenant is the session's role -- SET ROLE, or
-- the session user -- which only PostgreSQL's role checks change: no setting
-- a role can SET reaches another role's keys.
--
CREATE ROLE regress_edition_a;
CREATE ROLE regress_edition_b;
GRANT regress_edition_app TO regress_edition_a, regress_edition_b;
SELECT idempotency_tenant_isolation('regress_edition_a');
SELECT idempotency_tenant_isolation('regress_edition_b', 'role');
SELECT idempotency_tenant_isolation('regress_edition_b', 'role');
SELECT tenant FROM idempotency.tenants ORDER BY 1;
SET ROLE regress_edition_a;
BEGIN;
SELECT outcome FROM idempotency_begin('orders', 'k', request_hash('a''s request'::text), claim_data => '{"holder": "a"}');
SELECT idempotency_complete('orders', 'k', 201, '{"tenant": "a"}');
COMMIT;
SELECT outcome, response_body FROM idempotency_begin('orders', 'k', request_hash('a''s request'::text));
-- b sees nothing of a's key: no replay, no mismatch, no row; its own request
-- claims its own key, and its listing, forget and lookups reach only its own.
SET ROLE regress_edition_b;
SELECT * FROM idempotency_lookup('orders', 'k');
SELECT * FROM idempotency_lookup('orders', 'k', latest => true);
BEGIN;
SELECT outcome, attempt FROM idempotency_begin('orders', 'k', request_hash('a''s request'::text));
SELECT outcome, attempt FROM idempotency_begin('orders', 'k', request_hash('b''s request'::text));
ROLLBACK;
SELECT outcome FROM idempotency_begin('orders', 'k', request_hash('b''s request'::text), lease => '1 hour');
SELECT key, status FROM idempotency_keys('orders');
SELECT idempotency_forget('orders', 'k', attempt => 1);
SELECT idempotency_forget('orders', 'k');
-- Nor does any setting a role may SET: the tenant is the role.
SET app.tenant = 'regress_edition_a';
SELECT * FROM idempotency_lookup('orders', 'k');
RESET app.tenant;
-- a still gets its own response, and a role without isolation none of it.
SET ROLE regress_edition_a;
SELECT outcome, response_body FROM idempotency_begin('orders', 'k', request_hash('a''s request'::text));
SET ROLE regress_edition_app;
SELECT * FROM idempotency_lookup('orders', 'k');
RESET ROLE;
SELECT tenant, scope, key, status FROM idempotency.keys WHERE scope = 'orders' ORDER BY 1;
-- Isolation off again: the role's keys are those of no tenant from then on.
SELECT idempotency_tenant_isolation('regress_edition_a', 'off');
\set VERBOSITY sqlstate
SELECT idempotency_tenant_isolation('regress_edition_a', 'sometimes');
SELECT idempotency_tenant_isolation(NULL);
\set VERBOSITY default
SET ROLE regress_edition_a;
SELECT * FROM idempotency_lookup('orders', 'k');
RESET ROLE;
-- The keys of a dropped role belong to no one: the next sweep deletes them,
-- and the role leaves idempotency.tenants with them.
SET ROLE regress_edition_b;
SELECT outcome FROM idempotency_begin('orders', 'gone', request_hash('r'::text), lease => '1 hour');
RESET ROLE;
DROP OWNED BY regress_edition_b;
DROP ROLE regress_edition_b;
SELECT idempotency_expire() AS swept;
SELECT count(*) AS left_of_b FROM idempotency.keys WHERE key = 'gone';
SELECT count(*) AS tenants FROM idempotency.tenants;

--
-- The owner's limits: a row of idempotency.settings, which only the owner may
-- write.  A session's settings of the extension's names lower them, never
-- raise them.
--
INSERT INTO idempotency.settings (max_key_length, max_response_bytes) VALUES (8, 60);
SET ROLE regress_edition_app;
\set VERBOSITY terse
SELECT idempotency_begin('app', '123456789', request_hash('r'::text));
SELECT idempotency_key_problem('app', '123456789') AS problem;
RESET ROLE;
SET idempotency.max_key_length = 4;
SET ROLE regress_edition_app;
SELECT idempotency_begin('app', '12345', request_hash('r'::text));
RESET ROLE;
SET idempotency.max_key_length = 100;
SET ROLE regress_edition_app;
SELECT idempotency_begin('app', '123456789', request_hash('r'::text));
RESET ROLE;
RESET idempotency.max_key_length;
SET ROLE regress_edition_app;
BEGIN;
SELECT outcome FROM idempotency_begin('app', 'big', request_hash('r'::text));
SELECT idempotency_complete('app', 'big', 200, jsonb_build_object('pad', repeat('x', 100)));
ROLLBACK;
\set VERBOSITY default
RESET ROLE;
UPDATE idempotency.settings SET max_key_length = 2048;
DELETE FROM idempotency.settings;
-- Without the row, the defaults again, in the same session.
SET ROLE regress_edition_app;
BEGIN;
SELECT outcome FROM idempotency_begin('app', '123456789', request_hash('r'::text));
ROLLBACK;
RESET ROLE;
-- A session's setting is checked when a call reads it (nothing checks a SET
-- of a name no library defines), and once reset it reads as empty: not set.
\set VERBOSITY terse
SET idempotency.max_key_length = 'long';
SELECT idempotency_begin('app', 'k', request_hash('r'::text));
SELECT idempotency_key_problem('app', 'k');
SET idempotency.max_key_length = 2000;
SELECT idempotency_begin('app', 'k', request_hash('r'::text));
RESET idempotency.max_key_length;
SET idempotency.max_response_bytes = 'a lot';
BEGIN;
SELECT outcome FROM idempotency_begin('app', 'k', request_hash('r'::text));
SELECT idempotency_complete('app', 'k', 200, '{}');
ROLLBACK;
RESET idempotency.max_response_bytes;
SET idempotency.default_ttl = 0;
SELECT idempotency_begin('app', 'k', request_hash('r'::text));
RESET idempotency.default_ttl;
SELECT current_setting('idempotency.max_key_length') AS reset_reads_as;
BEGIN;
SELECT outcome FROM idempotency_begin('app', 'k', request_hash('r'::text));
SELECT idempotency_complete('app', 'k', 200, '{}');
ROLLBACK;
\set VERBOSITY default

--
-- The fingerprint rules of 0.5.0, against digests computed outside
-- PostgreSQL (SHA-256 of the encoding the rules describe): a number beyond
-- the short form hashes its binary form, a short one its text, and a body
-- that starts with the reserved prefix is kept apart from every encoding.
--
SELECT request_hash('[1e131000]'::jsonb) = 'e17d3712076f05078f807dce2cc04953d9e0c31adb6cc3fbcd144d0b8a76a3c0' AS long_number,
       request_hash('[1.50]'::jsonb) = '475425de169e162b46d14061bfea84472d8c556d164bba0fcd2ab4fd33f9800a' AS short_number,
       request_hash_body('text/plain', 'idempotency.request_hash.x')
           = 'f04aa82973e53312530ce6635aa3669455d1d277dea6d372c73e104a5fe78a73' AS reserved_prefix;

--
-- idempotency_keys lists a scope's live keys in key order (bytewise, not
-- the database's collation), where the extension lists them in its
-- digests' order (doc/sql-edition.md's table): each page starts after the
-- last key, listed or not.
--
BEGIN;
SELECT count(*) AS claimed
  FROM unnest(ARRAY['b', 'a', 'B', 'c', 'é', 'd']) AS k,
       idempotency_begin('list', k, request_hash('r'::text), lease => '1 hour') AS b
 WHERE b.outcome = 'claimed';
SELECT array_agg(key) AS listed FROM idempotency_keys('list');
SELECT array_agg(key) AS page_after_a FROM idempotency_keys('list', after_key => 'a', max_keys => 2);
SELECT array_agg(key) AS after_unlisted_bz FROM idempotency_keys('list', after_key => 'bz');
ROLLBACK;

--
-- Statistics: none kept, as the extension without shared_preload_libraries.
--
SELECT preloaded, claims IS NULL AS no_counters FROM idempotency_stats();

--
-- Expiry in batches, each its own transaction (what pg_cron runs), and its
-- schedule, which needs pg_cron in this database.
--
BEGIN;
SELECT count(*) FILTER (WHERE outcome = 'claimed') AS claimed
  FROM generate_series(1, 5) AS n, idempotency_begin('gc', 'k' || n, request_hash('r'::text), lease => '1 minute');
UPDATE idempotency.keys SET expires_at = now() - interval '1 hour', lease_expires_at = now() - interval '1 hour'
 WHERE scope = 'gc';
COMMIT;
CALL idempotency_expire_batches(2);
SELECT count(*) AS left_to_expire FROM idempotency.keys WHERE scope = 'gc';
SELECT scope, in_progress, completed FROM idempotency_scope_stats() ORDER BY scope;
\set VERBOSITY terse
CALL idempotency_expire_batches(0);
BEGIN;
CALL idempotency_expire_batches();
ROLLBACK;
\set VERBOSITY default
SELECT idempotency_schedule_expiry();
SELECT idempotency_unschedule_expiry() AS unscheduled;

DROP OWNED BY regress_edition_a, regress_edition_app;
DROP ROLE regress_edition_a, regress_edition_app;
DROP EXTENSION idempotency_sql;
