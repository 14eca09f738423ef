-- The scale benchmark's table, from what test/pgbench/scale recorded: table
-- runs (one row per pgbench run on the small or the large database; rep 0 is
-- the warm-up, not reported) and table storage (one row per database, taken
-- after population).
--   psql -At -v goal=0.8 -f report_scale.sql
-- Per workload and database: tps median and min..max, WAL bytes and blocks
-- read from outside shared buffers per transaction (medians).  Then the ratio
-- large / small, taken per repetition (the two runs of a repetition are next
-- to each other, so slow phases of a noisy machine hit both sides), as median
-- and min..max against the goal; a run that failed makes its line FAILED.
-- Then bytes per stored key.

CREATE TEMP VIEW measured AS
    SELECT *, wal_bytes / nullif(transactions, 0) AS wal_per_tx,
           blocks_read::float8 / nullif(transactions, 0) AS reads_per_tx
      FROM runs
     WHERE rep > 0;

-- ------------------------------------------------------------- workloads

SELECT format('%-18s %-6s %10s %4s  %-26s %9s %9s  %s',
              'workload', 'db', 'keys', 'reps', 'tps median (min..max)', 'WAL B/tx', 'reads/tx', '');

SELECT format('%-18s %-6s %10s %4s  %-26s %9s %9s  %s',
              workload, size, keys, reps,
              CASE WHEN tps IS NULL THEN '-'
                   ELSE format('%s (%s..%s)', round(tps), round(tps_min), round(tps_max)) END,
              to_char(wal_per_tx, 'FM9999990.0'), to_char(reads_per_tx, 'FM990.000'),
              CASE WHEN NOT ok THEN 'FAILED' END)
  FROM (SELECT workload, size, min(keys) AS keys, min(run_id) AS first_run, count(*) AS reps,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY tps) AS tps,
               min(tps) AS tps_min, max(tps) AS tps_max,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY wal_per_tx) AS wal_per_tx,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY reads_per_tx) AS reads_per_tx,
               bool_and(ok) AS ok
          FROM measured
         GROUP BY workload, size) AS w
 ORDER BY min(first_run) OVER (PARTITION BY workload), keys;

-- ------------------------------------------------------------- ratios

\echo
SELECT format('%-18s %-26s %-8s %s', 'ratio', 'large / small tps', 'goal', 'result');

WITH per_rep AS (
    SELECT l.workload, l.run_id, l.tps / nullif(s.tps, 0) AS ratio, l.ok AND s.ok AS ok
      FROM measured AS l
      JOIN measured AS s ON s.workload = l.workload AND s.rep = l.rep AND s.size = 'small'
     WHERE l.size = 'large'),
summary AS (
    SELECT workload, min(run_id) AS first_run,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY ratio) AS ratio,
           min(ratio) AS ratio_min, max(ratio) AS ratio_max, bool_and(ok) AS ok
      FROM per_rep
     GROUP BY workload)
SELECT format('%-18s %-26s %-8s %s',
              workload,
              CASE WHEN ratio IS NULL THEN '-'
                   ELSE format('%s (%s..%s)', to_char(ratio, 'FM990.00'),
                               to_char(ratio_min, 'FM990.00'), to_char(ratio_max, 'FM990.00')) END,
              '>= ' || :'goal',
              CASE WHEN NOT ok THEN 'FAILED'
                   WHEN ratio >= :'goal'::float8 THEN 'PASS'
                   ELSE 'MISS' END)
  FROM summary
 ORDER BY first_run;

-- ------------------------------------------------------------- storage

\echo
SELECT format('%-6s %10s  %10s %10s %12s %16s', 'db', 'keys', 'heap B/key', 'index B/key',
              '(primary key)', 'table+index B/key');
SELECT format('%-6s %10s  %10s %10s %12s %16s',
              size, keys, heap / keys, indexes / keys, '(' || (primary_key / keys) || ')', total / keys)
  FROM storage
 ORDER BY keys;

-- ------------------------------------------------------------- failures

SELECT E'\nFailed runs:' WHERE EXISTS (SELECT FROM runs WHERE NOT ok);
SELECT format('  run %s: %s on %s, %s: %s', run_id, workload, size,
              CASE WHEN rep = 0 THEN 'warm-up' ELSE 'rep ' || rep END, note)
  FROM runs
 WHERE NOT ok
 ORDER BY run_id;
