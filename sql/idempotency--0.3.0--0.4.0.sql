\echo Use "CREATE EXTENSION idempotency" to load this file. \quit

-- The update from 0.3.0.  A fresh CREATE EXTENSION of 0.4.0 runs the 0.3.0
-- install script and then this one.

-- ---------------------------------------------------------------------------
-- Request hashes of every string type a driver can send
-- ---------------------------------------------------------------------------

-- request_hash(x) of a string type without an overload of its own is read as
-- the cast x::request_hash, which parses the body as a digest (22P02), as 0.3.0
-- fixed for varchar.  JDBC's setObject(..., Types.CHAR) sends bpchar, hashed
-- by its bytes as they came (as text and varchar are: the padding of a
-- char(n) value included); name and "char" by their text.
CREATE FUNCTION @extschema@.request_hash(character) RETURNS @extschema@.request_hash
    AS 'MODULE_PATHNAME', 'request_hash_from_text' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.request_hash(character) IS 'request_hash(text) of a char(n) (bpchar) value, by its bytes';
CREATE FUNCTION @extschema@.request_hash(name) RETURNS @extschema@.request_hash
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT @extschema@.request_hash($1::pg_catalog.text) $$;
COMMENT ON FUNCTION @extschema@.request_hash(name) IS 'request_hash(text) of a name';
CREATE FUNCTION @extschema@.request_hash("char") RETURNS @extschema@.request_hash
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT @extschema@.request_hash($1::pg_catalog.text) $$;
COMMENT ON FUNCTION @extschema@.request_hash("char") IS 'request_hash(text) of a "char"';

-- ---------------------------------------------------------------------------
-- One rule for a request's body
-- ---------------------------------------------------------------------------

-- The middleware packages each decided for themselves whether a body was JSON
-- that jsonb reads (and so hashed by its value), and differed at the edges: a
-- lone surrogate failed the request in some, text/json counted as JSON in
-- others.  The rule is the server's now, and every package calls it.
CREATE FUNCTION @extschema@.request_hash_body(content_type text, body bytea)
    RETURNS @extschema@.request_hash
    AS 'MODULE_PATHNAME', 'request_hash_from_body' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.request_hash_body(text, bytea) IS
    'a request body of a JSON media type that jsonb reads by its value (request_hash_jsonb), any other by its bytes (request_hash_bytea)';

-- ---------------------------------------------------------------------------
-- idempotency_complete(..., omit_oversized): refuse a response it cannot keep
-- ---------------------------------------------------------------------------

-- A new argument makes a new function, as in the update from 0.1.0: the old
-- one steps aside under another name, the new one is created as a fresh
-- install has it, whoever may execute the old one may execute the new one,
-- and the old one goes.  The grants carried over are ordinary grants, which
-- pg_dump keeps: the initial privileges recorded for the extension stay what
-- CREATE EXTENSION itself records.
ALTER FUNCTION @extschema@.idempotency_complete(text, text, integer, jsonb, jsonb, integer, bytea, boolean)
    RENAME TO idempotency_complete_0_3_0;

CREATE FUNCTION @extschema@.idempotency_complete(
    scope text, key text, response_status integer,
    response_body jsonb DEFAULT NULL, response_headers jsonb DEFAULT NULL, attempt integer DEFAULT NULL,
    response_body_bytes bytea DEFAULT NULL, replace boolean DEFAULT false,
    omit_oversized boolean DEFAULT true)
    RETURNS boolean
    AS 'MODULE_PATHNAME', 'idempotency_complete' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.idempotency_complete(text, text, integer, jsonb, jsonb, integer, bytea, boolean, boolean) IS
    'record the response of a claimed key (or, with replace and the attempt, of a completed one); false when a server error (>= 500) was not stored and the claim was dropped instead; with omit_oversized => false, a response over idempotency.max_response_bytes fails (54000) instead of being stored without its body';
