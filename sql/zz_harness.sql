-- Placeholder proving the pg_regress path of test/run (delete once real tests exist):
-- the shared cluster preloads the library and the extension installs.
SHOW idempotency.default_ttl;
CREATE EXTENSION idempotency;
SELECT extname, extversion FROM pg_extension WHERE extname = 'idempotency';
DROP EXTENSION idempotency;
