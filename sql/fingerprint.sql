-- The fingerprint rules of request_hash(jsonb) and request_hash_body, as
-- doc/reference.md states them, each pinned by known answers: the digests
-- that 0.4.0 stored and 0.5.0 keeps, and each rule of 0.5.0 spelled out in
-- SQL (sha256 of the bytes the rule defines), so that an edition written in
-- SQL can check itself against them.
-- (Quietly: without shared_preload_libraries it warns; t/001_preload.pl tests that.)
SET client_min_messages = error;
CREATE EXTENSION idempotency;
RESET client_min_messages;

-- A part framed as the encodings frame strings and numbers: its length in 8
-- bytes, most significant first, then its bytes.
CREATE FUNCTION pg_temp.framed(part bytea) RETURNS bytea LANGUAGE sql IMMUTABLE
    RETURN int8send(length(part)) || part;
-- The encoding's header: the format's name and a NUL.
CREATE FUNCTION pg_temp.header() RETURNS bytea LANGUAGE sql IMMUTABLE
    RETURN convert_to('idempotency.request_hash.jsonb.v1', 'UTF8') || '\x00'::bytea;
-- One number's item, by the rule: t = trim_scale(n); the short form, tag d
-- and t's text, when abs(n) < 1e64 and scale(t) <= 64; else tag N and t's
-- binary form (numeric_send).
CREATE FUNCTION pg_temp.number_item(n numeric) RETURNS bytea LANGUAGE sql IMMUTABLE
    RETURN CASE WHEN abs(n) < 1e64 AND scale(trim_scale(n)) <= 64
                THEN convert_to('d', 'UTF8') || pg_temp.framed(convert_to(trim_scale(n)::text, 'UTF8'))
                ELSE convert_to('N', 'UTF8') || pg_temp.framed(numeric_send(trim_scale(n)))
           END;
-- The digest of the one-element array [n].
CREATE FUNCTION pg_temp.array_of_number(n numeric) RETURNS request_hash LANGUAGE sql IMMUTABLE
    RETURN sha256(pg_temp.header() || convert_to('[', 'UTF8') || pg_temp.number_item(n)
                  || convert_to(')', 'UTF8'))::request_hash;
-- The bytes rule of request_hash_body: the body's bytes, under the tag
-- 'idempotency.request_hash.bytes' and a NUL when they start with the
-- reserved prefix 'idempotency.request_hash.'.
CREATE FUNCTION pg_temp.bytes_rule(body bytea) RETURNS request_hash LANGUAGE sql IMMUTABLE
    RETURN sha256(CASE WHEN substring(body FROM 1 FOR 25) = convert_to('idempotency.request_hash.', 'UTF8')
                       THEN convert_to('idempotency.request_hash.bytes', 'UTF8') || '\x00'::bytea || body
                       ELSE body END)::request_hash;

