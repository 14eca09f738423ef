\echo Use "CREATE EXTENSION idempotency" to load this file. \quit

-- The update from 0.4.0.  A fresh CREATE EXTENSION of 0.5.0 runs the 0.3.0
-- install script, the update to 0.4.0 and then this one.

-- ---------------------------------------------------------------------------
-- idempotency_distribute() refuses an untested Citus release or PostgreSQL
-- major before its first change.  Until 0.4.0 it distributed the keys, the
-- routing table and the API's functions there, after which every call was
-- refused by the version guard (0A000).  The guard is the calls' own, in the
-- library (citus_placement.cpp, require_tested_citus: the one list of tested
-- releases), called through idempotency.require_tested_citus().
CREATE FUNCTION idempotency.require_tested_citus() RETURNS void
    AS 'MODULE_PATHNAME', 'idempotency_require_tested_citus'
    LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION idempotency.require_tested_citus() IS
    'for idempotency_distribute: fails (0A000) unless the loaded Citus library and the installed citus extension are a release tested on this PostgreSQL major';
REVOKE ALL ON FUNCTION idempotency.require_tested_citus() FROM PUBLIC;

-- The new body replaces the old function, as the update to 0.4.0 replaced
-- idempotency_complete: the old one steps aside under another name, the new
-- one is created as a fresh install has it, whoever may execute the old one
-- may execute the new one (a DBA's grant to a migration role), and the old
-- one goes.
ALTER FUNCTION @extschema@.idempotency_distribute(regclass) RENAME TO idempotency_distribute_0_4_0;
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
    -- The calls refuse a Citus release or PostgreSQL major that is not
    -- tested (0A000): so does their distribution, before it changes anything.
    PERFORM idempotency.require_tested_citus();
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
            -- From here on a call names its key under the tenant's value as
            -- its type prints it ('1001' for '01001', a uuid in lower
            -- case): each stored key moves to that spelling.  Two keys
            -- that would then be one (the same key under two spellings of
            -- one tenant) stop it, with nothing changed: which of them a
            -- retry should replay is the DBA's choice.
            BEGIN
                UPDATE idempotency.keys AS k SET scope = k.shard_key::pg_catalog.text
                 WHERE k.scope OPERATOR(pg_catalog.<>) k.shard_key::pg_catalog.text;
            EXCEPTION WHEN unique_violation THEN
                RAISE EXCEPTION 'two stored keys have the same key and scopes that spell one value of type %, the type of the distribution column % of table %',
                                column_type::pg_catalog.regtype, dist.column_name, colocate_with
                    USING ERRCODE = 'unique_violation',
                          DETAIL = 'With a tenant column of this type, a scope names the tenant''s value as the type prints it, so that every spelling of one tenant reaches one key.',
                          HINT = pg_catalog.format('Find them with SELECT scope, key FROM idempotency.keys WHERE scope OPERATOR(pg_catalog.<>) scope::%1$s::text, forget one of each pair (or wait for it to expire), then call this function again.',
                                                   column_type::pg_catalog.regtype);
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
    'with Citus: distribute idempotency.keys by the scope read as the tenant column''s type (bigint, integer, uuid or text COLLATE "C"), each scope spelled as that type prints it, co-located with that table, and delegate the API functions to the scope''s node';
REVOKE ALL ON FUNCTION @extschema@.idempotency_distribute(regclass) FROM PUBLIC;
DO $$
DECLARE
    -- Resolved through the search_path ALTER EXTENSION sets: the extension's
    -- schema first.
    old_function CONSTANT pg_catalog.regprocedure := 'idempotency_distribute_0_4_0(pg_catalog.regclass)';
    new_function CONSTANT pg_catalog.regprocedure := 'idempotency_distribute(pg_catalog.regclass)';
    initial pg_catalog.aclitem[];
    g record;
BEGIN
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
                 ELSE g.grantee::pg_catalog.regrole::text END,
            CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
    -- A GRANT in an extension's script is recorded as an initial privilege,
    -- which pg_dump leaves out: the carried-over grants are ordinary ones,
    -- and the initial privileges stay those a fresh install records.
    UPDATE pg_catalog.pg_init_privs AS i SET initprivs = initial
     WHERE i.objoid OPERATOR(pg_catalog.=) new_function
       AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
       AND i.objsubid OPERATOR(pg_catalog.=) 0;
END
$$;
DROP FUNCTION @extschema@.idempotency_distribute_0_4_0(regclass);
