\echo Use "CREATE EXTENSION idempotency" to load this file. \quit

-- ---------------------------------------------------------------------------
-- Volatility and parallel safety by what the functions do
-- ---------------------------------------------------------------------------

-- idempotency_keys() writes the rows of the caller's deferred claims before it
-- lists them: a write, which a parallel worker cannot make.
ALTER FUNCTION @extschema@.idempotency_keys(text, text, integer) VOLATILE PARALLEL UNSAFE;
-- idempotency_lookup() reads the caller's deferred claims, held in its own
-- backend: a parallel worker would not see them.
ALTER FUNCTION @extschema@.idempotency_lookup(text, text, boolean) PARALLEL RESTRICTED;

-- ---------------------------------------------------------------------------
-- Request hashes of what JDBC sends (varchar)
-- ---------------------------------------------------------------------------

-- JDBC's setString sends varchar.  Without an exact match, request_hash(x)
-- of a varchar would be read as the cast x::request_hash and parse the body
-- as a digest (22P02); varchar is hashed as the text it is.
CREATE FUNCTION @extschema@.request_hash(character varying) RETURNS @extschema@.request_hash
    AS 'MODULE_PATHNAME', 'request_hash_from_text' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.request_hash(character varying) IS 'request_hash(text) of a varchar';
-- A JSON body that a driver sends as text or varchar (JDBC's setString),
-- hashed by its value as request_hash_jsonb(jsonb) hashes it.
CREATE FUNCTION @extschema@.request_hash_jsonb(text) RETURNS @extschema@.request_hash
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT @extschema@.request_hash_jsonb($1::pg_catalog.jsonb) $$;
COMMENT ON FUNCTION @extschema@.request_hash_jsonb(text) IS 'request_hash_jsonb of a JSON document sent as text';

-- ---------------------------------------------------------------------------
-- retry_after in whole seconds, as HTTP's Retry-After takes it
-- ---------------------------------------------------------------------------

-- Drivers give an interval as an object of their own (or as text); a handler
-- wants the header's integer.  A new attribute at the end, as a fresh install
-- has it.
ALTER TYPE @extschema@.idempotency_begin_result ADD ATTRIBUTE retry_after_seconds integer;

-- ---------------------------------------------------------------------------
-- Citus tenants of type bigint, integer or uuid
-- ---------------------------------------------------------------------------

-- Citus co-locates tables only by columns of one type: idempotency_distribute()
-- turns this column into the tenant column's type and distributes the keys by
-- it.  NULL, and no cost but a bit of the null bitmap, everywhere else.  The
-- last column, as a fresh install has it.
-- With keys that Citus already distributes (by scope), Citus adds the column
-- on the workers too, from the coordinator's script, before it runs each
-- worker's: there the column is found, of this type, and kept.  Any other
-- column of that name is not this extension's.
DO $$
DECLARE
    present pg_catalog.regtype;
    added_by_citus boolean := false;
BEGIN
    SELECT a.atttypid INTO present
      FROM pg_catalog.pg_attribute AS a
     WHERE a.attrelid OPERATOR(pg_catalog.=) 'idempotency.keys'::pg_catalog.regclass
       AND a.attname OPERATOR(pg_catalog.=) 'shard_key'
       AND NOT a.attisdropped;
    IF NOT FOUND THEN
        ALTER TABLE idempotency.keys ADD COLUMN shard_key text;
        RETURN;
    END IF;
    IF present OPERATOR(pg_catalog.=) 'pg_catalog.text'::pg_catalog.regtype
       AND pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        added_by_citus := EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p
                                   WHERE p.logicalrelid OPERATOR(pg_catalog.=) 'idempotency.keys'::pg_catalog.regclass);
    END IF;
    IF NOT added_by_citus THEN
        RAISE EXCEPTION 'table idempotency.keys already has a column shard_key'
            USING ERRCODE = 'duplicate_column',
                  HINT = 'Rename or drop that column; the extension adds one of its own.';
    END IF;
