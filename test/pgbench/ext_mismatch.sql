-- Extension: a prepopulated key reused for another request.
-- Check: the answer is mismatch and reveals no stored response (\gset).
\set i random(1, :keys)
SELECT 1 AS mismatch
  FROM idempotency_begin('bench', bench_known_key(:i), request_hash(bench_other_request()))
 WHERE outcome = 'mismatch' AND response_body IS NULL \gset
