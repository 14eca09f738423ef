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

-- ---------------------------------------------------------------------------
-- Keys stored under a 128-bit digest
-- ---------------------------------------------------------------------------

-- The primary key was (tenant, scope, key): every request descended it
-- comparing text, and every new key wrote its scope and key into it again.
-- From 0.5.0 on it is the digest alone, 16 bytes: a 128-bit keyed hash of
-- the tenant, scope and key (SipHash-2-4 under the secret below;
-- src/key_digest.hpp gives the construction), with the key's columns kept in
-- the row and compared after each fetch: two keys with one digest are an
-- error (IK008), never taken for one another.  The tenant enters the digest
-- as its number in idempotency.tenants below, not as the role's OID: a dump
-- writes a role as its name, and a restore into another cluster reads it
-- back as the role's OID there.
--
-- The secret: 16 random bytes, one row, made here, committed with the
-- extension -- not by a request's write, whose transaction would hold the
-- lock that makes it to its end, a prepared one for as long as it stays
-- prepared.  Registered with pg_extension_config_dump, so that pg_dump keeps
-- it with the keys; a restore runs this script first, which makes a new one,
-- and then loads the dumped row, which replaces it (the trigger below).  It
-- never changes otherwise; the keys' digests are only found with it.
CREATE TABLE idempotency.digest_secret (
    secret pg_catalog.bytea NOT NULL
        CONSTRAINT digest_secret_16_bytes
        CHECK (pg_catalog.octet_length(secret) OPERATOR(pg_catalog.=) 16)
);
CREATE UNIQUE INDEX digest_secret_one_row ON idempotency.digest_secret ((true));
COMMENT ON INDEX idempotency.digest_secret_one_row IS 'keeps idempotency.digest_secret to one row';
COMMENT ON TABLE idempotency.digest_secret IS
    'the secret of the keys'' digests (one row, made by CREATE EXTENSION, kept by pg_dump with the keys): never change or delete it';
REVOKE ALL ON TABLE idempotency.digest_secret FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('idempotency.digest_secret', '');
CREATE FUNCTION idempotency.replace_digest_secret() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
BEGIN
    DELETE FROM idempotency.digest_secret;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION idempotency.replace_digest_secret() IS
    'a secret inserted into idempotency.digest_secret replaces the one there: a restore loads the dumped secret over the one CREATE EXTENSION made';
REVOKE ALL ON FUNCTION idempotency.replace_digest_secret() FROM PUBLIC;
CREATE TRIGGER digest_secret_replaced BEFORE INSERT ON idempotency.digest_secret
    FOR EACH ROW EXECUTE FUNCTION idempotency.replace_digest_secret();
COMMENT ON TRIGGER digest_secret_replaced ON idempotency.digest_secret IS
    'a restore''s secret replaces the one CREATE EXTENSION made';
INSERT INTO idempotency.digest_secret
SELECT pg_catalog.substr(pg_catalog.sha256(pg_catalog.uuid_send(pg_catalog.gen_random_uuid())
                                           OPERATOR(pg_catalog.||)
                                           pg_catalog.uuid_send(pg_catalog.gen_random_uuid())), 1, 16);

-- The tenants' numbers (src/tenants.hpp).  With idempotency.tenant_isolation
-- = role, a role's first call that stores a key numbers it here, in its own
-- transaction, with the next value of the sequence: a number is never handed
-- out twice, and 0, no tenant, never.  Both are registered with
-- pg_extension_config_dump, so that pg_dump keeps them with the keys; the
-- role column is written as the role's name and read back by name, so that
-- a restore into another cluster, where the role has another OID, gives it
-- the same number, and its keys the same digests.  The rows of roles that
-- no longer exist, which the expiry sweep deletes, are left out of a dump:
-- their role would be written as a bare OID, which the restore would read as
-- whichever role has that OID there.
CREATE SEQUENCE idempotency.tenant_numbers AS pg_catalog.int4 MINVALUE 1 NO CYCLE;
COMMENT ON SEQUENCE idempotency.tenant_numbers IS
    'the next tenant number of idempotency.tenants (kept by pg_dump): never reset it';