END
$$;
COMMENT ON COLUMN idempotency.keys.shard_key IS
    'with Citus and a tenant column of type bigint, integer or uuid: the scope as that type, which idempotency_distribute() distributes the keys by; NULL otherwise';

-- The functions Citus delegates by their scope, with the scope of type
-- scope_type: the extension's text functions, or the variants
-- create_scope_variants() made.
CREATE FUNCTION idempotency.routed_functions(scope_type regtype)
    RETURNS SETOF regprocedure
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
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
   AND p.proargtypes[0] OPERATOR(pg_catalog.=) scope_type
 ORDER BY p.proname
$$;
COMMENT ON FUNCTION idempotency.routed_functions(regtype) IS
    'the API functions Citus delegates by their scope, with the scope of the given type';
REVOKE ALL ON FUNCTION idempotency.routed_functions(regtype) FROM PUBLIC;

-- For Citus tenants of type bigint, integer or uuid: the functions that Citus
-- delegates by their scope, with the scope as a bigint or a uuid.  Citus
-- delegates a call only when its scope converts to the tenant column's type
-- by an assignment cast, which text has not (and a bigint has to integer).
-- The scope is the argument's text, so they name the text functions' keys.
-- idempotency_distribute() creates them on every node, as members of the
-- extension with the text functions' grants, and only then: elsewhere the
-- functions' names stay unique, as GRANT ... ON FUNCTION idempotency_begin
-- without an argument list needs.  Returns the variants it created.
CREATE FUNCTION idempotency.create_scope_variants(scope_type regtype)
    RETURNS SETOF regprocedure
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    api record;
    variant regprocedure;
    grantee oid;
BEGIN
    IF scope_type OPERATOR(pg_catalog.<>) ALL (ARRAY['pg_catalog.int8'::pg_catalog.regtype,
                                                     'pg_catalog.uuid'::pg_catalog.regtype]) THEN
        RAISE EXCEPTION 'scope variants are of type bigint or uuid, not %', scope_type
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR api IN
        SELECT p.oid, p.proname, p.pronamespace, p.proacl, p.proowner,
               pg_catalog.format('%I.%I(%s)', p.pronamespace::pg_catalog.regnamespace, p.proname,
                                 pg_catalog.regexp_replace(pg_catalog.pg_get_function_arguments(p.oid),
                                                           '^scope text', 'scope ' OPERATOR(pg_catalog.||) scope_type::text))
                 OPERATOR(pg_catalog.||) ' RETURNS ' OPERATOR(pg_catalog.||) pg_catalog.pg_get_function_result(p.oid)
                 OPERATOR(pg_catalog.||) pg_catalog.format(' AS %L, %L LANGUAGE c', p.probin, p.prosrc)
                 OPERATOR(pg_catalog.||) CASE p.provolatile WHEN 'v' THEN ' VOLATILE' WHEN 's' THEN ' STABLE' ELSE ' IMMUTABLE' END
                 OPERATOR(pg_catalog.||) CASE p.proparallel WHEN 'u' THEN ' PARALLEL UNSAFE' WHEN 'r' THEN ' PARALLEL RESTRICTED' ELSE ' PARALLEL SAFE' END
                 OPERATOR(pg_catalog.||) CASE WHEN p.proretset THEN ' ROWS ' OPERATOR(pg_catalog.||) p.prorows::text ELSE '' END
                 AS definition
          FROM idempotency.routed_functions('pg_catalog.text') AS f
          JOIN pg_catalog.pg_proc AS p ON p.oid OPERATOR(pg_catalog.=) f.f
         ORDER BY p.proname
    LOOP
        BEGIN
            EXECUTE 'CREATE FUNCTION ' OPERATOR(pg_catalog.||) api.definition;
        EXCEPTION WHEN duplicate_function THEN
            CONTINUE; -- made by an earlier call
        END;
        SELECT q.oid INTO variant
          FROM pg_catalog.pg_proc AS q
         WHERE q.proname OPERATOR(pg_catalog.=) api.proname
           AND q.pronamespace OPERATOR(pg_catalog.=) api.pronamespace
           AND q.proargtypes[0] OPERATOR(pg_catalog.=) scope_type;
        EXECUTE pg_catalog.format('ALTER EXTENSION idempotency ADD FUNCTION %s', variant);
        EXECUTE pg_catalog.format('COMMENT ON FUNCTION %s IS %L', variant,
            pg_catalog.format('%s(text, ...) with the scope as a %s, for Citus tenants (see idempotency_distribute)',
                              api.proname, scope_type));
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', variant);
        FOR grantee IN
            SELECT a.grantee FROM pg_catalog.aclexplode(api.proacl) AS a
             WHERE a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
               AND a.grantee OPERATOR(pg_catalog.<>) api.proowner
        LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', variant,
                CASE WHEN grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                     ELSE grantee::pg_catalog.regrole::text END);
        END LOOP;
        RETURN NEXT variant;
    END LOOP;
