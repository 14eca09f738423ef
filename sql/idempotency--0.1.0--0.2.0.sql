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

-- Functions whose arguments or result columns change (idempotency_scope_stats
-- reads a summary now, and answers in numbers).  A new argument list
-- makes a new function: each old one steps aside under another name, the new
-- one is created as in the install script, whoever may execute the old one
-- may execute the new one, and the old one goes.
ALTER FUNCTION @extschema@.idempotency_begin(text, text, @extschema@.request_hash, interval, interval, interval)
    RENAME TO idempotency_begin_0_1_0;
ALTER FUNCTION @extschema@.idempotency_complete(text, text, integer, jsonb, jsonb, integer)
    RENAME TO idempotency_complete_0_1_0;
ALTER FUNCTION @extschema@.idempotency_lookup(text, text) RENAME TO idempotency_lookup_0_1_0;
ALTER FUNCTION @extschema@.idempotency_stats() RENAME TO idempotency_stats_0_1_0;
ALTER FUNCTION @extschema@.idempotency_scope_stats() RENAME TO idempotency_scope_stats_0_1_0;

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
    OUT deferred_claims bigint, OUT deferred_fallbacks bigint,
    OUT last_sweep_time double precision, OUT last_sweep_seconds double precision,
    OUT last_error text, OUT last_error_time double precision)
    AS 'MODULE_PATHNAME', 'idempotency_stats' LANGUAGE C VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.idempotency_stats() IS
    'counters of the whole server since it started; NULL unless the library is in shared_preload_libraries';

-- The per-scope summary: derived from idempotency.keys by
-- idempotency_scope_stats_refresh() (the worker calls the same code), so that
-- reading it does not scan the keys.  Not registered with
-- pg_extension_config_dump: pg_dump leaves it out, and the next refresh after
-- a restore rebuilds it.
CREATE TABLE idempotency.scope_stats (
    scope                         text COLLATE "C" NOT NULL,
    in_progress                   bigint NOT NULL,
    completed                     bigint NOT NULL,
    expired                       bigint NOT NULL,
    oldest_created_at             timestamptz NOT NULL,
    oldest_in_progress_created_at timestamptz,
    refreshed_at                  timestamptz NOT NULL,
    CONSTRAINT scope_stats_pkey PRIMARY KEY (scope)
);
COMMENT ON TABLE idempotency.scope_stats IS
    'per scope, the keys table as of refreshed_at (derived: rebuilt by idempotency_scope_stats_refresh() and the worker, not dumped)';
REVOKE ALL ON TABLE idempotency.scope_stats FROM PUBLIC;

CREATE FUNCTION @extschema@.idempotency_scope_stats_refresh() RETURNS bigint
    AS 'MODULE_PATHNAME', 'idempotency_scope_stats_refresh'
    LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.idempotency_scope_stats_refresh() IS
    'summarise the keys table per scope now, for idempotency_scope_stats() (reads the whole table); returns the number of scopes';

-- Numbers only, with the scope as the label, as for idempotency_stats().
CREATE FUNCTION @extschema@.idempotency_scope_stats(
    OUT scope text, OUT in_progress bigint, OUT completed bigint, OUT expired bigint,
    OUT oldest_claim_age_seconds double precision,
    OUT oldest_in_progress_age_seconds double precision,
    OUT summary_age_seconds double precision)
    RETURNS SETOF record
    LANGUAGE sql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT s.scope, s.in_progress, s.completed, s.expired,
               pg_catalog.date_part('epoch', pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) s.oldest_created_at),
               pg_catalog.date_part('epoch', pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) s.oldest_in_progress_created_at),
               pg_catalog.date_part('epoch', pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) s.refreshed_at)
          FROM idempotency.scope_stats AS s
         ORDER BY s.scope
    $$;
COMMENT ON FUNCTION @extschema@.idempotency_scope_stats() IS
    'per scope: keys in progress, completed and past their expiry time, and the ages of the oldest claim, of the oldest unfinished one and of the summary (reads the summary, not the keys)';

