-- Extension: a retry while the first request is still being worked on:
-- idempotency_begin on a committed claim whose lease runs (cost.sql claims
-- :pending keys with a lease of a day), autocommit, no wait.
-- Check: the answer is in_progress with a retry hint and no response (\gset).
-- (The lease makes a key that is unexpectedly new a deliberate claim, as in
-- ext_replay.sql, so that the check below is what fails.)
\set i random(1, :pending)
SELECT 1 AS in_progress
  FROM idempotency_begin('bench', bench_pending_key(:i), request_hash(bench_request()), lease => '1 minute')
 WHERE outcome = 'in_progress' AND retry_after > '0'::interval AND response_body IS NULL \gset
