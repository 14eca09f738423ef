-- The extension as an object: dump registration, comments, clean removal.
-- (Quietly: without shared_preload_libraries it warns; t/001_preload.pl tests that.)
SET client_min_messages = error;
CREATE EXTENSION idempotency;
RESET client_min_messages;

-- pg_dump keeps the keys (a restore without them would replay nothing), the
-- secret and the tenants' numbers their digests are made with -- but the
-- numbers of roles that no longer exist.
SELECT d.dumped::regclass, d.condition
  FROM pg_extension AS e, unnest(e.extconfig, e.extcondition) AS d(dumped, condition)
 WHERE e.extname = 'idempotency' ORDER BY d.dumped::regclass::text;

-- Every object the extension creates carries a comment (the primary key's
-- index and the types PostgreSQL makes implicitly excepted: array types and
-- a table's row type, which 17 and later record as members too).
SELECT pg_describe_object(d.classid, d.objid, d.objsubid) AS uncommented
  FROM pg_depend d
 WHERE d.refclassid = 'pg_extension'::regclass
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'idempotency')
   AND d.deptype = 'e'
   AND obj_description(d.objid, d.classid::regclass::name) IS NULL
   AND NOT EXISTS (SELECT FROM pg_type t
                    WHERE d.classid = 'pg_type'::regclass AND t.oid = d.objid
                      AND (EXISTS (SELECT FROM pg_type e WHERE e.typarray = t.oid)
                           OR EXISTS (SELECT FROM pg_class c
                                       WHERE c.oid = t.typrelid AND c.relkind <> 'c')))
 ORDER BY 1;

-- A user's own table named like the usual hand-written one does not clash.
CREATE TABLE idempotency_keys (key text PRIMARY KEY);
CREATE TABLE keys (id int);
SELECT outcome FROM idempotency_begin('s', 'k', request_hash('r'::text), lease => '1 minute');
DROP TABLE idempotency_keys, keys;

-- DROP EXTENSION removes everything it created, data included.
DROP EXTENSION idempotency;
SELECT count(*) AS schemas FROM pg_namespace WHERE nspname = 'idempotency';
SELECT count(*) AS types FROM pg_type WHERE typname IN ('request_hash', 'idempotency_outcome', '_request_hash');
SELECT count(*) AS functions FROM pg_proc WHERE proname LIKE 'idempotency%' OR proname LIKE 'request_hash%';
SELECT count(*) AS operator_classes FROM pg_opclass WHERE opcname LIKE 'request_hash%';
SELECT count(*) AS operator_families FROM pg_opfamily WHERE opfname LIKE 'request_hash%';
SELECT count(*) AS casts FROM pg_cast WHERE castsource = 'bytea'::regtype AND casttarget NOT IN (SELECT oid FROM pg_type WHERE typnamespace = 'pg_catalog'::regnamespace);

-- And it installs again after removal.
-- (Quietly: without shared_preload_libraries it warns; t/001_preload.pl tests that.)
SET client_min_messages = error;
CREATE EXTENSION idempotency;
RESET client_min_messages;
SELECT count(*) AS keys_after_reinstall FROM idempotency.keys;
DROP EXTENSION idempotency;

-- One session through an upgrade and a reinstall: a backend keeps the outcome
-- labels of idempotency_begin's result and reads its row type from the type
-- cache, and both follow.  The 0.2.0 declaration's row has no
-- retry_after_seconds; after ALTER EXTENSION UPDATE it has, in the same
-- session; a reinstall makes a new outcome type, whose labels are found again.
SET client_min_messages = error;
CREATE EXTENSION idempotency VERSION '0.2.0';
RESET client_min_messages;
SELECT outcome, attempt FROM idempotency_begin('s', 'held', request_hash('r'::text), lease => '1 minute');
SELECT outcome FROM idempotency_begin('s', 'held', request_hash('other'::text));
ALTER EXTENSION idempotency UPDATE TO '0.3.0';
SELECT outcome, retry_after_seconds BETWEEN 1 AND 60 AS retry_after_seconds
  FROM idempotency_begin('s', 'held', request_hash('r'::text));
DROP EXTENSION idempotency;
SET client_min_messages = error;
CREATE EXTENSION idempotency;
RESET client_min_messages;
SELECT outcome, attempt FROM idempotency_begin('s', 'held', request_hash('r'::text), lease => '1 minute');
SELECT outcome FROM idempotency_begin('s', 'held', request_hash('other'::text));
DROP EXTENSION idempotency;

-- An update that finds a column shard_key it did not add refuses (42701),
-- and the extension stays at 0.2.0.
SET client_min_messages = error;
CREATE EXTENSION idempotency VERSION '0.2.0';
RESET client_min_messages;
ALTER TABLE idempotency.keys ADD COLUMN shard_key integer;
\set VERBOSITY terse
ALTER EXTENSION idempotency UPDATE TO '0.3.0';
\set VERBOSITY default
SELECT extversion FROM pg_extension WHERE extname = 'idempotency';
DROP EXTENSION idempotency;
