-- EXECUTE on the idempotency_* functions is not granted to PUBLIC, and the
-- storage is not readable or writable by PUBLIC.  The GRANTs of
-- doc/reference.md let an application role use every function.
-- (Quietly: without shared_preload_libraries it warns; t/001_preload.pl tests that.)
SET client_min_messages = error;
CREATE EXTENSION idempotency;
RESET client_min_messages;
CREATE ROLE regress_idem_app NOLOGIN;
CREATE ROLE regress_idem_outsider NOLOGIN;

BEGIN;
SELECT outcome FROM idempotency_begin('tenant-a', 'k', request_hash('r'::text));
SELECT idempotency_complete('tenant-a', 'k', 200, '{"private": true}');
COMMIT;

-- The grants of doc/reference.md (test/t/050 checks that they are this
-- statement), by name, so that they hold whatever the argument lists of a
-- version.
GRANT EXECUTE ON FUNCTION
    idempotency_begin, idempotency_complete, idempotency_checkpoint, idempotency_release,
    idempotency_lookup, idempotency_forget, idempotency_keys
    TO regress_idem_app;

\set VERBOSITY terse
SET ROLE regress_idem_outsider;
-- the type is public
SELECT request_hash('r'::text) = request_hash('r'::text) AS type_is_public;
-- the functions and the storage are not (42501, and nothing about other scopes)
SELECT outcome FROM idempotency_begin('tenant-a', 'k', request_hash('r'::text));
SELECT * FROM idempotency_lookup('tenant-a', 'k');
SELECT idempotency_complete('tenant-a', 'k', 200);
SELECT idempotency_checkpoint('tenant-a', 'k', 'p');
SELECT idempotency_release('tenant-a', 'k');
SELECT idempotency_forget('tenant-a', 'k');
SELECT * FROM idempotency_keys('tenant-a');
SELECT count(*) FROM idempotency.keys;
INSERT INTO idempotency.keys (scope, key) VALUES ('x', 'y');
RESET ROLE;

SET ROLE regress_idem_app;
SELECT outcome, response_body FROM idempotency_begin('tenant-a', 'k', request_hash('r'::text));
SELECT outcome, attempt FROM idempotency_begin('tenant-b', 'k', request_hash('r'::text), lease => '1 hour');
SELECT idempotency_checkpoint('tenant-b', 'k', 'step 1') IS NOT NULL AS checkpointed;
SELECT idempotency_release('tenant-b', 'k');
SELECT outcome, attempt FROM idempotency_begin('tenant-b', 'k', request_hash('r'::text), lease => '1 hour');
SELECT idempotency_complete('tenant-b', 'k', 201);
SELECT status, response_status FROM idempotency_lookup('tenant-b', 'k');
SELECT key, status FROM idempotency_keys('tenant-b');
SELECT idempotency_forget('tenant-b', 'k') AS forgotten;
-- the application still cannot touch the table directly
SELECT count(*) FROM idempotency.keys;
RESET ROLE;

-- No function of the extension is executable by PUBLIC but the type's, and
-- idempotency_key_problem, which reads nothing but its arguments and a setting.
SELECT p.proname
  FROM pg_depend d JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
 WHERE d.refclassid = 'pg_extension'::regclass
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'idempotency')
   AND has_function_privilege('public', p.oid, 'EXECUTE')
   AND p.proname NOT LIKE 'request_hash%'
   AND p.proname <> 'idempotency_key_problem'
 ORDER BY 1;
SET ROLE regress_idem_outsider;
SELECT idempotency_key_problem('s', '') AS problem;
RESET ROLE;

-- Every role may name the objects of the private schema, but nothing there
-- is granted to PUBLIC: no table, column or function (with Citus, the DBA
-- grants the routing table to the roles whose calls are forwarded:
-- doc/citus.md).
SELECT has_schema_privilege('public', 'idempotency', 'USAGE') AS public_uses_schema;
SELECT c.relname, a.attname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
 WHERE c.relnamespace = 'idempotency'::regnamespace
   AND has_column_privilege('public', c.oid, a.attnum, 'SELECT, INSERT, UPDATE, REFERENCES');
SELECT p.proname FROM pg_proc p
 WHERE p.pronamespace = 'idempotency'::regnamespace
   AND has_function_privilege('public', p.oid, 'EXECUTE');
-- The routing table and the two-phase table hold no row, even for their
-- owner.
INSERT INTO idempotency.route VALUES ('t');
INSERT INTO idempotency.two_phase VALUES (true);
DROP EXTENSION idempotency;