REVOKE ALL ON FUNCTION @extschema@.idempotency_complete(text, text, integer, jsonb, jsonb, integer, bytea, boolean, boolean) FROM PUBLIC;

-- create_scope_variants() as 0.3.0 defined it, but callable from the
-- extension's own script too, where what it creates is a member already:
-- the update below makes the new variant of idempotency_complete with it.
DROP FUNCTION idempotency.create_scope_variants(regtype);
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
        -- Made by the extension's own script (an update), it is a member already.
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_depend AS d
                        WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                          AND d.objid OPERATOR(pg_catalog.=) variant
                          AND d.deptype OPERATOR(pg_catalog.=) 'e') THEN
            EXECUTE pg_catalog.format('ALTER EXTENSION idempotency ADD FUNCTION %s', variant);
        END IF;
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

-- With Citus tenants of type bigint or uuid, idempotency_distribute() made
-- variants of the old function (create_scope_variants), on every node: each
-- node's update replaces them the same way, from the new function.  A
-- function Citus delegated (create_distributed_function) is delegated again
-- once replaced, from the coordinator, which keeps Citus's metadata: should
-- Citus refuse it there (the workers run their update after the
-- coordinator's), a WARNING gives the call to make once every node is at
-- 0.4.0.  (Citus's catalogs and functions are named only inside the body,
-- which PL/pgSQL plans when it runs: the update does not need Citus.)
DO $$
DECLARE
    -- Resolved through the search_path ALTER EXTENSION sets: the extension's
    -- schema first.
    old_function CONSTANT pg_catalog.regprocedure :=
        'idempotency_complete_0_3_0(text, text, integer, jsonb, jsonb, integer, bytea, boolean)';
    new_function CONSTANT pg_catalog.regprocedure :=
        'idempotency_complete(text, text, integer, jsonb, jsonb, integer, bytea, boolean, boolean)';
    citus_present CONSTANT boolean :=
        pg_catalog.to_regclass('pg_catalog.pg_dist_object') IS NOT NULL
        AND pg_catalog.to_regproc('pg_catalog.citus_is_coordinator') IS NOT NULL;
    replaced pg_catalog.regprocedure[] := ARRAY[new_function];
    delegated boolean[] := ARRAY[false];
    initial pg_catalog.aclitem[];
    variant record;
    new_variant pg_catalog.regprocedure;
    variant_delegated boolean;
    variant_initial pg_catalog.aclitem[];
    g record;
BEGIN
    IF citus_present THEN
        delegated[1] := EXISTS (
            SELECT FROM pg_catalog.pg_dist_object AS o
             WHERE o.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
               AND o.objid OPERATOR(pg_catalog.=) old_function);
    END IF;
    -- The grants of the old function, on the new one.
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
    UPDATE pg_catalog.pg_init_privs AS i SET initprivs = initial
     WHERE i.objoid OPERATOR(pg_catalog.=) new_function
       AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
       AND i.objsubid OPERATOR(pg_catalog.=) 0;
    -- Each old variant (the extension's idempotency_complete with another
    -- scope type and the old arguments): dropped, made again from the new
    -- function by create_scope_variants() (which makes only what is missing,
    -- with the new function's grants, as idempotency_distribute() does), and
    -- given the grants the old variant had besides.
    FOR variant IN
        SELECT p.oid::pg_catalog.regprocedure AS old_variant,
               p.proargtypes[0]::pg_catalog.regtype AS scope_type, p.proacl AS acl, p.proowner AS owner
          FROM pg_catalog.pg_proc AS p
          JOIN pg_catalog.pg_depend AS d
            ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
           AND d.objid OPERATOR(pg_catalog.=) p.oid
           AND d.deptype OPERATOR(pg_catalog.=) 'e'
          JOIN pg_catalog.pg_extension AS e
            ON e.oid OPERATOR(pg_catalog.=) d.refobjid
           AND e.extname OPERATOR(pg_catalog.=) 'idempotency'
         WHERE p.proname OPERATOR(pg_catalog.=) 'idempotency_complete'
           AND p.proargtypes[0] OPERATOR(pg_catalog.<>) 'pg_catalog.text'::pg_catalog.regtype
           AND p.pronargs OPERATOR(pg_catalog.=) 8
    LOOP
        variant_delegated := false;
        IF citus_present THEN
            variant_delegated := EXISTS (
                SELECT FROM pg_catalog.pg_dist_object AS o
                 WHERE o.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                   AND o.objid OPERATOR(pg_catalog.=) variant.old_variant);
        END IF;
        SELECT i.initprivs INTO variant_initial FROM pg_catalog.pg_init_privs AS i
         WHERE i.objoid OPERATOR(pg_catalog.=) variant.old_variant
           AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
           AND i.objsubid OPERATOR(pg_catalog.=) 0;
        EXECUTE pg_catalog.format('DROP FUNCTION %s', variant.old_variant);
        PERFORM idempotency.create_scope_variants(variant.scope_type);
        SELECT p.oid INTO STRICT new_variant
          FROM pg_catalog.pg_proc AS p
         WHERE p.proname OPERATOR(pg_catalog.=) 'idempotency_complete'
           AND p.pronamespace OPERATOR(pg_catalog.=) (SELECT q.pronamespace FROM pg_catalog.pg_proc AS q
                                                      WHERE q.oid OPERATOR(pg_catalog.=) new_function)
           AND p.proargtypes[0] OPERATOR(pg_catalog.=) variant.scope_type
           AND p.pronargs OPERATOR(pg_catalog.=) 9;
        FOR g IN
            SELECT a.grantee, a.is_grantable FROM pg_catalog.aclexplode(variant.acl) AS a
             WHERE a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
               AND a.grantee OPERATOR(pg_catalog.<>) variant.owner
        LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s%s', new_variant,
                CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                     ELSE g.grantee::pg_catalog.regrole::text END,
                CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
        -- The initial privileges the old variant had: made by this script,
        -- the new one got its grants recorded as initial ones.
        DELETE FROM pg_catalog.pg_init_privs AS i
         WHERE i.objoid OPERATOR(pg_catalog.=) new_variant
           AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
           AND i.objsubid OPERATOR(pg_catalog.=) 0;
        IF variant_initial IS NOT NULL THEN
            INSERT INTO pg_catalog.pg_init_privs (objoid, classoid, objsubid, privtype, initprivs)
            VALUES (new_variant, 'pg_catalog.pg_proc'::pg_catalog.regclass, 0, 'e', variant_initial);
        END IF;
        replaced := replaced OPERATOR(pg_catalog.||) new_variant;
        delegated := delegated OPERATOR(pg_catalog.||) variant_delegated;
    END LOOP;
    IF citus_present AND true = ANY (delegated) THEN
        IF NOT pg_catalog.citus_is_coordinator() THEN
            RETURN;
        END IF;
        FOR i IN 1 .. pg_catalog.array_length(replaced, 1) LOOP
            CONTINUE WHEN NOT delegated[i];
            BEGIN
                PERFORM pg_catalog.create_distributed_function(replaced[i], 'scope',
                            colocate_with => 'idempotency.keys', force_delegation => true);
            EXCEPTION WHEN OTHERS THEN
                RAISE WARNING 'Citus does not delegate calls of % yet', replaced[i]
                    USING DETAIL = SQLERRM,
                          HINT = pg_catalog.format('Once every node is at 0.4.0, run on the coordinator: SELECT create_distributed_function(%L, ''scope'', colocate_with => ''idempotency.keys'', force_delegation => true)',
                                                   replaced[i]::text);
            END;
        END LOOP;
    END IF;
END
$$;
DROP FUNCTION @extschema@.idempotency_complete_0_3_0(text, text, integer, jsonb, jsonb, integer, bytea, boolean);

-- ---------------------------------------------------------------------------
-- Citus, typed tenants: one spelling per tenant
-- ---------------------------------------------------------------------------
-- With keys distributed by a tenant column of type bigint, integer or uuid,
-- 0.3.0 read a text scope as the tenant's value to place it, but stored and
-- looked up the key under the scope as spelled: '01001' and '1001' (an
-- upper- and a lower-case uuid) reached the same shard and two different
-- keys, and a retry spelled otherwise ran the request again.  From 0.4.0 on
-- a call's scope is the tenant's value as its type prints it (citus.cpp,
-- tenant_scope).  idempotency_distribute() now stores the keys it moves
-- that way too, and refuses two keys that would become one.
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

-- Keys that 0.3.0 already distributed by a typed tenant and stored under
-- another spelling of it move to the tenant's value as its type prints it,
-- where every call looks for them now.  A key whose canonical spelling
-- holds the same key already (the request ran under both spellings) is left
-- as stored, with a WARNING: keeping one of the two answers is the DBA's
-- choice (doc/citus.md, "Updating to 0.4.0").  On the coordinator only: the
-- workers run this script too (Citus propagates the update), and the
-- coordinator reaches every shard.  Citus's catalogs are named only inside
-- EXECUTE: the extension does not need Citus.
DO $$
DECLARE
    typed boolean;
    stored record;
    moved bigint := 0;
    left_as_stored bigint := 0;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL
       OR pg_catalog.to_regclass('pg_catalog.pg_dist_local_group') IS NULL THEN
        RETURN;
    END IF;
    EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p
                             WHERE p.logicalrelid OPERATOR(pg_catalog.=) ''idempotency.keys''::pg_catalog.regclass
                               AND pg_catalog.column_to_column_name(p.logicalrelid, p.partkey)
                                   OPERATOR(pg_catalog.=) ''shard_key'')
                AND EXISTS (SELECT FROM pg_catalog.pg_dist_local_group AS g
                             WHERE g.groupid OPERATOR(pg_catalog.=) 0)'
        INTO typed;
    IF NOT typed THEN
        RETURN;
    END IF;
    FOR stored IN
        SELECT k.tenant, k.scope, k.key, k.shard_key
          FROM idempotency.keys AS k
         WHERE k.scope OPERATOR(pg_catalog.<>) k.shard_key::pg_catalog.text
    LOOP
        IF EXISTS (SELECT FROM idempotency.keys AS t
                    WHERE t.tenant OPERATOR(pg_catalog.=) stored.tenant
                      AND t.scope OPERATOR(pg_catalog.=) stored.shard_key::pg_catalog.text
                      AND t.key OPERATOR(pg_catalog.=) stored.key
                      AND t.shard_key OPERATOR(pg_catalog.=) stored.shard_key) THEN
            left_as_stored := left_as_stored OPERATOR(pg_catalog.+) 1;
        ELSE
            UPDATE idempotency.keys AS k SET scope = stored.shard_key::pg_catalog.text
             WHERE k.tenant OPERATOR(pg_catalog.=) stored.tenant
               AND k.scope OPERATOR(pg_catalog.=) stored.scope
               AND k.key OPERATOR(pg_catalog.=) stored.key
               AND k.shard_key OPERATOR(pg_catalog.=) stored.shard_key;
            moved := moved OPERATOR(pg_catalog.+) 1;
        END IF;
    END LOOP;
    IF left_as_stored OPERATOR(pg_catalog.>) 0 THEN
        RAISE WARNING 'idempotency: % stored keys are also stored under their tenant''s canonical scope, and were left as stored', left_as_stored
            USING DETAIL = pg_catalog.format('%s other keys moved to their tenant''s canonical scope (the value as its type prints it), where calls look for them from 0.4.0 on.', moved),
                  HINT = 'Each is a request that ran under two spellings of its tenant; see doc/citus.md, "Updating to 0.4.0", to keep one of the two.';
    END IF;
END
$$;
