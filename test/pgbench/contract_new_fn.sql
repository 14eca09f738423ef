-- Baseline: the hand-written minimum that keeps the extension's contract, in
-- one PL/pgSQL call (contract_new_request in schema.sql): look the key up
-- first, then the business INSERT and one INSERT of the completed key row.
-- Check: it answers 'created' (\gset); a key that exists answers replay.
\set hi random(1, 4611686018427387903)
\set lo random(0, 4611686018427387903)
SELECT 1 AS created
  FROM contract_new_request(bench_fresh_key(:hi, :lo), bench_request_digest()) AS answer
 WHERE answer = 'created' \gset
