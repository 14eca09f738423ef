-- What make bench-cost (test/pgbench/cost) adds to the workload database after
-- schema.sql and populate.sql: the in-progress workload's keys, and the marks
-- it reads around each measured run.
--   psql -v pending=1000 -f cost.sql

-- :pending committed claims whose lease runs for a day, one transaction each
-- as a two-phase request's begin commits it: ext_in_progress.sql's keys.
CREATE PROCEDURE bench_populate_pending(n integer)
    LANGUAGE plpgsql
    AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM idempotency_begin('bench', bench_pending_key(i), request_hash(bench_request()),
                                  lease => '1 day');
        COMMIT;
    END LOOP;
END
$$;

SET synchronous_commit = off;
CALL bench_populate_pending(:pending);
DROP PROCEDURE bench_populate_pending(integer);

SELECT count(*) = :pending AS all_keys_pending
  FROM generate_series(1, :pending) AS i, idempotency_lookup('bench', bench_pending_key(i)) AS l
 WHERE l.status = 'in_progress' AND l.committed \gset
\if :all_keys_pending
\else
SELECT bench_fail('claiming the pending keys');
\endif

-- Where the WAL and the tuple counters of the tables in the workloads' schemas
-- stand, one row, read by the runner before and after each run: the WAL insert
-- position (once the WAL writer has written it, so that pg_waldump can read up
-- to it), heap tuples inserted, updated (all and HOT) and deleted, and the
-- index entries those writes made: one per index for an insert or a non-HOT
-- update (every index here is a plain B-tree over all rows).  The counts of
-- a backend reach the shared statistics when it exits, before callgrind
-- writes its profile, which the runner waits for.
CREATE FUNCTION bench_cost_marks(OUT lsn pg_lsn, OUT heap_inserted numeric, OUT heap_updated numeric,
                                 OUT heap_hot_updated numeric, OUT heap_deleted numeric,
                                 OUT index_inserted numeric)
    LANGUAGE plpgsql
    AS $$
DECLARE
    give_up constant timestamptz := clock_timestamp() + interval '60 s';
BEGIN
    lsn := pg_current_wal_insert_lsn();
    WHILE pg_current_wal_lsn() < lsn LOOP
        IF clock_timestamp() > give_up THEN
            RAISE EXCEPTION 'the WAL writer did not write up to % in 60 s', lsn;
        END IF;
        PERFORM pg_sleep(0.01);
    END LOOP;
    PERFORM pg_stat_clear_snapshot();
    SELECT sum(s.n_tup_ins), sum(s.n_tup_upd), sum(s.n_tup_hot_upd), sum(s.n_tup_del),
           sum((s.n_tup_ins + s.n_tup_upd - s.n_tup_hot_upd) *
               (SELECT count(*) FROM pg_index AS i WHERE i.indrelid = s.relid))
      INTO heap_inserted, heap_updated, heap_hot_updated, heap_deleted, index_inserted
      FROM pg_stat_user_tables AS s
     WHERE s.schemaname IN ('public', 'idempotency');
END
$$;
