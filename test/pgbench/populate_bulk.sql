-- Bulk-loads known keys :first..:last for the scale benchmark
-- (test/pgbench/scale): key i holds the response 201 {"order": i}, as
-- populate.sql writes it.  One slice per session, so that sessions can load
-- in parallel: the keys i with (i - :first) % :jobs = :job.  Runs after
-- populate.sql has written keys 1..:first - 1 through the API.
--   psql -v first=100001 -v last=10000000 -v jobs=2 -v job=0 -f populate_bulk.sql
--
-- Through the API, one transaction per key as populate.sql does it, 10
-- million keys would take 12 minutes or more on the 2-core machine (100,000
-- took 7 to 30 s); two sessions of one INSERT each loaded 9.9 million in 3.3
-- minutes.  Every row is derived from the last key the API wrote (the
-- template): the same bytes in every column but the key, the response body
-- and the times.  The times continue the API keys' timeline at the rate the
-- API wrote them; sweep_at is NULL, as idempotency_complete leaves it.  The
-- rows go through the primary key as they are inserted, in the order of i,
-- which is random for the key (an md5), so the primary key splits and fills
-- as under traffic.  Only the heap may differ: a key the API writes leaves a
-- redirect line pointer where its claim was pruned.  Measured, both heaps
-- hold 215 bytes per key (doc/performance.md, `make bench-scale`).

-- The columns this file writes must be the table's: a changed layout fails
-- here instead of loading rows the extension would read otherwise.
SELECT array_agg(attname::text ORDER BY attnum) = ARRAY[
           'scope', 'key', 'request', 'created_at', 'ttl', 'expires_at', 'status', 'attempt',
           'lease_expires_at', 'completed_at', 'response_status', 'recovery_point',
           'response_body', 'response_headers', 'tenant', 'lease', 'response_body_bytes',
           'response_body_omitted', 'claim_data', 'sweep_at', 'shard_key', 'digest'] AS layout_known
  FROM pg_attribute
 WHERE attrelid = 'idempotency.keys'::regclass AND attnum > 0 AND NOT attisdropped \gset
\if :layout_known
\else
SELECT bench_fail('idempotency.keys has other columns than populate_bulk.sql writes');
\endif

CREATE TEMP TABLE api_keys AS
SELECT i, k.*
  FROM generate_series(1, :first - 1) AS i
  JOIN idempotency.keys AS k ON k.scope = 'bench' AND k.key = bench_known_key(i);

SELECT count(*) = :first - 1
       AND bool_and(status = 'c' AND expires_at = completed_at + ttl
                    AND sweep_at IS NULL) AS api_keys_as_expected
  FROM api_keys \gset
\if :api_keys_as_expected
\else
SELECT bench_fail('the keys written through the API are not all there, completed, with the expected expiry');
\endif

-- The template, and the rate in keys per second at which the API wrote.
CREATE TEMP TABLE template AS
SELECT *,
       (SELECT count(*) / greatest(extract(epoch FROM max(completed_at) - min(created_at)), 0.000001)
          FROM api_keys) AS keys_per_second
  FROM api_keys
 WHERE i = :first - 1;

INSERT INTO idempotency.keys (scope, key, request, created_at, ttl, expires_at, status, attempt,
                              lease_expires_at, completed_at, response_status, recovery_point,
                              response_body, response_headers, tenant, lease,
                              response_body_bytes, response_body_omitted, claim_data, sweep_at,
                              shard_key, digest)
SELECT t.scope, bench_known_key(g.i), t.request, t.created_at + o.later, t.ttl,
       t.completed_at + o.later + t.ttl, t.status, t.attempt,
       t.lease_expires_at, t.completed_at + o.later, t.response_status, t.recovery_point,
       jsonb_build_object('order', g.i), t.response_headers, t.tenant, t.lease,
       t.response_body_bytes, t.response_body_omitted, t.claim_data,
       t.sweep_at, t.shard_key, idempotency.key_digest(t.tenant, t.scope, bench_known_key(g.i))
  FROM template AS t,
       generate_series(:first + :job, :last, :jobs) AS g(i),
       LATERAL (SELECT (g.i - t.i) * interval '1 second' / t.keys_per_second) AS o(later);
