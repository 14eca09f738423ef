-- Baseline: a primary-key SELECT of a stored response from the populated plain
-- table.  Check: \gset fails the transaction unless exactly one row came back.
\set i random(1, :keys)
SELECT response_status, response_body
  FROM idempotency_keys_plain
 WHERE key = bench_known_key(:i) \gset
