-- The benchmark table, from the runs test/pgbench/run recorded in table runs
-- (one row per pgbench run; rep 0 is the warm-up, not reported).
--   psql -At -f report.sql
-- Per workload: medians over the repetitions, tps also as min..max.  Then
-- the ratios, each taken per repetition against the baseline run of the same
-- repetition (so slow phases of a noisy machine hit both sides), as median
-- and min..max, with its goal.  A goal missed is MISS; a run that failed its
-- checks makes every line that uses it FAILED.

CREATE TEMP TABLE goals (ord, mode, name, kind, num, den, op, goal) AS VALUES
    -- kind tps: num tps / den tps;  wal: num WAL bytes per transaction;
    -- wal_extra: num minus den WAL bytes per transaction;
    -- duplicates: keys with more than one business row, summed over runs;
    -- hot: the share of num's updates of idempotency.keys that were HOT;
    -- updates: num's updates of idempotency.keys per transaction.
    -- "1 round trip" is the PL/pgSQL wrapper (ext_new_fn): it measured
    -- faster than the same statements sent as one pgbench pipeline
    -- (ext_new_pipeline, in the table for comparison), and it is the same
    -- shape as its baseline.  "WAL per new request" is what the extension
    -- adds to the business INSERT; the total is in the workload table.
    -- Against Redis, whole request against whole request: the middleware a
    -- user would put in front of PostgreSQL instead (redis_middleware: SET NX
    -- in Redis, the business INSERT in PostgreSQL, SET in Redis) against the
    -- extension's new request, and a Redis GET against a replay.  redis_new
    -- (the two SETs without the business write) is only in the workload
    -- table, for reference.  Lines without a goal (op and goal NULL) are
    -- reported as measured.
    (1, 'off', 'ext replay / bare PK SELECT', 'tps', 'ext_replay', 'bare_select', '>=', 0.95),
    (2, 'off', 'ext replay WAL bytes per tx', 'wal', 'ext_replay', NULL, '=', 0),
    (3, 'off', 'ext new, 1 round trip / PL/pgSQL baseline', 'tps', 'ext_new_fn', 'plain_new_fn', '>=', 1.4),
    (4, 'off', 'ext new, 1 round trip / bare INSERT', 'tps', 'ext_new_fn', 'bare_insert', '>=', 0.6),
    (5, 'off', 'ext new, 5 statements / plain 5 statements', 'tps', 'ext_new', 'plain_new', '>=', 1.15),
    (6, 'off', 'ext contention / plain contention', 'tps', 'ext_contention', 'plain_contention', '>=', 2.5),
    (7, 'off', 'ext contention: keys with duplicated business rows', 'duplicates', 'ext_contention', NULL, '=', 0),
    (8, 'off', 'ext WAL bytes per new request beyond bare INSERT', 'wal_extra', 'ext_new_fn', 'bare_insert', '<=', 400),
    (9, 'off', 'ext replay / Redis replay (GET)', 'tps', 'ext_replay', 'redis_replay', '>=', 1.0),
    (10, 'off', 'ext new, 1 round trip / Redis middleware', 'tps', 'ext_new_fn', 'redis_middleware', '>=', 2.0),
    (11, 'off', 'ext new, 5 statements / Redis middleware', 'tps', 'ext_new', 'redis_middleware', NULL, NULL),
    (12, 'on', 'ext new, 5 statements / plain 5 statements', 'tps', 'ext_new', 'plain_new', '>=', 1.05),
    (13, 'on', 'ext new, 1 round trip / PL/pgSQL baseline', 'tps', 'ext_new_fn', 'plain_new_fn', '>=', 1.0),
    (14, 'on', 'ext replay / plain replay', 'tps', 'ext_replay', 'plain_replay', '>=', 1.0),
    (15, 'on', 'ext contention / plain contention', 'tps', 'ext_contention', 'plain_contention', '>=', 1.0),
    (16, 'on', 'ext contention: keys with duplicated business rows', 'duplicates', 'ext_contention', NULL, '=', 0),
    (17, 'on', 'ext new, 1 round trip / bare INSERT', 'tps', 'ext_new_fn', 'bare_insert', '>=', 0.65),
    (18, 'on', 'ext replay / Redis replay (GET)', 'tps', 'ext_replay', 'redis_replay', NULL, NULL),
    (19, 'on', 'ext new, 1 round trip / Redis middleware', 'tps', 'ext_new_fn', 'redis_middleware', '>=', 2.0),
    (20, 'on', 'ext new, 5 statements / Redis middleware', 'tps', 'ext_new', 'redis_middleware', NULL, NULL),
    -- A claim completed in its own transaction is written once, by the
    -- completion (deferred claims): no update.  A claim completed in a later
    -- transaction is updated; expiry is kept to the microsecond, the sweep's
    -- index column to the second, so that update stays HOT.
    (21, 'off', 'ext two-phase: completions that are HOT', 'hot', 'ext_two_phase', NULL, '>=', 0.9),
    (22, 'off', 'ext new, 1 round trip: updates per request', 'updates', 'ext_new_fn', NULL, '<=', 0.01);

