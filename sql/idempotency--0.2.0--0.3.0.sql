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
