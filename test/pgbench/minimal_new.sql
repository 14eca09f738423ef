-- Baseline: the hand-written minimum of a new request as one SQL statement,
-- autocommit: the business INSERT and one INSERT of the completed key row.
-- Check: the key row comes back (\gset); a key that exists fails with
-- unique_violation, which rolls the business row back with it.
\set hi random(1, 4611686018427387903)
\set lo random(0, 4611686018427387903)
WITH business AS (
    INSERT INTO orders (idem_key, item, qty) VALUES (bench_fresh_key(:hi, :lo), 'book', 1))
INSERT INTO idempotency_keys_plain (key, request_hash, status, response_status, response_body)
    VALUES (bench_fresh_key(:hi, :lo), bench_request_digest(), 'completed', 201, '{"order": "created"}')
    RETURNING 1 AS created \gset
