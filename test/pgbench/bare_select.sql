-- Baseline: a primary-key SELECT of a stored response from the populated plain
-- table.  Check: \gset fails the transaction unless exactly one row came back,
-- and the row must hold key i's response -- the same check as ext_replay's,
-- ext_lookup's and plain_replay's, so that the ratios compare the reads, not
-- the checks (this one costs about 10,000 instructions, a tenth of the SELECT).
\set i random(1, :keys)
SELECT response_status, response_body
  FROM idempotency_keys_plain
 WHERE key = bench_known_key(:i)
   AND response_status = 201
   AND response_body = jsonb_build_object('order', :i::integer) \gset
