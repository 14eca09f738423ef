-- EXECUTE on the idempotency_* functions is not granted to PUBLIC, and the
-- storage is not readable or writable by PUBLIC.  The README's GRANTs let an
-- application role use every function.
CREATE EXTENSION idempotency;
CREATE ROLE regress_idem_app NOLOGIN;
CREATE ROLE regress_idem_outsider NOLOGIN;

SELECT outcome FROM idempotency_begin('tenant-a', 'k', request_hash('r'::text));
SELECT idempotency_complete('tenant-a', 'k', 200, '{"private": true}');

-- The grants from the README.
GRANT EXECUTE ON FUNCTION
    idempotency_begin(text, text, request_hash, interval, interval, interval),
    idempotency_complete(text, text, integer, jsonb, jsonb, integer),
    idempotency_checkpoint(text, text, text, interval, integer),
    idempotency_release(text, text, integer),
    idempotency_lookup(text, text)
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
SELECT count(*) FROM idempotency.keys;
INSERT INTO idempotency.keys (scope, key) VALUES ('x', 'y');
RESET ROLE;

SET ROLE regress_idem_app;
SELECT outcome, response_body FROM idempotency_begin('tenant-a', 'k', request_hash('r'::text));
SELECT outcome, attempt FROM idempotency_begin('tenant-b', 'k', request_hash('r'::text), lease => '1 hour');
SELECT idempotency_checkpoint('tenant-b', 'k', 'step 1') IS NOT NULL AS checkpointed;
SELECT idempotency_release('tenant-b', 'k');
SELECT outcome, attempt FROM idempotency_begin('tenant-b', 'k', request_hash('r'::text));
SELECT idempotency_complete('tenant-b', 'k', 201);
SELECT status, response_status FROM idempotency_lookup('tenant-b', 'k');
-- the application still cannot touch the table directly
SELECT count(*) FROM idempotency.keys;
RESET ROLE;

-- No function of the extension is executable by PUBLIC but the type's.
SELECT p.proname
  FROM pg_depend d JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
 WHERE d.refclassid = 'pg_extension'::regclass
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'idempotency')
   AND has_function_privilege('public', p.oid, 'EXECUTE')
   AND p.proname NOT LIKE 'request_hash%'
 ORDER BY 1;

DROP EXTENSION idempotency;
DROP ROLE regress_idem_app;
DROP ROLE regress_idem_outsider;
