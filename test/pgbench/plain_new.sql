-- Baseline: a new request in plain SQL, 5 statements: claim the key, do the
-- business INSERT, mark the key completed with its response, commit.
-- Checks: the claim and the completion each return their row (\gset).
\set hi random(1, 4611686018427387903)
\set lo random(0, 4611686018427387903)
BEGIN;
INSERT INTO idempotency_keys_plain (key, request_hash, status)
    VALUES (bench_fresh_key(:hi, :lo), bench_request_digest(), 'started')
    ON CONFLICT DO NOTHING
    RETURNING 1 AS claimed \gset
INSERT INTO orders (idem_key, item, qty) VALUES (bench_fresh_key(:hi, :lo), 'book', 1);
UPDATE idempotency_keys_plain
   SET status = 'completed', response_status = 201, response_body = '{"order": "created"}'
 WHERE key = bench_fresh_key(:hi, :lo)
 RETURNING 1 AS completed \gset
COMMIT;
