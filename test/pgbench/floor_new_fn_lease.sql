-- Probe: ext_new_fn.sql over floor_new_request (floor_setup.sql), with_lease true.
\set hi random(1, 4611686018427387903)
\set lo random(0, 4611686018427387903)
SELECT 1 AS created
  FROM floor_new_request(bench_fresh_key(:hi, :lo), request_hash(bench_request()), true) AS answer
 WHERE answer = 'created' \gset