--
-- Documents whose every number has the short form hash as 0.4.0 hashed
-- them: the digests below were computed by 0.4.0 (at 5ed0654), and stored
-- keys keep answering for them.
--
CREATE TEMP TABLE digests_0_4_0 (doc text, digest request_hash);
INSERT INTO digests_0_4_0 VALUES
    ('{"a":1}', 'cfd9b4ba12731b20f0c7a6706b9c8e6a6bf09e1035509645f3df3bf4c04b819a'),
    ('[0]', 'e49d6a6c1f69ffb4b937bdef634fbb0feae1dc4033dc6695d3b1b400d5112117'),
    ('[-0.000]', 'e49d6a6c1f69ffb4b937bdef634fbb0feae1dc4033dc6695d3b1b400d5112117'),
    ('[1.50]', '475425de169e162b46d14061bfea84472d8c556d164bba0fcd2ab4fd33f9800a'),
    ('[5e-1]', 'a67005371bfeb537195e7b3ef037399d9c12a492f4a48ddd5bea203d28806e00'),
    ('[-12.345e2]', '4d18c93b326e696620bae6f6498a4a7b15e7f96f488447862e2e42efbd3e9e81'),
    ('[1e63]', '6e141fbaf36727014edf6f1ead2625200c03069a628a25b52403f6daee56a015'),
    ('[-1e63]', 'db14d9b2b1fcd9fdca7d83a1a429ce0cb0f78b0fde1cbf92c129df79c9663207'),
    ('[' || repeat('9', 64) || ']', '41f55135d197d4e35c7521ec5dd6c09ea6284d863cb97d1b47a68696c5883913'),
    ('[-' || repeat('9', 64) || ']', '1b9e142fbf2c847baa6aec0f705ceca704e2e234d838d4e027f90494df145113'),
    ('[1e-64]', 'a4cd6902e13317e47224464a2426f57cd13d0c5bb97c1f204637756f41d48dc4'),
    ('[-1e-64]', '6631cfdf0249cff582d57b6961bdd80c71ed2f3366703ccad666160c6d6e578c'),
    ('[0.' || repeat('0', 63) || '1]', 'a4cd6902e13317e47224464a2426f57cd13d0c5bb97c1f204637756f41d48dc4'),
    ('[0.1234567890123456789012345678901234567890123456789012345678901234]',
     '73a430902da504ddffb64169fdf244b45faf13b4c21ce963283eb679fff51f1e'),
    ('[1.' || repeat('0', 200) || ']', '97619443b6cabc5eb2510ffc72dc31a5710bdc5eb8748b0420ac3a02e55f3944'),
    ('[123456789012345678901234567890.123456789012345678901234567890]',
     '6bb9a7c78a74671f4ab2ca357b3f7170ad143eeaab0ea4d1e0493f7e66e01a5d'),
    ('{"item":"café","qty":3,"price":12.50,"tags":["a",1,true,null]}',
     'e1c4589eebab07b02f6a1580d15f3c440b8c14e88f31d94a6452ecb69581ec47'),
    ('{"amount":1999.99,"currency":"EUR","id":123456789012}',
     '9dcd49b8830266aafaa5c5bdab0f7951a2cc9d3fc362a16f6df8334575a1611b'),
    ('1', 'e095099fc64619cb1e736f23e2ff9a3069a25d1e8ebff056183230c14492b209'),
    ('"s"', 'e0fe498a4b8b8de663fba5ff7a122acb28be3bfe7cf526c60840fe6675ccddb3'),
    ('null', '5d91bf254da87443eba833496b7520a126bf13dbbfe8fff62d6897d88ef58a93');
SELECT left(doc, 70) AS doc, request_hash(doc::jsonb) = digest AS as_in_0_4_0,
       request_hash_body('application/json', convert_to(doc, 'UTF8')) = digest AS body_as_in_0_4_0
  FROM digests_0_4_0;
-- request_hash(jsonb) has no depth bound (only request_hash_body has one):
-- a document 129 deep keeps its 0.4.0 digest.
SELECT request_hash((repeat('[', 129) || repeat(']', 129))::jsonb)
           = '979a46d44ef9fe67e188d84d0646dbb93abc965f83490fe6926694de516bce08' AS deep_jsonb_as_in_0_4_0;

--
-- Numbers: each form, at each edge of the short form's condition, against
-- the rule spelled out in SQL.
--
SELECT left(n, 70) AS n, CASE WHEN abs(n::numeric) < 1e64 AND scale(trim_scale(n::numeric)) <= 64
               THEN 'd' ELSE 'N' END AS form,
       request_hash(('[' || n || ']')::jsonb) = pg_temp.array_of_number(n::numeric) AS by_the_rule
  FROM (VALUES ('0'), ('-0.0'), ('1.50'), ('1e63'), (repeat('9', 64)), ('-' || repeat('9', 64)),
               ('1e64'), ('-1e64'), (repeat('9', 65)), ('99999999999999999999999999999999999999999999999999999999999999999.5'),
               ('1e-64'), ('-1e-64'), ('1e-65'), ('1.5e-100'), ('1' || repeat('0', 70) || 'e-70'),
               ('0.1234567890123456789012345678901234567890123456789012345678901234'),
               ('0.12345678901234567890123456789012345678901234567890123456789012345'),
               ('1.' || repeat('0', 200)), ('1e131000'), ('-1e131000'), ('1e-16383'),
               ('123456789e131000')) AS numbers(n);
