-- Baseline: the hand-written minimum of a new request in one PL/pgSQL call
-- (minimal_new_request in schema.sql): the business INSERT and one INSERT of
-- the completed key row.  Check: it answers 'created' (\gset); a key that
-- exists fails with unique_violation.
\set hi random(1, 4611686018427387903)
\set lo random(0, 4611686018427387903)
SELECT 1 AS created
  FROM minimal_new_request(bench_fresh_key(:hi, :lo), bench_request_digest()) AS answer
 WHERE answer = 'created' \gset
