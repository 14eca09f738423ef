-- Extension: a retry of a completed request, idempotency_begin called as a
-- scalar, as a PL/pgSQL handler calls it (r := idempotency_begin(...), see
-- doc/handlers.md): no FunctionScan and no one-row tuplestore around the
-- call, which ext_replay.sql, a driver's SELECT ... FROM, has.  The
-- subquery (OFFSET 0 keeps it from being flattened) calls it once.
-- Check: as ext_replay.sql's (\gset).
\set i random(1, :keys)
SELECT (b).response_status, (b).response_body
  FROM (SELECT idempotency_begin('bench', bench_known_key(:i), request_hash(bench_request()),
                                 lease => '1 minute') AS b
        OFFSET 0) AS s
 WHERE (b).outcome = 'replay'
   AND (b).response_status = 201
   AND (b).response_body = jsonb_build_object('order', :i::integer) \gset