END
$$;
COMMENT ON FUNCTION idempotency.create_scope_variants(regtype) IS
    'for idempotency_distribute: the API functions Citus delegates by their scope, with the scope as a bigint or a uuid';
REVOKE ALL ON FUNCTION idempotency.create_scope_variants(regtype) FROM PUBLIC;

-- ---------------------------------------------------------------------------
-- Calls that reach a node without their scope's shard, forwarded through
-- a routing table
-- ---------------------------------------------------------------------------

-- As a fresh install has them (see there).  With keys that 0.2.0 distributed,
-- a second call of idempotency_distribute() distributes the routing table.
GRANT USAGE ON SCHEMA idempotency TO PUBLIC;
CREATE TABLE idempotency.route (
    tenant text COLLATE "C",
    CONSTRAINT route_stays_empty CHECK (false),
    CONSTRAINT route_pkey PRIMARY KEY (tenant)
);
COMMENT ON TABLE idempotency.route IS
    'always empty; with Citus, distributed with the keys: calls that reach a node without their scope''s shard are routed to it through this table';
REVOKE ALL ON TABLE idempotency.route FROM PUBLIC;

-- Always empty too, as a fresh install has it.  With Citus and the keys kept on the coordinator, a
-- write of a key asks Citus to commit the transaction's distributed writes
-- in two phases, with the claim; from PostgreSQL 16 on, Citus's library
-- exports no routine for that, and the SQL-level way is an update of this
-- table made a reference table by the DBA (create_reference_table), which
-- Citus commits in two phases (see doc/citus.md, "Keys on the coordinator").
CREATE TABLE idempotency.two_phase (
    marked boolean,
    CONSTRAINT two_phase_stays_empty CHECK (false)
);
COMMENT ON TABLE idempotency.two_phase IS
    'always empty; with Citus and the keys on the coordinator, made a reference table: each transaction that writes a key updates it, so that Citus commits in two phases';
REVOKE ALL ON TABLE idempotency.two_phase FROM PUBLIC;

