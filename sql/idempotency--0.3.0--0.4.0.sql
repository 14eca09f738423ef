\echo Use "CREATE EXTENSION idempotency" to load this file. \quit

-- The update from 0.3.0.  A fresh CREATE EXTENSION of 0.4.0 runs the 0.3.0
-- install script and then this one.

-- ---------------------------------------------------------------------------
-- Request hashes of every string type a driver can send
-- ---------------------------------------------------------------------------

-- request_hash(x) of a string type without an overload of its own is read as
-- the cast x::request_hash, which parses the body as a digest (22P02), as 0.3.0
-- fixed for varchar.  JDBC's setObject(..., Types.CHAR) sends bpchar, hashed
-- by its bytes as they came (as text and varchar are: the padding of a
-- char(n) value included); name and "char" by their text.
CREATE FUNCTION @extschema@.request_hash(character) RETURNS @extschema@.request_hash
    AS 'MODULE_PATHNAME', 'request_hash_from_text' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.request_hash(character) IS 'request_hash(text) of a char(n) (bpchar) value, by its bytes';
CREATE FUNCTION @extschema@.request_hash(name) RETURNS @extschema@.request_hash
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT @extschema@.request_hash($1::pg_catalog.text) $$;
COMMENT ON FUNCTION @extschema@.request_hash(name) IS 'request_hash(text) of a name';
CREATE FUNCTION @extschema@.request_hash("char") RETURNS @extschema@.request_hash
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT @extschema@.request_hash($1::pg_catalog.text) $$;
COMMENT ON FUNCTION @extschema@.request_hash("char") IS 'request_hash(text) of a "char"';
