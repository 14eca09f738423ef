-- Extension: idempotency_lookup of a prepopulated key.
-- Check: the record is completed with key i's response (\gset).
\set i random(1, :keys)
SELECT response_status, response_body
  FROM idempotency_lookup('bench', bench_known_key(:i))
 WHERE status = 'completed'
   AND response_body = jsonb_build_object('order', :i::integer) \gset
