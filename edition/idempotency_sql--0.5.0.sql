\echo Use "CREATE EXTENSION idempotency_sql" to load this file. \quit

-- The SQL edition of idempotency: the extension's contract in SQL and
-- PL/pgSQL only, for servers that take no C library (doc/sql-edition.md).
-- This script is written once; edition/generate wraps it for each way it
-- installs: this file as it is for CREATE EXTENSION from the extension
-- directory, inside pgtle.install_extension() for pg_tle, and as a plain
-- script for psql -f into a schema.  So it follows the rules all three
-- allow: @extschema@ only outside quotes (the plain form replaces it with a
-- psql variable, which psql does not expand inside quotes), no psql
-- commands but the first line (which the wrappers drop), and what only an
-- extension script may call wrapped in a DO block that a plain install
-- skips.
--
-- How the protocol of src/claims.hpp is kept without shared memory:
--  * A key's claim is its row, written at once (no deferred claims), and a
--    transaction-level advisory lock on the key (idempotency.key_lock),
--    which every writer of the key's row takes before writing and holds
--    until its transaction ends: a claim, a takeover, a completion, a
--    checkpoint, a release, a forget.  A begin that finds it taken answers
--    in_progress at once (a try-lock), or waits on it -- an ordinary lock
--    wait, seen by the deadlock detector -- and decides afresh once the
--    holder's transaction ended.  So one transaction at a time decides
--    about a key, and it reads the key after taking the lock (READ
--    COMMITTED takes a new snapshot per statement): rule K, held for the
--    whole transaction.
--  * A savepoint that rolls back releases the locks taken inside it along
--    with the rows written there: a claim rolled back was never made.
--  * Reads take no lock: a replay or a mismatch is answered from the
--    committed row, as the extension answers it.  Another transaction's
--    uncommitted claim has no row this one can read, only its lock: it is
--    answered in_progress, with nothing else known about it.
--  * Expiry deletes only rows nobody has locked (FOR UPDATE SKIP LOCKED),
--    and a begin that takes over an expired row locks it the same way, so
--    neither waits for the other.
--  * A claim made outside a transaction block without a lease must be
--    settled in its statement (IK004): a deferred constraint trigger checks
--    at commit that a claim still unsettled was not made by the statement
--    that commits.
--  * The functions run as their owner (SECURITY DEFINER), so that the
--    application role needs no privilege on the tables; every name in their
--    bodies is schema-qualified and every operator pinned, so that they do
--    not depend on the caller's search_path, which they do not set (a SET
--    clause costs every call a GUC save and restore).  Tenant isolation
--    comes from the caller's role, never from a setting it could change.

-- ---------------------------------------------------------------------------
-- The private schema
-- ---------------------------------------------------------------------------

CREATE SCHEMA idempotency;
COMMENT ON SCHEMA idempotency IS 'private storage and helpers of the SQL edition of idempotency';
-- Every role may name what is here; nothing here is granted to PUBLIC but
-- the helpers of request_hash, which every role may call.
GRANT USAGE ON SCHEMA idempotency TO PUBLIC;

-- ---------------------------------------------------------------------------
-- request_hash: a SHA-256 digest of a request, as 64 lowercase hex digits
-- ---------------------------------------------------------------------------

-- The domain's text is the extension's text form, so that request_hash(...)::text,
-- which the middleware packages feed into request_hash_parts, is the same
-- in both editions.  What a domain cannot do (cases of its text input, the
-- bytea casts, the binary form) is in doc/sql-edition.md's table.

