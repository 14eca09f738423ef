-- The error boundary: a C++ exception or a failed C++ allocation inside any
-- function of the extension comes out as an ordinary error, and the session
-- (and the server) live on.  idempotency.inject_fault makes every entry point
-- throw.
-- (Quietly: without shared_preload_libraries it warns; t/001_preload.pl tests that.)
SET client_min_messages = error;
CREATE EXTENSION idempotency;
RESET client_min_messages;
SELECT pg_backend_pid() AS backend \gset

\set VERBOSITY sqlstate
SET idempotency.inject_fault = 'exception';
SELECT request_hash('r'::text);
SELECT idempotency_begin('s', 'k', '0000000000000000000000000000000000000000000000000000000000000000');
SET idempotency.inject_fault = 'out_of_memory';
SELECT request_hash('r'::text);
SELECT * FROM idempotency_lookup('s', 'k');
\set VERBOSITY default
SET idempotency.inject_fault = 'exception';
SELECT idempotency_expire();
RESET idempotency.inject_fault;

-- Same backend, working as before, nothing written by the failed calls.
SELECT pg_backend_pid() = :backend AS same_backend;
SELECT outcome FROM idempotency_begin('s', 'k', request_hash('r'::text), lease => '1 minute');
SELECT count(*) FROM idempotency.keys;

-- Only a superuser may inject faults.
CREATE ROLE regress_idem_user;
SET ROLE regress_idem_user;
SET idempotency.inject_fault = 'exception';
RESET ROLE;
DROP ROLE regress_idem_user;

DROP EXTENSION idempotency;
