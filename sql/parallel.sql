-- Volatility and parallel safety, as declared and as parallel plans use them.
-- (Quietly: without shared_preload_libraries it warns; t/001_preload.pl tests that.)
SET client_min_messages = error;
CREATE EXTENSION idempotency;
RESET client_min_messages;
\set VERBOSITY sqlstate

-- Every function of the extension: what writes is VOLATILE PARALLEL UNSAFE,
-- what reads the calling backend's deferred claims PARALLEL RESTRICTED.
SELECT p.oid::regprocedure AS function, p.provolatile AS volatility, p.proparallel AS parallel
  FROM pg_proc AS p
  JOIN pg_depend AS d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
 WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'idempotency')
   AND p.proname LIKE 'idempotency%'
 ORDER BY p.oid::regprocedure::text;

-- Parallel plans, cheap enough to be chosen for a small table, and forced
-- where the planner would not choose one.
CREATE TABLE parallel_rows AS SELECT g AS n FROM generate_series(1, 20000) AS g;
ANALYZE parallel_rows;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;

BEGIN;
SELECT outcome FROM idempotency_begin('par', 'k7', request_hash('r'::text));
-- A listing joined with a table scanned in parallel: it runs in the leader,
-- which writes the caller's deferred claim first, and finds it.
SELECT count(*) AS joined FROM parallel_rows AS p JOIN idempotency_keys('par') AS k ON k.key = 'k' || p.n;
-- The same with the leader only gathering.
SET LOCAL parallel_leader_participation = off;
SELECT count(*) AS joined FROM parallel_rows AS p JOIN idempotency_keys('par') AS k ON k.key = 'k' || p.n;
ROLLBACK;

-- A lookup of the caller's own claim, with every query forced into a
-- parallel plan (force_parallel_mode before 16, debug_parallel_query since).
BEGIN;
SELECT outcome FROM idempotency_begin('par', 'k8', request_hash('r'::text));
SELECT set_config(CASE WHEN current_setting('server_version_num')::int >= 160000
                       THEN 'debug_parallel_query' ELSE 'force_parallel_mode' END,
                  'on', true) AS forced;
SELECT status, attempt, committed FROM idempotency_lookup('par', 'k8');
SELECT count(*) AS joined FROM parallel_rows AS p JOIN idempotency_lookup('par', 'k8') AS l ON p.n = l.attempt;
ROLLBACK;

DROP TABLE parallel_rows;
DROP EXTENSION idempotency;
