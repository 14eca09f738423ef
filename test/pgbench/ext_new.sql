-- Extension: a new request as an application writes it, 5 statements: begin,
-- the business INSERT, complete, commit.  Also the demo's pgbench run.
-- Checks: begin claims the fresh key; complete stores the response (\gset).
\set hi random(1, 4611686018427387903)
\set lo random(0, 4611686018427387903)
BEGIN;
SELECT 1 AS claimed
  FROM idempotency_begin('bench', bench_fresh_key(:hi, :lo), request_hash(bench_request()))
 WHERE outcome = 'claimed' \gset
INSERT INTO orders (idem_key, item, qty) VALUES (bench_fresh_key(:hi, :lo), 'book', 1);
SELECT 1 AS completed
 WHERE idempotency_complete('bench', bench_fresh_key(:hi, :lo), 201, '{"order": "created"}') \gset
COMMIT;
