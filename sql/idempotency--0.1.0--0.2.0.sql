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
-- Storage: the tenant in a column of its own, the lease length, byte bodies
-- ---------------------------------------------------------------------------

-- New columns go after 0.1.0's, as in the 0.2.0 install script.  The
-- tenant's default (no tenant) fills the existing rows without rewriting the
-- table.
ALTER TABLE idempotency.keys
    ADD COLUMN tenant pg_catalog.regrole NOT NULL DEFAULT 0,
    ADD COLUMN lease interval,
    ADD COLUMN response_body_bytes bytea,
    ADD COLUMN response_body_omitted boolean;

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
ALTER TABLE idempotency.keys ADD CONSTRAINT keys_pkey PRIMARY KEY (tenant, scope, key);

COMMENT ON TABLE idempotency.keys IS
    'one row per (tenant, scope, key): the claim, its lease and the stored response (status p = in progress, c = completed)';
COMMENT ON COLUMN idempotency.keys.tenant IS
    'the role that owns the key with idempotency.tenant_isolation = role, else 0 (-); dumped as the role''s name';

-- ---------------------------------------------------------------------------
-- API
-- ---------------------------------------------------------------------------

ALTER TYPE @extschema@.idempotency_begin_result
    ADD ATTRIBUTE response_body_bytes bytea, ADD ATTRIBUTE response_body_omitted boolean;
ALTER TYPE @extschema@.idempotency_lookup_result
    ADD ATTRIBUTE response_body_bytes bytea, ADD ATTRIBUTE response_body_omitted boolean;

-- idempotency_complete takes a body as bytes too.  A new argument list makes
-- a new function: whoever may execute the old one may execute the new one.
-- The grants are ordinary grants, which pg_dump keeps: the initial privileges
-- recorded for the extension are what CREATE EXTENSION itself would record,
-- not the grants made here.
CREATE FUNCTION @extschema@.idempotency_complete(
    scope text, key text, response_status integer,
    response_body jsonb DEFAULT NULL, response_headers jsonb DEFAULT NULL, attempt integer DEFAULT NULL,
    response_body_bytes bytea DEFAULT NULL)
    RETURNS boolean
    AS 'MODULE_PATHNAME', 'idempotency_complete' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.idempotency_complete(text, text, integer, jsonb, jsonb, integer, bytea) IS
    'record the response of a claimed key; false when a server error (>= 500) was not stored and the claim was dropped instead';
REVOKE ALL ON FUNCTION @extschema@.idempotency_complete(text, text, integer, jsonb, jsonb, integer, bytea) FROM PUBLIC;
DO $$
DECLARE
    old_function regprocedure := 'idempotency_complete(text, text, integer, jsonb, jsonb, integer)'::regprocedure;
    new_function regprocedure := 'idempotency_complete(text, text, integer, jsonb, jsonb, integer, bytea)'::regprocedure;
    initial aclitem[];
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
                 ELSE g.grantee::regrole::text END,
            CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
    UPDATE pg_catalog.pg_init_privs AS i SET initprivs = initial
     WHERE i.objoid OPERATOR(pg_catalog.=) new_function
       AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::regclass
       AND i.objsubid OPERATOR(pg_catalog.=) 0;
END
$$;
DROP FUNCTION @extschema@.idempotency_complete(text, text, integer, jsonb, jsonb, integer);

CREATE FUNCTION @extschema@.idempotency_key_problem(scope text, key text) RETURNS text
    AS 'MODULE_PATHNAME', 'idempotency_key_problem' LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.idempotency_key_problem(text, text) IS
    'what makes a scope and key unacceptable to the other functions (empty, too long, null), or NULL: a 400 without an error';
