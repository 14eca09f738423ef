-- Hostile input: request documents and keys built to confuse a hash or a
-- length check.  request_hash(jsonb) agrees with jsonb equality however the
-- document is spelled, deep or huge input fails cleanly (never a crash), odd
-- keys round-trip byte for byte, and the limits hold to the byte.
-- (Quietly: without shared_preload_libraries it warns; t/001_preload.pl tests that.)
SET client_min_messages = error;
CREATE EXTENSION idempotency;
RESET client_min_messages;

-- Runs a statement and shows "SQLSTATE: message" (or "ok").
CREATE FUNCTION pg_temp.try(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

--
-- Spellings of one document: the hashes are equal exactly when jsonb's = says
-- the documents are.  Each pair shows both, and the last query checks them all.
--
CREATE TEMP TABLE spellings (l text, r text, why text);
INSERT INTO spellings VALUES
    ('{"a":1,"a":2}', '{"a":2}', 'duplicate keys: jsonb keeps the last'),
    ('{"a":1,"a":2}', '{"a":1}', 'duplicate keys: the first is dropped'),
    ('{"o":{"k":"x","k":"y"}}', '{"o":{"k":"y"}}', 'duplicate keys, nested'),
    ('{"\u0061":1}', '{"a":1}', 'escaped key'),
    ('["NaN"]', '["nan"]', 'NaN is a string like any other'),
    ('["Infinity"]', '["-Infinity"]', 'infinities are only strings in JSON'),
    ('[0]', '[-0]', 'zero and minus zero'),
    ('[0]', '[-0.0]', 'zero and minus zero, with a fraction'),
    ('[0]', '[0e10]', 'zero with an exponent'),
    ('[1E2]', '[100]', 'upper-case exponent'),
    ('[0.1e1]', '[1]', 'fraction with exponent'),
    ('[1e-5]', '[-1e-5]', 'sign of a small number'),
    ('[1e400]', '[1e+400]', 'large exponent'),
    ('[1e400]', '[1e401]', 'large exponents differ'),
    ('["0"]', '[0]', 'string and number'),
    ('[""]', '[null]', 'empty string and null'),
    ('{"":1}', '{}', 'empty key'),
    ('"\u00e9"', '"é"', 'unicode escape and literal'),
    ('"\ud83d\ude00"', '"😀"', 'surrogate pair and literal'),
    ('"\/"', '"/"', 'escaped solidus'),
    ('"\t"', '"\u0009"', 'two escapes of a tab'),
    ('"é"', '"e\u0301"', 'composed and decomposed: different code points'),
    ('"A"', '"a"', 'case');
SELECT why, l::jsonb = r::jsonb AS jsonb_equal,
       request_hash(l::jsonb) = request_hash(r::jsonb) AS hash_equal
  FROM spellings;
SELECT count(*) AS disagreements FROM spellings
 WHERE (l::jsonb = r::jsonb) <> (request_hash(l::jsonb) = request_hash(r::jsonb));

-- NaN and the infinities are not JSON: jsonb input rejects them, and a SQL
-- NaN or infinity converted to jsonb becomes a string, hashed as one.
SELECT pg_temp.try($$ SELECT request_hash('[NaN]'::jsonb) $$);
SELECT pg_temp.try($$ SELECT request_hash('[Infinity]'::jsonb) $$);
SELECT request_hash(to_jsonb('NaN'::numeric)) = request_hash('"NaN"'::jsonb) AS nan_is_a_string,
       request_hash(to_jsonb('-Infinity'::float8)) = request_hash('"-Infinity"'::jsonb)
           AS infinity_is_a_string,
       request_hash(to_jsonb('-0'::float8)) = request_hash('0'::jsonb) AS float_minus_zero_is_zero;
-- Escapes that jsonb refuses: a lone surrogate and NUL.
SELECT pg_temp.try($$ SELECT request_hash('"\ud83d"'::jsonb) $$);
SELECT pg_temp.try($$ SELECT request_hash('"\u0000"'::jsonb) $$);

--
-- Depth: the encoder walks the document with jsonb's iterator, without
-- recursion, so any document jsonb accepts hashes.  Far beyond what the
-- parser allows (max_stack_depth), jsonb input itself refuses with 54001.
--
SELECT request_hash((repeat('[', 1000) || repeat(']', 1000))::jsonb)
           = request_hash((repeat('[', 1000) || repeat(']', 1000))::jsonb) AS deep_array_stable,
       request_hash((repeat('[', 1000) || repeat(']', 1000))::jsonb)
           <> request_hash((repeat('[', 999) || repeat(']', 999))::jsonb) AS depth_matters,
       request_hash((repeat('{"a":', 1000) || '1' || repeat('}', 1000))::jsonb)
           <> request_hash((repeat('{"a":', 1000) || '2' || repeat('}', 1000))::jsonb)
           AS deep_leaf_matters;
\set VERBOSITY sqlstate
SELECT request_hash((repeat('[', 200000) || repeat(']', 200000))::jsonb);
SELECT request_hash((repeat('{"a":', 200000) || '1' || repeat('}', 200000))::jsonb);
\set VERBOSITY default
-- The session goes on.
SELECT request_hash('[]'::jsonb) IS NOT NULL AS still_working;

--
-- Size: a long string, and a wide document.
--
SELECT request_hash(jsonb_build_array(repeat('x', 10000000)))
           = request_hash(jsonb_build_array(repeat('x', 10000000))) AS long_string_stable,
       request_hash(jsonb_build_array(repeat('x', 10000000)))
           <> request_hash(jsonb_build_array(repeat('x', 9999999) || 'y')) AS last_byte_matters,
       request_hash(repeat('x', 10000000)) <> request_hash(repeat('x', 10000000), '')
           AS extra_empty_part_matters;
SELECT request_hash(jsonb_object_agg('k' || i, i)) = request_hash(jsonb_object_agg('k' || i, i))
           AS wide_stable
  FROM generate_series(1, 100000) AS i;

--
-- Odd keys: control characters, the highest code points, case and trailing
-- space.  Each key is its own record and comes back byte for byte.
--
CREATE TEMP TABLE odd_keys (name text, key text);
INSERT INTO odd_keys VALUES
    ('control characters', (SELECT string_agg(chr(c), '') FROM generate_series(1, 31) AS c)),
    ('DEL and C1 controls', chr(127) || chr(128) || chr(159)),
    ('high code points', chr(55295) || chr(57344) || chr(65533) || chr(65535) || chr(1114111)),
    ('emoji', '😀🚀'),
    ('quotes and backslash', E'"\'\\%_'),
    ('lower', 'key'),
    ('upper', 'KEY'),
    ('trailing space', 'key '),
    ('leading space', ' key'),
    ('composed', 'é'),
    ('decomposed', E'e\u0301');
BEGIN;
SELECT count(*) AS claimed FROM odd_keys,
       LATERAL idempotency_begin('hostile', key, request_hash(name)) AS b
 WHERE b.outcome = 'claimed';
SELECT count(*) AS completed FROM odd_keys,
       LATERAL idempotency_complete('hostile', key, 200, jsonb_build_object('for', name)) AS done
 WHERE done;
COMMIT;
-- Every key replays its own response, and lookup finds exactly its record.
SELECT o.name, b.outcome, b.response_body ->> 'for' = o.name AS own_response
  FROM odd_keys AS o, LATERAL idempotency_begin('hostile', o.key, request_hash(o.name)) AS b
 ORDER BY o.name;
SELECT count(*) AS own_lookups FROM odd_keys AS o,
       LATERAL idempotency_lookup('hostile', o.key) AS l
 WHERE l.response_body ->> 'for' = o.name;
SELECT count(*) AS stored_byte_for_byte FROM odd_keys AS o
  JOIN idempotency.keys AS k ON k.scope = 'hostile' AND convert_to(k.key, 'UTF8') = convert_to(o.key, 'UTF8');
-- Odd scopes are namespaces of their own.
SELECT outcome FROM idempotency_begin(chr(1), 'key', request_hash('r'::text), lease => '1 hour');
SELECT outcome FROM idempotency_begin(chr(1) || ' ', 'key', request_hash('r'::text), lease => '1 hour');
SELECT idempotency_scope_stats_refresh() > 0 AS summarised;
SELECT count(*) AS scopes FROM idempotency_scope_stats() WHERE scope LIKE chr(1) || '%';

--
-- max_key_length counts bytes: a key of 4-byte characters ending exactly at
-- the limit (here 255 bytes) is accepted, one byte more is IK006, and the
-- message shows a prefix cut at a character boundary.
--
SET idempotency.max_key_length = 255;
SELECT octet_length(repeat('😀', 63) || 'abc') AS at_limit,
       octet_length(repeat('😀', 64)) AS over_limit;
BEGIN;
SELECT outcome FROM idempotency_begin('hostile', repeat('😀', 63) || 'abc', request_hash('r'::text));
SELECT outcome FROM idempotency_begin(repeat('😀', 63) || 'abc', 'k', request_hash('r'::text));
ROLLBACK;
SELECT pg_temp.try($$ SELECT idempotency_begin('hostile', repeat('😀', 64), request_hash('r'::text)) $$);
SELECT pg_temp.try($$ SELECT idempotency_begin(repeat('😀', 64), 'k', request_hash('r'::text)) $$);
SELECT pg_temp.try($$ SELECT * FROM idempotency_lookup('hostile', repeat('😀', 64)) $$);
RESET idempotency.max_key_length;

--
-- max_response_bytes counts the uncompressed jsonb bytes of body plus
-- headers, to the byte, whether or not the body was stored compressed: one
-- byte over and the body is not stored (a WARNING says so).  The body
-- carries a marker that no message may show.
--
CREATE TEMP TABLE big (body jsonb, bigger jsonb);
INSERT INTO big SELECT jsonb_build_object('marker', 'BODY-MARKER-' || repeat('x', 100000)),
                       jsonb_build_object('marker', 'BODY-MARKER-' || repeat('x', 100001));
-- The table holds the bodies compressed; the limit ignores that.
SELECT pg_column_size(body) < 10000 AS stored_compressed FROM big;
SELECT pg_column_size(jsonb_build_object('marker', 'BODY-MARKER-' || repeat('x', 100000)))
       + pg_column_size('{"h": "a"}'::jsonb) AS limit_bytes \gset
SET idempotency.max_response_bytes = :limit_bytes;
SELECT outcome FROM idempotency_begin('hostile', 'big', request_hash('r'::text), lease => '1 hour');
BEGIN;
SELECT idempotency_complete('hostile', 'big', 200, (SELECT body FROM big), '{"h": "a"}') AS at_limit;
ROLLBACK;
BEGIN;
SELECT idempotency_complete('hostile', 'big', 200, (SELECT bigger FROM big), '{"h": "a"}')
       AS one_byte_over;
SELECT response_body IS NULL AS body_omitted, response_body_omitted FROM idempotency_lookup('hostile', 'big');
ROLLBACK;
BEGIN;
SELECT idempotency_complete('hostile', 'big', 200, (SELECT body FROM big), '{"h": "ab"}')
       AS one_header_byte_over;
SELECT response_body IS NULL AS body_omitted, response_body_omitted FROM idempotency_lookup('hostile', 'big');
ROLLBACK;
RESET idempotency.max_response_bytes;

DROP EXTENSION idempotency;
