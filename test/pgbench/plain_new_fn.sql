-- Baseline: the plain-SQL new request in one PL/pgSQL call, one round trip
-- (plain_new_request in schema.sql).  Check: it answers 'created' (\gset).
\set hi random(1, 4611686018427387903)
\set lo random(0, 4611686018427387903)
SELECT 1 AS created
  FROM plain_new_request(bench_fresh_key(:hi, :lo), bench_request_digest()) AS answer
 WHERE answer = 'created' \gset