REVOKE ALL ON SEQUENCE idempotency.tenant_numbers FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('idempotency.tenant_numbers', '');
CREATE TABLE idempotency.tenants (
    number pg_catalog.int4 NOT NULL
        CONSTRAINT tenants_pkey PRIMARY KEY
        CONSTRAINT tenants_number_positive CHECK (number OPERATOR(pg_catalog.>) 0),
    role pg_catalog.regrole NOT NULL
        CONSTRAINT tenants_role_key UNIQUE
);
COMMENT ON TABLE idempotency.tenants IS
    'the number each tenant role enters the keys'' digests with (made by its first key, kept by pg_dump with the keys): never change or delete a row';
COMMENT ON COLUMN idempotency.tenants.number IS
    'the role''s number in this database''s key digests (0, no tenant, has no row)';
COMMENT ON COLUMN idempotency.tenants.role IS
    'the tenant role (idempotency.tenant_isolation = role); dumped as the role''s name';
COMMENT ON INDEX idempotency.tenants_role_key IS
    'one number per role: two first calls of a role at once agree on one';
REVOKE ALL ON TABLE idempotency.tenants FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('idempotency.tenants',
    'WHERE EXISTS (SELECT FROM pg_catalog.pg_roles AS r WHERE r.oid OPERATOR(pg_catalog.=) tenants.role::pg_catalog.oid)');

-- The one way to compute a key's digest in this database, for whatever
-- moves keys into idempotency.keys: this update, and the move from the SQL
-- edition (doc/operations.md, "Moving keys in").  It makes the secret when
-- there is none and numbers a tenant that has no number, so it needs a
-- writable transaction then.
CREATE FUNCTION idempotency.key_digest(tenant pg_catalog.regrole, scope pg_catalog.text,
                                       key pg_catalog.text)
    RETURNS pg_catalog.uuid
    AS 'MODULE_PATHNAME', 'idempotency_key_digest' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.key_digest(pg_catalog.regrole, pg_catalog.text, pg_catalog.text) IS
    'the digest idempotency.keys stores a tenant''s (or, for 0, no tenant''s) key of a scope under in this database; makes the database''s secret if it has none, numbers the tenant if it has no number';
REVOKE ALL ON FUNCTION idempotency.key_digest(pg_catalog.regrole, pg_catalog.text, pg_catalog.text) FROM PUBLIC;

-- The new column, at the end (as each version's are), then one rewrite of
-- the table that fills it, and the new primary key built once, sorted.  (An
-- UPDATE instead would leave every row's old version behind, and write each
-- new one into the old primary key.)  Measured: doc/operations.md,
-- "Updating to 0.5.0".  First the keys of roles dropped since they were
-- stored go, as the next sweep would delete them (nobody can reach them,
-- and a role that no longer exists gets no number), and each tenant that
-- has keys is numbered.
--
-- Keys that Citus already distributes keep their layout: the library serves
-- a table without the digest column as it served 0.4.0's (its primary key
-- (tenant, scope, key), and shard_key with a typed tenant), and the
-- rewrite would have to run on every node's shards with one secret before
-- the primary key could change on the coordinator (doc/citus.md, "Updating
-- to 0.5.0").  Citus's catalogs are named only inside EXECUTE: the
-- extension does not need Citus.
DO $$
DECLARE
    distributed boolean := false;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p
                                 WHERE p.logicalrelid OPERATOR(pg_catalog.=) ''idempotency.keys''::pg_catalog.regclass)'
            INTO distributed;
    END IF;
    IF distributed THEN
        RAISE NOTICE 'idempotency.keys is distributed by Citus: its keys keep the layout of 0.4.0'
            USING DETAIL = 'The functions serve it as they did; a new request costs what it cost under 0.4.0.';
        RETURN;
    END IF;
    DELETE FROM idempotency.keys AS k
     WHERE k.tenant::pg_catalog.oid OPERATOR(pg_catalog.<>) 0::pg_catalog.oid
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_roles AS r
                        WHERE r.oid OPERATOR(pg_catalog.=) k.tenant::pg_catalog.oid);
    PERFORM idempotency.key_digest(t.tenant, '', '')
       FROM (SELECT DISTINCT k.tenant FROM idempotency.keys AS k
              WHERE k.tenant::pg_catalog.oid OPERATOR(pg_catalog.<>) 0::pg_catalog.oid) AS t
      ORDER BY t.tenant::pg_catalog.oid;
    ALTER TABLE idempotency.keys ADD COLUMN digest pg_catalog.uuid;
    COMMENT ON COLUMN idempotency.keys.digest IS
        'the primary key: a 128-bit keyed digest of (tenant, scope, key) under idempotency.digest_secret, the tenant by its number in idempotency.tenants';
    ALTER TABLE idempotency.keys
        ALTER COLUMN digest TYPE pg_catalog.uuid USING idempotency.key_digest(tenant, scope, key),
        ALTER COLUMN digest SET NOT NULL,
        DROP CONSTRAINT keys_pkey,
        ADD CONSTRAINT keys_pkey PRIMARY KEY (digest);
