-- Prepopulates :keys completed keys, the same in the extension and in the
-- plain table, for the replay, mismatch, lookup and bare SELECT workloads:
-- known key i holds the response 201 {"order": i}.
--   psql -v keys=100000 -f populate.sql

-- Batches of 1000 per transaction: every claim holds its key lock until
-- commit, and 100,000 locks in one transaction would fill the lock table.
CREATE PROCEDURE bench_populate(n integer)
    LANGUAGE plpgsql
    AS $$
DECLARE
    batch constant integer := 1000;
BEGIN
    FOR batch_start IN 1..n BY batch LOOP
        PERFORM idempotency_begin('bench', bench_known_key(i), request_hash(bench_request())),
                idempotency_complete('bench', bench_known_key(i), 201, jsonb_build_object('order', i))
           FROM generate_series(batch_start, least(batch_start + batch - 1, n)) AS i;
        INSERT INTO idempotency_keys_plain (key, request_hash, status, response_status, response_body)
            SELECT bench_known_key(i), bench_request_digest(), 'completed', 201,
                   jsonb_build_object('order', i)
              FROM generate_series(batch_start, least(batch_start + batch - 1, n)) AS i;
        COMMIT;
    END LOOP;
END
$$;

CALL bench_populate(:keys);
DROP PROCEDURE bench_populate(integer);

-- Every completion left a dead claim version beside it.  Prune them now, or
-- the first replays would do it and write WAL inside a measured run.
VACUUM ANALYZE idempotency.keys, idempotency_keys_plain, orders;

-- Both tables must hold every key, completed.
SELECT count(*) = :keys AS all_keys_stored
  FROM idempotency_keys_plain
 WHERE status = 'completed' \gset
\if :all_keys_stored
\else
\warn 'populate.sql: idempotency_keys_plain does not hold every key'
SELECT bench_fail('prepopulating the plain table');
\endif
SELECT count(*) = :keys AS all_keys_stored
  FROM generate_series(1, :keys) AS i, idempotency_lookup('bench', bench_known_key(i)) AS l
 WHERE l.status = 'completed' AND l.response_body = jsonb_build_object('order', i) \gset
\if :all_keys_stored
\else
SELECT bench_fail('prepopulating the extension');
\endif