REVOKE ALL ON FUNCTION @extschema@.idempotency_begin(text, text, @extschema@.request_hash, interval, interval, interval, jsonb, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idempotency_complete(text, text, integer, jsonb, jsonb, integer, bytea, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idempotency_forget(text, text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idempotency_lookup(text, text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idempotency_keys(text, text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idempotency_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.idempotency_stats() TO pg_monitor;
REVOKE ALL ON FUNCTION @extschema@.idempotency_scope_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.idempotency_scope_stats() TO pg_monitor;
REVOKE ALL ON FUNCTION @extschema@.idempotency_scope_stats_refresh() FROM PUBLIC;

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
        'idempotency_stats()',
        'idempotency_scope_stats_0_1_0()',
        'idempotency_scope_stats()'];
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
DROP FUNCTION @extschema@.idempotency_scope_stats_0_1_0();

-- ---------------------------------------------------------------------------
-- Citus: the keys co-located with the business tables (README, "Citus").
-- The same definition is in idempotency--0.2.0.sql and the 0.1.0--0.2.0
-- upgrade.  Citus's functions and catalogs are named only inside the body,
-- which PL/pgSQL plans when it runs: the extension does not need Citus.
-- ---------------------------------------------------------------------------

CREATE FUNCTION @extschema@.idempotency_distribute(colocate_with regclass) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    dist record;
    column_type oid;
    column_collation oid;
    api regprocedure;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension AS e
                    WHERE e.extname OPERATOR(pg_catalog.=) 'citus') THEN
        RAISE EXCEPTION 'Citus is not installed in this database'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Run CREATE EXTENSION citus, add the worker nodes, then call this function.';
    END IF;
    IF pg_catalog.current_setting('idempotency.tenant_isolation', true) OPERATOR(pg_catalog.=) 'role' THEN
        RAISE EXCEPTION 'idempotency.tenant_isolation = role is not supported with distributed keys'
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'Role OIDs differ between Citus nodes, and shard moves copy them as they are.',
                  HINT = 'Use one scope per tenant: the value of the tenant column.';
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p
                WHERE p.logicalrelid OPERATOR(pg_catalog.=) 'idempotency.keys'::regclass) THEN
        RAISE EXCEPTION 'idempotency.keys is already distributed'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    SELECT p.partmethod, p.repmodel,
           pg_catalog.column_to_column_name(p.logicalrelid, p.partkey) AS column_name
      INTO dist
      FROM pg_catalog.pg_dist_partition AS p
     WHERE p.logicalrelid OPERATOR(pg_catalog.=) colocate_with;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table % is not distributed', colocate_with
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Distribute it by its tenant column (text COLLATE "C") with create_distributed_table() first.';
    END IF;
    IF dist.partmethod OPERATOR(pg_catalog.<>) 'h' THEN
        RAISE EXCEPTION 'table % is not hash-distributed', colocate_with
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'The keys of a scope must be stored with the rows of its tenant: a reference, single-shard or Citus local table has no tenant column to co-locate them by.';
    END IF;
    IF dist.repmodel OPERATOR(pg_catalog.<>) 's' THEN
        RAISE EXCEPTION 'table % has more than one placement per shard', colocate_with
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'Citus delegates a function call to a node only for tables with one placement per shard (citus.shard_replication_factor = 1).';
    END IF;
    SELECT a.atttypid, a.attcollation INTO column_type, column_collation
      FROM pg_catalog.pg_attribute AS a
     WHERE a.attrelid OPERATOR(pg_catalog.=) colocate_with
       AND a.attname OPERATOR(pg_catalog.=) dist.column_name;
    IF column_type OPERATOR(pg_catalog.<>) 'pg_catalog.text'::pg_catalog.regtype
       OR column_collation OPERATOR(pg_catalog.<>) 'pg_catalog."C"'::pg_catalog.regcollation THEN
        RAISE EXCEPTION 'the distribution column % of table % is not text COLLATE "C"',
                        dist.column_name, colocate_with
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'The keys are distributed by their scope, text COLLATE "C"; Citus co-locates only columns of the same type and collation, and the tenant column must hold the scope.',
                  HINT = 'Declare the tenant column text COLLATE "C" and pass its value as the scope.';
    END IF;
    PERFORM pg_catalog.create_distributed_table('idempotency.keys', 'scope',
                                                colocate_with => colocate_with::text);
    -- The rows were copied to the shards; the table itself is a shell now.
    PERFORM pg_catalog.truncate_local_data_after_distributing_table('idempotency.keys');
    -- Each call is delegated to the node of its scope's shard, also inside a
    -- transaction block (force_delegation), where it joins the transaction
    -- on that node.
    FOR api IN
        SELECT p.oid::pg_catalog.regprocedure
          FROM pg_catalog.pg_proc AS p
          JOIN pg_catalog.pg_depend AS d
            ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
           AND d.objid OPERATOR(pg_catalog.=) p.oid
           AND d.deptype OPERATOR(pg_catalog.=) 'e'
          JOIN pg_catalog.pg_extension AS e
            ON e.oid OPERATOR(pg_catalog.=) d.refobjid
           AND e.extname OPERATOR(pg_catalog.=) 'idempotency'
         WHERE p.proname OPERATOR(pg_catalog.=) ANY (ARRAY['idempotency_begin', 'idempotency_complete',
                 'idempotency_checkpoint', 'idempotency_release', 'idempotency_forget',
                 'idempotency_lookup', 'idempotency_keys'])
         ORDER BY p.proname
    LOOP
        PERFORM pg_catalog.create_distributed_function(api, 'scope',
                    colocate_with => 'idempotency.keys', force_delegation => true);
    END LOOP;
END
$$;
COMMENT ON FUNCTION @extschema@.idempotency_distribute(regclass) IS
    'with Citus: distribute idempotency.keys by scope, co-located with a table distributed by its tenant column (text COLLATE "C"), and delegate the API functions to the scope''s node';
REVOKE ALL ON FUNCTION @extschema@.idempotency_distribute(regclass) FROM PUBLIC;
