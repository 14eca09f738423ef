-- Probe: ext_replay.sql over floor_replay_front (floor_setup.sql).
\set i random(1, :keys)
SELECT response_status, response_body
  FROM floor_replay_front('bench', bench_known_key(:i), request_hash(bench_request()), lease => '1 minute')
 WHERE outcome = 'replay'
   AND response_status = 201
   AND response_body = jsonb_build_object('order', :i::integer) \gset