-- idempotency_distribute() takes those tenant columns, and distributes the
-- routing table.  It is only ever run
-- by a superuser: dropped and created again, with the grants of a fresh
-- install.
DROP FUNCTION @extschema@.idempotency_distribute(regclass);
CREATE FUNCTION @extschema@.idempotency_distribute(colocate_with regclass) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    dist record;
    column_type oid;
    column_collation oid;
    distribution_column text;
    scope_type oid;
    api regprocedure;
    alter_keys text;
    alter_route text;
    problem text;
    problem_state text;
    ddl_propagation text;
    node record;
    keys_distributed boolean;
    alter_tables text[] := '{}';
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
    keys_distributed := EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p
                                 WHERE p.logicalrelid OPERATOR(pg_catalog.=) 'idempotency.keys'::regclass);
    IF EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p
                WHERE p.logicalrelid OPERATOR(pg_catalog.=) 'idempotency.route'::regclass) THEN
        RAISE EXCEPTION 'idempotency.keys is already distributed'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    -- Keys distributed by 0.2.0 (by a text scope): only the routing table
    -- is distributed now, with them.
    IF keys_distributed AND NOT EXISTS (
           SELECT FROM pg_catalog.pg_dist_partition AS k, pg_catalog.pg_dist_partition AS t
            WHERE k.logicalrelid OPERATOR(pg_catalog.=) 'idempotency.keys'::regclass
              AND t.logicalrelid OPERATOR(pg_catalog.=) colocate_with
              AND t.colocationid OPERATOR(pg_catalog.=) k.colocationid) THEN
        RAISE EXCEPTION 'table % is not co-located with idempotency.keys, which is already distributed', colocate_with
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass the table the keys were distributed with.';
    END IF;
    SELECT p.partmethod, p.repmodel,
           pg_catalog.column_to_column_name(p.logicalrelid, p.partkey) AS column_name
      INTO dist
      FROM pg_catalog.pg_dist_partition AS p
     WHERE p.logicalrelid OPERATOR(pg_catalog.=) colocate_with;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table % is not distributed', colocate_with
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Distribute it by its tenant column (bigint, integer, uuid or text COLLATE "C") with create_distributed_table() first.';
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
    IF column_type OPERATOR(pg_catalog.=) 'pg_catalog.text'::pg_catalog.regtype
       AND column_collation OPERATOR(pg_catalog.=) 'pg_catalog."C"'::pg_catalog.regcollation THEN
        distribution_column := 'scope';
        scope_type := 'pg_catalog.text'::pg_catalog.regtype;
    ELSIF column_type OPERATOR(pg_catalog.=) ANY (ARRAY['pg_catalog.int8'::pg_catalog.regtype,
                                                         'pg_catalog.int4'::pg_catalog.regtype,
                                                         'pg_catalog.uuid'::pg_catalog.regtype]) THEN
        -- Citus co-locates tables only by columns of one type: shard_key
        -- becomes the tenant column's type, holding each key's scope read as
        -- that type, and joins the primary key, as Citus requires of the
        -- distribution column.
        IF NOT keys_distributed THEN
            alter_keys := pg_catalog.format(
                'ALTER TABLE idempotency.keys ALTER COLUMN shard_key TYPE %1$s USING scope::%1$s, '
                'DROP CONSTRAINT keys_pkey, '
                'ADD CONSTRAINT keys_pkey PRIMARY KEY (tenant, scope, key, shard_key)',
                column_type::pg_catalog.regtype);
            BEGIN
                EXECUTE alter_keys;
            EXCEPTION WHEN data_exception THEN
                GET STACKED DIAGNOSTICS problem = MESSAGE_TEXT, problem_state = RETURNED_SQLSTATE;
                RAISE EXCEPTION 'the scope of a stored key is not a value of type %, the type of the distribution column % of table %',
                                column_type::pg_catalog.regtype, dist.column_name, colocate_with
                    USING ERRCODE = problem_state, DETAIL = problem,
                          HINT = 'Every scope must be a tenant''s value. Forget the keys of other scopes, or wait for them to expire, then call this function again.';
            END;
            alter_tables := alter_tables OPERATOR(pg_catalog.||) alter_keys;
        END IF;
        scope_type := CASE WHEN column_type OPERATOR(pg_catalog.=) 'pg_catalog.uuid'::pg_catalog.regtype
                           THEN 'pg_catalog.uuid'::pg_catalog.regtype
                           ELSE 'pg_catalog.int8'::pg_catalog.regtype END;
        -- The variants belong to the extension: made on each node by its
        -- own function, as its script made the text functions, not
        -- propagated by Citus.
        ddl_propagation := pg_catalog.current_setting('citus.enable_ddl_propagation');
        PERFORM pg_catalog.set_config('citus.enable_ddl_propagation', 'off', true);
        PERFORM idempotency.create_scope_variants(scope_type::pg_catalog.regtype);
        PERFORM pg_catalog.set_config('citus.enable_ddl_propagation', ddl_propagation, true);
        distribution_column := 'shard_key';
    ELSE
        RAISE EXCEPTION 'the distribution column % of table % is not of type bigint, integer, uuid or text COLLATE "C"',
                        dist.column_name, colocate_with
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'The keys are distributed by the scope read as the tenant column''s type; these are the types this extension reads and tests.',
                  HINT = 'Declare the tenant column bigint, integer, uuid or text COLLATE "C", and pass its value as the scope.';
    END IF;
    -- The routing table's column, of the type of the keys' distribution
    -- column (the table holds no row to convert; set whatever a failed call
    -- left on a worker).
    alter_route := pg_catalog.format('ALTER TABLE idempotency.route ALTER COLUMN tenant TYPE %s USING NULL',
                                     CASE WHEN scope_type OPERATOR(pg_catalog.=) 'pg_catalog.text'::pg_catalog.regtype
                                          THEN 'pg_catalog.text COLLATE "C"'
                                          ELSE column_type::pg_catalog.regtype::text END);
    EXECUTE alter_route;
    alter_tables := alter_tables OPERATOR(pg_catalog.||) alter_route;
    -- The workers have the tables too (Citus created the extension on
    -- them), and Citus checks their columns there; and the calls it
    -- delegates need the variants there: the same changes, which Citus
    -- runs in a transaction of its own on each (one statement, whose error
    -- Citus reports).  Their tables are empty and unused (the functions
    -- refuse the keys), so the changes are harmless if the distribution
    -- fails after them, and made again by the next call.
    FOR node IN
        SELECT * FROM pg_catalog.run_command_on_workers(pg_catalog.format(
            'DO $do$ DECLARE statement text; BEGIN '
            'PERFORM pg_catalog.set_config(''citus.enable_ddl_propagation'', ''off'', true); '
            'FOREACH statement IN ARRAY %L::text[] LOOP EXECUTE statement; END LOOP; '
            '%s'
            'END $do$',
            alter_tables,
            CASE WHEN scope_type OPERATOR(pg_catalog.=) 'pg_catalog.text'::pg_catalog.regtype THEN ''
                 ELSE pg_catalog.format('PERFORM idempotency.create_scope_variants(%L); ',
                                        scope_type::pg_catalog.regtype) END))
    LOOP
        IF NOT node.success THEN
            RAISE EXCEPTION 'could not change the tables of the extension on node %:%', node.nodename, node.nodeport
                USING ERRCODE = 'object_not_in_prerequisite_state', DETAIL = node.result;
        END IF;
    END LOOP;
    IF NOT keys_distributed THEN
        PERFORM pg_catalog.create_distributed_table('idempotency.keys', distribution_column,
                                                    colocate_with => colocate_with::text);
        -- The rows were copied to the shards; the table itself is a shell now.
        PERFORM pg_catalog.truncate_local_data_after_distributing_table('idempotency.keys');
    END IF;
    PERFORM pg_catalog.create_distributed_table('idempotency.route', 'tenant',
                                                colocate_with => 'idempotency.keys');
    -- Each call is delegated to the node of its scope's shard, also inside a
    -- transaction block (force_delegation), where it joins the transaction
    -- on that node.  With a typed tenant, the variants whose scope is a
    -- bigint (for bigint and integer tenants) or a uuid (see
    -- create_scope_variants).  The text functions then run where they are
    -- called: on the coordinator they are forwarded to the shard's node
    -- (through idempotency.route), in a distributed handler they find the
    -- local shard.
    FOR api IN SELECT * FROM idempotency.routed_functions(scope_type::pg_catalog.regtype) LOOP
        PERFORM pg_catalog.create_distributed_function(api, 'scope',
                    colocate_with => 'idempotency.keys', force_delegation => true);
    END LOOP;
