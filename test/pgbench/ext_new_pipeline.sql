-- Extension: the 5-statement new request sent as one pipeline, one round trip
-- without a wrapper function.
-- Checks: \gset is not allowed in a pipeline, so each check raises on the
-- server through bench_fail, which aborts the pipeline and the client.
\set hi random(1, 4611686018427387903)
\set lo random(0, 4611686018427387903)
\startpipeline
BEGIN;
SELECT CASE WHEN outcome = 'claimed' THEN 1 ELSE bench_fail('begin did not claim a fresh key') END
  FROM idempotency_begin('bench', bench_fresh_key(:hi, :lo), request_hash(bench_request()));
INSERT INTO orders (idem_key, item, qty) VALUES (bench_fresh_key(:hi, :lo), 'book', 1);
SELECT CASE WHEN idempotency_complete('bench', bench_fresh_key(:hi, :lo), 201, '{"order": "created"}')
            THEN 1 ELSE bench_fail('complete did not store the response') END;
COMMIT;
\endpipeline
