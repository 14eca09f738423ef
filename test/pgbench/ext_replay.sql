-- Extension: a retry of a completed request: one idempotency_begin on a
-- prepopulated key, autocommit.
-- Check: the answer is replay with key i's stored response (\gset).  (The
-- lease costs a replay nothing; it makes a key that is unexpectedly new a
-- deliberate claim, so that the check below is what fails, not the guard
-- against claims committed unfinished by mistake.)
\set i random(1, :keys)
SELECT response_status, response_body
  FROM idempotency_begin('bench', bench_known_key(:i), request_hash(bench_request()), lease => '1 minute')
 WHERE outcome = 'replay'
   AND response_status = 201
   AND response_body = jsonb_build_object('order', :i::integer) \gset