END
$$;

-- ---------------------------------------------------------------------------
-- Citus: keys under their digest
-- ---------------------------------------------------------------------------
-- idempotency_distribute() of a table at 0.5.0's layout puts the
-- distribution column beside the digest in the primary key (Citus takes it
-- in every unique constraint), stores a key moved to its tenant's canonical
-- scope under that scope's digest, and makes idempotency.digest_secret a
-- reference table, so that every node -- and a node a shard moves to --
-- digests keys with one secret.
--
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
    by_digest boolean;
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
    -- A table at 0.5.0's layout: keys under their digest, whose primary key
    -- takes the distribution column beside the digest, as Citus requires.
    by_digest := EXISTS (SELECT FROM pg_catalog.pg_attribute AS a
                          WHERE a.attrelid OPERATOR(pg_catalog.=) 'idempotency.keys'::pg_catalog.regclass
                            AND a.attname OPERATOR(pg_catalog.=) 'digest' AND NOT a.attisdropped);
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
        IF by_digest AND NOT keys_distributed THEN
            alter_keys := 'ALTER TABLE idempotency.keys DROP CONSTRAINT keys_pkey, '
                          'ADD CONSTRAINT keys_pkey PRIMARY KEY (digest, scope)';
            EXECUTE alter_keys;
            alter_tables := alter_tables OPERATOR(pg_catalog.||) alter_keys;
        END IF;
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
                'ADD CONSTRAINT keys_pkey PRIMARY KEY (%2$s)',
                column_type::pg_catalog.regtype,
                CASE WHEN by_digest THEN 'digest, shard_key' ELSE 'tenant, scope, key, shard_key' END);
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
            -- retry should replay is the DBA's choice.  A key moved is
            -- stored under the digest of its new scope.
            BEGIN
                UPDATE idempotency.keys AS k SET scope = k.shard_key::pg_catalog.text
                 WHERE k.scope OPERATOR(pg_catalog.<>) k.shard_key::pg_catalog.text;
                IF by_digest THEN
                    UPDATE idempotency.keys AS k
                       SET digest = idempotency.key_digest(k.tenant, k.scope, k.key)
                     WHERE k.digest OPERATOR(pg_catalog.<>) idempotency.key_digest(k.tenant, k.scope, k.key);
                END IF;
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
    -- Every node digests keys with the coordinator's secret: the table of
    -- the secret becomes a reference table, placed on every node (and on
    -- every node added later), where the library reads it
    -- (citus_placement.hpp, reference_placement).  Made first if no key was
    -- written yet.
    IF by_digest AND NOT EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p
                                  WHERE p.logicalrelid OPERATOR(pg_catalog.=) 'idempotency.digest_secret'::pg_catalog.regclass) THEN
        PERFORM idempotency.key_digest('-', '', '');
        -- Its trigger (a restore's secret replaces the installed one) is for
        -- a plain restore, not Citus's: Citus refuses to distribute a table
        -- with triggers, and its copy of the rows would fire it.
        DROP TRIGGER digest_secret_replaced ON idempotency.digest_secret;
        PERFORM pg_catalog.create_reference_table('idempotency.digest_secret');
        PERFORM pg_catalog.truncate_local_data_after_distributing_table('idempotency.digest_secret');
    END IF;
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
    'with Citus: distribute idempotency.keys by the scope read as the tenant column''s type (bigint, integer, uuid or text COLLATE "C"), each scope spelled as that type prints it, co-located with that table, with the secret of the key digests on every node, and delegate the API functions to the scope''s node';
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
