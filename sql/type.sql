-- The request_hash type: hashing constructors, text and binary forms, casts,
-- comparison, and the btree and hash operator classes at work.
-- (Quietly: without shared_preload_libraries it warns; t/001_preload.pl tests that.)
SET client_min_messages = error;
CREATE EXTENSION idempotency;
RESET client_min_messages;

--
-- Known answers: the SHA-256 vectors of FIPS 180-2 (one and two blocks).
--
SELECT request_hash(''::text) AS empty_text, request_hash(''::bytea) AS empty_bytea;
SELECT request_hash('abc'::text) AS abc_text, request_hash('\x616263'::bytea) AS abc_bytea;
SELECT request_hash('abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq'::text) AS two_blocks;
-- NULL in, NULL out (the functions are strict).
SELECT request_hash(NULL::text) IS NULL AS null_text, request_hash(NULL::jsonb) IS NULL AS null_jsonb;

--
-- Text form: 64 hex digits in, lowercase out.
--
SELECT 'BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD'::request_hash AS upper_in;
SELECT 'Ba7816bF8f01CfEa414140De5dAe2223b00361A396177a9cB410fF61f20015aD'::request_hash
    = request_hash('abc'::text) AS mixed_case_equal;
SELECT request_hash('abc'::text)::text::request_hash = request_hash('abc'::text) AS text_round_trip;

-- Every malformed form is 22P02.  The message quotes the bad value only
-- when it is hexadecimal digits (a mistyped digest), and at most 64 of them:
-- anything else may be a request body.
SELECT 'xyz'::request_hash;
\echo :LAST_ERROR_SQLSTATE
SELECT repeat('body', 40)::request_hash;
SELECT repeat('a', 63)::request_hash;
SELECT repeat('0a', 40)::request_hash;
-- An argument of no known type -- a bare literal, a driver's untyped
-- parameter -- is never hashed by its spelling as text: 64 hex digits are a
-- digest, as the type's literal form reads them, and anything else is
-- refused (42P18) without being quoted.  A typed argument hashes it.
SELECT request_hash('abc');
\echo :LAST_ERROR_SQLSTATE
SELECT request_hash('{"a": 1}');
\echo :LAST_ERROR_SQLSTATE
SELECT request_hash('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad')
       = request_hash('abc'::text) AS hex_literal_is_a_digest;
PREPARE untyped AS SELECT request_hash($1);
\echo :LAST_ERROR_SQLSTATE
SELECT request_hash('abc'::text);
-- Each constructor also has a name of its own, whose one argument type a
-- driver's untyped parameter takes on: a JSON body sent as text hashes by
-- its value.
PREPARE by_name AS SELECT request_hash_jsonb($1);
EXECUTE by_name('{"b": 2, "a": 1.0}');
SELECT request_hash_jsonb('{"a": 1, "b": 2}') = request_hash('{"a": 1, "b": 2}'::jsonb) AS jsonb_alike,
       request_hash_text('abc') = request_hash('abc'::text) AS text_alike,
       request_hash_bytea('\x616263') = request_hash('\x616263'::bytea) AS bytea_alike,
       request_hash_parts('POST', '/orders') = request_hash('POST', '/orders') AS parts_alike;
DEALLOCATE by_name;
-- What JDBC's setString sends is varchar: hashed as the text it is (never
-- read as a digest), and as a JSON document by its value.
PREPARE from_jdbc(varchar) AS
    SELECT request_hash($1) = request_hash('{"a": 1}'::text) AS varchar_as_text,
           request_hash_jsonb($1) = request_hash('{ "a" : 1.0 }'::jsonb) AS json_by_value;
EXECUTE from_jdbc('{"a": 1}');
DEALLOCATE from_jdbc;
-- So is every other string type a driver can send (JDBC's setObject(...,
-- Types.CHAR) sends bpchar): hashed as the text it is, by its bytes -- a
-- char(n)'s padding included -- never read as a digest.
PREPARE from_char(bpchar) AS
    SELECT request_hash($1) = request_hash('{"a": 1}'::text) AS bpchar_as_text;
