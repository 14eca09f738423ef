\echo Use "CREATE EXTENSION idempotency" to load this file. \quit

-- ---------------------------------------------------------------------------
-- request_hash: refuse untyped arguments; one name per constructor
-- ---------------------------------------------------------------------------

CREATE FUNCTION @extschema@.request_hash(unknown) RETURNS @extschema@.request_hash
    AS 'MODULE_PATHNAME', 'request_hash_from_unknown' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.request_hash(unknown) IS
    'an untyped argument: 64 hex digits are a digest; anything else is refused (give the argument a type)';
CREATE FUNCTION @extschema@.request_hash_jsonb(jsonb) RETURNS @extschema@.request_hash
    AS 'MODULE_PATHNAME', 'request_hash_from_jsonb' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.request_hash_jsonb(jsonb) IS 'request_hash(jsonb) under a name of its own';
CREATE FUNCTION @extschema@.request_hash_text(text) RETURNS @extschema@.request_hash
    AS 'MODULE_PATHNAME', 'request_hash_from_text' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.request_hash_text(text) IS 'request_hash(text) under a name of its own';
CREATE FUNCTION @extschema@.request_hash_bytea(bytea) RETURNS @extschema@.request_hash
    AS 'MODULE_PATHNAME', 'request_hash_from_bytea' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.request_hash_bytea(bytea) IS 'request_hash(bytea) under a name of its own';
CREATE FUNCTION @extschema@.request_hash_parts(VARIADIC text[]) RETURNS @extschema@.request_hash
    AS 'MODULE_PATHNAME', 'request_hash_from_parts' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.request_hash_parts(VARIADIC text[]) IS 'request_hash(VARIADIC text[]) under a name of its own';

-- ---------------------------------------------------------------------------
-- Storage: the tenant in a column of its own, the lease length, byte bodies,
-- claim data, and expiry to the microsecond
-- ---------------------------------------------------------------------------

-- New columns go after 0.1.0's, in the order of the 0.2.0 install script.  The
-- tenant's default (no tenant) fills the existing rows without rewriting the
-- table.
-- 0.1.0's CHECK constraints on status and attempt go: the library checks
-- both when it reads a version (see the 0.2.0 install script).
ALTER TABLE idempotency.keys
    DROP CONSTRAINT IF EXISTS keys_status_check,
    DROP CONSTRAINT IF EXISTS keys_attempt_check,
    ADD COLUMN tenant pg_catalog.regrole NOT NULL DEFAULT 0,
    ADD COLUMN lease interval,
    ADD COLUMN response_body_bytes bytea,
    ADD COLUMN response_body_omitted boolean,
    ADD COLUMN claim_data jsonb,
    ADD COLUMN sweep_at timestamptz DEFAULT '-infinity';

-- 0.1.0 kept an isolated tenant's keys under the scope '<role oid>/<scope>'.
-- Those move to the tenant column: keys whose prefix is the OID of a role
-- that has idempotency.tenant_isolation = role, for this database or all of
-- them, or of any role when the setting is on for the whole server (as this
-- session sees it).  Other keys, whatever their scope looks like, stay
-- without a tenant.  The primary key is rebuilt around the tenant afterwards,
-- so that a moved key never meets an untenanted one of the same scope.
ALTER TABLE idempotency.keys DROP CONSTRAINT keys_pkey;
WITH isolated AS (
    SELECT r.oid AS role
      FROM pg_catalog.pg_roles AS r
     WHERE pg_catalog.current_setting('idempotency.tenant_isolation', true) OPERATOR(pg_catalog.=) 'role'
        OR EXISTS (
            SELECT
              FROM pg_catalog.pg_db_role_setting AS s
             WHERE s.setrole OPERATOR(pg_catalog.=) r.oid
               AND s.setdatabase OPERATOR(pg_catalog.=) ANY (ARRAY[0::oid,
                   (SELECT d.oid FROM pg_catalog.pg_database AS d
                     WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())])
               AND 'idempotency.tenant_isolation=role' OPERATOR(pg_catalog.=) ANY (s.setconfig))
), prefixed AS (
    SELECT k.ctid AS row,
           pg_catalog.substring(k.scope, '^([0-9]{1,10})/')::bigint AS role,
           pg_catalog.substring(k.scope, '^[0-9]{1,10}/(.*)$') AS scope
      FROM idempotency.keys AS k
     WHERE k.scope OPERATOR(pg_catalog.~) '^[0-9]{1,10}/'
)
UPDATE idempotency.keys AS k
   SET tenant = p.role::oid::pg_catalog.regrole, scope = p.scope
  FROM prefixed AS p
 WHERE k.ctid OPERATOR(pg_catalog.=) p.row
   AND p.role OPERATOR(pg_catalog.<=) 4294967295
   AND p.role::oid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT i.role FROM isolated AS i));