-- The update to 0.4.0 replaces idempotency_complete (a new argument,
-- omit_oversized) and, with Citus tenants of type bigint or uuid, its
-- variants: whoever could execute the old one can execute the new one, with
-- the same grant options, and the initial privileges recorded for the
-- extension are those of a fresh install.  (create_scope_variants(), which
-- idempotency_distribute() calls, makes the variants without Citus too.)
SET client_min_messages = error;
CREATE EXTENSION idempotency VERSION '0.3.0';
RESET client_min_messages;
SELECT count(*) AS variants FROM idempotency.create_scope_variants('bigint');
GRANT EXECUTE ON FUNCTION idempotency_complete(text, text, integer, jsonb, jsonb, integer, bytea, boolean)
    TO regress_idem_app;
GRANT EXECUTE ON FUNCTION idempotency_complete(bigint, text, integer, jsonb, jsonb, integer, bytea, boolean)
    TO regress_idem_app WITH GRANT OPTION;
GRANT EXECUTE ON FUNCTION idempotency_begin(text, text, request_hash, interval, interval, interval, jsonb, boolean)
    TO regress_idem_app;
ALTER EXTENSION idempotency UPDATE TO '0.4.0';
SELECT p.oid::regprocedure AS replaced,
       has_function_privilege('regress_idem_app', p.oid, 'EXECUTE') AS app_executes,
       has_function_privilege('regress_idem_app', p.oid, 'EXECUTE WITH GRANT OPTION') AS app_grants
  FROM pg_proc p WHERE p.proname = 'idempotency_complete' ORDER BY 1;
SELECT i.objoid::regprocedure AS function, replace(i.initprivs::text, current_user, 'owner') AS initprivs
  FROM pg_init_privs i JOIN pg_proc p ON p.oid = i.objoid AND i.classoid = 'pg_proc'::regclass
 WHERE p.proname IN ('idempotency_complete', 'create_scope_variants') ORDER BY 1;
SET ROLE regress_idem_app;
BEGIN;
SELECT outcome FROM idempotency_begin('s', 'updated', request_hash('r'::text));
SELECT idempotency_complete('s', 'updated', 201, omit_oversized => false);
ROLLBACK;
\set VERBOSITY terse
SELECT idempotency_complete(42::bigint, 'nobody', 201);
\set VERBOSITY default
RESET ROLE;
-- A fresh install records the same initial privileges.
DROP EXTENSION idempotency;
SET client_min_messages = error;
CREATE EXTENSION idempotency;
RESET client_min_messages;
SELECT i.objoid::regprocedure AS function, replace(i.initprivs::text, current_user, 'owner') AS initprivs
  FROM pg_init_privs i JOIN pg_proc p ON p.oid = i.objoid AND i.classoid = 'pg_proc'::regclass
 WHERE p.proname IN ('idempotency_complete', 'create_scope_variants') ORDER BY 1;
DROP EXTENSION idempotency;

-- The update to 0.5.0 replaces idempotency_distribute (a new body): a grant
-- on the old one carries over as an ordinary grant (pg_dump keeps it), and
-- the initial privileges are those of a fresh install.
SET client_min_messages = error;
CREATE EXTENSION idempotency VERSION '0.4.0';
RESET client_min_messages;
GRANT EXECUTE ON FUNCTION idempotency_distribute(regclass) TO regress_idem_app;
ALTER EXTENSION idempotency UPDATE TO '0.5.0';
SELECT has_function_privilege('regress_idem_app', 'idempotency_distribute(regclass)', 'EXECUTE') AS app_executes,
       has_function_privilege('regress_idem_outsider', 'idempotency_distribute(regclass)', 'EXECUTE') AS outsider_executes;
SELECT replace(i.initprivs::text, current_user, 'owner') AS initprivs
  FROM pg_init_privs i WHERE i.objoid = 'idempotency_distribute(regclass)'::regprocedure AND i.classoid = 'pg_proc'::regclass;
SELECT count(*) AS old_function_left FROM pg_proc WHERE proname = 'idempotency_distribute_0_4_0';
DROP EXTENSION idempotency;
SET client_min_messages = error;
CREATE EXTENSION idempotency;
RESET client_min_messages;
SELECT replace(i.initprivs::text, current_user, 'owner') AS initprivs
  FROM pg_init_privs i WHERE i.objoid = 'idempotency_distribute(regclass)'::regprocedure AND i.classoid = 'pg_proc'::regclass;
DROP EXTENSION idempotency;
DROP ROLE regress_idem_app;
DROP ROLE regress_idem_outsider;
