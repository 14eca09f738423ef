-- Prepopulates :keys completed keys, the same in the extension and in the
-- plain table, for the replay, mismatch, lookup and bare SELECT workloads:
-- known key i holds the response 201 {"order": i}.
--   psql -v keys=100000 -f populate.sql

-- One transaction per key, each writing its key the way the workloads do
-- (claim, then complete; insert 'started', then update to 'completed'), so
-- that the tables' size per key is the one real traffic leaves behind.
CREATE PROCEDURE bench_populate(n integer)
    LANGUAGE plpgsql
    AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM idempotency_begin('bench', bench_known_key(i), request_hash(bench_request()));
        PERFORM idempotency_complete('bench', bench_known_key(i), 201, jsonb_build_object('order', i));
        INSERT INTO idempotency_keys_plain (key, request_hash, status)
            VALUES (bench_known_key(i), bench_request_digest(), 'started');
        UPDATE idempotency_keys_plain
           SET status = 'completed', response_status = 201, response_body = jsonb_build_object('order', i)
         WHERE key = bench_known_key(i);
        COMMIT;
    END LOOP;
END
$$;

-- 100,000 commits: not waiting for the disk on each saves a minute.
SET synchronous_commit = off;
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
SELECT bench_fail('prepopulating the plain table');
\endif
SELECT count(*) = :keys AS all_keys_stored
  FROM generate_series(1, :keys) AS i, idempotency_lookup('bench', bench_known_key(i)) AS l
 WHERE l.status = 'completed' AND l.response_body = jsonb_build_object('order', i) \gset
\if :all_keys_stored
\else
SELECT bench_fail('prepopulating the extension');
\endif
