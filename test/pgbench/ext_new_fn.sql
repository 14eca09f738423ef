-- Extension: a new request in one round trip, through the PL/pgSQL wrapper
-- ext_new_request (schema.sql): begin, business INSERT, complete.
-- Check: it answers 'created' (\gset).
\set hi random(1, 4611686018427387903)
\set lo random(0, 4611686018427387903)
SELECT 1 AS created
  FROM ext_new_request(bench_fresh_key(:hi, :lo), request_hash(bench_request())) AS answer
 WHERE answer = 'created' \gset
