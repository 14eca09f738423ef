-- Baseline: 100 hot keys, fresh for each run (-D run=N), hammered by many
-- clients in plain SQL.  The first client to claim a key does the work; the
-- others wait on its uncommitted row (ON CONFLICT waits), then replay.
-- Checks: the claim path completes its row; the replay path finds the
-- completed row of this request (\gset).  The runner then counts business
-- rows per key: more than one is a failure.
\set k random(1, 100)
\set claimed 0
BEGIN;
INSERT INTO idempotency_keys_plain (key, request_hash, status)
    VALUES (bench_hot_key(:run, :k), bench_request_digest(), 'started')
    ON CONFLICT DO NOTHING
    RETURNING 1 AS claimed \aset
\if :claimed
INSERT INTO orders (idem_key, item, qty) VALUES (bench_hot_key(:run, :k), 'book', 1);
UPDATE idempotency_keys_plain
   SET status = 'completed', response_status = 201, response_body = '{"order": "created"}'
 WHERE key = bench_hot_key(:run, :k)
 RETURNING 1 AS completed \gset
\else
SELECT response_status, response_body
  FROM idempotency_keys_plain
 WHERE key = bench_hot_key(:run, :k)
   AND request_hash = bench_request_digest()
   AND status = 'completed'
   FOR UPDATE \gset
\endif
COMMIT;
