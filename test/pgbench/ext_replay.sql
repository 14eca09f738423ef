-- Extension: a retry of a completed request: one idempotency_begin on a
-- prepopulated key, autocommit.
-- Check: the answer is replay with key i's stored response (\gset).
\set i random(1, :keys)
SELECT response_status, response_body
  FROM idempotency_begin('bench', bench_known_key(:i), request_hash(bench_request()))
 WHERE outcome = 'replay'
   AND response_status = 201
   AND response_body = jsonb_build_object('order', :i::integer) \gset
