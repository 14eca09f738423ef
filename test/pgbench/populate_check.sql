-- Reads back, through the extension, the known keys 1..:keys that
-- populate.sql and populate_bulk.sql wrote (the scale benchmark's large
-- database): the table holds exactly :keys rows, and idempotency_lookup finds
-- a sample of them completed, with the request the workloads send and key i's
-- response 201 {"order": i}.  The sample: the first and last key, the last
-- key written through the API (:api_keys) and the first bulk-loaded one, and
-- :sample more at random.
--   psql -v keys=10000000 -v api_keys=100000 -v sample=1000 -f populate_check.sql

SELECT count(*) = :keys AS all_rows_there FROM idempotency.keys \gset
\if :all_rows_there
\else
SELECT bench_fail('idempotency.keys does not hold exactly the populated keys');
\endif

SELECT count(l.status) = count(*) AS sample_as_written
  FROM (SELECT i FROM unnest(ARRAY[1, :api_keys, :api_keys + 1, :keys]) AS i
        UNION
        SELECT 1 + floor(random() * :keys)::integer FROM generate_series(1, :sample)) AS s
  LEFT JOIN LATERAL idempotency_lookup('bench', bench_known_key(s.i)) AS l
         ON l.status = 'completed'
            AND l.request = request_hash(bench_request())
            AND l.response_status = 201
            AND l.response_body = jsonb_build_object('order', s.i) \gset
\if :sample_as_written
\else
SELECT bench_fail('a sample of the populated keys does not read back as written');
\endif