END
$$;
COMMENT ON FUNCTION @extschema@.idempotency_distribute(regclass) IS
    'with Citus: distribute idempotency.keys by the scope read as the tenant column''s type (bigint, integer, uuid or text COLLATE "C"), co-located with that table, and delegate the API functions to the scope''s node';
REVOKE ALL ON FUNCTION @extschema@.idempotency_distribute(regclass) FROM PUBLIC;

-- ---------------------------------------------------------------------------
-- Tenants isolated through a gateway role under 0.1.0
-- ---------------------------------------------------------------------------

-- 0.1.0 kept an isolated tenant's keys under the scope '<role oid>/<scope>',
-- for the role that called (current_user): also a role a gateway reached by
-- SET ROLE, when the gateway's session had idempotency.tenant_isolation =
-- role.  The 0.1.0--0.2.0 script moved to the tenant column only the keys of
-- roles that have the setting themselves, and released scripts are not
-- edited, so this one finishes the job when the database comes from 0.1.0
-- in the same ALTER EXTENSION UPDATE: its 0.2.0 columns were then added in
-- this very transaction (age(xmin) of their catalog row is 0), and every key
-- still prefixed is a 0.1.0 key.
--
-- A login role is isolated when its setting for this database, else its own,
-- else the database's, else the configuration files', is 'role' (the order in
-- which a session gets it); a tenant is any role an isolated login role can
-- SET ROLE to (itself included; a superuser, any role).  A database that
-- went to 0.2.0 earlier has keys of its own since, which cannot be told from
-- such leftovers: it gets a WARNING, and doc/install.md's "Upgrading" section
-- shows how to move them.
DO $$
DECLARE
    from_0_1_0 boolean;
    tenants oid[];
    moved bigint;
    prefixed bigint;