-- The sweep finds records through sweep_at now; 0.1.0's expires_at is
-- already a whole second, and a write keeps it (see the install script).  Filling the column this way rewrites the table
-- once (no dead row versions), under the lock ALTER EXTENSION holds anyway.
DROP INDEX idempotency.keys_expires_at_idx;
ALTER TABLE idempotency.keys
    ALTER COLUMN sweep_at TYPE timestamptz USING expires_at,
    ALTER COLUMN sweep_at SET NOT NULL;
ALTER TABLE idempotency.keys ADD CONSTRAINT keys_pkey PRIMARY KEY (tenant, scope, key);
CREATE INDEX keys_sweep_at_idx ON idempotency.keys (sweep_at);

COMMENT ON TABLE idempotency.keys IS
    'one row per (tenant, scope, key): the claim, its lease and the stored response (status p = in progress, c = completed)';
COMMENT ON COLUMN idempotency.keys.tenant IS
    'the role that owns the key with idempotency.tenant_isolation = role, else 0 (-); dumped as the role''s name';
COMMENT ON COLUMN idempotency.keys.sweep_at IS
    'a whole second 1 to 2 seconds after expires_at: when the expiry sweep looks at the record';
COMMENT ON INDEX idempotency.keys_sweep_at_idx IS 'drives expiry sweeps';

-- ---------------------------------------------------------------------------
-- API
-- ---------------------------------------------------------------------------

ALTER TYPE @extschema@.idempotency_begin_result
    ADD ATTRIBUTE response_body_bytes bytea, ADD ATTRIBUTE response_body_omitted boolean,
    ADD ATTRIBUTE status text, ADD ATTRIBUTE lease_expires_at timestamptz,
    ADD ATTRIBUTE claim_data jsonb;
ALTER TYPE @extschema@.idempotency_lookup_result
    ADD ATTRIBUTE response_body_bytes bytea, ADD ATTRIBUTE response_body_omitted boolean,
    ADD ATTRIBUTE claim_data jsonb, ADD ATTRIBUTE committed boolean;

-- Functions whose arguments or result columns change.  A new argument list
-- makes a new function: each old one steps aside under another name, the new
-- one is created as in the install script, whoever may execute the old one
-- may execute the new one, and the old one goes.
ALTER FUNCTION @extschema@.idempotency_begin(text, text, @extschema@.request_hash, interval, interval, interval)
    RENAME TO idempotency_begin_0_1_0;
ALTER FUNCTION @extschema@.idempotency_complete(text, text, integer, jsonb, jsonb, integer)
    RENAME TO idempotency_complete_0_1_0;
ALTER FUNCTION @extschema@.idempotency_lookup(text, text) RENAME TO idempotency_lookup_0_1_0;
ALTER FUNCTION @extschema@.idempotency_stats() RENAME TO idempotency_stats_0_1_0;

CREATE FUNCTION @extschema@.idempotency_begin(
    scope text, key text, request @extschema@.request_hash,
    ttl interval DEFAULT NULL, lease interval DEFAULT NULL, wait interval DEFAULT NULL,
    claim_data jsonb DEFAULT NULL, take_over_mismatch boolean DEFAULT false)
    RETURNS @extschema@.idempotency_begin_result
    AS 'MODULE_PATHNAME', 'idempotency_begin' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.idempotency_begin(text, text, @extschema@.request_hash, interval, interval, interval, jsonb, boolean) IS
    'claim (scope, key) for this request in the calling transaction, or report its replay, in_progress or mismatch state';

CREATE FUNCTION @extschema@.idempotency_complete(
    scope text, key text, response_status integer,
    response_body jsonb DEFAULT NULL, response_headers jsonb DEFAULT NULL, attempt integer DEFAULT NULL,
    response_body_bytes bytea DEFAULT NULL, replace boolean DEFAULT false)
    RETURNS boolean
    AS 'MODULE_PATHNAME', 'idempotency_complete' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.idempotency_complete(text, text, integer, jsonb, jsonb, integer, bytea, boolean) IS
    'record the response of a claimed key (or, with replace and the attempt, of a completed one); false when a server error (>= 500) was not stored and the claim was dropped instead';

CREATE FUNCTION @extschema@.idempotency_forget(scope text, key text, attempt integer DEFAULT NULL)
    RETURNS boolean
    AS 'MODULE_PATHNAME', 'idempotency_forget' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.idempotency_forget(text, text, integer) IS
    'delete the record of a key (an unfinished claim of another transaction only with its attempt); false when there was none';

-- VOLATILE: with latest => true it reads the newest version, not the
-- statement's snapshot.
CREATE FUNCTION @extschema@.idempotency_lookup(scope text, key text, latest boolean DEFAULT false)
    RETURNS SETOF @extschema@.idempotency_lookup_result
    AS 'MODULE_PATHNAME', 'idempotency_lookup' LANGUAGE C VOLATILE PARALLEL SAFE ROWS 1;
