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
