-- Probe: ext_replay.sql over idempotency.floor_begin (floor_setup.sql).
\set i random(1, :keys)
SELECT response_status, response_body
  FROM idempotency.floor_begin('bench', bench_known_key(:i), request_hash(bench_request()), lease => '1 minute')
 WHERE outcome = 'replay'
   AND response_status = 201
   AND response_body = jsonb_build_object('order', :i::integer) \gset