COMMENT ON FUNCTION @extschema@.idempotency_lookup(text, text, boolean) IS
    'the live record of (scope, key) as the statement''s snapshot sees it, or with latest the newest one as idempotency_begin sees it; no row when absent or expired';

CREATE FUNCTION @extschema@.idempotency_keys(
    scope text, after_key text DEFAULT NULL, max_keys integer DEFAULT 100)
    RETURNS TABLE (key text, status text, attempt integer, response_status integer,
                   created_at timestamptz, lease_expires_at timestamptz,
                   completed_at timestamptz, expires_at timestamptz, committed boolean)
    AS 'MODULE_PATHNAME', 'idempotency_keys' LANGUAGE C STABLE PARALLEL SAFE ROWS 100;
COMMENT ON FUNCTION @extschema@.idempotency_keys(text, text, integer) IS
    'a page of the live keys of a scope after after_key, in key order, without bodies';

CREATE FUNCTION @extschema@.idempotency_key_problem(scope text, key text) RETURNS text
    AS 'MODULE_PATHNAME', 'idempotency_key_problem' LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.idempotency_key_problem(text, text) IS
    'what makes a scope and key unacceptable to the other functions (empty, too long, null), or NULL: a 400 without an error';

-- Numbers only (seconds as double precision, times as seconds since the
-- epoch), which exporters such as postgres_exporter can read.
CREATE FUNCTION @extschema@.idempotency_stats(
    OUT preloaded boolean,
    OUT claims bigint, OUT replays bigint, OUT mismatches bigint, OUT in_progress bigint,
    OUT waits bigint, OUT wait_seconds double precision,
    OUT completes bigint, OUT server_errors_dropped bigint, OUT responses_omitted bigint,
    OUT responses_replaced bigint, OUT checkpoints bigint, OUT releases bigint, OUT forgets bigint,
    OUT keys_expired bigint, OUT sweeps bigint,
    OUT last_sweep_time double precision, OUT last_sweep_seconds double precision,
    OUT last_error text, OUT last_error_time double precision)
    AS 'MODULE_PATHNAME', 'idempotency_stats' LANGUAGE C VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.idempotency_stats() IS
    'counters of the whole server since it started; NULL unless the library is in shared_preload_libraries';

REVOKE ALL ON FUNCTION @extschema@.idempotency_begin(text, text, @extschema@.request_hash, interval, interval, interval, jsonb, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idempotency_complete(text, text, integer, jsonb, jsonb, integer, bytea, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idempotency_forget(text, text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idempotency_lookup(text, text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idempotency_keys(text, text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idempotency_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.idempotency_stats() TO pg_monitor;

-- The grants carried over are ordinary grants, which pg_dump keeps: the
-- initial privileges recorded for the extension stay what CREATE EXTENSION
-- itself records, not the grants made here.
DO $$
DECLARE
    replaced CONSTANT text[] := ARRAY[
        'idempotency_begin_0_1_0(text, text, request_hash, interval, interval, interval)',
        'idempotency_begin(text, text, request_hash, interval, interval, interval, jsonb, boolean)',
        'idempotency_complete_0_1_0(text, text, integer, jsonb, jsonb, integer)',
        'idempotency_complete(text, text, integer, jsonb, jsonb, integer, bytea, boolean)',
        'idempotency_lookup_0_1_0(text, text)',
        'idempotency_lookup(text, text, boolean)',
        'idempotency_stats_0_1_0()',
        'idempotency_stats()'];
    old_function regprocedure;
    new_function regprocedure;
    initial aclitem[];
    g record;
BEGIN
    FOR i IN 1 .. pg_catalog.array_length(replaced, 1) BY 2 LOOP
        old_function := replaced[i]::regprocedure;
        new_function := replaced[i + 1]::regprocedure;
        SELECT p.proacl INTO initial FROM pg_catalog.pg_proc AS p WHERE p.oid OPERATOR(pg_catalog.=) new_function;
        FOR g IN
            SELECT a.grantee, a.is_grantable
              FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS a
             WHERE p.oid OPERATOR(pg_catalog.=) old_function
               AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
               AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
        LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s%s', new_function,
                CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                     ELSE g.grantee::regrole::text END,
                CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
        UPDATE pg_catalog.pg_init_privs AS i SET initprivs = initial
         WHERE i.objoid OPERATOR(pg_catalog.=) new_function
           AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::regclass
           AND i.objsubid OPERATOR(pg_catalog.=) 0;
    END LOOP;
END
$$;
DROP FUNCTION @extschema@.idempotency_begin_0_1_0(text, text, @extschema@.request_hash, interval, interval, interval);
DROP FUNCTION @extschema@.idempotency_complete_0_1_0(text, text, integer, jsonb, jsonb, integer);
DROP FUNCTION @extschema@.idempotency_lookup_0_1_0(text, text);
DROP FUNCTION @extschema@.idempotency_stats_0_1_0();
