-- The move from the SQL edition to the C++ extension, on the same database,
-- with every key, record, answer, tenant and grant kept (doc/sql-edition.md,
-- "Moving to the extension").  edition/generate writes it, with the plain
-- install's objects in place of the line that names them, as
-- idempotency_sql.move-to-extension.sql.  Run it as a superuser, once the
-- extension's library is installed (and in shared_preload_libraries):
--   psql -v schema=NAME -f idempotency_sql.move-to-extension.sql
-- where NAME is the schema of the edition's functions (default public).
--
-- One transaction: it waits for every transaction using the keys (an
-- ACCESS EXCLUSIVE lock, which also holds new calls until it commits), copies
-- the rows aside, removes the edition, creates the extension in the same
-- schema and writes the rows into its table -- or, on any error, changes
-- nothing.
\set ON_ERROR_STOP on
\if :{?schema}
\else
\set schema public
\endif
BEGIN;
SET LOCAL search_path = :"schema";
SET LOCAL client_min_messages = warning;

-- Which install: the extension (from its directory or pg_tle), or the plain
-- script (its version table).
SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'idempotency_sql')
           AS edition_extension,
       pg_catalog.to_regclass('idempotency.installed') IS NOT NULL AS edition_plain \gset
\if :edition_extension
\elif :edition_plain
\else
DO $$
BEGIN
    RAISE EXCEPTION 'there is no SQL edition of idempotency in this database'
        USING ERRCODE = 'object_not_in_prerequisite_state';
END
$$;
\endif

LOCK TABLE idempotency.keys IN ACCESS EXCLUSIVE MODE;

-- What moves: the rows, the tenants, the owner's limits, and who may execute
-- the API functions.  The keys and the isolation of a role dropped since
-- stay behind, as the edition's next expiry would have deleted them: no one
-- can reach them, and the extension has no setting for a role that does not
-- exist.
CREATE TEMPORARY TABLE moved_keys ON COMMIT DROP AS
    SELECT * FROM idempotency.keys AS k
     WHERE k.tenant::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
        OR EXISTS (SELECT FROM pg_catalog.pg_roles AS r WHERE r.oid OPERATOR(pg_catalog.=) k.tenant::pg_catalog.oid);
CREATE TEMPORARY TABLE moved_tenants ON COMMIT DROP AS
    SELECT t.tenant FROM idempotency.tenants AS t
     WHERE EXISTS (SELECT FROM pg_catalog.pg_roles AS r WHERE r.oid OPERATOR(pg_catalog.=) t.tenant::pg_catalog.oid);
CREATE TEMPORARY TABLE moved_settings ON COMMIT DROP AS SELECT * FROM idempotency.settings;
CREATE TEMPORARY TABLE moved_grants ON COMMIT DROP AS
    SELECT DISTINCT p.proname, a.grantee, a.is_grantable
      FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS a
     WHERE p.pronamespace OPERATOR(pg_catalog.=) :'schema'::pg_catalog.regnamespace
       AND p.proname OPERATOR(pg_catalog.~) '^idempotency_'
       AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
       AND a.grantee OPERATOR(pg_catalog.<>) p.proowner;

-- The edition's expiry job (pg_cron in this database): the extension's worker
-- expires keys from now on, and the job would fail every minute.
SELECT pg_catalog.to_regclass('cron.job') IS NOT NULL AS cron_here \gset
\if :cron_here
SELECT cron.unschedule(j.jobid) FROM cron.job AS j
 WHERE j.jobname OPERATOR(pg_catalog.=) 'idempotency expiry in ' OPERATOR(pg_catalog.||) pg_catalog.current_database();
\endif

-- The edition goes.
\if :edition_extension
DROP EXTENSION idempotency_sql;
\else
-- @drop-plain-install@
\endif

CREATE EXTENSION idempotency SCHEMA :"schema";

-- The keys, in the extension's layout: the one place that writes them.  A
-- claim moves with its attempt, lease, recovery point and claim data, a
-- response with its status, headers and body, and each key keeps its
-- tenant, times and expiry.  (The edition's writer and unsettled_since have
-- no counterpart: every moved row is committed and settled.)  The extension
-- stores a key under its digest, which only the extension computes
-- (idempotency.key_digest: this database's secret, the tenant's number in
-- idempotency.tenants, made on first use), as doc/operations.md's "Moving
-- keys in" says; the tenants are numbered first, in the order of their
-- roles, as the update to 0.5.0 numbers them.
SELECT pg_catalog.count(idempotency.key_digest(t.tenant, '', '')) AS tenants_numbered
  FROM (SELECT m.tenant FROM moved_keys AS m
         WHERE m.tenant::pg_catalog.oid OPERATOR(pg_catalog.<>) 0::pg_catalog.oid
         GROUP BY m.tenant ORDER BY m.tenant::pg_catalog.oid) AS t \gset
INSERT INTO idempotency.keys (digest, tenant, scope, key, request, created_at, ttl, expires_at, status, attempt,
                              lease_expires_at, completed_at, response_status, recovery_point, response_body,
                              response_headers, lease, response_body_bytes, response_body_omitted, claim_data)
SELECT idempotency.key_digest(m.tenant, m.scope, m.key), m.tenant, m.scope, m.key, m.request::request_hash,
       m.created_at, m.ttl, m.expires_at, m.status, m.attempt,
       m.lease_expires_at, m.completed_at, m.response_status, m.recovery_point, m.response_body,
       m.response_headers, m.lease, m.response_body_bytes, m.response_body_omitted, m.claim_data
  FROM moved_keys AS m;

-- Tenant isolation: each role of idempotency.tenants gets the extension's
-- setting in this database; the owner's limits become the database's.
SELECT pg_catalog.format('ALTER ROLE %I IN DATABASE %I SET idempotency.tenant_isolation = role',
                         t.tenant::pg_catalog.text, pg_catalog.current_database())
  FROM moved_tenants AS t \gexec
SELECT pg_catalog.format('ALTER DATABASE %I SET idempotency.max_key_length = %s',
                         pg_catalog.current_database(), s.max_key_length),
       pg_catalog.format('ALTER DATABASE %I SET idempotency.max_response_bytes = %s',
                         pg_catalog.current_database(), s.max_response_bytes)
  FROM moved_settings AS s \gexec

-- Grants, by name, as doc/reference.md makes them.
SELECT pg_catalog.format('GRANT EXECUTE ON FUNCTION %I.%I TO %s%s', :'schema', g.proname,
                         CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                              ELSE pg_catalog.quote_ident(g.grantee::pg_catalog.regrole::pg_catalog.text) END,
                         CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
  FROM moved_grants AS g
 WHERE EXISTS (SELECT FROM pg_catalog.pg_proc AS p
                WHERE p.pronamespace OPERATOR(pg_catalog.=) :'schema'::pg_catalog.regnamespace
                  AND p.proname OPERATOR(pg_catalog.=) g.proname) \gexec

SELECT pg_catalog.count(*) AS keys_moved FROM idempotency.keys \gset
\echo move-to-extension: :keys_moved keys now in the extension idempotency
COMMIT;