BEGIN
    -- A Citus worker runs this script inside the coordinator's update, where
    -- reading the distributed keys would be a nested distributed query,
    -- which Citus refuses; the coordinator's run reads them all.
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_local_group') IS NOT NULL THEN
        IF EXISTS (SELECT FROM pg_catalog.pg_dist_local_group AS g
                    WHERE g.groupid OPERATOR(pg_catalog.>) 0) THEN
            RETURN;
        END IF;
    END IF;
    SELECT pg_catalog.age(a.xmin) OPERATOR(pg_catalog.=) 0 INTO from_0_1_0
      FROM pg_catalog.pg_attribute AS a
     WHERE a.attrelid OPERATOR(pg_catalog.=) 'idempotency.keys'::pg_catalog.regclass
       AND a.attname OPERATOR(pg_catalog.=) 'sweep_at';

    WITH setting AS (
        SELECT s.setrole, s.setdatabase,
               (SELECT pg_catalog.substring(c, '^idempotency\.tenant_isolation=(.*)$')
                  FROM pg_catalog.unnest(s.setconfig) AS c
                 WHERE c OPERATOR(pg_catalog.~) '^idempotency\.tenant_isolation=') AS value
          FROM pg_catalog.pg_db_role_setting AS s
         WHERE s.setdatabase OPERATOR(pg_catalog.=) ANY (ARRAY[0::oid,
                   (SELECT d.oid FROM pg_catalog.pg_database AS d
                     WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())])
    ), isolated AS (
        SELECT r.oid AS login
          FROM pg_catalog.pg_roles AS r
         WHERE r.rolcanlogin
           AND coalesce(
                   (SELECT s.value FROM setting AS s
                     WHERE s.setrole OPERATOR(pg_catalog.=) r.oid
                       AND s.setdatabase OPERATOR(pg_catalog.<>) 0 AND s.value IS NOT NULL),
                   (SELECT s.value FROM setting AS s
                     WHERE s.setrole OPERATOR(pg_catalog.=) r.oid
                       AND s.setdatabase OPERATOR(pg_catalog.=) 0 AND s.value IS NOT NULL),
                   (SELECT s.value FROM setting AS s
                     WHERE s.setrole OPERATOR(pg_catalog.=) 0 AND s.value IS NOT NULL),
                   (SELECT f.setting FROM pg_catalog.pg_file_settings AS f
                     WHERE f.name OPERATOR(pg_catalog.=) 'idempotency.tenant_isolation' AND f.applied
                     ORDER BY f.seqno DESC LIMIT 1))
               OPERATOR(pg_catalog.=) 'role'
    )
    SELECT pg_catalog.array_agg(t.oid) INTO tenants
      FROM pg_catalog.pg_roles AS t
     WHERE EXISTS (SELECT FROM isolated AS i
                    WHERE pg_catalog.pg_has_role(i.login, t.oid, 'MEMBER'));

    IF from_0_1_0 THEN
        UPDATE idempotency.keys AS k
           SET tenant = p.role::oid::pg_catalog.regrole, scope = p.scope
          FROM (SELECT k2.ctid AS row,
                       pg_catalog.substring(k2.scope, '^([0-9]{1,10})/')::bigint AS role,
                       pg_catalog.substring(k2.scope, '^[0-9]{1,10}/(.*)$') AS scope
                  FROM idempotency.keys AS k2
                 WHERE k2.tenant OPERATOR(pg_catalog.=) 0
                   AND k2.scope OPERATOR(pg_catalog.~) '^[0-9]{1,10}/') AS p
         WHERE k.ctid OPERATOR(pg_catalog.=) p.row
           AND p.role OPERATOR(pg_catalog.<=) 4294967295
           AND p.role::oid OPERATOR(pg_catalog.=) ANY (tenants);
        GET DIAGNOSTICS moved = ROW_COUNT;
        IF moved OPERATOR(pg_catalog.>) 0 THEN
            RAISE NOTICE 'moved % keys of tenants isolated through a gateway role to the tenant column', moved;
        END IF;
    ELSE
        SELECT pg_catalog.count(*) INTO prefixed
          FROM idempotency.keys AS k
         WHERE k.tenant OPERATOR(pg_catalog.=) 0
           AND k.scope OPERATOR(pg_catalog.~) '^[0-9]{1,10}/'
           AND pg_catalog.substring(k.scope, '^([0-9]{1,10})/')::bigint OPERATOR(pg_catalog.<=) 4294967295
           AND pg_catalog.substring(k.scope, '^([0-9]{1,10})/')::bigint::oid
               OPERATOR(pg_catalog.=) ANY (tenants);
        IF prefixed OPERATOR(pg_catalog.>) 0 THEN
            RAISE WARNING '% keys without a tenant have a scope that starts with the OID of an isolated tenant', prefixed
                USING DETAIL = 'They may be keys that a tenant isolated through a gateway role wrote under 0.1.0, which the update to 0.2.0 left outside the tenant column: the tenant''s retries do not find them, and roles without isolation can read them.',
                      HINT = 'See "Upgrading" in doc/install.md for how to move them.';
        END IF;
    END IF;