EXECUTE from_char('{"a": 1}');
DEALLOCATE from_char;
SELECT request_hash('{"a": 1}'::char(10)) = request_hash('{"a": 1}  '::text) AS padded_by_its_bytes,
       request_hash('{"a": 1}'::name) = request_hash('{"a": 1}'::text) AS name_as_text,
       request_hash('{'::"char") = request_hash('{'::text) AS char_as_text;

CREATE FUNCTION pg_temp.input_sqlstate(input text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM input::request_hash;
    RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END
$$;
SELECT form, pg_temp.input_sqlstate(input)
FROM (VALUES
    ('valid, for reference', repeat('0a', 32)),
    ('empty', ''),
    ('63 digits', repeat('a', 63)),
    ('65 digits', repeat('a', 65)),
    ('128 digits', repeat('a', 128)),
    ('non-hex digit', repeat('a', 63) || 'g'),
    ('embedded space', repeat('a', 31) || ' ' || repeat('a', 32)),
    ('leading space', ' ' || repeat('a', 64)),
    ('trailing space', repeat('a', 64) || ' '),
    ('0x prefix', '0x' || repeat('a', 62)),
    ('\x prefix', '\x' || repeat('a', 62)),
    ('uuid-style dashes', '12345678-1234-1234-1234-123456789abc12345678-1234-1234-1234-12')
) AS inputs(form, input);

--
-- request_hash(jsonb): documents equal as jsonb hash alike, others differ.
--
-- The canonical encoding is pinned: a change to it would orphan stored hashes.
SELECT request_hash('{"a":1}'::jsonb) AS canonical_a_1;
SELECT l, r, l::jsonb = r::jsonb AS jsonb_equal,
    request_hash(l::jsonb) = request_hash(r::jsonb) AS hash_equal
FROM (VALUES
    ('{"a":1}', '{"a":1.0}'),
    ('{"a":1}', '{"a":1e0}'),
    ('{"a":1.0}', '{"a":1e0}'),
    ('[100]', '[1e2]'),
    ('[0.10]', '[1e-1]'),
    ('[-0]', '[0.000]'),
    ('[1]', '[1.000000000000000000001]'),
    ('{"a":1,"b":2}', '{ "b" : 2 ,  "a" : 1 }'),
    ('{"a":1,"a":2}', '{"a":2}'),
    ('{"a":{"b":[1,2.50,{"c":null}]}}', '{"a":{"b":[1.0,2.5,{"c":null}]}}'),
    ('{"a":{"b":1}}', '{"a":{"b":1},"c":null}'),
    ('1', '[1]'),
    ('"1"', '1'),
    ('"A"', '"\u0041"'),
    ('null', '"null"'),
    ('true', '"true"'),
    ('true', 'false'),
    ('[]', '{}'),
    ('{"a":[]}', '{"a":{}}'),
    ('[null]', '[]'),
    ('[1,2]', '[2,1]'),
    ('[[1],2]', '[1,[2]]'),
    ('{"ab":"c"}', '{"a":"bc"}'),
    ('["ab","c"]', '["a","bc"]'),
    ('{"a":"b"}', '["a","b"]')
) AS pairs(l, r);

--
-- request_hash_body(content_type, body): the rule every package of the
-- project fingerprints a body by.  A document of a JSON media type that
-- jsonb reads hashes by its value; any other body by its bytes -- a JSON one
-- that jsonb refuses included, never an error.
--
SELECT content_type, body,
       CASE request_hash_body(content_type, body)
           WHEN request_hash_bytea(body) THEN 'bytes'
           WHEN request_hash_jsonb('{"a": 2, "b": [1]}'::jsonb) THEN 'value'
       END AS hashed_by
  FROM (VALUES
    ('application/json', convert_to('{"b":[1.0],  "a":2}', 'UTF8')),
    ('Application/JSON; charset=utf-8', convert_to('{"b":[1],"a":2}', 'UTF8')),
    (E' application/vnd.api+json\t', convert_to('{"a":2,"b":[1]}', 'UTF8')),
    ('application/problem+JSON;x=y', convert_to(E'{"a":2,"b":[1]}\n', 'UTF8')),
    ('text/json', convert_to('{"a":2,"b":[1]}', 'UTF8')),
    ('application/jsonx', convert_to('{"a":2,"b":[1]}', 'UTF8')),
    ('application/+json', convert_to('{"a":2,"b":[1]}', 'UTF8')),
    ('', convert_to('{"a":2,"b":[1]}', 'UTF8')),
    ('application/json', convert_to('{"a":"\u0000"}', 'UTF8')),
    ('application/json', convert_to('{"a":"\ud800"}', 'UTF8')),
    ('application/json', convert_to('{"a":NaN}', 'UTF8')),
    ('application/json', convert_to('{"a":2', 'UTF8')),
    ('application/json', '\x7b2261223a22ff227d'::bytea),
    ('application/json', '\x7b2261223a00327d'::bytea),
    ('application/json', ''::bytea)
  ) AS bodies(content_type, body);
-- A number beyond numeric's range is numeric's error, as for request_hash_jsonb.
SELECT request_hash_body('application/json', convert_to('[1e1000000]', 'UTF8'));
\echo :LAST_ERROR_SQLSTATE

--
-- request_hash(VARIADIC text[]): length-prefixed parts.
--
SELECT request_hash('ab', 'c') AS ab_c, request_hash('a', NULL) AS a_null;
SELECT request_hash('ab', 'c') = request_hash('a', 'bc') AS resplit_equal,
    request_hash('a', NULL) = request_hash('a', '') AS null_equals_empty,
    request_hash('a', 'b') = request_hash(VARIADIC ARRAY['a', 'b']) AS variadic_equal,
    request_hash(VARIADIC ARRAY['abc']) = request_hash('abc'::text) AS one_part_is_text;
-- Zero parts frame to zero bytes.
SELECT request_hash(VARIADIC '{}'::text[]) AS no_parts;
SELECT request_hash(VARIADIC NULL::text[]) IS NULL AS null_array;
-- Arrays of more than one dimension are rejected, not flattened.
SELECT request_hash(VARIADIC '{{a,b},{c,d}}'::text[]);
\echo :LAST_ERROR_SQLSTATE

--
-- Casts wrap or expose a digest; they do not hash.
--
SELECT request_hash('abc'::text)::bytea AS digest;
SELECT '\xba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad'::bytea::request_hash
    = request_hash('abc'::text) AS wrapped_equal;
SELECT request_hash_from_digest(request_hash_digest(request_hash('abc'::text)))
    = request_hash('abc'::text) AS function_round_trip;
SELECT '\x'::bytea::request_hash;
\echo :LAST_ERROR_SQLSTATE
SELECT substring(request_hash('abc'::text)::bytea FROM 2)::request_hash;
SELECT (request_hash('abc'::text)::bytea || '\x00'::bytea)::request_hash;

--
-- Binary form: send gives the 32 digest bytes; COPY BINARY round-trips
-- through send and recv, and recv refuses a field of another length.
--
SELECT request_hash_send(request_hash('abc'::text)) AS sent;
\getenv abs_builddir PG_ABS_BUILDDIR
\set hashes_file :abs_builddir '/results/type_hashes.bin'
\set short_file :abs_builddir '/results/type_short.bin'
CREATE TEMP TABLE received (h request_hash);
COPY (SELECT request_hash('abc'::text)) TO :'hashes_file' (FORMAT binary);
COPY received FROM :'hashes_file' (FORMAT binary);
SELECT h, h = request_hash('abc'::text) AS round_trip FROM received;
COPY (SELECT substring(request_hash('abc'::text)::bytea FROM 2)) TO :'short_file' (FORMAT binary);
COPY received FROM :'short_file' (FORMAT binary);
\echo :LAST_ERROR_SQLSTATE

--
-- Operators: byte-wise, unsigned, over all 32 bytes.
--
SELECT x, y, x = y AS eq, x <> y AS ne, x < y AS lt, x <= y AS le, x > y AS gt, x >= y AS ge,
    request_hash_cmp(x, y) AS cmp
FROM (VALUES
    (repeat('00', 31) || '01', repeat('00', 31) || '02'),
    (repeat('00', 31) || '02', repeat('00', 31) || '01'),
    ('7f' || repeat('00', 31), '80' || repeat('00', 31)),
    ('80' || repeat('00', 31), '7f' || repeat('00', 31)),
    (repeat('ab', 32), repeat('AB', 32))
) AS pairs(a, b), LATERAL (SELECT a::request_hash AS x, b::request_hash AS y) AS hashes;

-- Hash support: equal values hash alike whatever built them; the extended
-- hash with seed 0 agrees with the plain one in its low 32 bits, and the seed
-- matters.  (Values themselves are not shown: they depend on the platform.)
SELECT request_hash_hash(request_hash('abc'::text))
        = request_hash_hash(request_hash('\x616263'::bytea)) AS equal_hash,
    request_hash_hash(request_hash('abc'::text))
        <> request_hash_hash(request_hash('abd'::text)) AS different_hash,
    request_hash_hash(request_hash('abc'::text))::bit(32)
        = request_hash_hash_extended(request_hash('abc'::text), 0)::bit(32) AS seed_0_agrees,
    request_hash_hash_extended(request_hash('abc'::text), 0)
        <> request_hash_hash_extended(request_hash('abc'::text), 1) AS seed_matters;

--
-- In a table: btree index, ORDER BY, GROUP BY, DISTINCT, joins, hash index.
--
CREATE TABLE requests (id integer PRIMARY KEY, h request_hash NOT NULL);
INSERT INTO requests SELECT i, request_hash((i % 7)::text) FROM generate_series(1, 70) AS i;
CREATE INDEX requests_h_btree ON requests (h);
CREATE TABLE labels (h request_hash NOT NULL, label text NOT NULL);
INSERT INTO labels SELECT request_hash(i::text), 'part ' || i FROM generate_series(0, 9) AS i;
ANALYZE requests, labels;

-- The byte-wise order is the order of the hex text.
SELECT array_agg(h ORDER BY h)::text[]
    = array_agg(h::text ORDER BY h::text COLLATE "C") AS order_is_text_order
FROM requests;

SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT DISTINCT h FROM requests ORDER BY h;
SELECT DISTINCT h FROM requests ORDER BY h;
EXPLAIN (COSTS OFF) SELECT id FROM requests WHERE h = request_hash('3'::text) ORDER BY id;
SELECT id FROM requests WHERE h = request_hash('3'::text) ORDER BY id;
RESET enable_seqscan;

-- Grouping by sorting (btree) and by hashing (hash opclass) agree.
SET enable_hashagg = off;
SELECT h, count(*) FROM requests GROUP BY h ORDER BY h;
RESET enable_hashagg;
SET enable_sort = off;
EXPLAIN (COSTS OFF) SELECT h, count(*) FROM requests GROUP BY h;
SELECT h, count(*) FROM requests GROUP BY h ORDER BY h;
RESET enable_sort;
SELECT count(DISTINCT h) AS distinct_count FROM requests;

SET enable_mergejoin = off;
SET enable_nestloop = off;
EXPLAIN (COSTS OFF) SELECT l.label, count(*) FROM requests r JOIN labels l ON r.h = l.h GROUP BY l.label;
SELECT l.label, count(*) FROM requests r JOIN labels l ON r.h = l.h GROUP BY l.label ORDER BY l.label;
RESET enable_mergejoin;
SET enable_hashjoin = off;
EXPLAIN (COSTS OFF) SELECT l.label, count(*) FROM requests r JOIN labels l ON r.h = l.h GROUP BY l.label;
SELECT l.label, count(*) FROM requests r JOIN labels l ON r.h = l.h GROUP BY l.label ORDER BY l.label;
RESET enable_hashjoin;
RESET enable_nestloop;

DROP INDEX requests_h_btree;
CREATE INDEX requests_h_hash ON requests USING hash (h);
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM requests WHERE h = request_hash('3'::text);
SELECT id FROM requests WHERE h = request_hash('3'::text) ORDER BY id;
RESET enable_bitmapscan;
RESET enable_seqscan;

DROP TABLE requests, labels;