CREATE TEMP VIEW measured AS
    SELECT *, wal_bytes / nullif(transactions, 0) AS wal_per_tx FROM runs WHERE rep > 0;

-- ------------------------------------------------------------- workloads

SELECT format('%-46s %-4s %4s  %-26s %8s %8s %9s  %s',
              'workload', 'sync', 'reps', 'tps median (min..max)', 'mean ms', 'p99 ms', 'WAL B/tx', '');

SELECT format('%-46s %-4s %4s  %-26s %8s %8s %9s  %s',
              label, mode, reps,
              CASE WHEN tps IS NULL THEN '-'
                   ELSE format('%s (%s..%s)', round(tps), round(tps_min), round(tps_max)) END,
              to_char(lat_mean, 'FM99990.000'), to_char(lat_p99, 'FM99990.000'),
              to_char(wal_per_tx, 'FM9999990.0'),
              concat_ws(', ', CASE WHEN NOT ok THEN 'FAILED' END,
                        CASE WHEN checkpoints > 0 THEN 'checkpoint during a run' END))
  FROM (SELECT mode, workload, min(label) AS label, min(run_id) AS first_run, count(*) AS reps,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY tps) AS tps,
               min(tps) AS tps_min, max(tps) AS tps_max,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY lat_mean_ms) AS lat_mean,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY lat_p99_ms) AS lat_p99,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY wal_per_tx) AS wal_per_tx,
               bool_and(ok) AS ok, sum(checkpoints) AS checkpoints
          FROM measured
         GROUP BY mode, workload) AS w
 ORDER BY mode = 'on', first_run;

-- ------------------------------------------------------------- ratios

\echo
SELECT format('%-52s %-4s %-24s %-8s %s', 'ratio', 'sync', 'median (min..max)', 'goal', 'result');

WITH per_rep AS (
    SELECT g.ord, n.rep,
           CASE g.kind
               WHEN 'tps' THEN n.tps / nullif(d.tps, 0)
               WHEN 'wal' THEN n.wal_per_tx
               WHEN 'wal_extra' THEN n.wal_per_tx - d.wal_per_tx
               WHEN 'duplicates' THEN n.duplicated_keys
               WHEN 'hot' THEN n.key_hot_updates::float8 / nullif(n.key_updates, 0)
               WHEN 'updates' THEN n.key_updates::float8 / nullif(n.transactions, 0)
           END AS value,
           n.ok AND coalesce(d.ok, true) AS ok
      FROM goals AS g
      JOIN measured AS n ON n.mode = g.mode AND n.workload = g.num
      LEFT JOIN measured AS d ON d.mode = g.mode AND d.workload = g.den AND d.rep = n.rep
     WHERE g.den IS NULL OR d.run_id IS NOT NULL),
summary AS (
    SELECT ord,
           CASE WHEN min(g.kind) = 'duplicates' THEN sum(value)
                ELSE percentile_cont(0.5) WITHIN GROUP (ORDER BY value) END AS value,
           min(value) AS value_min, max(value) AS value_max, bool_and(ok) AS ok
      FROM per_rep JOIN goals AS g USING (ord)
     GROUP BY ord)
SELECT format('%-52s %-4s %-24s %-8s %s',
              g.name, g.mode,
              CASE WHEN s.ord IS NULL THEN 'not run'
                   WHEN s.value IS NULL THEN '-'
                   WHEN g.kind = 'duplicates' THEN s.value::text
                   WHEN g.kind IN ('tps', 'hot', 'updates') THEN format('%s (%s..%s)', to_char(s.value, 'FM990.00'),
                                                   to_char(s.value_min, 'FM990.00'),
                                                   to_char(s.value_max, 'FM990.00'))
                   ELSE format('%s (%s..%s)', to_char(s.value, 'FM999990.0'),
                               to_char(s.value_min, 'FM999990.0'), to_char(s.value_max, 'FM999990.0'))
              END,
              coalesce(g.op || ' ' || g.goal, 'none'),
              CASE WHEN s.ord IS NULL THEN '-'
                   WHEN NOT s.ok THEN 'FAILED'
                   WHEN g.op IS NULL THEN '-'
                   WHEN CASE g.op WHEN '>=' THEN s.value >= g.goal
                                  WHEN '<=' THEN s.value <= g.goal
                                  ELSE round(s.value::numeric) = g.goal END THEN 'PASS'
                   ELSE 'MISS' END)
  FROM goals AS g LEFT JOIN summary AS s USING (ord)
 ORDER BY g.ord;

-- ------------------------------------------------------------- failures

SELECT E'\nFailed runs:' WHERE EXISTS (SELECT FROM runs WHERE NOT ok);
SELECT format('  run %s: %s, sync %s, %s: %s', run_id, workload, mode,
              CASE WHEN rep = 0 THEN 'warm-up' ELSE 'rep ' || rep END, note)
  FROM runs
 WHERE NOT ok
 ORDER BY run_id;