-- Equal numbers have one form whatever their spelling; unequal ones differ.
SELECT request_hash('[1e131000]'::jsonb) = request_hash(('[1' || repeat('0', 131000) || ']')::jsonb)
           AS spelled_out_alike,
       request_hash('[1e131000]'::jsonb) = request_hash('[10.000e130999]'::jsonb) AS trimmed_alike,
       request_hash('[1e131000]'::jsonb) <> request_hash('[-1e131000]'::jsonb) AS sign_matters,
       request_hash('[1e131000]'::jsonb) <> request_hash('[1e131001]'::jsonb) AS exponent_matters,
       request_hash('[1e64]'::jsonb) = request_hash('[10000000000000000000000000000000000000000000000000000000000000000.000]'::jsonb)
           AS long_form_alike;
-- The issue's body: 4,000 numbers 1e131000, 36 kB.  Its digest is the
-- rule's, without writing a number out (the memory this takes is measured
-- by test/t/041_fingerprint_bounds.pl).
SELECT length(body) AS bytes,
       request_hash_body('application/json', body)
           = sha256(pg_temp.header() || convert_to('[', 'UTF8')
                    || (SELECT string_agg(pg_temp.number_item(1e131000), ''::bytea) FROM generate_series(1, 4000))
                    || convert_to(')', 'UTF8'))::request_hash AS by_the_rule
  FROM (SELECT convert_to('[' || string_agg('1e131000', ',') || ']', 'UTF8') AS body
          FROM generate_series(1, 4000)) AS issue;