END
$$;

-- ---------------------------------------------------------------------------
-- Expiry without an index
-- ---------------------------------------------------------------------------

-- The expiry sweep reads the heap since 0.3.0 (see the install script): the
-- index on sweep_at goes, and with it a B-tree entry and its WAL record per
-- new request; sweep_at stays, NULL, in its place.  After the check above,
-- which reads when sweep_at was added.  With keys that Citus distributes,
-- the coordinator's DROP INDEX and ALTER TABLE reach the workers before their
-- own run of this script, which finds the index gone and the column changed.
-- In a DO block: Citus passes a DROP INDEX on to the workers as the text it
-- was given, which in a script brings the script's next statements along
-- (42601, "cannot insert multiple commands into a prepared statement"); in
-- a block it is the statement alone.  (test/t/061 updates distributed keys.)
DO $$
BEGIN
    DROP INDEX IF EXISTS idempotency.keys_sweep_at_idx;
    ALTER TABLE idempotency.keys
        ALTER COLUMN sweep_at DROP NOT NULL,
        ALTER COLUMN sweep_at DROP DEFAULT;
END
$$;
COMMENT ON COLUMN idempotency.keys.sweep_at IS
    'unused since 0.3.0 (NULL); 0.2.0 indexed it for the expiry sweep';