-- Refuses a malformed request_hash text with the extension's error (22P02):
-- the domain's CHECK calls it only for text that is not a digest.  The
-- message quotes the value only when it is hex digits (a mistyped digest).
CREATE FUNCTION idempotency.reject_request_hash_text(value text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
BEGIN
    IF value OPERATOR(pg_catalog.~) '^[0-9a-fA-F]*$' THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_text_representation',
            MESSAGE = pg_catalog.format('invalid input syntax for type request_hash: "%s%s"',
                                        pg_catalog."left"(value, 64),
                                        CASE WHEN pg_catalog.length(value) OPERATOR(pg_catalog.>) 64 THEN '...' ELSE '' END),
            DETAIL = CASE WHEN pg_catalog.length(value) OPERATOR(pg_catalog.=) 64
                          THEN 'A request_hash is written in lowercase hexadecimal digits in the SQL edition.'
                          ELSE pg_catalog.format('A request_hash is written as 64 hexadecimal digits, not %s.', pg_catalog.length(value)) END;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'invalid_text_representation',
        MESSAGE = 'invalid input syntax for type request_hash',
        DETAIL = pg_catalog.format('A request_hash is written as 64 hexadecimal digits. The input, of %s bytes, is not shown: it may be request data.',
                                   pg_catalog.octet_length(value)),
        HINT = 'To hash a string instead, give it a type, as in request_hash(''...''::text).';
END
$$;
COMMENT ON FUNCTION idempotency.reject_request_hash_text(text) IS
    'raises the error of a malformed request_hash text (22P02), for the domain''s check';

CREATE DOMAIN @extschema@.request_hash AS text COLLATE "C"
    CONSTRAINT request_hash_is_a_digest
    CHECK (VALUE OPERATOR(pg_catalog.~) '^[0-9a-f]{64}$' OR idempotency.reject_request_hash_text(VALUE));
COMMENT ON DOMAIN @extschema@.request_hash IS
    'SHA-256 fingerprint of a request (32 bytes, as 64 lowercase hex digits)';

-- A text's bytes in the database encoding, without the encoding function
-- (convert_to is only STABLE, which would keep the constructors below from
-- being inlined): decode('escape') copies every byte but backslash
-- sequences, and each backslash is doubled first.
CREATE FUNCTION idempotency.text_bytes(value text) RETURNS bytea
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN pg_catalog.decode(pg_catalog.replace(value, '\', '\\'), 'escape');
COMMENT ON FUNCTION idempotency.text_bytes(text) IS 'the bytes of a text in the database encoding';

-- The framing of one request part (src/canonical.hpp): its length in 8
-- bytes, most significant first, then its bytes; a NULL part is the length
-- 2^64 - 1 and no bytes.
CREATE FUNCTION idempotency.framed(part bytea) RETURNS bytea
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN part IS NULL THEN '\xffffffffffffffff'::pg_catalog.bytea
                ELSE pg_catalog.int8send(pg_catalog.octet_length(part)::pg_catalog.int8) OPERATOR(pg_catalog.||) part END;
COMMENT ON FUNCTION idempotency.framed(bytea) IS 'a request part framed by its length (NULL: the null marker)';


-- The items of one container, in the iterator's order (src/canonical.hpp),
-- grouped in runs: run 2n is the n-th child container (to be encoded in its
-- turn); the odd runs between are encoded bytes -- the opening tag, the
-- scalars, the keys (an object's key goes with the run before its value when
-- the value is a container) and, last, the end tag.  A scalar is encoded as
-- its tag: 's' and a string's bytes; 't', 'f' or 'n'; for a number, of t,
-- the number without trailing fractional zeros, 'd' and its text when it is
-- below 1e64 in magnitude with at most 64 decimals (the text 0.4.0 hashed),
-- else 'N' and numeric's binary form, which never spells out the digits of
-- 1e131000 (doc/reference.md, request_hash).  Bytes and texts are framed by
-- their length (framed).  Each value's type and number are computed once
-- (OFFSET 0 keeps them from being copied into every use, and lets framed()
-- be inlined).
CREATE FUNCTION idempotency.jsonb_items(container jsonb)
    RETURNS TABLE (run bigint, item_position bigint, half integer, child jsonb, bytes bytea)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
WITH element AS (
    SELECT o.ordinality AS item_position, o.key, o.value
      FROM pg_catalog.jsonb_each(container) WITH ORDINALITY AS o
     WHERE pg_catalog.jsonb_typeof(container) OPERATOR(pg_catalog.=) 'object'
    UNION ALL
    SELECT a.ordinality, NULL, a.value
      FROM pg_catalog.jsonb_array_elements(container) WITH ORDINALITY AS a
     WHERE pg_catalog.jsonb_typeof(container) OPERATOR(pg_catalog.=) 'array'
), typed AS (
    SELECT e.item_position, e.key, e.value, k.kind,
           k.kind OPERATOR(pg_catalog.=) ANY (ARRAY['object', 'array']) AS nested,
           pg_catalog.count(*) FILTER (WHERE k.kind OPERATOR(pg_catalog.=) ANY (ARRAY['object', 'array']))
               OVER (ORDER BY e.item_position) AS containers
      FROM element AS e,
           LATERAL (SELECT pg_catalog.jsonb_typeof(e.value) AS kind OFFSET 0) AS k
), scalar AS (
    SELECT t.*, idempotency.framed(v.key_bytes) AS framed_key,
           CASE WHEN t.kind OPERATOR(pg_catalog.=) 'string'
                THEN 's'::pg_catalog.bytea OPERATOR(pg_catalog.||) idempotency.framed(v.string)
                WHEN t.kind OPERATOR(pg_catalog.=) 'number'
                     AND pg_catalog.abs(v.number) OPERATOR(pg_catalog.<) 1e64::pg_catalog.numeric
                     AND pg_catalog.scale(v.number) OPERATOR(pg_catalog.<=) 64
                THEN 'd'::pg_catalog.bytea OPERATOR(pg_catalog.||) idempotency.framed(w.number_bytes)
                WHEN t.kind OPERATOR(pg_catalog.=) 'number'
                THEN 'N'::pg_catalog.bytea OPERATOR(pg_catalog.||) idempotency.framed(w.number_bytes)
                WHEN t.kind OPERATOR(pg_catalog.=) 'boolean'
                THEN CASE WHEN t.value OPERATOR(pg_catalog.=) 'true'::pg_catalog.jsonb
                          THEN 't'::pg_catalog.bytea ELSE 'f'::pg_catalog.bytea END
                WHEN t.kind OPERATOR(pg_catalog.=) 'null' THEN 'n'::pg_catalog.bytea END AS item
      FROM typed AS t,
           LATERAL (SELECT CASE WHEN t.kind OPERATOR(pg_catalog.=) 'number'
                                THEN pg_catalog.trim_scale(t.value::pg_catalog.numeric) END AS number,
                           CASE WHEN t.kind OPERATOR(pg_catalog.=) 'string'
                                THEN idempotency.text_bytes(t.value OPERATOR(pg_catalog.#>>) '{}'::pg_catalog.text[]) END AS string,
                           idempotency.text_bytes(t.key) AS key_bytes
                    OFFSET 0) AS v,
           LATERAL (SELECT CASE WHEN pg_catalog.abs(v.number) OPERATOR(pg_catalog.<) 1e64::pg_catalog.numeric
                                     AND pg_catalog.scale(v.number) OPERATOR(pg_catalog.<=) 64
                                THEN v.number::pg_catalog.text::pg_catalog.bytea
                                ELSE pg_catalog.numeric_send(v.number) END AS number_bytes
                    OFFSET 0) AS w
)
SELECT 1::pg_catalog.int8, 0::pg_catalog.int8, 0, NULL::pg_catalog.jsonb,
       CASE WHEN pg_catalog.jsonb_typeof(container) OPERATOR(pg_catalog.=) 'object'
            THEN '{'::pg_catalog.bytea ELSE '['::pg_catalog.bytea END
UNION ALL
SELECT CASE WHEN s.nested THEN 2 OPERATOR(pg_catalog.*) s.containers OPERATOR(pg_catalog.-) 1
            ELSE 2 OPERATOR(pg_catalog.*) s.containers OPERATOR(pg_catalog.+) 1 END,
       s.item_position, 0, NULL,
       's'::pg_catalog.bytea OPERATOR(pg_catalog.||) s.framed_key
  FROM scalar AS s
 WHERE s.key IS NOT NULL
UNION ALL
SELECT CASE WHEN s.nested THEN 2 OPERATOR(pg_catalog.*) s.containers
            ELSE 2 OPERATOR(pg_catalog.*) s.containers OPERATOR(pg_catalog.+) 1 END,
       s.item_position, 1,
       CASE WHEN s.nested THEN s.value END,
       s.item
  FROM scalar AS s
UNION ALL
SELECT 2 OPERATOR(pg_catalog.*) (SELECT pg_catalog.count(*) FROM typed AS t WHERE t.nested) OPERATOR(pg_catalog.+) 1,
       9223372036854775807, 0, NULL, ')'::pg_catalog.bytea
$$;
COMMENT ON FUNCTION idempotency.jsonb_items(jsonb) IS
    'the items of one jsonb container for request_hash(jsonb): runs of encoded scalars and the child containers';

-- The canonical encoding of a jsonb document (src/canonical.hpp): a header,
-- then one item per token of jsonb's iterator.  The document is walked with
-- a work stack, never by recursion, so that any document jsonb holds is
-- encoded without raising 54001; each container is split once into its
-- children, which are disjoint, so the stack never holds more than the
-- document.  The pieces are joined once, at the end.
CREATE FUNCTION idempotency.jsonb_encoding(document jsonb) RETURNS bytea
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
DECLARE
    -- The work stack: each entry a container still to split, or bytes.
    stack_containers pg_catalog.jsonb[];
    stack_bytes pg_catalog.bytea[];
    top pg_catalog.int4 := 1;
    pieces pg_catalog.bytea[];
    piece_count pg_catalog.int4 := 1;
    container pg_catalog.jsonb;
    run_containers pg_catalog.jsonb[];
    run_bytes pg_catalog.bytea[];
BEGIN
    -- "idempotency.request_hash.jsonb.v1" and its terminating NUL.
    pieces[1] := '\x6964656d706f74656e63792e726571756573745f686173682e6a736f6e622e763100'::pg_catalog.bytea;
    IF pg_catalog.jsonb_typeof(document) OPERATOR(pg_catalog.<>) ALL (ARRAY['object', 'array']) THEN
        -- A top-level scalar is jsonb's raw-scalar pseudo-array: the items
        -- of [scalar], with the opening tag R.
        RETURN pieces[1] OPERATOR(pg_catalog.||) 'R'::pg_catalog.bytea OPERATOR(pg_catalog.||)
               (SELECT pg_catalog.string_agg(i.bytes, ''::pg_catalog.bytea ORDER BY i.item_position, i.half)
                  FROM idempotency.jsonb_items(pg_catalog.jsonb_build_array(document)) AS i
                 WHERE i.item_position OPERATOR(pg_catalog.>) 0);
    END IF;
    stack_containers[1] := document;
    stack_bytes[1] := NULL;
    WHILE top OPERATOR(pg_catalog.>) 0 LOOP
        container := stack_containers[top];
        IF container IS NULL THEN
            piece_count := piece_count OPERATOR(pg_catalog.+) 1;
            pieces[piece_count] := stack_bytes[top];
            stack_bytes[top] := NULL;
            top := top OPERATOR(pg_catalog.-) 1;
            CONTINUE;
        END IF;
        stack_containers[top] := NULL;
        top := top OPERATOR(pg_catalog.-) 1;
        -- Its runs, last first, to be pushed so that the first is on top.
        SELECT pg_catalog.array_agg(r.child ORDER BY r.run DESC),
               pg_catalog.array_agg(r.bytes ORDER BY r.run DESC)
          INTO run_containers, run_bytes
          FROM (SELECT i.run, (pg_catalog.array_agg(i.child) FILTER (WHERE i.child IS NOT NULL))[1] AS child,
                       pg_catalog.string_agg(i.bytes, ''::pg_catalog.bytea ORDER BY i.item_position, i.half) AS bytes
                  FROM idempotency.jsonb_items(container) AS i
                 GROUP BY i.run) AS r;
        container := NULL;
        FOR i IN 1 .. pg_catalog.array_length(run_bytes, 1) LOOP
            top := top OPERATOR(pg_catalog.+) 1;
            stack_containers[top] := run_containers[i];
            stack_bytes[top] := run_bytes[i];
        END LOOP;
    END LOOP;
    RETURN (SELECT pg_catalog.string_agg(p.piece, ''::pg_catalog.bytea ORDER BY p.n)
              FROM pg_catalog.unnest(pieces) WITH ORDINALITY AS p(piece, n));
END
$$;
COMMENT ON FUNCTION idempotency.jsonb_encoding(jsonb) IS
    'the canonical encoding of a jsonb document that request_hash(jsonb) hashes';

-- A digest as the domain's text; 22P02 for a digest of another length.
CREATE FUNCTION idempotency.digest_text(digest bytea) RETURNS text
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
BEGIN
    IF pg_catalog.octet_length(digest) OPERATOR(pg_catalog.<>) 32 THEN
        RAISE EXCEPTION 'invalid request_hash length: % bytes', pg_catalog.octet_length(digest)
            USING ERRCODE = 'invalid_text_representation',
                  DETAIL = 'A request_hash is a SHA-256 digest of exactly 32 bytes.';
    END IF;
    RETURN pg_catalog.encode(digest, 'hex');
END
$$;
COMMENT ON FUNCTION idempotency.digest_text(bytea) IS 'a 32-byte digest as request_hash text; 22P02 for any other length';

-- The framed parts of request_hash(VARIADIC text[]); one dimension only.
CREATE FUNCTION idempotency.parts_encoding(parts text[]) RETURNS bytea
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
BEGIN
    IF pg_catalog.array_ndims(parts) OPERATOR(pg_catalog.>) 1 THEN
        RAISE EXCEPTION 'cannot hash a %-dimensional array of request parts', pg_catalog.array_ndims(parts)
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Request parts are given as separate arguments or as a one-dimensional text array.';
    END IF;
    RETURN COALESCE(
        (SELECT pg_catalog.string_agg(idempotency.framed(b.bytes), ''::pg_catalog.bytea ORDER BY p.n)
           FROM pg_catalog.unnest(parts) WITH ORDINALITY AS p(part, n),
                LATERAL (SELECT idempotency.text_bytes(p.part) AS bytes OFFSET 0) AS b),
        ''::pg_catalog.bytea);
END
$$;
COMMENT ON FUNCTION idempotency.parts_encoding(text[]) IS 'the length-framed parts that request_hash(VARIADIC text[]) hashes';

-- A JSON media type: application/json or application/<anything>+json, in
-- any (ASCII) case, its parameters and the blanks around it aside.
CREATE FUNCTION idempotency.is_json_media_type(content_type text) RETURNS boolean
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN pg_catalog.translate(pg_catalog.btrim(pg_catalog.split_part(content_type, ';', 1), E' \t'),
                                'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')
           OPERATOR(pg_catalog.~) '^application/(json|.+\+json)$';
COMMENT ON FUNCTION idempotency.is_json_media_type(text) IS 'whether a Content-Type is a JSON media type';

-- Whether JSON text nests deeper than `depth` containers, decided without a
-- recursive parser: strings out, brackets kept, and each pass removes the
-- innermost pairs.  Exact for valid JSON; for anything else the answer does
-- not matter (it is hashed by its bytes either way).
CREATE FUNCTION idempotency.json_nests_deeper(document text, depth integer) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
DECLARE
    brackets pg_catalog.text := pg_catalog.regexp_replace(
        pg_catalog.regexp_replace(document, '"(?:[^"\\]|\\.)*"', '', 'g'), '[^][{}]', '', 'g');
BEGIN
    FOR pass IN 1 .. depth LOOP
        IF brackets OPERATOR(pg_catalog.=) '' THEN
            RETURN false;
        END IF;
        brackets := pg_catalog.regexp_replace(brackets, '\[\]|\{\}', '', 'g');
    END LOOP;
    RETURN brackets OPERATOR(pg_catalog.<>) '';
END
$$;
COMMENT ON FUNCTION idempotency.json_nests_deeper(text, integer) IS
    'whether JSON text opens more than depth containers at once (strings aside), without recursion';

-- The fingerprint of a request body (doc/reference.md, request_hash_body):
-- by its value when the database is UTF8 (JSON is UTF-8 text; read in
-- another encoding distinct bodies would collide, so every body there takes
-- the bytes rule, as in the extension), it is of a JSON media type, valid
-- UTF-8, nested at most 128 deep and one document jsonb reads; else by its
-- bytes, domain-separated from every JSON encoding.  The checks run in the order that keeps a
-- number beyond numeric's range the only error: text and nesting first,
-- then json's syntax and escapes (json_strip_nulls reads every escape but
-- converts no number), and jsonb last.
CREATE FUNCTION idempotency.body_digest(content_type text, body bytea) RETURNS text
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
DECLARE
    document pg_catalog.text;
BEGIN
    IF pg_catalog.getdatabaseencoding() OPERATOR(pg_catalog.=) 'UTF8' AND idempotency.is_json_media_type(content_type) THEN
        BEGIN
            document := pg_catalog.convert_from(body, 'UTF8');
            IF idempotency.json_nests_deeper(document, 128) THEN
                document := NULL;
            ELSE
                PERFORM pg_catalog.json_strip_nulls(document::pg_catalog.json);
            END IF;
        EXCEPTION WHEN character_not_in_repertoire OR invalid_text_representation
                       OR untranslatable_character OR statement_too_complex THEN
            document := NULL;
        END;
        IF document IS NOT NULL THEN
            RETURN pg_catalog.encode(pg_catalog.sha256(idempotency.jsonb_encoding(document::pg_catalog.jsonb)), 'hex');
        END IF;
    END IF;
    IF pg_catalog.substr(body, 1, 25) OPERATOR(pg_catalog.=) 'idempotency.request_hash.'::pg_catalog.bytea THEN
        RETURN pg_catalog.encode(pg_catalog.sha256('idempotency.request_hash.bytes\000'::pg_catalog.bytea
                                                   OPERATOR(pg_catalog.||) body), 'hex');
    END IF;
    RETURN pg_catalog.encode(pg_catalog.sha256(body), 'hex');
END
$$;
COMMENT ON FUNCTION idempotency.body_digest(text, bytea) IS 'the digest text of request_hash_body';

-- Constructors: each hashes its argument.  SQL-standard bodies, which the
-- planner inlines and which name the domain outside quotes.
CREATE FUNCTION @extschema@.request_hash(bytea) RETURNS @extschema@.request_hash
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN pg_catalog.encode(pg_catalog.sha256($1), 'hex');
COMMENT ON FUNCTION @extschema@.request_hash(bytea) IS 'SHA-256 of the bytes';
CREATE FUNCTION @extschema@.request_hash(text) RETURNS @extschema@.request_hash
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN pg_catalog.encode(pg_catalog.sha256(idempotency.text_bytes($1)), 'hex');
COMMENT ON FUNCTION @extschema@.request_hash(text) IS 'SHA-256 of the text''s bytes in the database encoding (UTF-8 in a UTF-8 database)';
CREATE FUNCTION @extschema@.request_hash(jsonb) RETURNS @extschema@.request_hash
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN pg_catalog.encode(pg_catalog.sha256(idempotency.jsonb_encoding($1)), 'hex');
COMMENT ON FUNCTION @extschema@.request_hash(jsonb) IS
    'SHA-256 of a canonical encoding of the document: documents equal as jsonb hash alike';
CREATE FUNCTION @extschema@.request_hash(VARIADIC text[]) RETURNS @extschema@.request_hash
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN pg_catalog.encode(pg_catalog.sha256(idempotency.parts_encoding($1)), 'hex');
COMMENT ON FUNCTION @extschema@.request_hash(VARIADIC text[]) IS
    'SHA-256 of length-prefixed parts (e.g. method, path, body); NULL parts differ from empty ones';
-- Every string type a driver can send has its own overload, as in the
-- extension: without one, request_hash(x) would be read as a cast to the
-- domain.  char(n) is hashed by its bytes, padding included (its output).
CREATE FUNCTION @extschema@.request_hash(character varying) RETURNS @extschema@.request_hash
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN @extschema@.request_hash($1::pg_catalog.text);
COMMENT ON FUNCTION @extschema@.request_hash(character varying) IS 'request_hash(text) of a varchar';
CREATE FUNCTION @extschema@.request_hash(character) RETURNS @extschema@.request_hash
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN @extschema@.request_hash(pg_catalog.textin(pg_catalog.bpcharout($1)));
COMMENT ON FUNCTION @extschema@.request_hash(character) IS 'request_hash(text) of a char(n) (bpchar) value, by its bytes';
CREATE FUNCTION @extschema@.request_hash(name) RETURNS @extschema@.request_hash
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN @extschema@.request_hash($1::pg_catalog.text);
COMMENT ON FUNCTION @extschema@.request_hash(name) IS 'request_hash(text) of a name';
CREATE FUNCTION @extschema@.request_hash("char") RETURNS @extschema@.request_hash
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN @extschema@.request_hash($1::pg_catalog.text);
COMMENT ON FUNCTION @extschema@.request_hash("char") IS 'request_hash(text) of a "char"';
-- One name per constructor, so that a driver's untyped parameter has exactly
-- one type it can be.
CREATE FUNCTION @extschema@.request_hash_jsonb(jsonb) RETURNS @extschema@.request_hash
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN @extschema@.request_hash($1);
COMMENT ON FUNCTION @extschema@.request_hash_jsonb(jsonb) IS 'request_hash(jsonb) under a name of its own';
CREATE FUNCTION @extschema@.request_hash_jsonb(text) RETURNS @extschema@.request_hash
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN @extschema@.request_hash($1::pg_catalog.jsonb);
COMMENT ON FUNCTION @extschema@.request_hash_jsonb(text) IS 'request_hash_jsonb of a JSON document sent as text';
CREATE FUNCTION @extschema@.request_hash_text(text) RETURNS @extschema@.request_hash
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN @extschema@.request_hash($1);
COMMENT ON FUNCTION @extschema@.request_hash_text(text) IS 'request_hash(text) under a name of its own';
CREATE FUNCTION @extschema@.request_hash_bytea(bytea) RETURNS @extschema@.request_hash
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN @extschema@.request_hash($1);
COMMENT ON FUNCTION @extschema@.request_hash_bytea(bytea) IS 'request_hash(bytea) under a name of its own';
CREATE FUNCTION @extschema@.request_hash_parts(VARIADIC text[]) RETURNS @extschema@.request_hash
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN @extschema@.request_hash(VARIADIC $1);
COMMENT ON FUNCTION @extschema@.request_hash_parts(VARIADIC text[]) IS 'request_hash(VARIADIC text[]) under a name of its own';
CREATE FUNCTION @extschema@.request_hash_body(content_type text, body bytea) RETURNS @extschema@.request_hash
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN idempotency.body_digest(content_type, body);
COMMENT ON FUNCTION @extschema@.request_hash_body(text, bytea) IS
    'a request body of a JSON media type that jsonb reads by its value (request_hash_jsonb), any other by its bytes (request_hash_bytea)';

-- What the extension's casts do (a domain can have none of its own): wrap
-- an existing 32-byte digest, or expose it.  They do not hash.
CREATE FUNCTION @extschema@.request_hash_from_digest(bytea) RETURNS @extschema@.request_hash
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN idempotency.digest_text($1);
COMMENT ON FUNCTION @extschema@.request_hash_from_digest(bytea) IS
    'wrap an existing 32-byte SHA-256 digest (the extension''s bytea to request_hash cast)';
CREATE FUNCTION @extschema@.request_hash_digest(@extschema@.request_hash) RETURNS bytea
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN pg_catalog.decode($1, 'hex');
COMMENT ON FUNCTION @extschema@.request_hash_digest(@extschema@.request_hash) IS
    'the 32 digest bytes (the extension''s request_hash to bytea cast)';

-- ---------------------------------------------------------------------------
-- Storage
-- ---------------------------------------------------------------------------

-- One row per (tenant, scope, key), with the extension's column names (the
-- move to the extension maps them one to one; doc/sql-edition.md).  Columns
-- that never change after a claim come first, so that a completion's WAL
-- record, which leaves out the unchanged prefix, is short; nothing a
-- completion changes is indexed, and fillfactor 90 leaves room on the page,
-- so the completion of a claim written earlier is a HOT update.
--   request          the digest's 32 bytes (the domain's text is 64)
--   writer           the top-level transaction that wrote this version: a
--                    visible version whose writer is the caller's own
--                    transaction is its own claim, not yet committed
--   unsettled_since  for a claim made without a lease, the start of the
--                    statement that made it, until it is completed,
--                    released or forgotten (IK004; refuse_unsettled_claim)
CREATE TABLE idempotency.keys (
    tenant           pg_catalog.regrole NOT NULL,
    scope            pg_catalog.text COLLATE "C" NOT NULL,
    key              pg_catalog.text COLLATE "C" NOT NULL,
    request          pg_catalog.bytea NOT NULL,
    created_at       pg_catalog.timestamptz NOT NULL,
    ttl              pg_catalog.interval NOT NULL,
    attempt          pg_catalog.int4 NOT NULL,
    writer           pg_catalog.xid8 NOT NULL,
    status           pg_catalog."char" NOT NULL,
    expires_at       pg_catalog.timestamptz NOT NULL,
    lease            pg_catalog.interval,
    lease_expires_at pg_catalog.timestamptz,
    unsettled_since  pg_catalog.timestamptz,
    completed_at     pg_catalog.timestamptz,
    response_status  pg_catalog.int4,
    response_body_omitted pg_catalog.bool,
    recovery_point   pg_catalog.text,
    claim_data       pg_catalog.jsonb,
    response_headers pg_catalog.jsonb,
    response_body    pg_catalog.jsonb,
    response_body_bytes pg_catalog.bytea,
    CONSTRAINT keys_pkey PRIMARY KEY (tenant, scope, key)
) WITH (fillfactor = 90);
COMMENT ON TABLE idempotency.keys IS
    'one row per (tenant, scope, key): the claim, its lease and the stored response (status p = in progress, c = completed)';
COMMENT ON COLUMN idempotency.keys.tenant IS
    'the role that owns the key when the role is in idempotency.tenants, else 0 (-); dumped as the role''s name';
COMMENT ON COLUMN idempotency.keys.request IS 'the 32 bytes of the request''s digest';
COMMENT ON COLUMN idempotency.keys.writer IS 'the top-level transaction that wrote this version of the row';
COMMENT ON COLUMN idempotency.keys.unsettled_since IS
    'for a claim made without a lease and not yet settled, the start of the statement that made it (IK004)';
REVOKE ALL ON TABLE idempotency.keys FROM PUBLIC;

-- Roles whose keys are their own (the extension's idempotency.tenant_isolation
-- = role, which only a superuser may set: here only the owner may change
-- this table, through idempotency_tenant_isolation()).
CREATE TABLE idempotency.tenants (
    tenant pg_catalog.regrole NOT NULL,
    CONSTRAINT tenants_pkey PRIMARY KEY (tenant)
);
COMMENT ON TABLE idempotency.tenants IS
    'roles with tenant isolation: each key such a role claims belongs to it alone';
REVOKE ALL ON TABLE idempotency.tenants FROM PUBLIC;

-- The owner's limits (the extension's superuser settings): no row means
-- the defaults.  A session may lower them with the settings of the same
-- names, never raise them.
CREATE TABLE idempotency.settings (
    singleton pg_catalog.bool NOT NULL DEFAULT true,
    max_key_length pg_catalog.int4 NOT NULL DEFAULT 1024,
    max_response_bytes pg_catalog.int4 NOT NULL DEFAULT 1048576,
    CONSTRAINT settings_pkey PRIMARY KEY (singleton),
    CONSTRAINT settings_one_row CHECK (singleton),
    CONSTRAINT settings_max_key_length CHECK (max_key_length OPERATOR(pg_catalog.>=) 1
                                              AND max_key_length OPERATOR(pg_catalog.<=) 1024),
    CONSTRAINT settings_max_response_bytes CHECK (max_response_bytes OPERATOR(pg_catalog.>=) 0
                                                  AND max_response_bytes OPERATOR(pg_catalog.<=) 536870911)
);
COMMENT ON TABLE idempotency.settings IS
    'the owner''s limits: at most one row; without it max_key_length is 1024 and max_response_bytes 1 MB';
REVOKE ALL ON TABLE idempotency.settings FROM PUBLIC;
GRANT SELECT ON TABLE idempotency.settings TO PUBLIC;

-- pg_dump must keep the keys (a restore without them would let every
-- retried request run a second time) and the owner's choices.  Only an
-- extension script may register them: a plain install skips it, and pg_dump
-- dumps its tables anyway.
DO $$
BEGIN
    PERFORM pg_catalog.pg_extension_config_dump('idempotency.keys', '');
    PERFORM pg_catalog.pg_extension_config_dump('idempotency.tenants', '');
    PERFORM pg_catalog.pg_extension_config_dump('idempotency.settings', '');
EXCEPTION WHEN feature_not_supported THEN
    NULL; -- not an extension script: the plain install
END
$$;

-- The owner's choices, as constants that the planner folds into every plan
-- that uses them, so that a call reads neither table: whether any role is
-- isolated, and the limits.  The tables above stay the record (they are
-- dumped); a statement that changes them -- the owner's, or a restore's --
-- writes these functions anew (configured), and the plans that used the old
-- ones are made again.
CREATE FUNCTION idempotency.any_tenants() RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN false;
COMMENT ON FUNCTION idempotency.any_tenants() IS 'whether idempotency.tenants has a row (written by idempotency.configured)';
CREATE FUNCTION idempotency.owner_max_key_length() RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 1024;
COMMENT ON FUNCTION idempotency.owner_max_key_length() IS 'the owner''s max_key_length (written by idempotency.configured)';
CREATE FUNCTION idempotency.owner_max_response_bytes() RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 1048576;
COMMENT ON FUNCTION idempotency.owner_max_response_bytes() IS 'the owner''s max_response_bytes (written by idempotency.configured)';

CREATE FUNCTION idempotency.configured() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    tenants pg_catalog.bool := EXISTS (SELECT FROM idempotency.tenants);
    key_limit pg_catalog.int4 := COALESCE((SELECT s.max_key_length FROM idempotency.settings AS s), 1024);
    size_limit pg_catalog.int4 := COALESCE((SELECT s.max_response_bytes FROM idempotency.settings AS s), 1048576);
BEGIN
    IF tenants OPERATOR(pg_catalog.=) idempotency.any_tenants()
       AND key_limit OPERATOR(pg_catalog.=) idempotency.owner_max_key_length()
       AND size_limit OPERATOR(pg_catalog.=) idempotency.owner_max_response_bytes() THEN
        RETURN NULL;
    END IF;
    -- Only what changed is written anew.
    IF tenants OPERATOR(pg_catalog.<>) idempotency.any_tenants() THEN
        EXECUTE pg_catalog.format(
            'CREATE OR REPLACE FUNCTION idempotency.any_tenants() RETURNS boolean '
            'LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN %s', CASE WHEN tenants THEN 'true' ELSE 'false' END);
    END IF;
    IF key_limit OPERATOR(pg_catalog.<>) idempotency.owner_max_key_length() THEN
        EXECUTE pg_catalog.format(
            'CREATE OR REPLACE FUNCTION idempotency.owner_max_key_length() RETURNS integer '
            'LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN %s', key_limit);
    END IF;
    IF size_limit OPERATOR(pg_catalog.<>) idempotency.owner_max_response_bytes() THEN
        EXECUTE pg_catalog.format(
            'CREATE OR REPLACE FUNCTION idempotency.owner_max_response_bytes() RETURNS integer '
            'LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN %s', size_limit);
    END IF;
    -- A plan that folded one of them through call_context, an inlined
    -- function, does not record that it depends on it; every such plan
    -- reads idempotency.keys, and a change of the table's options makes them
    -- all be made again (SHARE UPDATE EXCLUSIVE: no request waits for it).
    ALTER TABLE idempotency.keys SET (fillfactor = 90);
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION idempotency.configured() IS
    'writes any_tenants, owner_max_key_length and owner_max_response_bytes anew from the tables they reflect';
REVOKE ALL ON FUNCTION idempotency.configured() FROM PUBLIC;
CREATE TRIGGER tenants_configured AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON idempotency.tenants
    FOR EACH STATEMENT EXECUTE FUNCTION idempotency.configured();
COMMENT ON TRIGGER tenants_configured ON idempotency.tenants IS 'keeps idempotency.any_tenants() in step';
CREATE TRIGGER settings_configured AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON idempotency.settings
    FOR EACH STATEMENT EXECUTE FUNCTION idempotency.configured();
COMMENT ON TRIGGER settings_configured ON idempotency.settings IS 'keeps the owner''s limit functions in step';

-- The per-scope summary, as the extension's: derived, not dumped, rebuilt by
-- idempotency_scope_stats_refresh() (which the scheduled expiry calls).
CREATE TABLE idempotency.scope_stats (
    scope                         pg_catalog.text COLLATE "C" NOT NULL,
    in_progress                   pg_catalog.int8 NOT NULL,
    completed                     pg_catalog.int8 NOT NULL,
    expired                       pg_catalog.int8 NOT NULL,
    oldest_created_at             pg_catalog.timestamptz NOT NULL,
    oldest_in_progress_created_at pg_catalog.timestamptz,
    refreshed_at                  pg_catalog.timestamptz NOT NULL,
    CONSTRAINT scope_stats_pkey PRIMARY KEY (scope)
);
COMMENT ON TABLE idempotency.scope_stats IS
    'per scope, the keys table as of refreshed_at (derived: rebuilt by idempotency_scope_stats_refresh(), not dumped)';
REVOKE ALL ON TABLE idempotency.scope_stats FROM PUBLIC;

-- ---------------------------------------------------------------------------
-- Result types
-- ---------------------------------------------------------------------------

CREATE TYPE @extschema@.idempotency_outcome AS ENUM ('claimed', 'replay', 'in_progress', 'mismatch');
COMMENT ON TYPE @extschema@.idempotency_outcome IS
    'answer of idempotency_begin: claimed (run the request), replay (return the stored response), in_progress (409, retry later), mismatch (422, key reused for another request)';

CREATE TYPE @extschema@.idempotency_begin_result AS (
    outcome @extschema@.idempotency_outcome, attempt integer,
    response_status integer, response_body jsonb, response_headers jsonb,
    recovery_point text, retry_after interval,
    created_at timestamptz, expires_at timestamptz,
    response_body_bytes bytea, response_body_omitted boolean,
    status text, lease_expires_at timestamptz, claim_data jsonb,
    retry_after_seconds integer);
COMMENT ON TYPE @extschema@.idempotency_begin_result IS 'result row of idempotency_begin';
-- The same row, for the PL/pgSQL bodies that build one (a body cannot name
-- the API schema: see the header).
CREATE TYPE idempotency.begin_row AS (
    outcome @extschema@.idempotency_outcome, attempt integer,
    response_status integer, response_body jsonb, response_headers jsonb,
    recovery_point text, retry_after interval,
    created_at timestamptz, expires_at timestamptz,
    response_body_bytes bytea, response_body_omitted boolean,
    status text, lease_expires_at timestamptz, claim_data jsonb,
    retry_after_seconds integer);
COMMENT ON TYPE idempotency.begin_row IS 'idempotency_begin''s result row, as its PL/pgSQL body builds it';
-- The outcomes, as constants a body can name (the planner folds them).
CREATE FUNCTION idempotency.outcome(name text) RETURNS @extschema@.idempotency_outcome
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN name::@extschema@.idempotency_outcome;
COMMENT ON FUNCTION idempotency.outcome(text) IS 'an idempotency_outcome by its name';

CREATE TYPE @extschema@.idempotency_lookup_result AS (
    status text, request @extschema@.request_hash, attempt integer,
    response_status integer, response_body jsonb, response_headers jsonb,
    recovery_point text, created_at timestamptz, lease_expires_at timestamptz,
    completed_at timestamptz, expires_at timestamptz,
    response_body_bytes bytea, response_body_omitted boolean,
    claim_data jsonb, committed boolean);
COMMENT ON TYPE @extschema@.idempotency_lookup_result IS 'result row of idempotency_lookup';

-- ---------------------------------------------------------------------------
-- The rules of arguments and settings (src/arguments.cpp's, the same
-- messages and SQLSTATEs)
-- ---------------------------------------------------------------------------

-- The role whose keys a call reaches when it is isolated: the session's
-- current role (SET ROLE, else the session user).  Read from what only
-- PostgreSQL's role checks change, never from a setting a caller could set;
-- current_user would be the functions' owner, as they run as it.
CREATE FUNCTION idempotency.caller_role() RETURNS regrole
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN pg_catalog.to_regrole(pg_catalog.quote_ident(
        CASE WHEN pg_catalog.current_setting('role') OPERATOR(pg_catalog.=) 'none'
             THEN SESSION_USER::pg_catalog.text ELSE pg_catalog.current_setting('role') END));
COMMENT ON FUNCTION idempotency.caller_role() IS 'the calling session''s current role (SET ROLE, else the session user)';

-- A session's setting in the unit of the extension's setting of that name:
-- a bare number counts in `unit`, anything else is read as an interval
-- ('1d', '5s', '250ms').  NULL when it is not set.
CREATE FUNCTION idempotency.duration_setting(name text, unit interval) RETURNS interval
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE WHEN pg_catalog.current_setting(name, true) OPERATOR(pg_catalog.~) '^\s*[0-9]+(\.[0-9]*)?\s*$'
                THEN unit OPERATOR(pg_catalog.*) pg_catalog.current_setting(name, true)::pg_catalog.float8
                WHEN pg_catalog.current_setting(name, true) OPERATOR(pg_catalog.<>) ''
                THEN pg_catalog.current_setting(name, true)::pg_catalog.interval END;
COMMENT ON FUNCTION idempotency.duration_setting(text, interval) IS 'a duration setting of the session, NULL when not set';

-- A size setting in bytes ('54000', '1MB', '512kB'), NULL when not set (or
-- not a size).
CREATE FUNCTION idempotency.size_setting(name text) RETURNS bigint
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE WHEN pg_catalog.current_setting(name, true) OPERATOR(pg_catalog.~) '^\s*[0-9]{1,12}\s*(B|kB|MB|GB|TB)?\s*$'
                THEN (pg_catalog.substring(pg_catalog.current_setting(name, true), '[0-9]+')::pg_catalog.numeric
                      OPERATOR(pg_catalog.*)
                      CASE WHEN pg_catalog.current_setting(name, true) OPERATOR(pg_catalog.~) 'kB' THEN 1024
                           WHEN pg_catalog.current_setting(name, true) OPERATOR(pg_catalog.~) 'MB' THEN 1048576
                           WHEN pg_catalog.current_setting(name, true) OPERATOR(pg_catalog.~) 'GB' THEN 1073741824
                           WHEN pg_catalog.current_setting(name, true) OPERATOR(pg_catalog.~) 'TB' THEN 1099511627776
                           ELSE 1 END)::pg_catalog.int8 END;
COMMENT ON FUNCTION idempotency.size_setting(text) IS 'a size setting of the session in bytes, NULL when not set';

-- 22023 for a session's setting of one of the extension's names that is not
-- a value of it (the extension's SET would have refused it).
CREATE FUNCTION idempotency.refuse_setting(name text, hint text) RETURNS bigint
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    AS $$
BEGIN
    RAISE EXCEPTION 'invalid value for parameter "%": "%"', name, pg_catalog.current_setting(name, true)
        USING ERRCODE = 'invalid_parameter_value', HINT = hint;
END
$$;
COMMENT ON FUNCTION idempotency.refuse_setting(text, text) IS 'raises 22023 for a session''s setting that is not a value of its name';

-- The session's own limits, which may only lower the owner's: NULL when not
-- set (a setting set and then reset reads as empty), 22023 when not a value.
CREATE FUNCTION idempotency.session_max_key_length() RETURNS bigint
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE WHEN COALESCE(pg_catalog.current_setting('idempotency.max_key_length', true), '') OPERATOR(pg_catalog.=) ''
                THEN NULL
                WHEN pg_catalog.current_setting('idempotency.max_key_length', true) OPERATOR(pg_catalog.~) '^\s*[0-9]{1,4}\s*$'
                     AND pg_catalog.current_setting('idempotency.max_key_length', true)::pg_catalog.int4
                         OPERATOR(pg_catalog.>=) 1
                     AND pg_catalog.current_setting('idempotency.max_key_length', true)::pg_catalog.int4
                         OPERATOR(pg_catalog.<=) 1024
                THEN pg_catalog.current_setting('idempotency.max_key_length', true)::pg_catalog.int4
                ELSE idempotency.refuse_setting('idempotency.max_key_length',
                                                'idempotency.max_key_length is a number of bytes between 1 and 1024.') END;
COMMENT ON FUNCTION idempotency.session_max_key_length() IS 'the session''s idempotency.max_key_length, NULL when not set';
CREATE FUNCTION idempotency.session_max_response_bytes() RETURNS bigint
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE WHEN COALESCE(pg_catalog.current_setting('idempotency.max_response_bytes', true), '') OPERATOR(pg_catalog.=) ''
                THEN NULL
                ELSE COALESCE(idempotency.size_setting('idempotency.max_response_bytes'),
                              idempotency.refuse_setting('idempotency.max_response_bytes',
                                                         'idempotency.max_response_bytes is a size in bytes, such as 1MB or 65536.')) END;
COMMENT ON FUNCTION idempotency.session_max_response_bytes() IS 'the session''s idempotency.max_response_bytes, NULL when not set';

-- What every call needs to know about its caller: its tenant (the role, if
-- isolated, else 0) and the limits (the owner's, or a session's lower ones).
-- One query, which the planner inlines into the caller's.  The owner's
-- functions are named here, in the query itself: a plan records that it
-- depends on a function it folded, and is made again when the function
-- changes, only for a function of the query, not for one inside another
-- inlined function.
CREATE FUNCTION idempotency.call_context()
    RETURNS TABLE (tenant regrole, max_key_length integer, max_response_bytes integer)
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
SELECT CASE WHEN idempotency.any_tenants()
            THEN COALESCE((SELECT t.tenant FROM idempotency.tenants AS t
                            WHERE t.tenant OPERATOR(pg_catalog.=) idempotency.caller_role()),
                          0::pg_catalog.regrole)
            ELSE 0::pg_catalog.regrole END,
       LEAST(idempotency.owner_max_key_length(), COALESCE(idempotency.session_max_key_length(), 1024))::pg_catalog.int4,
       LEAST(idempotency.owner_max_response_bytes(),
             COALESCE(idempotency.session_max_response_bytes(), 2147483647))::pg_catalog.int4
$$;
COMMENT ON FUNCTION idempotency.call_context() IS 'the calling role''s tenant and the limits that apply to its call';

-- A key or scope as an error message shows it: its first 32 bytes (whole
-- characters), control characters as ?, so that a key can neither leak a
-- body nor forge a log line.
CREATE FUNCTION idempotency.key_for_message(value text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
DECLARE
    shown pg_catalog.text := pg_catalog."left"(value, 32);
BEGIN
    WHILE pg_catalog.octet_length(shown) OPERATOR(pg_catalog.>) 32 LOOP
        shown := pg_catalog."left"(shown, -1);
    END LOOP;
    IF pg_catalog.length(shown) OPERATOR(pg_catalog.<) pg_catalog.length(value) THEN
        shown := shown OPERATOR(pg_catalog.||) '...';
    END IF;
    RETURN pg_catalog.regexp_replace(shown, '[\x01-\x1f\x7f]', '?', 'g');
END
$$;
COMMENT ON FUNCTION idempotency.key_for_message(text) IS 'a key or scope as messages show it: a 32-byte prefix, control characters as ?';

-- What is wrong with a scope and key: 0 nothing, 1 an empty key, 2 a scope
-- too long, 3 a key too long (in bytes), checked in that order.
CREATE FUNCTION idempotency.key_problem_code(scope text, key text, max_key_length integer) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN pg_catalog.octet_length(key) OPERATOR(pg_catalog.=) 0 THEN 1
                WHEN pg_catalog.octet_length(scope) OPERATOR(pg_catalog.>) max_key_length THEN 2
                WHEN pg_catalog.octet_length(key) OPERATOR(pg_catalog.>) max_key_length THEN 3
                ELSE 0 END;
COMMENT ON FUNCTION idempotency.key_problem_code(text, text, integer) IS
    'what is wrong with a scope and key: 0 nothing, 1 empty key, 2 long scope, 3 long key';

-- Raises the error of a required argument that is NULL (22004), or of a
-- scope and key with a problem (IK006 for the client's key, 22001 for the
-- handler's scope).
CREATE FUNCTION idempotency.refuse_null(name text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$
BEGIN
    RAISE EXCEPTION '% must not be null', name USING ERRCODE = 'null_value_not_allowed';
END
$$;
COMMENT ON FUNCTION idempotency.refuse_null(text) IS 'raises 22004 for a required argument that is NULL';

CREATE FUNCTION idempotency.refuse_key(problem integer, scope text, key text, max_key_length integer) RETURNS void
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$
BEGIN
    IF problem OPERATOR(pg_catalog.=) 1 THEN
        RAISE EXCEPTION 'key must not be empty' USING ERRCODE = 'IK006';
    ELSIF problem OPERATOR(pg_catalog.=) 2 THEN
        RAISE EXCEPTION 'scope "%" is too long (% bytes)', idempotency.key_for_message(scope), pg_catalog.octet_length(scope)
            USING ERRCODE = 'string_data_right_truncation',
                  DETAIL = pg_catalog.format('idempotency.max_key_length is %s bytes.', max_key_length);
    ELSE
        RAISE EXCEPTION 'key "%" is too long (% bytes)', idempotency.key_for_message(key), pg_catalog.octet_length(key)
            USING ERRCODE = 'IK006',
                  DETAIL = pg_catalog.format('idempotency.max_key_length is %s bytes.', max_key_length);
    END IF;
END
$$;
COMMENT ON FUNCTION idempotency.refuse_key(integer, text, text, integer) IS 'raises the error of a scope and key that key_problem_code found wrong';

-- A ttl or lease, checked by its effect, as the extension checks it: no
-- part negative (a month is 28 to 31 days and a day 23 to 25 hours, so a mix
-- of signs can end before it starts), and an end after now and at most 3650
-- days after it.  Raises 22023, or returns the interval.
CREATE FUNCTION idempotency.checked_span(name text, span interval) RETURNS interval
    LANGUAGE plpgsql VOLATILE PARALLEL SAFE
    AS $$
DECLARE
    months pg_catalog.int4;
    days pg_catalog.int4;
    now pg_catalog.timestamptz := pg_catalog.clock_timestamp();
    span_end pg_catalog.timestamptz;
BEGIN
    IF pg_catalog.isfinite(span) THEN
        months := (pg_catalog.extract('year', span) OPERATOR(pg_catalog.*) 12
                   OPERATOR(pg_catalog.+) pg_catalog.extract('month', span))::pg_catalog.int4;
        days := pg_catalog.extract('day', span)::pg_catalog.int4;
    END IF;
    IF span OPERATOR(pg_catalog.<) '0'::pg_catalog.interval AND NOT pg_catalog.isfinite(span)
       OR months OPERATOR(pg_catalog.<) 0 OR days OPERATOR(pg_catalog.<) 0
       OR span OPERATOR(pg_catalog.-) pg_catalog.make_interval(months => months, days => days)
          OPERATOR(pg_catalog.<) '0'::pg_catalog.interval THEN
        RAISE EXCEPTION 'invalid % "%"', name, span
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('No part of %s may be negative: months, days and time are added one after the other, so a mix of signs may end before it starts.', name);
    END IF;
    -- Far beyond the limit (or infinite), the addition itself would fail.
    span_end := CASE WHEN span OPERATOR(pg_catalog.>) '7300 days'::pg_catalog.interval THEN 'infinity'::pg_catalog.timestamptz
                     ELSE now OPERATOR(pg_catalog.+) span END;
    IF span_end OPERATOR(pg_catalog.<=) now
       OR span_end OPERATOR(pg_catalog.>) (now OPERATOR(pg_catalog.+) '315360000 seconds'::pg_catalog.interval) THEN
        RAISE EXCEPTION 'invalid % "%"', name, span
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('%s must end after now and at most 3650 days after it.', name);
    END IF;
    RETURN span;
END
$$;
COMMENT ON FUNCTION idempotency.checked_span(text, interval) IS 'a ttl or lease argument, checked by its effect on now (22023)';

-- The wait argument: between 0 and 1 hour, measured as interval comparison
-- measures it.
CREATE FUNCTION idempotency.checked_wait(wait interval) RETURNS interval
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$
BEGIN
    IF wait OPERATOR(pg_catalog.<) '0'::pg_catalog.interval OR wait OPERATOR(pg_catalog.>) '1 hour'::pg_catalog.interval THEN
        RAISE EXCEPTION 'invalid wait "%"', wait
            USING ERRCODE = 'invalid_parameter_value', DETAIL = 'wait must be between 0 and 1 hour.';
    END IF;
    RETURN wait;
END
$$;
COMMENT ON FUNCTION idempotency.checked_wait(interval) IS 'a wait argument, checked (22023)';

-- The defaults of ttl, lease and wait: the session's settings of the
-- extension's names, in their units and ranges, else the extension's
-- defaults; as the extension keeps them, in microseconds (no days or months).
CREATE FUNCTION idempotency.default_duration(name text, unit interval, fallback interval, low interval, high interval)
    RETURNS interval
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    AS $$
DECLARE
    value pg_catalog.interval := COALESCE(idempotency.duration_setting(name, unit), fallback);
BEGIN
    IF value OPERATOR(pg_catalog.<) low OR value OPERATOR(pg_catalog.>) high THEN
        RAISE EXCEPTION 'invalid value for parameter "%": "%"', name, pg_catalog.current_setting(name, true)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = pg_catalog.format('%s is between %s and %s.', name, low, high);
    END IF;
    RETURN pg_catalog.make_interval(secs => pg_catalog.extract('epoch', value));
END
$$;
COMMENT ON FUNCTION idempotency.default_duration(text, interval, interval, interval, interval) IS
    'the session''s setting of a default ttl, lease or wait, checked, or the extension''s default';

-- The size a jsonb argument counts for against idempotency.max_response_bytes:
-- uncompressed, with a 4-byte header, as a freshly built value has it (#>
-- with an empty path returns the value detoasted).
CREATE FUNCTION idempotency.jsonb_size(value jsonb) RETURNS bigint
    LANGUAGE sql STABLE STRICT PARALLEL SAFE
    RETURN pg_catalog.pg_column_size(value OPERATOR(pg_catalog.#>) '{}'::pg_catalog.text[]);
COMMENT ON FUNCTION idempotency.jsonb_size(jsonb) IS 'the uncompressed size of a jsonb value, with a 4-byte header';

-- 25006: the functions that write refuse a read-only transaction or a
-- standby before they read anything.
CREATE FUNCTION idempotency.refuse_read_only(function_name text) RETURNS void
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    AS $$
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        RAISE EXCEPTION 'cannot call %() during recovery', function_name
            USING ERRCODE = 'read_only_sql_transaction',
                  HINT = 'Call it on the primary; idempotency_lookup() works on a standby.';
    END IF;
    RAISE EXCEPTION 'cannot call %() in a read-only transaction', function_name
        USING ERRCODE = 'read_only_sql_transaction';
END
$$;
COMMENT ON FUNCTION idempotency.refuse_read_only(text) IS 'raises 25006 for a function that writes, in a read-only transaction or on a standby';

-- 54000 for what a key would store beyond its claim (claim data, a recovery
-- point) over the limit.
CREATE FUNCTION idempotency.refuse_size(what text, key text, bytes bigint, max_response_bytes integer) RETURNS void
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$
BEGIN
    RAISE EXCEPTION '% of idempotency key "%" is too large (% bytes)', what, idempotency.key_for_message(key), bytes
        USING ERRCODE = 'program_limit_exceeded',
              DETAIL = pg_catalog.format('idempotency.max_response_bytes is %s bytes.', max_response_bytes);
END
$$;
COMMENT ON FUNCTION idempotency.refuse_size(text, text, bigint, integer) IS 'raises 54000 for claim data or a recovery point over the limit';

-- The key's lock (see the top of this script): one advisory lock per
-- (tenant, scope, key), in the two-integer space of advisory locks (the
-- usual one-bigint locks of applications never meet it).  Two keys whose
-- hashes collide keep each other out (in_progress), never both claimed.
CREATE FUNCTION idempotency.key_hash(tenant regrole, scope text, key text) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN pg_catalog.hashtextextended(scope OPERATOR(pg_catalog.||) key,
                                       tenant::pg_catalog.oid::pg_catalog.int8 OPERATOR(pg_catalog.#)
                                       (pg_catalog.octet_length(scope)::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32));
COMMENT ON FUNCTION idempotency.key_hash(regrole, text, text) IS 'the 64-bit hash of a key that names its advisory lock';
CREATE FUNCTION idempotency.try_lock_key(hash bigint) RETURNS boolean
    LANGUAGE sql VOLATILE PARALLEL UNSAFE
    RETURN pg_catalog.pg_try_advisory_xact_lock((hash OPERATOR(pg_catalog.>>) 32)::pg_catalog.int4,
                                                (hash OPERATOR(pg_catalog.&) 2147483647)::pg_catalog.int4);
COMMENT ON FUNCTION idempotency.try_lock_key(bigint) IS 'takes the key''s lock for the transaction if it is free';
CREATE FUNCTION idempotency.lock_key(hash bigint) RETURNS void
    LANGUAGE sql VOLATILE PARALLEL UNSAFE
    RETURN pg_catalog.pg_advisory_xact_lock((hash OPERATOR(pg_catalog.>>) 32)::pg_catalog.int4,
                                            (hash OPERATOR(pg_catalog.&) 2147483647)::pg_catalog.int4);
COMMENT ON FUNCTION idempotency.lock_key(bigint) IS 'takes the key''s lock for the transaction, waiting for its holder';
CREATE FUNCTION idempotency.locked_key(hash bigint) RETURNS boolean
    LANGUAGE sql VOLATILE PARALLEL UNSAFE
    RETURN pg_catalog.pg_advisory_xact_lock((hash OPERATOR(pg_catalog.>>) 32)::pg_catalog.int4,
                                            (hash OPERATOR(pg_catalog.&) 2147483647)::pg_catalog.int4) IS NOT NULL;
COMMENT ON FUNCTION idempotency.locked_key(bigint) IS 'lock_key, as an expression: takes the key''s lock, waiting for its holder; true';
-- Waits until no other transaction holds the key's lock, and keeps nothing:
-- the lock is taken for the session and let go in the same expression,
-- which no interrupt can split (a session lock left behind would hold the
-- key for good).
CREATE FUNCTION idempotency.await_key(hash bigint) RETURNS void
    LANGUAGE sql VOLATILE PARALLEL UNSAFE
    AS $$
SELECT pg_catalog.pg_advisory_lock((hash OPERATOR(pg_catalog.>>) 32)::pg_catalog.int4,
                                   (hash OPERATOR(pg_catalog.&) 2147483647)::pg_catalog.int4),
       pg_catalog.pg_advisory_unlock((hash OPERATOR(pg_catalog.>>) 32)::pg_catalog.int4,
                                     (hash OPERATOR(pg_catalog.&) 2147483647)::pg_catalog.int4)
$$;
COMMENT ON FUNCTION idempotency.await_key(bigint) IS 'waits until no other transaction holds the key''s lock, taking nothing';

-- Rule E: a committed record past its expiry -- completed, or unfinished with
-- its lease ended too -- is as good as absent.
CREATE FUNCTION idempotency.expired(k idempotency.keys, now timestamptz) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN k.expires_at OPERATOR(pg_catalog.<=) now
           AND (k.status OPERATOR(pg_catalog.=) 'c'::pg_catalog."char" OR k.lease_expires_at OPERATOR(pg_catalog.<=) now);
COMMENT ON FUNCTION idempotency.expired(idempotency.keys, timestamptz) IS 'whether a record is past its expiry (rule E)';

-- Whether a visible version of a key was written by the calling transaction
-- (which holds the key's lock): its own claim, not yet committed.
CREATE FUNCTION idempotency.own(k idempotency.keys) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN COALESCE(k.writer OPERATOR(pg_catalog.=) pg_catalog.pg_current_xact_id_if_assigned(), false);
COMMENT ON FUNCTION idempotency.own(idempotency.keys) IS 'whether this version of a record was written by the calling transaction';

-- An interval of whole microseconds (no days), as the extension builds one.
CREATE FUNCTION idempotency.microseconds(span interval) RETURNS interval
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN pg_catalog.make_interval(secs => pg_catalog.extract('epoch', span));
COMMENT ON FUNCTION idempotency.microseconds(interval) IS 'an interval as a time of microseconds, without days or months';

-- idempotency_begin's row: what the answer shows of the key (api.cpp's
-- begin_result).  A mismatch tells the state of the key and when it frees
-- up, nothing about the other request.  (STABLE, as the outcome's enum
-- input is: an IMMUTABLE function with a STABLE call inside would not be
-- inlined, and each call would plan it anew.)
CREATE FUNCTION idempotency.begin_answer(outcome text, k idempotency.keys, retry_after interval)
    RETURNS @extschema@.idempotency_begin_result
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN ROW(outcome::@extschema@.idempotency_outcome, k.attempt,
               CASE WHEN outcome OPERATOR(pg_catalog.=) 'replay' THEN k.response_status END,
               CASE WHEN outcome OPERATOR(pg_catalog.=) 'replay' THEN k.response_body END,
               CASE WHEN outcome OPERATOR(pg_catalog.=) 'replay' THEN k.response_headers END,
               CASE WHEN outcome OPERATOR(pg_catalog.=) 'claimed' THEN k.recovery_point END,
               retry_after, k.created_at, k.expires_at,
               CASE WHEN outcome OPERATOR(pg_catalog.=) 'replay' THEN k.response_body_bytes END,
               CASE WHEN outcome OPERATOR(pg_catalog.=) 'replay' THEN k.response_body_omitted END,
               CASE WHEN k.status OPERATOR(pg_catalog.=) 'c'::pg_catalog."char" THEN 'completed'
                    WHEN k.status IS NOT NULL THEN 'in_progress' END,
               k.lease_expires_at,
               CASE WHEN outcome OPERATOR(pg_catalog.=) ANY (ARRAY['claimed', 'in_progress']) THEN k.claim_data END,
               CASE WHEN retry_after IS NOT NULL
                    THEN GREATEST(1, LEAST(pg_catalog.ceil(pg_catalog.extract('epoch', retry_after)), 2147483647))::pg_catalog.int4 END
           )::@extschema@.idempotency_begin_result;
COMMENT ON FUNCTION idempotency.begin_answer(text, idempotency.keys, interval) IS 'the result row of idempotency_begin';

-- ---------------------------------------------------------------------------
-- idempotency_begin
-- ---------------------------------------------------------------------------

-- A ttl or lease that checked_span accepts, as an expression the planner
-- inlines (checked_span, which raises the error, runs only when it is not).
-- STABLE, as timestamptz + interval is: a SQL function is inlined only when
-- it is no less volatile than its body, and one that is not is planned anew
-- at every call.
CREATE FUNCTION idempotency.span_ok(span interval, now timestamptz) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN span IS NULL
           OR pg_catalog.isfinite(span)
              AND pg_catalog.extract('year', span) OPERATOR(pg_catalog.*) 12
                  OPERATOR(pg_catalog.+) pg_catalog.extract('month', span) OPERATOR(pg_catalog.>=) 0
              AND pg_catalog.extract('day', span) OPERATOR(pg_catalog.>=) 0
              AND span OPERATOR(pg_catalog.-)
                  pg_catalog.make_interval(months => (pg_catalog.extract('year', span) OPERATOR(pg_catalog.*) 12
                                                      OPERATOR(pg_catalog.+) pg_catalog.extract('month', span))::pg_catalog.int4,
                                           days => pg_catalog.extract('day', span)::pg_catalog.int4)
                  OPERATOR(pg_catalog.>=) '0'::pg_catalog.interval
              AND span OPERATOR(pg_catalog.<=) '7300 days'::pg_catalog.interval
              AND now OPERATOR(pg_catalog.+) span OPERATOR(pg_catalog.>) now
              AND now OPERATOR(pg_catalog.+) span
                  OPERATOR(pg_catalog.<=) (now OPERATOR(pg_catalog.+) '315360000 seconds'::pg_catalog.interval);
COMMENT ON FUNCTION idempotency.span_ok(interval, timestamptz) IS 'whether checked_span accepts a ttl or lease (NULL: not given)';

-- A ttl or lease that is a time alone (no days or months) and that
-- checked_span accepts: a sufficient test, cheaper than span_ok.
CREATE FUNCTION idempotency.time_span_ok(span interval) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN pg_catalog.date_part('month', span) OPERATOR(pg_catalog.=) 0
           AND pg_catalog.date_part('year', span) OPERATOR(pg_catalog.=) 0
           AND pg_catalog.date_part('day', span) OPERATOR(pg_catalog.=) 0
           AND span OPERATOR(pg_catalog.>) '0'::pg_catalog.interval
           AND span OPERATOR(pg_catalog.<=) '315360000 seconds'::pg_catalog.interval;
COMMENT ON FUNCTION idempotency.time_span_ok(interval) IS 'whether a ttl or lease is a time alone that checked_span accepts (sufficient, not necessary)';

-- A default of ttl, lease or wait (default_duration's), as an inlined
-- expression: NULL when the session's setting is out of range, which
-- default_duration then reports.
CREATE FUNCTION idempotency.default_span(name text, unit interval, fallback interval, low interval, high interval)
    RETURNS interval
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE WHEN pg_catalog.current_setting(name, true) IS NULL THEN fallback
                WHEN COALESCE(idempotency.duration_setting(name, unit), fallback)
                         OPERATOR(pg_catalog.>=) low
                     AND COALESCE(idempotency.duration_setting(name, unit), fallback)
                         OPERATOR(pg_catalog.<=) high
                THEN idempotency.microseconds(COALESCE(idempotency.duration_setting(name, unit), fallback)) END;
COMMENT ON FUNCTION idempotency.default_span(text, interval, interval, interval, interval) IS
    'the session''s setting of a default ttl, lease or wait, or the extension''s default; NULL when out of range';

-- What is wrong with begin's arguments, in the order the extension checks
-- them, or NULL: a name that refuse_begin turns into the error.
CREATE FUNCTION idempotency.begin_problem(scope text, key text, request text, ttl interval, lease interval,
                                          wait interval, claim_data jsonb, max_key_length integer,
                                          max_response_bytes integer, now timestamptz)
    RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE WHEN scope IS NULL THEN 'scope'
                WHEN key IS NULL THEN 'key'
                WHEN idempotency.key_problem_code(scope, key, max_key_length) OPERATOR(pg_catalog.<>) 0 THEN 'key problem'
                WHEN request IS NULL THEN 'request'
                WHEN NOT idempotency.span_ok(ttl, now) THEN 'ttl'
                WHEN NOT idempotency.span_ok(lease, now) THEN 'lease'
                WHEN wait OPERATOR(pg_catalog.<) '0'::pg_catalog.interval
                     OR wait OPERATOR(pg_catalog.>) '1 hour'::pg_catalog.interval THEN 'wait'
                WHEN idempotency.jsonb_size(claim_data) OPERATOR(pg_catalog.>) max_response_bytes THEN 'claim_data'
                WHEN pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN 'read-only' END;
COMMENT ON FUNCTION idempotency.begin_problem(text, text, text, interval, interval, interval, jsonb, integer, integer, timestamptz) IS
    'the first of idempotency_begin''s argument checks that fails, or NULL';

-- Raises the error of begin_problem's answer.
CREATE FUNCTION idempotency.refuse_begin(problem text, scope text, key text, ttl interval, lease interval,
                                         wait interval, claim_data jsonb, max_key_length integer,
                                         max_response_bytes integer)
    RETURNS void
    LANGUAGE plpgsql VOLATILE PARALLEL SAFE
    AS $$
BEGIN
    IF problem OPERATOR(pg_catalog.=) ANY (ARRAY['scope', 'key', 'request']) THEN
        PERFORM idempotency.refuse_null(problem);
    ELSIF problem OPERATOR(pg_catalog.=) 'key problem' THEN
        PERFORM idempotency.refuse_key(idempotency.key_problem_code(scope, key, max_key_length), scope, key, max_key_length);
    ELSIF problem OPERATOR(pg_catalog.=) 'ttl' THEN
        PERFORM idempotency.checked_span('ttl', ttl);
    ELSIF problem OPERATOR(pg_catalog.=) 'lease' THEN
        PERFORM idempotency.checked_span('lease', lease);
    ELSIF problem OPERATOR(pg_catalog.=) 'wait' THEN
        PERFORM idempotency.checked_wait(wait);
    ELSIF problem OPERATOR(pg_catalog.=) 'claim_data' THEN
        PERFORM idempotency.refuse_size('claim_data', key, idempotency.jsonb_size(claim_data), max_response_bytes);
    ELSIF problem OPERATOR(pg_catalog.=) 'read-only' THEN
        PERFORM idempotency.refuse_read_only('idempotency_begin');
    ELSIF problem OPERATOR(pg_catalog.=) 'default_ttl' THEN
        PERFORM idempotency.default_duration('idempotency.default_ttl', '1 second', '1 day', '1 second', '3650 days');
    ELSIF problem OPERATOR(pg_catalog.=) 'default_lease' THEN
        PERFORM idempotency.default_duration('idempotency.default_lease', '1 millisecond', '1 minute',
                                             '1 millisecond', '2147483647 milliseconds');
    ELSE
        PERFORM idempotency.default_duration('idempotency.default_wait', '1 millisecond', '0', '0', '1 hour');
    END IF;
END
$$;
COMMENT ON FUNCTION idempotency.refuse_begin(text, text, text, interval, interval, interval, jsonb, integer, integer) IS
    'raises the error of idempotency_begin''s argument check that failed';

-- The states of a key are src/claims.hpp's, as a read of the committed row
-- (or the caller's own uncommitted one) and the key's lock show them:
--   absent        no row: claimed, under the key's lock (INSERT)
--   expired       committed, past its expiry: claimed over it (UPDATE)
--   held          the key's lock is another transaction's (its claim, or a
--                 change of the row it has not committed), or the sweep is
--                 deleting the row: in_progress, retry in 1 s; waits on the
--                 lock (or the sweep)
--   leased        committed unfinished claim, lease running: in_progress
--                 until the lease ends; polls it
--   lease_ended   unfinished claim (committed, or own after a release or a
--                 dropped 5xx), lease over: taken over, attempt + 1
--   dead_mismatch the same for another request, with take_over_mismatch
--   own           the caller's own claim, lease running: claimed again
--   replay        completed for this request: replayed, no lock, no write
--   mismatch      for another request (a dead claim taken over on request)
-- begin_state classifies a row read (all but held, which the lock tells).
CREATE FUNCTION idempotency.begin_state(k idempotency.keys, digest bytea, take_over_mismatch boolean, now timestamptz)
    RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE WHEN k.scope IS NULL THEN 'absent'
                WHEN NOT idempotency.own(k) AND idempotency.expired(k, now) THEN 'expired'
                WHEN k.request OPERATOR(pg_catalog.<>) digest
                THEN CASE WHEN take_over_mismatch AND k.status OPERATOR(pg_catalog.=) 'p'::pg_catalog."char"
                               AND k.lease_expires_at OPERATOR(pg_catalog.<=) now
                          THEN 'dead_mismatch' ELSE 'mismatch' END
                WHEN k.status OPERATOR(pg_catalog.=) 'c'::pg_catalog."char" THEN 'replay'
                WHEN k.lease_expires_at OPERATOR(pg_catalog.<=) now THEN 'lease_ended'
                WHEN idempotency.own(k) THEN 'own'
                ELSE 'leased' END;
COMMENT ON FUNCTION idempotency.begin_state(idempotency.keys, bytea, boolean, timestamptz) IS
    'the state of a key for idempotency_begin, from its row (src/claims.hpp''s states)';

-- The answer a state gives without a write: replay, mismatch, or (own) the
-- caller's claim.
CREATE FUNCTION idempotency.read_answer(state text, k idempotency.keys)
    RETURNS @extschema@.idempotency_begin_result
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN idempotency.begin_answer(CASE WHEN state OPERATOR(pg_catalog.=) 'own' THEN 'claimed' ELSE state END, k, NULL);
COMMENT ON FUNCTION idempotency.read_answer(text, idempotency.keys) IS
    'idempotency_begin''s answer when a read gives it: replay, mismatch, or the caller''s own claim';

-- Every course of idempotency_begin, in the order of src/claims.hpp's
-- rules: one read gives the caller's context, every argument check, the
-- key's row and state, and the answer when a read gives it (a replay, a
-- mismatch, the caller's own claim); a new key is then claimed by one more
-- statement, which takes the key's lock and inserts the row.  The rest --
-- takeovers, in_progress, waiting -- loops.  idempotency_begin (below) runs
-- the two commonest courses itself and calls this for everything else.
CREATE FUNCTION idempotency.begin_general(
    scope text, key text, request @extschema@.request_hash, ttl interval, lease interval, wait interval,
    claim_data jsonb, take_over_mismatch boolean)
    RETURNS @extschema@.idempotency_begin_result
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
    AS $$
#variable_conflict use_column
DECLARE
    r record;
    claimed record;
    k idempotency.keys;
    problem pg_catalog.text;
    digest pg_catalog.bytea;
    claim_ttl pg_catalog.interval;
    claim_lease pg_catalog.interval;
    wait_for pg_catalog.interval;
    lock_hash pg_catalog.int8;
    claim_unsettled pg_catalog.timestamptz;
    claim_expires pg_catalog.timestamptz;
    claim_lease_expires pg_catalog.timestamptz;
    claim_writer pg_catalog.xid8;
    state pg_catalog.text;
    locked pg_catalog.bool := false;
    found_row pg_catalog.bool;
    now pg_catalog.timestamptz;
    retry_after pg_catalog.interval;
    deadline pg_catalog.timestamptz;
    poll pg_catalog.float8 := 0.001;
    old_lock_timeout pg_catalog.text;
BEGIN
    -- One query, whose only parameters are the key's (so that its plan is
    -- made once, not for each call); the rest are expressions of
    -- PL/pgSQL, which the planner inlines.
    SELECT x.tenant, x.max_key_length, x.max_response_bytes, k AS stored
      INTO r
      FROM idempotency.call_context() AS x
      LEFT JOIN idempotency.keys AS k
        ON k.tenant OPERATOR(pg_catalog.=) x.tenant
       AND k.scope OPERATOR(pg_catalog.=) begin_general.scope COLLATE "C"
       AND k.key OPERATOR(pg_catalog.=) begin_general.key COLLATE "C";
    now := pg_catalog.clock_timestamp();
    -- The argument checks, cheapest first: each expression is set up once per
    -- transaction, so those of arguments not given are never built.
    IF begin_general.scope IS NULL OR begin_general.key IS NULL
       OR idempotency.key_problem_code(begin_general.scope, begin_general.key, r.max_key_length)
          OPERATOR(pg_catalog.<>) 0
       OR begin_general.request IS NULL
       OR begin_general.claim_data IS NOT NULL
       OR begin_general.ttl IS NOT NULL OR begin_general.wait IS NOT NULL
       OR pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        problem := idempotency.begin_problem(begin_general.scope, begin_general.key, begin_general.request,
                                             begin_general.ttl, begin_general.lease, begin_general.wait,
                                             begin_general.claim_data, r.max_key_length, r.max_response_bytes,
                                             now);
    ELSIF begin_general.lease IS NOT NULL THEN
        IF NOT idempotency.span_ok(begin_general.lease, now) THEN
            problem := 'lease';
        END IF;
    END IF;
    IF problem IS NOT NULL THEN
        PERFORM idempotency.refuse_begin(problem, begin_general.scope, begin_general.key,
                                         begin_general.ttl, begin_general.lease, begin_general.wait,
                                         begin_general.claim_data, r.max_key_length, r.max_response_bytes);
    END IF;
    digest := pg_catalog.decode(begin_general.request, 'hex');
    state := idempotency.begin_state(r.stored, digest, begin_general.take_over_mismatch, now);
    IF state OPERATOR(pg_catalog.=) ANY (ARRAY['replay', 'mismatch', 'own']) THEN
        RETURN idempotency.read_answer(state, r.stored);
    END IF;
    -- The claim's ttl and lease, and the wait: as given, else the defaults.
    claim_ttl := COALESCE(begin_general.ttl,
                          idempotency.default_span('idempotency.default_ttl', '1 second', '86400 seconds',
                                                   '1 second', '3650 days'));
    claim_lease := COALESCE(begin_general.lease,
                            idempotency.default_span('idempotency.default_lease', '1 millisecond', '60 seconds',
                                                     '1 millisecond', '2147483647 milliseconds'));
    IF claim_ttl IS NULL OR claim_lease IS NULL THEN
        PERFORM idempotency.refuse_begin(CASE WHEN claim_ttl IS NULL THEN 'default_ttl' ELSE 'default_lease' END,
                                         NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
    END IF;
    lock_hash := idempotency.key_hash(r.tenant, begin_general.scope, begin_general.key);
    claim_unsettled := CASE WHEN begin_general.lease IS NULL THEN pg_catalog.statement_timestamp() END;
    IF state OPERATOR(pg_catalog.=) 'absent' THEN
        -- Rules A and K: under the key's lock (taken here, if free), so that
        -- only a row committed since the read can be there; then it is
        -- read again.
        claim_expires := now OPERATOR(pg_catalog.+) claim_ttl;
        claim_lease_expires := now OPERATOR(pg_catalog.+) claim_lease;
        claim_writer := pg_catalog.pg_current_xact_id();
        WITH lock AS (SELECT idempotency.try_lock_key(lock_hash) AS taken),
        claim AS (
            INSERT INTO idempotency.keys AS x (tenant, scope, key, request, created_at, ttl, attempt, writer,
                                               status, expires_at, lease, lease_expires_at, unsettled_since,
                                               claim_data)
            SELECT r.tenant, begin_general.scope, begin_general.key, digest, now, claim_ttl, 1,
                   claim_writer, 'p', claim_expires, claim_lease, claim_lease_expires, claim_unsettled,
                   begin_general.claim_data
              FROM lock WHERE lock.taken
            ON CONFLICT ON CONSTRAINT keys_pkey DO NOTHING
            RETURNING x)
        SELECT lock.taken, claim.x AS stored INTO claimed FROM lock LEFT JOIN claim ON true;
        IF claimed.stored IS NOT NULL THEN
            RETURN idempotency.begin_answer('claimed', claimed.stored, NULL);
        END IF;
        locked := claimed.taken;
    END IF;
    wait_for := COALESCE(begin_general.wait,
                         idempotency.default_span('idempotency.default_wait', '1 millisecond', '0', '0', '1 hour'));
    IF wait_for IS NULL THEN
        PERFORM idempotency.refuse_begin('default_wait', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
    END IF;
    IF wait_for OPERATOR(pg_catalog.>) '0'::pg_catalog.interval THEN
        -- Rule W: a wait ends at the deadline, or sooner with a shorter lock_timeout.
        old_lock_timeout := pg_catalog.current_setting('lock_timeout');
        deadline := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+)
                    CASE WHEN old_lock_timeout OPERATOR(pg_catalog.=) '0' THEN wait_for
                         ELSE LEAST(wait_for, old_lock_timeout::pg_catalog.interval) END;
    END IF;
    LOOP
        now := pg_catalog.clock_timestamp();
        state := NULL;
        -- The newest committed version, or the caller's own.  Under the
        -- key's lock the row is locked too, unless the sweep has it.
        IF locked THEN
            SELECT * INTO k FROM idempotency.keys AS x
             WHERE x.tenant OPERATOR(pg_catalog.=) r.tenant
               AND x.scope OPERATOR(pg_catalog.=) begin_general.scope COLLATE "C"
               AND x.key OPERATOR(pg_catalog.=) begin_general.key COLLATE "C"
               FOR NO KEY UPDATE SKIP LOCKED;
            found_row := FOUND;
            IF NOT found_row THEN
                PERFORM FROM idempotency.keys AS x
                 WHERE x.tenant OPERATOR(pg_catalog.=) r.tenant
                   AND x.scope OPERATOR(pg_catalog.=) begin_general.scope COLLATE "C"
                   AND x.key OPERATOR(pg_catalog.=) begin_general.key COLLATE "C";
                IF FOUND THEN
                    state := 'held'; -- by the sweep
                END IF;
            END IF;
        ELSE
            SELECT * INTO k FROM idempotency.keys AS x
             WHERE x.tenant OPERATOR(pg_catalog.=) r.tenant
               AND x.scope OPERATOR(pg_catalog.=) begin_general.scope COLLATE "C"
               AND x.key OPERATOR(pg_catalog.=) begin_general.key COLLATE "C";
            found_row := FOUND;
        END IF;
        IF state IS NULL THEN
            IF NOT found_row THEN
                k := NULL;
            END IF;
            state := idempotency.begin_state(k, digest, begin_general.take_over_mismatch, now);
        END IF;

        IF state OPERATOR(pg_catalog.=) ANY (ARRAY['replay', 'mismatch', 'own']) THEN
            RETURN idempotency.read_answer(state, k);
        ELSIF state OPERATOR(pg_catalog.=) ANY (ARRAY['absent', 'expired', 'lease_ended', 'dead_mismatch'])
              AND NOT locked THEN
            locked := idempotency.try_lock_key(lock_hash);
            IF locked THEN
                CONTINUE; -- read it again under the lock, and lock the row
            END IF;
            state := 'held';
        END IF;
        IF state OPERATOR(pg_catalog.=) 'absent' THEN
            -- Rules A and K: the key's lock is ours, so only a row committed
            -- since the read can be there; then it is read again.
            INSERT INTO idempotency.keys AS x (tenant, scope, key, request, created_at, ttl, attempt, writer,
                                               status, expires_at, lease, lease_expires_at, unsettled_since,
                                               claim_data)
            VALUES (r.tenant, begin_general.scope, begin_general.key, digest, now, claim_ttl, 1,
                    pg_catalog.pg_current_xact_id(), 'p', now OPERATOR(pg_catalog.+) claim_ttl, claim_lease,
                    now OPERATOR(pg_catalog.+) claim_lease, claim_unsettled, begin_general.claim_data)
            ON CONFLICT ON CONSTRAINT keys_pkey DO NOTHING
            RETURNING * INTO k;
            IF FOUND THEN
                RETURN idempotency.begin_answer('claimed', k, NULL);
            END IF;
            CONTINUE;
        ELSIF state OPERATOR(pg_catalog.=) ANY (ARRAY['expired', 'lease_ended', 'dead_mismatch']) THEN
            -- Rules K and T: decided under the key's lock, on the locked row.
            -- A takeover keeps the record and its recovery point, with
            -- attempt + 1 (another request's without its recovery point);
            -- a claim over an expired record starts it afresh.
            UPDATE idempotency.keys AS x SET
                request = digest,
                created_at = CASE WHEN state OPERATOR(pg_catalog.=) 'expired' THEN now ELSE x.created_at END,
                attempt = CASE WHEN state OPERATOR(pg_catalog.=) 'expired' THEN 1
                               ELSE x.attempt OPERATOR(pg_catalog.+) 1 END,
                completed_at = CASE WHEN state OPERATOR(pg_catalog.=) 'expired' THEN NULL ELSE x.completed_at END,
                response_status = CASE WHEN state OPERATOR(pg_catalog.=) 'expired' THEN NULL ELSE x.response_status END,
                recovery_point = CASE WHEN state OPERATOR(pg_catalog.=) 'lease_ended' THEN x.recovery_point END,
                response_body = CASE WHEN state OPERATOR(pg_catalog.=) 'expired' THEN NULL ELSE x.response_body END,
                response_headers = CASE WHEN state OPERATOR(pg_catalog.=) 'expired' THEN NULL ELSE x.response_headers END,
                response_body_bytes = CASE WHEN state OPERATOR(pg_catalog.=) 'expired' THEN NULL ELSE x.response_body_bytes END,
                ttl = claim_ttl,
                lease = claim_lease,
                expires_at = now OPERATOR(pg_catalog.+) claim_ttl,
                status = 'p',
                lease_expires_at = now OPERATOR(pg_catalog.+) claim_lease,
                claim_data = begin_general.claim_data,
                writer = pg_catalog.pg_current_xact_id(),
                unsettled_since = claim_unsettled
             WHERE x.tenant OPERATOR(pg_catalog.=) r.tenant
               AND x.scope OPERATOR(pg_catalog.=) begin_general.scope COLLATE "C"
               AND x.key OPERATOR(pg_catalog.=) begin_general.key COLLATE "C"
            RETURNING * INTO k;
            RETURN idempotency.begin_answer('claimed', k, NULL);
        END IF;

        -- in_progress, or wait (rule W) and decide afresh.
        IF state OPERATOR(pg_catalog.=) 'leased' THEN
            retry_after := idempotency.microseconds(k.lease_expires_at OPERATOR(pg_catalog.-) now);
        ELSE
            k := NULL;
            retry_after := '1 second';
        END IF;
        IF deadline IS NULL OR pg_catalog.clock_timestamp() OPERATOR(pg_catalog.>=) deadline THEN
            RETURN idempotency.begin_answer('in_progress', k, retry_after);
        END IF;
        IF state OPERATOR(pg_catalog.=) 'held' THEN
            -- The holder's transaction, through the key's lock (or, for a
            -- sweep, the row's): an ordinary lock wait, which
            -- statement_timeout cancels and the deadlock detector sees, cut
            -- short at the wait's end.  The key's lock is only waited for,
            -- not kept (await_key): the answer is decided afresh.
            BEGIN
                PERFORM pg_catalog.set_config('lock_timeout',
                    pg_catalog.ceil(pg_catalog.extract('epoch', deadline OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())
                                    OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8::pg_catalog.text, true);
                IF locked THEN
                    PERFORM FROM idempotency.keys AS x
                     WHERE x.tenant OPERATOR(pg_catalog.=) r.tenant
                       AND x.scope OPERATOR(pg_catalog.=) begin_general.scope COLLATE "C"
                       AND x.key OPERATOR(pg_catalog.=) begin_general.key COLLATE "C"
                       FOR NO KEY UPDATE;
                ELSE
                    PERFORM idempotency.await_key(lock_hash);
                END IF;
                PERFORM pg_catalog.set_config('lock_timeout', old_lock_timeout, true);
            EXCEPTION WHEN lock_not_available THEN
                NULL;
            END;
        ELSE
            -- A committed claim has no transaction to wait on: poll its
            -- lease, every 1 ms, backing off to 50 ms.
            PERFORM pg_catalog.pg_sleep(LEAST(poll, pg_catalog.extract('epoch', deadline OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())::pg_catalog.float8));
            poll := LEAST(poll OPERATOR(pg_catalog.*) 2, 0.05);
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION idempotency.begin_general(text, text, @extschema@.request_hash, interval, interval, interval, jsonb, boolean) IS
    'idempotency_begin''s every course: the argument checks and their errors, takeovers, in_progress, waiting';
REVOKE ALL ON FUNCTION idempotency.begin_general(text, text, @extschema@.request_hash, interval, interval, interval, jsonb, boolean) FROM PUBLIC;

-- The tenant of the calling role when any role is isolated (caller_role's
-- row of idempotency.tenants, else 0).
CREATE FUNCTION idempotency.caller_tenant() RETURNS regrole
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    AS $$
DECLARE
    tenant pg_catalog.regrole;
BEGIN
    SELECT t.tenant INTO tenant FROM idempotency.tenants AS t
     WHERE t.tenant OPERATOR(pg_catalog.=) idempotency.caller_role();
    RETURN COALESCE(tenant, 0::pg_catalog.regrole);
END
$$;
COMMENT ON FUNCTION idempotency.caller_tenant() IS 'the calling role''s tenant: itself when isolated, else 0';

-- The two commonest courses run here, each in one statement after checks
-- made in as few expressions as will do (PL/pgSQL sets each expression up
-- once per transaction, and that is most of what a call costs): a replay
-- (one read) and the claim of a new key (the same read, then one INSERT
-- under the key's lock).  They need arguments that pass every check, no
-- claim data, and the extension's default ttl and lease unless given;
-- everything else -- and every argument that does not pass, so that the
-- error is the general course's -- is begin_general's.  The owner's
-- functions are named in the expressions themselves, so that a change of
-- the owner's choices makes them be planned again.
CREATE FUNCTION @extschema@.idempotency_begin(
    scope text, key text, request @extschema@.request_hash,
    ttl interval DEFAULT NULL, lease interval DEFAULT NULL, wait interval DEFAULT NULL,
    claim_data jsonb DEFAULT NULL, take_over_mismatch boolean DEFAULT false)
    RETURNS @extschema@.idempotency_begin_result
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
    AS $$
#variable_conflict use_column
DECLARE
    answer idempotency.begin_row;
    now pg_catalog.timestamptz;
BEGIN
    IF (idempotency_begin.claim_data IS NULL
        AND pg_catalog.octet_length(idempotency_begin.key) OPERATOR(pg_catalog.>) 0
        AND GREATEST(pg_catalog.octet_length(idempotency_begin.key), pg_catalog.octet_length(idempotency_begin.scope))
            OPERATOR(pg_catalog.<=) idempotency.owner_max_key_length()
        AND pg_catalog.current_setting('idempotency.max_key_length', true) IS NULL
        AND pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'off') IS NOT TRUE THEN
        RETURN idempotency.begin_general(idempotency_begin.scope, idempotency_begin.key, idempotency_begin.request,
                                         idempotency_begin.ttl, idempotency_begin.lease, idempotency_begin.wait,
                                         idempotency_begin.claim_data, idempotency_begin.take_over_mismatch);
    END IF;
    -- A ttl or lease given: most are times alone (no days, no months),
    -- which a few comparisons check; span_ok checks the rest.
    IF idempotency_begin.ttl IS NOT NULL THEN
        IF idempotency.time_span_ok(idempotency_begin.ttl) IS NOT TRUE THEN
            now := pg_catalog.clock_timestamp();
            IF idempotency.span_ok(idempotency_begin.ttl, now) IS NOT TRUE THEN
                RETURN idempotency.begin_general(idempotency_begin.scope, idempotency_begin.key, idempotency_begin.request,
                                                     idempotency_begin.ttl, idempotency_begin.lease, idempotency_begin.wait,
                                                     idempotency_begin.claim_data, idempotency_begin.take_over_mismatch);
            END IF;
        END IF;
    END IF;
    IF idempotency_begin.lease IS NOT NULL THEN
        IF idempotency.time_span_ok(idempotency_begin.lease) IS NOT TRUE THEN
            now := pg_catalog.clock_timestamp();
            IF idempotency.span_ok(idempotency_begin.lease, now) IS NOT TRUE THEN
                RETURN idempotency.begin_general(idempotency_begin.scope, idempotency_begin.key, idempotency_begin.request,
                                                     idempotency_begin.ttl, idempotency_begin.lease, idempotency_begin.wait,
                                                     idempotency_begin.claim_data, idempotency_begin.take_over_mismatch);
            END IF;
        END IF;
    END IF;
    IF idempotency_begin.wait IS NOT NULL THEN
        IF idempotency_begin.wait OPERATOR(pg_catalog.<) '0'::pg_catalog.interval
           OR idempotency_begin.wait OPERATOR(pg_catalog.>) '1 hour'::pg_catalog.interval THEN
            RETURN idempotency.begin_general(idempotency_begin.scope, idempotency_begin.key, idempotency_begin.request,
                                                     idempotency_begin.ttl, idempotency_begin.lease, idempotency_begin.wait,
                                                     idempotency_begin.claim_data, idempotency_begin.take_over_mismatch);
        END IF;
    END IF;
    -- The key's row: a replay is answered from it (completed for this
    -- request and not expired: rule E).
    SELECT CASE WHEN k.status OPERATOR(pg_catalog.=) 'c'::pg_catalog."char"
                     AND k.request OPERATOR(pg_catalog.=) pg_catalog.decode(idempotency_begin.request, 'hex')
                     AND k.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
                THEN idempotency.outcome('replay') END,
           k.attempt, k.response_status, k.response_body, k.response_headers, NULL, NULL,
           k.created_at, k.expires_at, k.response_body_bytes, k.response_body_omitted, 'completed',
           k.lease_expires_at, NULL, NULL
      INTO answer
      FROM idempotency.keys AS k
     WHERE k.tenant OPERATOR(pg_catalog.=) CASE WHEN idempotency.any_tenants() THEN idempotency.caller_tenant() ELSE 0::pg_catalog.regrole END
       AND k.scope OPERATOR(pg_catalog.=) idempotency_begin.scope COLLATE "C"
       AND k.key OPERATOR(pg_catalog.=) idempotency_begin.key COLLATE "C";
    IF FOUND THEN
        IF answer.outcome IS NOT NULL THEN
            RETURN answer;
        END IF;
    -- Rules A and K: no row, so the key is claimed under its lock, taken here
    -- if it is free (a row committed since the read is left alone).
    ELSIF idempotency_begin.request IS NOT NULL
          AND pg_catalog.current_setting('idempotency.default_ttl', true) IS NULL
          AND pg_catalog.current_setting('idempotency.default_lease', true) IS NULL
          AND idempotency.try_lock_key(idempotency.key_hash(CASE WHEN idempotency.any_tenants() THEN idempotency.caller_tenant() ELSE 0::pg_catalog.regrole END, idempotency_begin.scope, idempotency_begin.key)) THEN
        now := pg_catalog.clock_timestamp();
        INSERT INTO idempotency.keys AS x (tenant, scope, key, request, created_at, ttl, attempt, writer,
                                           status, expires_at, lease, lease_expires_at, unsettled_since)
        VALUES (CASE WHEN idempotency.any_tenants() THEN idempotency.caller_tenant() ELSE 0::pg_catalog.regrole END, idempotency_begin.scope, idempotency_begin.key,
                pg_catalog.decode(idempotency_begin.request, 'hex'), now,
                COALESCE(idempotency_begin.ttl, '86400 seconds'::pg_catalog.interval), 1,
                pg_catalog.pg_current_xact_id(), 'p',
                now OPERATOR(pg_catalog.+) COALESCE(idempotency_begin.ttl, '86400 seconds'::pg_catalog.interval),
                COALESCE(idempotency_begin.lease, '60 seconds'::pg_catalog.interval),
                now OPERATOR(pg_catalog.+) COALESCE(idempotency_begin.lease, '60 seconds'::pg_catalog.interval),
                CASE WHEN idempotency_begin.lease IS NULL THEN pg_catalog.statement_timestamp() END)
        ON CONFLICT ON CONSTRAINT keys_pkey DO NOTHING;
        IF FOUND THEN
            RETURN ROW(idempotency.outcome('claimed'), 1, NULL, NULL, NULL, NULL, NULL, now,
                       now OPERATOR(pg_catalog.+) COALESCE(idempotency_begin.ttl, '86400 seconds'::pg_catalog.interval),
                       NULL, NULL, 'in_progress',
                       now OPERATOR(pg_catalog.+) COALESCE(idempotency_begin.lease, '60 seconds'::pg_catalog.interval),
                       NULL, NULL)::idempotency.begin_row;
        END IF;
    END IF;
    RETURN idempotency.begin_general(idempotency_begin.scope, idempotency_begin.key, idempotency_begin.request,
                                     idempotency_begin.ttl, idempotency_begin.lease, idempotency_begin.wait,
                                     idempotency_begin.claim_data, idempotency_begin.take_over_mismatch);
END
$$;
COMMENT ON FUNCTION @extschema@.idempotency_begin(text, text, @extschema@.request_hash, interval, interval, interval, jsonb, boolean) IS
    'claim (scope, key) for this request in the calling transaction, or report its replay, in_progress or mismatch state';
REVOKE ALL ON FUNCTION @extschema@.idempotency_begin(text, text, @extschema@.request_hash, interval, interval, interval, jsonb, boolean) FROM PUBLIC;

-- ---------------------------------------------------------------------------
-- The holder's writes: complete, checkpoint, release, forget (rules H, T)
-- ---------------------------------------------------------------------------

-- The key's current record, ready to be changed: the caller's own claim as
-- it is (its transaction holds the key's lock already), else read under the
-- key's lock, after waiting for a transaction that is changing the key, as
-- an UPDATE waits for a concurrent one (lock_timeout 55P03, statement_timeout
-- 57014 and the deadlock detector apply).  All NULL when there is none.
CREATE FUNCTION idempotency.current_record(tenant regrole, scope text, key text) RETURNS idempotency.keys
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
    AS $$
#variable_conflict use_column
DECLARE
    k idempotency.keys;
BEGIN
    SELECT * INTO k FROM idempotency.keys AS x
     WHERE x.tenant OPERATOR(pg_catalog.=) current_record.tenant
       AND x.scope OPERATOR(pg_catalog.=) current_record.scope COLLATE "C"
       AND x.key OPERATOR(pg_catalog.=) current_record.key COLLATE "C";
    IF FOUND AND idempotency.own(k) THEN
        RETURN k;
    END IF;
    PERFORM idempotency.lock_key(idempotency.key_hash(current_record.tenant, current_record.scope, current_record.key));
    SELECT * INTO k FROM idempotency.keys AS x
     WHERE x.tenant OPERATOR(pg_catalog.=) current_record.tenant
       AND x.scope OPERATOR(pg_catalog.=) current_record.scope COLLATE "C"
       AND x.key OPERATOR(pg_catalog.=) current_record.key COLLATE "C";
    RETURN k;
END
$$;
COMMENT ON FUNCTION idempotency.current_record(regrole, text, text) IS
    'the key''s current record: the caller''s own claim, or the committed one read under the key''s lock';

-- Rule H: the key's live claim, or the documented error: IK001 when there is
-- none, IK003 for a stale attempt (checked before anything else it could
-- say), IK002 when it is completed -- unless replacing its response, which
-- needs the attempt that completed it (22023).
CREATE FUNCTION idempotency.held_claim(tenant regrole, scope text, key text, attempt integer, replacing boolean)
    RETURNS idempotency.keys
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
    AS $$
DECLARE
    k idempotency.keys := idempotency.current_record(tenant, scope, key);
BEGIN
    IF k.scope IS NULL OR (NOT idempotency.own(k) AND idempotency.expired(k, pg_catalog.clock_timestamp())) THEN
        RAISE EXCEPTION 'idempotency key "%" is not claimed', idempotency.key_for_message(key)
            USING ERRCODE = 'IK001', HINT = 'Call idempotency_begin() first.';
    END IF;
    PERFORM idempotency.check_attempt(k, key, attempt);
    IF k.status OPERATOR(pg_catalog.=) 'c'::pg_catalog."char" AND NOT replacing THEN
        RAISE EXCEPTION 'idempotency key "%" is already completed', idempotency.key_for_message(key)
            USING ERRCODE = 'IK002';
    END IF;
    IF k.status OPERATOR(pg_catalog.=) 'c'::pg_catalog."char" AND attempt IS NULL THEN
        RAISE EXCEPTION 'replacing the response of idempotency key "%" needs its attempt', idempotency.key_for_message(key)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass attempt => the attempt that completed it, which a replay answer gives.';
    END IF;
    RETURN k;
END
$$;
COMMENT ON FUNCTION idempotency.held_claim(regrole, text, text, integer, boolean) IS
    'the key''s live claim for complete, checkpoint and release, or their error (IK001, IK003, IK002)';

-- Rule T: a write that names an attempt other than the record's is refused
-- (IK003), so that a holder whose lease ran out never stores its result over
-- its successor's, nor undoes it.
CREATE FUNCTION idempotency.check_attempt(k idempotency.keys, key text, attempt integer) RETURNS void
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$
BEGIN
    IF attempt OPERATOR(pg_catalog.<>) k.attempt THEN
        RAISE EXCEPTION 'attempt % of idempotency key "%" is stale', attempt, idempotency.key_for_message(key)
            USING ERRCODE = 'IK003',
                  DETAIL = pg_catalog.format('The key''s current attempt is %s: its lease ended and another caller took it over.', k.attempt);
    END IF;
END
$$;
COMMENT ON FUNCTION idempotency.check_attempt(idempotency.keys, text, integer) IS 'raises IK003 for an attempt that is not the record''s';

-- The arguments every holder's write starts with: scope and key checked,
-- with the caller's tenant and limits.
CREATE FUNCTION idempotency.checked_key(scope text, key text,
                                        OUT tenant regrole, OUT max_response_bytes integer)
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    AS $$
DECLARE
    key_limit pg_catalog.int4;
    problem pg_catalog.int4;
BEGIN
    IF scope IS NULL THEN
        PERFORM idempotency.refuse_null('scope');
    ELSIF key IS NULL THEN
        PERFORM idempotency.refuse_null('key');
    END IF;
    SELECT c.tenant, c.max_key_length, c.max_response_bytes INTO tenant, key_limit, max_response_bytes
      FROM idempotency.call_context() AS c;
    problem := idempotency.key_problem_code(scope, key, key_limit);
    IF problem OPERATOR(pg_catalog.<>) 0 THEN
        PERFORM idempotency.refuse_key(problem, scope, key, key_limit);
    END IF;
END
$$;
COMMENT ON FUNCTION idempotency.checked_key(text, text) IS
    'checks the scope and key arguments of a call and returns the caller''s tenant and size limit';

-- Every course of idempotency_complete: its argument checks and errors,
-- rule H's read under the key's lock, a server error's dropped claim, a
-- replaced response, what of an oversized response is kept.
CREATE FUNCTION idempotency.complete_general(
    scope text, key text, response_status integer, response_body jsonb, response_headers jsonb, attempt integer,
    response_body_bytes bytea, replace boolean, omit_oversized boolean)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
    AS $$
#variable_conflict use_column
DECLARE
    r record;
    caller_tenant pg_catalog.regrole;
    size_limit pg_catalog.int4;
    body_size pg_catalog.int8;
    header_size pg_catalog.int8;
    store_response pg_catalog.bool;
    body_kept pg_catalog.bool;
    headers_kept pg_catalog.bool;
    replacing pg_catalog.bool := COALESCE(complete_general.replace, false);
    k idempotency.keys;
    now pg_catalog.timestamptz;
BEGIN
    -- The caller's context and the key's row in one query, whose only
    -- parameters are the key's; the key's checks are checked_key's.
    SELECT x.tenant, x.max_key_length, x.max_response_bytes, k AS stored
      INTO r
      FROM idempotency.call_context() AS x
      LEFT JOIN idempotency.keys AS k
        ON k.tenant OPERATOR(pg_catalog.=) x.tenant
       AND k.scope OPERATOR(pg_catalog.=) complete_general.scope COLLATE "C"
       AND k.key OPERATOR(pg_catalog.=) complete_general.key COLLATE "C";
    IF complete_general.scope IS NULL OR complete_general.key IS NULL
       OR idempotency.key_problem_code(complete_general.scope, complete_general.key, r.max_key_length)
          OPERATOR(pg_catalog.<>) 0 THEN
        PERFORM idempotency.checked_key(complete_general.scope, complete_general.key);
    END IF;
    caller_tenant := r.tenant;
    size_limit := r.max_response_bytes;
    IF complete_general.response_status IS NULL THEN
        PERFORM idempotency.refuse_null('response_status');
    END IF;
    IF complete_general.response_status OPERATOR(pg_catalog.<) 100
       OR complete_general.response_status OPERATOR(pg_catalog.>) 599 THEN
        RAISE EXCEPTION 'invalid response_status %', complete_general.response_status
            USING ERRCODE = 'invalid_parameter_value', DETAIL = 'An HTTP status code is between 100 and 599.';
    END IF;
    IF complete_general.response_body IS NOT NULL AND complete_general.response_body_bytes IS NOT NULL THEN
        RAISE EXCEPTION 'response_body and response_body_bytes cannot both be given'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass a JSON body as response_body, any other body as response_body_bytes.';
    END IF;
    -- What of the response is kept: the body and headers as PostgreSQL
    -- holds them, the bytes with their 4-byte header, within the limit.
    body_size := 0;
    IF complete_general.response_body IS NOT NULL THEN
        body_size := idempotency.jsonb_size(complete_general.response_body);
    ELSIF complete_general.response_body_bytes IS NOT NULL THEN
        body_size := pg_catalog.octet_length(complete_general.response_body_bytes) OPERATOR(pg_catalog.+) 4;
    END IF;
    header_size := 0;
    IF complete_general.response_headers IS NOT NULL THEN
        header_size := idempotency.jsonb_size(complete_general.response_headers);
    END IF;
    body_kept := body_size OPERATOR(pg_catalog.+) header_size OPERATOR(pg_catalog.<=) size_limit;
    headers_kept := header_size OPERATOR(pg_catalog.<=) size_limit;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        PERFORM idempotency.refuse_read_only('idempotency_complete');
    END IF;
    store_response := complete_general.response_status OPERATOR(pg_catalog.<) 500;
    IF NOT store_response THEN
        store_response := COALESCE(pg_catalog.current_setting('idempotency.store_server_errors', true), '')
                          OPERATOR(pg_catalog.=) ANY (ARRAY['on', 'true', 'yes', '1']);
    END IF;
    IF store_response AND NOT body_kept AND NOT COALESCE(complete_general.omit_oversized, true) THEN
        RAISE EXCEPTION 'response of idempotency key "%" is too large (% bytes)',
                        idempotency.key_for_message(complete_general.key), body_size OPERATOR(pg_catalog.+) header_size
            USING ERRCODE = 'program_limit_exceeded',
                  DETAIL = pg_catalog.format('idempotency.max_response_bytes is %s bytes, counting the body and the headers; with omit_oversized => false nothing is stored.', size_limit),
                  HINT = 'Raise idempotency.max_response_bytes (the owner''s limit: UPDATE idempotency.settings), or pass omit_oversized => true to store the response without its body.';
    END IF;
    IF replacing AND NOT store_response THEN
        RAISE EXCEPTION 'a response with status % cannot replace a stored one', complete_general.response_status
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Server errors are not stored while idempotency.store_server_errors is off.';
    END IF;
    -- Rule H: the caller's own claim as read (its transaction holds the
    -- key's lock), else the key's current record under the lock.
    IF idempotency.own(r.stored) AND complete_general.attempt IS NULL
       AND (r.stored).status OPERATOR(pg_catalog.=) 'p'::pg_catalog."char" THEN
        k := r.stored;
    ELSE
        k := idempotency.held_claim(caller_tenant, complete_general.scope, complete_general.key,
                                    complete_general.attempt, replacing);
    END IF;
    now := pg_catalog.clock_timestamp();
    IF NOT store_response THEN
        -- A server error is transient: the claim's lease ends, so that a
        -- retry runs again.
        UPDATE idempotency.keys AS x SET lease_expires_at = now, unsettled_since = NULL,
                                          writer = pg_catalog.pg_current_xact_id()
         WHERE x.tenant OPERATOR(pg_catalog.=) caller_tenant
           AND x.scope OPERATOR(pg_catalog.=) complete_general.scope COLLATE "C"
           AND x.key OPERATOR(pg_catalog.=) complete_general.key COLLATE "C";
        RETURN false;
    END IF;
    UPDATE idempotency.keys AS x SET
        status = 'c', completed_at = now, expires_at = now OPERATOR(pg_catalog.+) x.ttl,
        lease = NULL, lease_expires_at = NULL, unsettled_since = NULL,
        response_status = complete_general.response_status,
        response_body = CASE WHEN body_kept THEN complete_general.response_body END,
        response_body_bytes = CASE WHEN body_kept THEN complete_general.response_body_bytes END,
        response_headers = CASE WHEN headers_kept THEN complete_general.response_headers END,
        response_body_omitted = NOT body_kept,
        writer = pg_catalog.pg_current_xact_id()
     WHERE x.tenant OPERATOR(pg_catalog.=) caller_tenant
       AND x.scope OPERATOR(pg_catalog.=) complete_general.scope COLLATE "C"
       AND x.key OPERATOR(pg_catalog.=) complete_general.key COLLATE "C";
    IF NOT body_kept THEN
        RAISE WARNING 'the response body of idempotency key "%" is not stored', idempotency.key_for_message(complete_general.key)
            USING DETAIL = pg_catalog.format('The response is %s bytes; idempotency.max_response_bytes is %s bytes. Replays return its status%s, with response_body_omitted set.',
                                             body_size OPERATOR(pg_catalog.+) header_size, size_limit,
                                             CASE WHEN headers_kept THEN ' and headers' ELSE '' END);
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION idempotency.complete_general(text, text, integer, jsonb, jsonb, integer, bytea, boolean, boolean) IS
    'idempotency_complete''s every course: argument checks and errors, rule H, server errors, replacing, oversized responses';
REVOKE ALL ON FUNCTION idempotency.complete_general(text, text, integer, jsonb, jsonb, integer, bytea, boolean, boolean) FROM PUBLIC;

-- The commonest courses run here in one statement each: the caller completes
-- its own claim (rule H: its transaction wrote the claim, and holds the key's
-- lock), or one that another transaction committed (under the key's lock),
-- with a response under 500 that fits within the owner's limit.  Anything
-- else, or a check that does not pass, is complete_general's.
CREATE FUNCTION @extschema@.idempotency_complete(
    scope text, key text, response_status integer,
    response_body jsonb DEFAULT NULL, response_headers jsonb DEFAULT NULL, attempt integer DEFAULT NULL,
    response_body_bytes bytea DEFAULT NULL, replace boolean DEFAULT false,
    omit_oversized boolean DEFAULT true)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
    AS $$
#variable_conflict use_column
DECLARE
    now pg_catalog.timestamptz;
BEGIN
    IF (idempotency_complete.response_status OPERATOR(pg_catalog.>=) 100
        AND idempotency_complete.response_status OPERATOR(pg_catalog.<) 500
        AND idempotency_complete.attempt IS NULL AND idempotency_complete.response_body_bytes IS NULL
        AND idempotency_complete.replace IS FALSE
        AND pg_catalog.octet_length(idempotency_complete.key) OPERATOR(pg_catalog.>) 0
        AND GREATEST(pg_catalog.octet_length(idempotency_complete.key), pg_catalog.octet_length(idempotency_complete.scope))
            OPERATOR(pg_catalog.<=) idempotency.owner_max_key_length()
        AND pg_catalog.current_setting('idempotency.max_key_length', true) IS NULL
        AND pg_catalog.current_setting('idempotency.max_response_bytes', true) IS NULL
        AND COALESCE(idempotency.jsonb_size(idempotency_complete.response_body), 0)
            OPERATOR(pg_catalog.+) COALESCE(idempotency.jsonb_size(idempotency_complete.response_headers), 0)
            OPERATOR(pg_catalog.<=) idempotency.owner_max_response_bytes()
        AND pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'off') IS TRUE THEN
        now := pg_catalog.clock_timestamp();
        UPDATE idempotency.keys AS x SET
            status = 'c', completed_at = now, expires_at = now OPERATOR(pg_catalog.+) x.ttl,
            lease = NULL, lease_expires_at = NULL,
            unsettled_since = NULL,
            response_status = idempotency_complete.response_status,
            response_body = idempotency_complete.response_body,
            response_headers = idempotency_complete.response_headers,
            response_body_bytes = NULL, response_body_omitted = false
         WHERE x.tenant OPERATOR(pg_catalog.=) CASE WHEN idempotency.any_tenants() THEN idempotency.caller_tenant() ELSE 0::pg_catalog.regrole END
           AND x.scope OPERATOR(pg_catalog.=) idempotency_complete.scope COLLATE "C"
           AND x.key OPERATOR(pg_catalog.=) idempotency_complete.key COLLATE "C"
           AND x.writer OPERATOR(pg_catalog.=) pg_catalog.pg_current_xact_id_if_assigned()
           AND x.status OPERATOR(pg_catalog.=) 'p'::pg_catalog."char";
        IF FOUND THEN
            RETURN true;
        END IF;
        -- A claim another transaction committed (the two-phase pattern):
        -- rule H under the key's lock, which waits for a transaction changing
        -- the key as an UPDATE would; the claim must not have expired (rule E).
        IF idempotency.locked_key(idempotency.key_hash(CASE WHEN idempotency.any_tenants() THEN idempotency.caller_tenant() ELSE 0::pg_catalog.regrole END,
                                                       idempotency_complete.scope, idempotency_complete.key)) THEN
            now := pg_catalog.clock_timestamp();
            UPDATE idempotency.keys AS x SET
                status = 'c', completed_at = now, expires_at = now OPERATOR(pg_catalog.+) x.ttl,
                lease = NULL, lease_expires_at = NULL,
                unsettled_since = NULL,
                response_status = idempotency_complete.response_status,
                response_body = idempotency_complete.response_body,
                response_headers = idempotency_complete.response_headers,
                response_body_bytes = NULL, response_body_omitted = false,
                writer = pg_catalog.pg_current_xact_id()
             WHERE x.tenant OPERATOR(pg_catalog.=) CASE WHEN idempotency.any_tenants() THEN idempotency.caller_tenant() ELSE 0::pg_catalog.regrole END
               AND x.scope OPERATOR(pg_catalog.=) idempotency_complete.scope COLLATE "C"
               AND x.key OPERATOR(pg_catalog.=) idempotency_complete.key COLLATE "C"
               AND x.status OPERATOR(pg_catalog.=) 'p'::pg_catalog."char"
               AND (x.expires_at OPERATOR(pg_catalog.>) now OR x.lease_expires_at OPERATOR(pg_catalog.>) now);
            IF FOUND THEN
                RETURN true;
            END IF;
        END IF;
    END IF;
    RETURN idempotency.complete_general(idempotency_complete.scope, idempotency_complete.key,
                                        idempotency_complete.response_status, idempotency_complete.response_body,
                                        idempotency_complete.response_headers, idempotency_complete.attempt,
                                        idempotency_complete.response_body_bytes, idempotency_complete.replace,
                                        idempotency_complete.omit_oversized);
END
$$;
COMMENT ON FUNCTION @extschema@.idempotency_complete(text, text, integer, jsonb, jsonb, integer, bytea, boolean, boolean) IS
    'record the response of a claimed key (or, with replace and the attempt, of a completed one); false when a server error (>= 500) was not stored and the claim was dropped instead; with omit_oversized => false, a response over idempotency.max_response_bytes fails (54000) instead of being stored without its body';
REVOKE ALL ON FUNCTION @extschema@.idempotency_complete(text, text, integer, jsonb, jsonb, integer, bytea, boolean, boolean) FROM PUBLIC;

CREATE FUNCTION @extschema@.idempotency_checkpoint(
    scope text, key text, recovery_point text, lease interval DEFAULT NULL, attempt integer DEFAULT NULL)
    RETURNS timestamptz
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
    AS $$
#variable_conflict use_column
DECLARE
    caller_tenant pg_catalog.regrole;
    size_limit pg_catalog.int4;
    k idempotency.keys;
    lease_end pg_catalog.timestamptz;
BEGIN
    SELECT c.tenant, c.max_response_bytes INTO caller_tenant, size_limit
      FROM idempotency.checked_key(idempotency_checkpoint.scope, idempotency_checkpoint.key) AS c;
    IF pg_catalog.octet_length(idempotency_checkpoint.recovery_point) OPERATOR(pg_catalog.+) 4
       OPERATOR(pg_catalog.>) size_limit THEN
        PERFORM idempotency.refuse_size('recovery_point', idempotency_checkpoint.key,
                                        pg_catalog.octet_length(idempotency_checkpoint.recovery_point) OPERATOR(pg_catalog.+) 4,
                                        size_limit);
    END IF;
    PERFORM idempotency.checked_span('lease', idempotency_checkpoint.lease);
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        PERFORM idempotency.refuse_read_only('idempotency_checkpoint');
    END IF;
    k := idempotency.held_claim(caller_tenant, idempotency_checkpoint.scope, idempotency_checkpoint.key,
                                idempotency_checkpoint.attempt, false);
    -- Without a lease, the claim's own lease length, as begin set it.
    lease_end := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+)
                 COALESCE(idempotency_checkpoint.lease, k.lease,
                          idempotency.default_duration('idempotency.default_lease', '1 millisecond', '1 minute',
                                                       '1 millisecond', '2147483647 milliseconds'));
    -- A NULL recovery point is a heartbeat: the last one is kept.
    UPDATE idempotency.keys AS x SET
        recovery_point = COALESCE(idempotency_checkpoint.recovery_point, x.recovery_point),
        lease_expires_at = lease_end,
        writer = pg_catalog.pg_current_xact_id()
     WHERE x.tenant OPERATOR(pg_catalog.=) caller_tenant
       AND x.scope OPERATOR(pg_catalog.=) idempotency_checkpoint.scope COLLATE "C"
       AND x.key OPERATOR(pg_catalog.=) idempotency_checkpoint.key COLLATE "C";
    RETURN lease_end;
END
$$;
COMMENT ON FUNCTION @extschema@.idempotency_checkpoint(text, text, text, interval, integer) IS
    'record progress of a claimed key and extend its lease; returns the new lease end';
REVOKE ALL ON FUNCTION @extschema@.idempotency_checkpoint(text, text, text, interval, integer) FROM PUBLIC;

CREATE FUNCTION @extschema@.idempotency_release(scope text, key text, attempt integer DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
    AS $$
#variable_conflict use_column
DECLARE
    caller_tenant pg_catalog.regrole;
BEGIN
    SELECT c.tenant INTO caller_tenant
      FROM idempotency.checked_key(idempotency_release.scope, idempotency_release.key) AS c;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        PERFORM idempotency.refuse_read_only('idempotency_release');
    END IF;
    PERFORM idempotency.held_claim(caller_tenant, idempotency_release.scope, idempotency_release.key,
                                   idempotency_release.attempt, false);
    UPDATE idempotency.keys AS x SET
        lease_expires_at = pg_catalog.clock_timestamp(), unsettled_since = NULL,
        writer = pg_catalog.pg_current_xact_id()
     WHERE x.tenant OPERATOR(pg_catalog.=) caller_tenant
       AND x.scope OPERATOR(pg_catalog.=) idempotency_release.scope COLLATE "C"
       AND x.key OPERATOR(pg_catalog.=) idempotency_release.key COLLATE "C";
END
$$;
COMMENT ON FUNCTION @extschema@.idempotency_release(text, text, integer) IS
    'end the lease of an in-progress claim so that the next begin claims it again with attempt + 1';
REVOKE ALL ON FUNCTION @extschema@.idempotency_release(text, text, integer) FROM PUBLIC;

-- Rules H and T: an unfinished claim of another transaction is forgotten only
-- with its attempt, so that a caller never undoes a successor's claim.
CREATE FUNCTION @extschema@.idempotency_forget(scope text, key text, attempt integer DEFAULT NULL)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
    AS $$
#variable_conflict use_column
DECLARE
    caller_tenant pg_catalog.regrole;
    k idempotency.keys;
BEGIN
    SELECT c.tenant INTO caller_tenant
      FROM idempotency.checked_key(idempotency_forget.scope, idempotency_forget.key) AS c;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        PERFORM idempotency.refuse_read_only('idempotency_forget');
    END IF;
    -- With nothing to forget, the key's lock that current_record took goes
    -- with the subtransaction, as the extension lets go of its key lock.
    BEGIN
        k := idempotency.current_record(caller_tenant, idempotency_forget.scope, idempotency_forget.key);
        IF k.scope IS NULL OR (NOT idempotency.own(k) AND idempotency.expired(k, pg_catalog.clock_timestamp())) THEN
            RAISE EXCEPTION USING ERRCODE = 'IKNIL';
        END IF;
    EXCEPTION WHEN SQLSTATE 'IKNIL' THEN
        RETURN false;
    END;
    PERFORM idempotency.check_attempt(k, idempotency_forget.key, idempotency_forget.attempt);
    IF k.status OPERATOR(pg_catalog.=) 'p'::pg_catalog."char" AND NOT idempotency.own(k)
       AND idempotency_forget.attempt IS NULL THEN
        RAISE EXCEPTION 'idempotency key "%" is claimed and not completed', idempotency.key_for_message(idempotency_forget.key)
            USING ERRCODE = 'object_in_use',
                  HINT = 'Pass attempt => the claim''s attempt to forget it; idempotency_lookup() shows it.';
    END IF;
    DELETE FROM idempotency.keys AS x
     WHERE x.tenant OPERATOR(pg_catalog.=) caller_tenant
       AND x.scope OPERATOR(pg_catalog.=) idempotency_forget.scope COLLATE "C"
       AND x.key OPERATOR(pg_catalog.=) idempotency_forget.key COLLATE "C";
    RETURN true;
END
$$;
COMMENT ON FUNCTION @extschema@.idempotency_forget(text, text, integer) IS
    'delete the record of a key (an unfinished claim of another transaction only with its attempt); false when there was none';
REVOKE ALL ON FUNCTION @extschema@.idempotency_forget(text, text, integer) FROM PUBLIC;

-- ---------------------------------------------------------------------------
-- A claim made outside a transaction block (IK004)
-- ---------------------------------------------------------------------------

-- A claim made without a lease by a statement that commits on its own (a
-- forgotten BEGIN) must be settled in that statement; otherwise the commit
-- fails with IK004 and the claim rolls back (unsettled.hpp).  Each such
-- claim queues this deferred trigger, which runs at commit: the claim is
-- unsettled when its row still carries unsettled_since, and it was made
-- outside a transaction block when the statement that commits is the one
-- that made it (statement_timestamp() is set by each message of the simple
-- protocol, and by each Parse, Bind and Execute of the extended one, whose
-- Sync commits; an explicit COMMIT is a statement of its own).
CREATE FUNCTION idempotency.refuse_unsettled_claim() RETURNS trigger
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    AS $$
BEGIN
    IF NEW.unsettled_since OPERATOR(pg_catalog.<>) pg_catalog.statement_timestamp() THEN
        RETURN NULL; -- claimed in a transaction block
    END IF;
    PERFORM FROM idempotency.keys AS x
     WHERE x.tenant OPERATOR(pg_catalog.=) NEW.tenant
       AND x.scope OPERATOR(pg_catalog.=) NEW.scope
       AND x.key OPERATOR(pg_catalog.=) NEW.key
       AND x.unsettled_since OPERATOR(pg_catalog.=) NEW.unsettled_since;
    IF FOUND THEN
        RAISE EXCEPTION 'idempotency key "%" was claimed outside a transaction block and is not completed',
                        idempotency.key_for_message(NEW.key)
            USING ERRCODE = 'IK004',
                  DETAIL = 'Outside BEGIN ... COMMIT each statement commits on its own, so the claim would be committed unfinished, apart from the work it guards.',
                  HINT = 'Call idempotency_begin() inside BEGIN ... COMMIT, complete or release the claim in the same statement, or pass lease => ... to commit a claim unfinished on purpose (the two-phase pattern).';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION idempotency.refuse_unsettled_claim() IS
    'at commit: IK004 for a claim made without a lease outside a transaction block and not settled';
REVOKE ALL ON FUNCTION idempotency.refuse_unsettled_claim() FROM PUBLIC;

CREATE CONSTRAINT TRIGGER keys_unsettled_claim
    AFTER INSERT OR UPDATE ON idempotency.keys
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.unsettled_since IS NOT NULL)
    EXECUTE FUNCTION idempotency.refuse_unsettled_claim();
COMMENT ON TRIGGER keys_unsettled_claim ON idempotency.keys IS
    'at commit: a claim made without a lease outside a transaction block must be settled (IK004)';

-- ---------------------------------------------------------------------------
-- Reads: lookup, a scope's keys, a key's problem
-- ---------------------------------------------------------------------------

-- idempotency_lookup's row of a record; of none (NULL), the row of a key
-- another transaction holds: in_progress, not committed, nothing else.
CREATE FUNCTION idempotency.lookup_answer(k idempotency.keys, committed boolean)
    RETURNS @extschema@.idempotency_lookup_result
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN ROW(CASE WHEN k.status OPERATOR(pg_catalog.=) 'c'::pg_catalog."char" THEN 'completed' ELSE 'in_progress' END,
               pg_catalog.encode(k.request, 'hex'), k.attempt, k.response_status, k.response_body,
               k.response_headers, k.recovery_point, k.created_at, k.lease_expires_at, k.completed_at,
               k.expires_at, k.response_body_bytes, k.response_body_omitted, k.claim_data, committed
           )::@extschema@.idempotency_lookup_result;
COMMENT ON FUNCTION idempotency.lookup_answer(idempotency.keys, boolean) IS 'the result row of idempotency_lookup';

-- The record of (scope, key) as the statement's snapshot sees it, or
-- (latest) as idempotency_begin sees it: then a key whose lock another
-- transaction holds -- its claim, or a change it has not committed -- shows
-- as in_progress, not committed, and nothing else.  Neither waits or writes.
CREATE FUNCTION @extschema@.idempotency_lookup(scope text, key text, latest boolean DEFAULT false)
    RETURNS SETOF @extschema@.idempotency_lookup_result
    LANGUAGE plpgsql VOLATILE PARALLEL RESTRICTED SECURITY DEFINER ROWS 1
    AS $$
#variable_conflict use_column
DECLARE
    caller_tenant pg_catalog.regrole;
    k idempotency.keys;
    lock_hash pg_catalog.int8;
    held pg_catalog.bool := false;
BEGIN
    SELECT c.tenant INTO caller_tenant
      FROM idempotency.checked_key(idempotency_lookup.scope, idempotency_lookup.key) AS c;
    SELECT * INTO k FROM idempotency.keys AS x
     WHERE x.tenant OPERATOR(pg_catalog.=) caller_tenant
       AND x.scope OPERATOR(pg_catalog.=) idempotency_lookup.scope COLLATE "C"
       AND x.key OPERATOR(pg_catalog.=) idempotency_lookup.key COLLATE "C";
    IF COALESCE(idempotency_lookup.latest, false) AND NOT pg_catalog.pg_is_in_recovery()
       AND (k.scope IS NULL OR NOT idempotency.own(k)) THEN
        -- Another transaction holds the key's lock when this session can
        -- take it neither at once nor at the session level (which it then
        -- lets go at once).
        lock_hash := idempotency.key_hash(caller_tenant, idempotency_lookup.scope, idempotency_lookup.key);
        held := NOT pg_catalog.pg_try_advisory_lock((lock_hash OPERATOR(pg_catalog.>>) 32)::pg_catalog.int4,
                                                    (lock_hash OPERATOR(pg_catalog.&) 2147483647)::pg_catalog.int4);
        IF NOT held THEN
            PERFORM pg_catalog.pg_advisory_unlock((lock_hash OPERATOR(pg_catalog.>>) 32)::pg_catalog.int4,
                                                  (lock_hash OPERATOR(pg_catalog.&) 2147483647)::pg_catalog.int4);
        END IF;
    END IF;
    IF held THEN
        RETURN NEXT idempotency.lookup_answer(NULL, false);
    ELSIF k.scope IS NOT NULL
          AND (idempotency.own(k) OR NOT idempotency.expired(k, pg_catalog.clock_timestamp())) THEN
        RETURN NEXT idempotency.lookup_answer(k, NOT idempotency.own(k));
    END IF;
END
$$;
COMMENT ON FUNCTION @extschema@.idempotency_lookup(text, text, boolean) IS
    'the live record of (scope, key) as the statement''s snapshot sees it, or with latest the newest one as idempotency_begin sees it; no row when absent or expired';
REVOKE ALL ON FUNCTION @extschema@.idempotency_lookup(text, text, boolean) FROM PUBLIC;

CREATE FUNCTION @extschema@.idempotency_keys(
    scope text, after_key text DEFAULT NULL, max_keys integer DEFAULT 100)
    RETURNS TABLE (key text, status text, attempt integer, response_status integer,
                   created_at timestamptz, lease_expires_at timestamptz,
                   completed_at timestamptz, expires_at timestamptz, committed boolean)
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER ROWS 100
    AS $$
#variable_conflict use_column
DECLARE
    caller_tenant pg_catalog.regrole;
    page_size pg_catalog.int4 := COALESCE(idempotency_keys.max_keys, 100);
BEGIN
    IF idempotency_keys.scope IS NULL THEN
        PERFORM idempotency.refuse_null('scope');
    END IF;
    IF page_size OPERATOR(pg_catalog.<) 1 OR page_size OPERATOR(pg_catalog.>) 10000 THEN
        RAISE EXCEPTION 'invalid max_keys %', page_size
            USING ERRCODE = 'invalid_parameter_value', DETAIL = 'max_keys must be between 1 and 10000.';
    END IF;
    SELECT c.tenant INTO caller_tenant FROM idempotency.call_context() AS c;
    RETURN QUERY
        SELECT x.key::pg_catalog.text,
               CASE WHEN x.status OPERATOR(pg_catalog.=) 'c'::pg_catalog."char" THEN 'completed' ELSE 'in_progress' END,
               x.attempt, x.response_status, x.created_at, x.lease_expires_at, x.completed_at, x.expires_at,
               NOT idempotency.own(x)
          FROM idempotency.keys AS x
         WHERE x.tenant OPERATOR(pg_catalog.=) caller_tenant
           AND x.scope OPERATOR(pg_catalog.=) idempotency_keys.scope COLLATE "C"
           AND (idempotency_keys.after_key IS NULL OR x.key OPERATOR(pg_catalog.>) idempotency_keys.after_key COLLATE "C")
           AND (idempotency.own(x) OR NOT idempotency.expired(x, pg_catalog.clock_timestamp()))
         ORDER BY x.key
         LIMIT page_size;
END
$$;
COMMENT ON FUNCTION @extschema@.idempotency_keys(text, text, integer) IS
    'a page of the live keys of a scope after after_key, in key order, without bodies';
REVOKE ALL ON FUNCTION @extschema@.idempotency_keys(text, text, integer) FROM PUBLIC;

CREATE FUNCTION @extschema@.idempotency_key_problem(scope text, key text) RETURNS text
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    AS $$
DECLARE
    key_limit pg_catalog.int4;
    problem pg_catalog.int4;
BEGIN
    IF scope IS NULL THEN
        RETURN 'scope is null';
    ELSIF key IS NULL THEN
        RETURN 'key is null';
    END IF;
    key_limit := LEAST(idempotency.owner_max_key_length(), COALESCE(idempotency.session_max_key_length(), 1024));
    problem := idempotency.key_problem_code(scope, key, key_limit);
    RETURN CASE WHEN problem OPERATOR(pg_catalog.=) 1 THEN 'key is empty'
                WHEN problem OPERATOR(pg_catalog.=) 2 THEN pg_catalog.format('scope is longer than %s bytes', key_limit)
                WHEN problem OPERATOR(pg_catalog.=) 3 THEN pg_catalog.format('key is longer than %s bytes', key_limit) END;
END
$$;
COMMENT ON FUNCTION @extschema@.idempotency_key_problem(text, text) IS
    'what makes a scope and key unacceptable to the other functions (empty, too long, null), or NULL: a 400 without an error';

-- ---------------------------------------------------------------------------
-- Expiry and statistics
-- ---------------------------------------------------------------------------

-- Deletes up to max_rows expired records (all when NULL) now, and returns how
-- many.  Rule E: only what is past its expiry, and only rows nobody has
-- locked (SKIP LOCKED): a record another transaction is changing is never
-- expired, and the sweep never waits for a request.  Keys of a dropped role
-- belong to no one, and go too.
CREATE FUNCTION @extschema@.idempotency_expire(max_rows bigint DEFAULT NULL) RETURNS bigint
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
    AS $$
DECLARE
    deleted pg_catalog.int8;
BEGIN
    IF max_rows OPERATOR(pg_catalog.<) 0 THEN
        RAISE EXCEPTION 'invalid max_rows %', max_rows
            USING ERRCODE = 'invalid_parameter_value', DETAIL = 'max_rows must be zero or more, or NULL for no limit.';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        PERFORM idempotency.refuse_read_only('idempotency_expire');
    END IF;
    WITH doomed AS (
        SELECT x.ctid FROM idempotency.keys AS x
         WHERE idempotency.expired(x, pg_catalog.clock_timestamp())
            OR (x.tenant OPERATOR(pg_catalog.<>) 0::pg_catalog.regrole
                AND NOT EXISTS (SELECT FROM pg_catalog.pg_roles AS r WHERE r.oid OPERATOR(pg_catalog.=) x.tenant))
         LIMIT max_rows
         FOR UPDATE SKIP LOCKED),
    gone AS (
        DELETE FROM idempotency.keys AS x USING doomed
         WHERE x.ctid OPERATOR(pg_catalog.=) doomed.ctid
        RETURNING 1)
    SELECT pg_catalog.count(*) INTO deleted FROM gone;
    IF idempotency.any_tenants() THEN
        DELETE FROM idempotency.tenants AS t
         WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles AS r WHERE r.oid OPERATOR(pg_catalog.=) t.tenant);
    END IF;
    RETURN deleted;
END
$$;
COMMENT ON FUNCTION @extschema@.idempotency_expire(bigint) IS
    'delete up to max_rows expired keys of this database now (all when NULL); returns the number deleted';
REVOKE ALL ON FUNCTION @extschema@.idempotency_expire(bigint) FROM PUBLIC;

-- The schema of the API functions (the extension's schema, or the schema of
-- a plain install), for code that calls them by name.
CREATE FUNCTION idempotency.api_schema() RETURNS regnamespace
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (SELECT t.typnamespace::pg_catalog.regnamespace FROM pg_catalog.pg_type AS t
             WHERE t.oid OPERATOR(pg_catalog.=) pg_catalog.pg_typeof(NULL::@extschema@.idempotency_outcome)::pg_catalog.oid);
COMMENT ON FUNCTION idempotency.api_schema() IS 'the schema of the SQL edition''s API functions';

-- What the scheduled expiry runs (idempotency_schedule_expiry): expired keys
-- deleted in transactions of batch_size rows until none is left, then the
-- per-scope summary refreshed (as the extension's worker does every
-- minute).  A procedure,
-- so that each batch commits (so it runs as its caller, who needs EXECUTE on
-- idempotency_expire and idempotency_scope_stats_refresh); call it outside a
-- transaction block.
CREATE PROCEDURE @extschema@.idempotency_expire_batches(batch_size bigint DEFAULT 10000)
    LANGUAGE plpgsql
    AS $$
DECLARE
    deleted pg_catalog.int8;
    api pg_catalog.text := pg_catalog.quote_ident(idempotency.api_schema()::pg_catalog.text);
BEGIN
    IF batch_size IS NULL OR batch_size OPERATOR(pg_catalog.<) 1 THEN
        RAISE EXCEPTION 'invalid batch_size %', batch_size
            USING ERRCODE = 'invalid_parameter_value', DETAIL = 'batch_size must be 1 or more.';
    END IF;
    LOOP
        EXECUTE pg_catalog.format('SELECT %s.idempotency_expire($1)', api) INTO deleted USING batch_size;
        COMMIT;
        EXIT WHEN deleted OPERATOR(pg_catalog.<) batch_size;
    END LOOP;
    EXECUTE pg_catalog.format('SELECT %s.idempotency_scope_stats_refresh()', api);
END
$$;
COMMENT ON PROCEDURE @extschema@.idempotency_expire_batches(bigint) IS
    'delete every expired key in transactions of batch_size keys, then refresh the per-scope summary (what the scheduled expiry runs)';
REVOKE ALL ON PROCEDURE @extschema@.idempotency_expire_batches(bigint) FROM PUBLIC;

-- The statistics that the extension keeps in shared memory have no place
-- here: as the extension without shared_preload_libraries, preloaded is
-- false and every counter NULL (doc/sql-edition.md).
CREATE FUNCTION @extschema@.idempotency_stats(
    OUT preloaded boolean,
    OUT claims bigint, OUT replays bigint, OUT mismatches bigint, OUT in_progress bigint,
    OUT waits bigint, OUT wait_seconds double precision,
    OUT completes bigint, OUT server_errors_dropped bigint, OUT responses_omitted bigint,
    OUT responses_replaced bigint, OUT checkpoints bigint, OUT releases bigint, OUT forgets bigint,
    OUT keys_expired bigint, OUT sweeps bigint,
    OUT deferred_claims bigint, OUT deferred_fallbacks bigint,
    OUT last_sweep_time double precision, OUT last_sweep_seconds double precision,
    OUT last_error text, OUT last_error_time double precision)
    LANGUAGE sql VOLATILE PARALLEL SAFE
    RETURN ROW(false, NULL::pg_catalog.int8, NULL::pg_catalog.int8, NULL::pg_catalog.int8, NULL::pg_catalog.int8,
               NULL::pg_catalog.int8, NULL::pg_catalog.float8, NULL::pg_catalog.int8, NULL::pg_catalog.int8,
               NULL::pg_catalog.int8, NULL::pg_catalog.int8, NULL::pg_catalog.int8, NULL::pg_catalog.int8,
               NULL::pg_catalog.int8, NULL::pg_catalog.int8, NULL::pg_catalog.int8, NULL::pg_catalog.int8,
               NULL::pg_catalog.int8, NULL::pg_catalog.float8, NULL::pg_catalog.float8, NULL::pg_catalog.text,
               NULL::pg_catalog.float8);
COMMENT ON FUNCTION @extschema@.idempotency_stats() IS
    'the extension''s server-wide counters: in the SQL edition, which has no shared memory, preloaded is false and the rest NULL';
REVOKE ALL ON FUNCTION @extschema@.idempotency_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.idempotency_stats() TO pg_monitor;

-- The per-scope summary, as the extension computes it (scope_stats.cpp):
-- readers see the old summary until the new one commits; two refreshes take
-- turns.
CREATE FUNCTION @extschema@.idempotency_scope_stats_refresh() RETURNS bigint
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
    AS $$
DECLARE
    scopes pg_catalog.int8;
BEGIN
    LOCK TABLE idempotency.scope_stats IN SHARE UPDATE EXCLUSIVE MODE;
    DELETE FROM idempotency.scope_stats;
    INSERT INTO idempotency.scope_stats (scope, in_progress, completed, expired,
                                         oldest_created_at, oldest_in_progress_created_at, refreshed_at)
    SELECT k.scope,
           pg_catalog.count(*) FILTER (WHERE k.status OPERATOR(pg_catalog.=) 'p'::pg_catalog."char"),
           pg_catalog.count(*) FILTER (WHERE k.status OPERATOR(pg_catalog.=) 'c'::pg_catalog."char"),
           pg_catalog.count(*) FILTER (WHERE k.expires_at OPERATOR(pg_catalog.<=) pg_catalog.now()),
           pg_catalog.min(k.created_at),
           pg_catalog.min(k.created_at) FILTER (WHERE k.status OPERATOR(pg_catalog.=) 'p'::pg_catalog."char"),
           pg_catalog.now()
      FROM idempotency.keys AS k
     GROUP BY k.scope;
    GET DIAGNOSTICS scopes = ROW_COUNT;
    RETURN scopes;
END
$$;
COMMENT ON FUNCTION @extschema@.idempotency_scope_stats_refresh() IS
    'summarise the keys table per scope now, for idempotency_scope_stats() (reads the whole table); returns the number of scopes';
REVOKE ALL ON FUNCTION @extschema@.idempotency_scope_stats_refresh() FROM PUBLIC;

CREATE FUNCTION @extschema@.idempotency_scope_stats(
    OUT scope text, OUT in_progress bigint, OUT completed bigint, OUT expired bigint,
    OUT oldest_claim_age_seconds double precision,
    OUT oldest_in_progress_age_seconds double precision,
    OUT summary_age_seconds double precision)
    RETURNS SETOF record
    LANGUAGE sql VOLATILE SECURITY DEFINER
    AS $$
        SELECT s.scope, s.in_progress, s.completed, s.expired,
               pg_catalog.date_part('epoch', pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) s.oldest_created_at),
               pg_catalog.date_part('epoch', pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) s.oldest_in_progress_created_at),
               pg_catalog.date_part('epoch', pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) s.refreshed_at)
          FROM idempotency.scope_stats AS s
         ORDER BY s.scope
    $$;
COMMENT ON FUNCTION @extschema@.idempotency_scope_stats() IS
    'per scope: keys in progress, completed and past their expiry time, and the ages of the oldest claim, of the oldest unfinished one and of the summary (reads the summary, not the keys)';
REVOKE ALL ON FUNCTION @extschema@.idempotency_scope_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.idempotency_scope_stats() TO pg_monitor;

-- ---------------------------------------------------------------------------
-- Administration: tenant isolation, the expiry schedule
-- ---------------------------------------------------------------------------

-- The extension's ALTER ROLE r SET idempotency.tenant_isolation = role (or
-- off): a role whose keys are its own, or no longer.  For the owner only.
CREATE FUNCTION @extschema@.idempotency_tenant_isolation(role regrole, mode text DEFAULT 'role') RETURNS void
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
    AS $$
BEGIN
    IF role IS NULL THEN
        PERFORM idempotency.refuse_null('role');
    END IF;
    IF mode OPERATOR(pg_catalog.=) 'role' THEN
        INSERT INTO idempotency.tenants (tenant) VALUES (role) ON CONFLICT ON CONSTRAINT tenants_pkey DO NOTHING;
    ELSIF mode OPERATOR(pg_catalog.=) 'off' THEN
        DELETE FROM idempotency.tenants AS t WHERE t.tenant OPERATOR(pg_catalog.=) role;
    ELSE
        RAISE EXCEPTION 'invalid tenant isolation mode "%"', mode
            USING ERRCODE = 'invalid_parameter_value', HINT = 'The modes are role and off.';
    END IF;
END
$$;
COMMENT ON FUNCTION @extschema@.idempotency_tenant_isolation(regrole, text) IS
    'tenant isolation for a role (mode role: each key it claims is its own; off: no longer), as the extension''s idempotency.tenant_isolation setting';
REVOKE ALL ON FUNCTION @extschema@.idempotency_tenant_isolation(regrole, text) FROM PUBLIC;

-- The expiry schedule, with pg_cron in this database: one job, named after
-- the database, that runs idempotency_expire_batches(batch_size) as the
-- calling role every minute (pg_cron runs a job at most once a minute).
-- Returns the job's id; calling it again replaces the job.  Before DROP
-- EXTENSION, unschedule it: pg_cron keeps a job whose function is gone.
CREATE FUNCTION @extschema@.idempotency_schedule_expiry(batch_size bigint DEFAULT 10000,
                                                      schedule text DEFAULT '* * * * *')
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
    AS $$
DECLARE
    command pg_catalog.text;
BEGIN
    IF batch_size IS NULL OR batch_size OPERATOR(pg_catalog.<) 1 THEN
        RAISE EXCEPTION 'invalid batch_size %', batch_size
            USING ERRCODE = 'invalid_parameter_value', DETAIL = 'batch_size must be 1 or more.';
    END IF;
    command := pg_catalog.format('CALL %I.idempotency_expire_batches(%s)', idempotency.api_schema(), batch_size);
    IF pg_catalog.to_regclass('cron.job') IS NULL THEN
        RAISE EXCEPTION 'pg_cron is not installed in this database'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'pg_cron schedules jobs from the database named by its setting cron.database_name.',
                  HINT = pg_catalog.format('In that database, run: SELECT cron.schedule_in_database(%L, %L, %L, %L)',
                                           idempotency.expiry_job_name(), schedule, command, pg_catalog.current_database());
    END IF;
    RETURN cron.schedule(idempotency.expiry_job_name(), schedule, command);
END
$$;
COMMENT ON FUNCTION @extschema@.idempotency_schedule_expiry(bigint, text) IS
    'schedule the expiry with pg_cron (in this database): idempotency_expire_batches every minute, as the calling role; returns the job id';
REVOKE ALL ON FUNCTION @extschema@.idempotency_schedule_expiry(bigint, text) FROM PUBLIC;

CREATE FUNCTION @extschema@.idempotency_unschedule_expiry() RETURNS boolean
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
    AS $$
BEGIN
    IF pg_catalog.to_regclass('cron.job') IS NULL THEN
        RETURN false;
    END IF;
    IF NOT EXISTS (SELECT FROM cron.job AS j WHERE j.jobname OPERATOR(pg_catalog.=) idempotency.expiry_job_name()
                                              AND j.username OPERATOR(pg_catalog.=) CURRENT_USER) THEN
        RETURN false;
    END IF;
    RETURN cron.unschedule(idempotency.expiry_job_name());
END
$$;
COMMENT ON FUNCTION @extschema@.idempotency_unschedule_expiry() IS
    'remove the expiry job that idempotency_schedule_expiry() made for the calling role; false when there was none';
REVOKE ALL ON FUNCTION @extschema@.idempotency_unschedule_expiry() FROM PUBLIC;

CREATE FUNCTION idempotency.expiry_job_name() RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN 'idempotency expiry in ' OPERATOR(pg_catalog.||) pg_catalog.current_database();
COMMENT ON FUNCTION idempotency.expiry_job_name() IS 'the name of the pg_cron job of this database''s expiry';

-- ---------------------------------------------------------------------------
-- Privileges of the private helpers
-- ---------------------------------------------------------------------------

-- Every role may call what request_hash and idempotency_key_problem call
-- (they run as their caller); the rest of the helpers serve the functions
-- above, which run as the owner, and nobody else.
DO $$
DECLARE
    helper pg_catalog.regprocedure;
BEGIN
    FOR helper IN
        SELECT p.oid::pg_catalog.regprocedure FROM pg_catalog.pg_proc AS p
         WHERE p.pronamespace OPERATOR(pg_catalog.=) 'idempotency'::pg_catalog.regnamespace
           AND p.proname OPERATOR(pg_catalog.<>) ALL (ARRAY[
               'reject_request_hash_text', 'text_bytes', 'framed', 'jsonb_items', 'jsonb_encoding',
               'digest_text', 'parts_encoding', 'is_json_media_type', 'json_nests_deeper', 'body_digest',
               'key_problem_code', 'owner_max_key_length', 'session_max_key_length', 'refuse_setting',
               'api_schema', 'expiry_job_name'])
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', helper);
    END LOOP;
END
$$;
