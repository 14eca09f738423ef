-- Extension: two-phase use, for work outside the database (e.g. a payment
-- provider): begin commits the claim with a lease; a second transaction
-- completes it.  One pgbench transaction is both database transactions.
-- Checks: begin claims the fresh key; complete stores the response (\gset).
\set hi random(1, 4611686018427387903)
\set lo random(0, 4611686018427387903)
SELECT 1 AS claimed
  FROM idempotency_begin('bench', bench_fresh_key(:hi, :lo), request_hash(bench_request()), lease => '1 minute')
 WHERE outcome = 'claimed' \gset
SELECT 1 AS completed
 WHERE idempotency_complete('bench', bench_fresh_key(:hi, :lo), 201, '{"order": "created"}') \gset
