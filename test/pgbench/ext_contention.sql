-- Extension: 100 hot keys, fresh for each run (-D run=N), hammered by many
-- clients.  begin waits for an uncommitted holder (wait => 10s), so every
-- answer is claimed (do the work) or replay (the holder committed).
-- Checks: the answer is one of those two, a replay carries the response, and
-- the claim path completes (\gset).  The runner then counts business rows
-- per key: more than one is a failure.
\set k random(1, 100)
BEGIN;
SELECT (outcome = 'claimed')::integer AS claimed
  FROM idempotency_begin('bench', bench_hot_key(:run, :k), request_hash(bench_request()), wait => '10s')
 WHERE outcome = 'claimed' OR (outcome = 'replay' AND response_status = 201) \gset
\if :claimed
INSERT INTO orders (idem_key, item, qty) VALUES (bench_hot_key(:run, :k), 'book', 1);
SELECT 1 AS completed
 WHERE idempotency_complete('bench', bench_hot_key(:run, :k), 201, '{"order": "created"}') \gset
\endif
COMMIT;
