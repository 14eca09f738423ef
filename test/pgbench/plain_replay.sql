-- Baseline: a retry of a completed request in plain SQL: the claim attempt
-- finds the key, then the row is locked and its hash compared before the
-- stored response is returned, in one transaction.
-- Checks: the claim attempt must not insert, and the locked row must be the
-- completed one of this very request, with key i's response (\gset).
\set i random(1, :keys)
\set claimed 0
BEGIN;
INSERT INTO idempotency_keys_plain (key, request_hash, status)
    VALUES (bench_known_key(:i), bench_request_digest(), 'started')
    ON CONFLICT DO NOTHING
    RETURNING 1 AS claimed \aset
\if :claimed
SELECT bench_fail('plain replay claimed a completed key');
\endif
SELECT response_status, response_body
  FROM idempotency_keys_plain
 WHERE key = bench_known_key(:i)
   AND request_hash = bench_request_digest()
   AND status = 'completed'
   AND response_body = jsonb_build_object('order', :i::integer)
   FOR UPDATE \gset
COMMIT;