-- A number beyond numeric's range is still numeric's error (jsonb's input).
\set VERBOSITY sqlstate
SELECT request_hash_body('application/json', convert_to('[1e131072]', 'UTF8'));
SELECT request_hash_body('application/json', convert_to('[1e-16384]', 'UTF8'));
\set VERBOSITY default

--
-- Depth: request_hash_body reads a JSON body by its value only when it is
-- nested at most 128 deep (the most '[' and '{' open at once outside
-- strings), and by its bytes otherwise -- never an error, valid JSON or not.
--
SELECT body_name, length(body) AS bytes,
       CASE request_hash_body('application/json', body)
           WHEN pg_temp.bytes_rule(body) THEN 'bytes'
           WHEN request_hash_jsonb(convert_from(body, 'UTF8')) THEN 'value'
       END AS hashed_by
  FROM (VALUES
    ('arrays, 128', convert_to(repeat('[', 128) || repeat(']', 128), 'UTF8')),
    ('arrays, 129', convert_to(repeat('[', 129) || repeat(']', 129), 'UTF8')),
    ('objects, 128', convert_to(repeat('{"a":', 128) || '1' || repeat('}', 128), 'UTF8')),
    ('objects, 129', convert_to(repeat('{"a":', 129) || '1' || repeat('}', 129), 'UTF8')),
    ('mixed, 128', convert_to(repeat('{"a":[', 64) || '1' || repeat(']}', 64), 'UTF8')),
    ('mixed, 129', convert_to('[' || repeat('{"a":[', 64) || '1' || repeat(']}', 64) || ']', 'UTF8')),
    ('128, twice side by side', convert_to('[' || repeat('[', 127) || repeat(']', 127) || ','
                                           || repeat('[', 127) || repeat(']', 127) || ']', 'UTF8')),
    ('brackets in a string', convert_to('["' || repeat('[', 200) || '"]', 'UTF8')),
    ('brackets after an escaped quote', convert_to('["\"' || repeat('{', 200) || '"]', 'UTF8')),
    ('brackets after an escaped backslash', convert_to('["\\",' || repeat('[', 129) || repeat(']', 129) || ']', 'UTF8'))
  ) AS bodies(body_name, body);
-- Too deep and not JSON at all (no value to compare with): by the bytes.
SELECT body_name, request_hash_body('application/json', body) = pg_temp.bytes_rule(body) AS by_bytes
  FROM (VALUES
    ('20,000 [', convert_to(repeat('[', 20000), 'UTF8')),
    ('20,000 {"a":', convert_to(repeat('{"a":', 20000), 'UTF8')),
    ('129 [ then garbage', convert_to(repeat('[', 129) || 'x', 'UTF8')),
    ('128 [ then garbage', convert_to(repeat('[', 128) || 'x', 'UTF8'))
  ) AS bodies(body_name, body);
-- Depth 128 keeps 0.4.0's digest (by value); 129 has the digest of its bytes.
SELECT request_hash_body('application/json', convert_to(repeat('[', 128) || repeat(']', 128), 'UTF8'))
           = 'ef84515aaf11ab116e3e265133f93a58d8200c36c4b73a9fe980a6393d031bcc' AS depth_128_as_in_0_4_0,
       request_hash_body('application/json', convert_to(repeat('[', 129) || repeat(']', 129), 'UTF8'))
           = 'bf9ccb2c6b046c499dabdebed2f03905969c04d81b93b7f396977cad5d48cae7' AS depth_129_by_bytes;

--
-- The bytes rule: every body keeps the plain SHA-256 of its bytes (0.4.0's
-- digest, request_hash(bytea)), except one that starts with the 25 bytes
-- 'idempotency.request_hash.', which every JSON encoding starts with.
--
SELECT body_name, request_hash_body(content_type, body) = request_hash(body) AS plain_sha256,
       request_hash_body(content_type, body) = pg_temp.bytes_rule(body) AS by_the_rule
  FROM (VALUES
    ('text', 'text/plain', convert_to('hello', 'UTF8')),
    ('empty', 'application/octet-stream', ''::bytea),
    ('24 bytes of the prefix', 'text/plain', convert_to('idempotency.request_hash', 'UTF8')),
    ('the prefix later on', 'text/plain', convert_to(' idempotency.request_hash.x', 'UTF8')),
    ('the prefix', 'text/plain', convert_to('idempotency.request_hash.', 'UTF8')),
    ('the prefix and more', 'application/octet-stream', convert_to('idempotency.request_hash.x', 'UTF8')),
    ('the prefix, not JSON, as JSON', 'application/json', convert_to('idempotency.request_hash.x', 'UTF8'))
  ) AS bodies(body_name, content_type, body);
SELECT request_hash_body('text/plain', convert_to('hello', 'UTF8'))
           = '2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824' AS text_as_in_0_4_0,
       request_hash_body('text/plain', convert_to('idempotency.request_hash', 'UTF8'))
           = '4a2eab27a0790cb0f67a2cdcdbfaba2fb6cc5017d54b45860b32498bb6f0bd42' AS short_prefix_as_in_0_4_0,
       request_hash_body('text/plain', convert_to('idempotency.request_hash.x', 'UTF8'))
           = 'f04aa82973e53312530ce6635aa3669455d1d277dea6d372c73e104a5fe78a73' AS prefixed;

-- A crafted body: the bytes of the JSON encoding of {"item":"a"}, sent as
-- application/octet-stream.  0.4.0 hashed it like the JSON document (the
-- retry of one was replayed for the other); now the two differ.
CREATE TEMP TABLE crafted AS
SELECT pg_temp.header() || convert_to('{s', 'UTF8') || int8send(4) || convert_to('items', 'UTF8')
       || int8send(1) || convert_to('a)', 'UTF8') AS body;
SELECT length(body) AS bytes,
       request_hash(body) = request_hash('{"item":"a"}'::jsonb) AS is_the_encoding,
       request_hash_body('application/json', convert_to('{"item":"a"}', 'UTF8'))
           = 'd18bd1730eecf7f9dc99e5131b8bab5b3b577dba276f862e73bf06a0d4bd06ea' AS json_as_in_0_4_0,
       request_hash_body('application/octet-stream', body)
           <> request_hash_body('application/json', convert_to('{"item":"a"}', 'UTF8')) AS apart,
       request_hash_body('application/octet-stream', body) = pg_temp.bytes_rule(body) AS by_the_rule
  FROM crafted;

DROP TABLE digests_0_4_0, crafted;
DROP FUNCTION pg_temp.array_of_number(numeric), pg_temp.bytes_rule(bytea);
DROP EXTENSION idempotency;
