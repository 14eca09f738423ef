\echo Use "CREATE EXTENSION idempotency" to load this file. \quit

-- ---------------------------------------------------------------------------
-- request_hash: a 32-byte SHA-256 digest of a request
-- ---------------------------------------------------------------------------

CREATE TYPE @extschema@.request_hash;

CREATE FUNCTION @extschema@.request_hash_in(cstring) RETURNS @extschema@.request_hash
    AS 'MODULE_PATHNAME', 'request_hash_in' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION @extschema@.request_hash_out(@extschema@.request_hash) RETURNS cstring
    AS 'MODULE_PATHNAME', 'request_hash_out' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION @extschema@.request_hash_recv(internal) RETURNS @extschema@.request_hash
    AS 'MODULE_PATHNAME', 'request_hash_recv' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION @extschema@.request_hash_send(@extschema@.request_hash) RETURNS bytea
    AS 'MODULE_PATHNAME', 'request_hash_send' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE TYPE @extschema@.request_hash (
    INPUT = @extschema@.request_hash_in,
    OUTPUT = @extschema@.request_hash_out,
    RECEIVE = @extschema@.request_hash_recv,
    SEND = @extschema@.request_hash_send,
    INTERNALLENGTH = 32,
    ALIGNMENT = char,
    STORAGE = plain
);
COMMENT ON TYPE @extschema@.request_hash IS
    'SHA-256 fingerprint of a request (32 bytes; text form is 64 lowercase hex digits)';
COMMENT ON FUNCTION @extschema@.request_hash_in(cstring) IS 'request_hash text input (64 hex digits)';
COMMENT ON FUNCTION @extschema@.request_hash_out(@extschema@.request_hash) IS 'request_hash text output';
COMMENT ON FUNCTION @extschema@.request_hash_recv(internal) IS 'request_hash binary input';
COMMENT ON FUNCTION @extschema@.request_hash_send(@extschema@.request_hash) IS 'request_hash binary output';

-- Constructors: each hashes its argument.
CREATE FUNCTION @extschema@.request_hash(bytea) RETURNS @extschema@.request_hash
    AS 'MODULE_PATHNAME', 'request_hash_from_bytea' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.request_hash(bytea) IS 'SHA-256 of the bytes';
CREATE FUNCTION @extschema@.request_hash(text) RETURNS @extschema@.request_hash
    AS 'MODULE_PATHNAME', 'request_hash_from_text' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.request_hash(text) IS 'SHA-256 of the text''s bytes in the database encoding (UTF-8 in a UTF-8 database)';
CREATE FUNCTION @extschema@.request_hash(jsonb) RETURNS @extschema@.request_hash
    AS 'MODULE_PATHNAME', 'request_hash_from_jsonb' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.request_hash(jsonb) IS
    'SHA-256 of a canonical encoding of the document: documents equal as jsonb hash alike';
CREATE FUNCTION @extschema@.request_hash(VARIADIC text[]) RETURNS @extschema@.request_hash
    AS 'MODULE_PATHNAME', 'request_hash_from_parts' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.request_hash(VARIADIC text[]) IS
    'SHA-256 of length-prefixed parts (e.g. method, path, body); NULL parts differ from empty ones';
-- JDBC's setString sends varchar.  Without an exact match, request_hash(x)
-- of a varchar would be read as the cast x::request_hash and parse the body
-- as a digest (22P02); varchar is hashed as the text it is.
CREATE FUNCTION @extschema@.request_hash(character varying) RETURNS @extschema@.request_hash
    AS 'MODULE_PATHNAME', 'request_hash_from_text' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.request_hash(character varying) IS 'request_hash(text) of a varchar';
-- An argument whose type nobody gave (a driver's untyped parameter, a bare
-- literal) would otherwise resolve to request_hash(text) and hash a JSON body
-- by its spelling.  This one takes 64 hex digits as a digest, as the literal
-- form of the type does, and refuses anything else.
CREATE FUNCTION @extschema@.request_hash(unknown) RETURNS @extschema@.request_hash
    AS 'MODULE_PATHNAME', 'request_hash_from_unknown' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.request_hash(unknown) IS
    'an untyped argument: 64 hex digits are a digest; anything else is refused (give the argument a type)';
-- One name per constructor, so that a driver's untyped parameter has exactly
-- one type it can be.
CREATE FUNCTION @extschema@.request_hash_jsonb(jsonb) RETURNS @extschema@.request_hash
    AS 'MODULE_PATHNAME', 'request_hash_from_jsonb' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.request_hash_jsonb(jsonb) IS 'request_hash(jsonb) under a name of its own';
-- A JSON body that a driver sends as text or varchar (JDBC's setString),
-- hashed by its value as request_hash_jsonb(jsonb) hashes it.
CREATE FUNCTION @extschema@.request_hash_jsonb(text) RETURNS @extschema@.request_hash
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT @extschema@.request_hash_jsonb($1::pg_catalog.jsonb) $$;
COMMENT ON FUNCTION @extschema@.request_hash_jsonb(text) IS 'request_hash_jsonb of a JSON document sent as text';
CREATE FUNCTION @extschema@.request_hash_text(text) RETURNS @extschema@.request_hash
    AS 'MODULE_PATHNAME', 'request_hash_from_text' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.request_hash_text(text) IS 'request_hash(text) under a name of its own';
CREATE FUNCTION @extschema@.request_hash_bytea(bytea) RETURNS @extschema@.request_hash
    AS 'MODULE_PATHNAME', 'request_hash_from_bytea' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.request_hash_bytea(bytea) IS 'request_hash(bytea) under a name of its own';
CREATE FUNCTION @extschema@.request_hash_parts(VARIADIC text[]) RETURNS @extschema@.request_hash
    AS 'MODULE_PATHNAME', 'request_hash_from_parts' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.request_hash_parts(VARIADIC text[]) IS 'request_hash(VARIADIC text[]) under a name of its own';

-- Casts wrap or expose an existing 32-byte digest; they do not hash.
CREATE FUNCTION @extschema@.request_hash_from_digest(bytea) RETURNS @extschema@.request_hash
    AS 'MODULE_PATHNAME', 'request_hash_from_digest' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.request_hash_from_digest(bytea) IS
    'wrap an existing 32-byte SHA-256 digest (the bytea to request_hash cast)';
CREATE FUNCTION @extschema@.request_hash_digest(@extschema@.request_hash) RETURNS bytea
    AS 'MODULE_PATHNAME', 'request_hash_digest' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.request_hash_digest(@extschema@.request_hash) IS
    'the 32 digest bytes (the request_hash to bytea cast)';
CREATE CAST (bytea AS @extschema@.request_hash)
    WITH FUNCTION @extschema@.request_hash_from_digest(bytea);
CREATE CAST (@extschema@.request_hash AS bytea)
    WITH FUNCTION @extschema@.request_hash_digest(@extschema@.request_hash);
COMMENT ON CAST (bytea AS @extschema@.request_hash) IS 'wraps a 32-byte digest; does not hash';
COMMENT ON CAST (@extschema@.request_hash AS bytea) IS 'the 32 digest bytes';

-- Comparison: byte-wise, so the btree order is the order of the hex text.
CREATE FUNCTION @extschema@.request_hash_eq(@extschema@.request_hash, @extschema@.request_hash) RETURNS boolean
    AS 'MODULE_PATHNAME', 'request_hash_eq' LANGUAGE C IMMUTABLE STRICT LEAKPROOF PARALLEL SAFE;
CREATE FUNCTION @extschema@.request_hash_ne(@extschema@.request_hash, @extschema@.request_hash) RETURNS boolean
    AS 'MODULE_PATHNAME', 'request_hash_ne' LANGUAGE C IMMUTABLE STRICT LEAKPROOF PARALLEL SAFE;
CREATE FUNCTION @extschema@.request_hash_lt(@extschema@.request_hash, @extschema@.request_hash) RETURNS boolean
    AS 'MODULE_PATHNAME', 'request_hash_lt' LANGUAGE C IMMUTABLE STRICT LEAKPROOF PARALLEL SAFE;
CREATE FUNCTION @extschema@.request_hash_le(@extschema@.request_hash, @extschema@.request_hash) RETURNS boolean
    AS 'MODULE_PATHNAME', 'request_hash_le' LANGUAGE C IMMUTABLE STRICT LEAKPROOF PARALLEL SAFE;
CREATE FUNCTION @extschema@.request_hash_gt(@extschema@.request_hash, @extschema@.request_hash) RETURNS boolean
    AS 'MODULE_PATHNAME', 'request_hash_gt' LANGUAGE C IMMUTABLE STRICT LEAKPROOF PARALLEL SAFE;
CREATE FUNCTION @extschema@.request_hash_ge(@extschema@.request_hash, @extschema@.request_hash) RETURNS boolean
    AS 'MODULE_PATHNAME', 'request_hash_ge' LANGUAGE C IMMUTABLE STRICT LEAKPROOF PARALLEL SAFE;
CREATE FUNCTION @extschema@.request_hash_cmp(@extschema@.request_hash, @extschema@.request_hash) RETURNS integer
    AS 'MODULE_PATHNAME', 'request_hash_cmp' LANGUAGE C IMMUTABLE STRICT LEAKPROOF PARALLEL SAFE;
CREATE FUNCTION @extschema@.request_hash_hash(@extschema@.request_hash) RETURNS integer
    AS 'MODULE_PATHNAME', 'request_hash_hash' LANGUAGE C IMMUTABLE STRICT LEAKPROOF PARALLEL SAFE;
CREATE FUNCTION @extschema@.request_hash_hash_extended(@extschema@.request_hash, bigint) RETURNS bigint
    AS 'MODULE_PATHNAME', 'request_hash_hash_extended' LANGUAGE C IMMUTABLE STRICT LEAKPROOF PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.request_hash_eq(@extschema@.request_hash, @extschema@.request_hash) IS 'implementation of = for request_hash';
COMMENT ON FUNCTION @extschema@.request_hash_ne(@extschema@.request_hash, @extschema@.request_hash) IS 'implementation of <> for request_hash';
COMMENT ON FUNCTION @extschema@.request_hash_lt(@extschema@.request_hash, @extschema@.request_hash) IS 'implementation of < for request_hash';
COMMENT ON FUNCTION @extschema@.request_hash_le(@extschema@.request_hash, @extschema@.request_hash) IS 'implementation of <= for request_hash';
COMMENT ON FUNCTION @extschema@.request_hash_gt(@extschema@.request_hash, @extschema@.request_hash) IS 'implementation of > for request_hash';
COMMENT ON FUNCTION @extschema@.request_hash_ge(@extschema@.request_hash, @extschema@.request_hash) IS 'implementation of >= for request_hash';
COMMENT ON FUNCTION @extschema@.request_hash_cmp(@extschema@.request_hash, @extschema@.request_hash) IS 'btree comparison support for request_hash';
COMMENT ON FUNCTION @extschema@.request_hash_hash(@extschema@.request_hash) IS 'hash support for request_hash';
COMMENT ON FUNCTION @extschema@.request_hash_hash_extended(@extschema@.request_hash, bigint) IS 'seeded hash support for request_hash';

CREATE OPERATOR @extschema@.= (
    LEFTARG = @extschema@.request_hash, RIGHTARG = @extschema@.request_hash,
    FUNCTION = @extschema@.request_hash_eq,
    COMMUTATOR = OPERATOR(@extschema@.=), NEGATOR = OPERATOR(@extschema@.<>),
    RESTRICT = eqsel, JOIN = eqjoinsel, HASHES, MERGES
);
CREATE OPERATOR @extschema@.<> (
    LEFTARG = @extschema@.request_hash, RIGHTARG = @extschema@.request_hash,
    FUNCTION = @extschema@.request_hash_ne,
    COMMUTATOR = OPERATOR(@extschema@.<>), NEGATOR = OPERATOR(@extschema@.=),
    RESTRICT = neqsel, JOIN = neqjoinsel
);
CREATE OPERATOR @extschema@.< (
    LEFTARG = @extschema@.request_hash, RIGHTARG = @extschema@.request_hash,
    FUNCTION = @extschema@.request_hash_lt,
    COMMUTATOR = OPERATOR(@extschema@.>), NEGATOR = OPERATOR(@extschema@.>=),
    RESTRICT = scalarltsel, JOIN = scalarltjoinsel
);
CREATE OPERATOR @extschema@.<= (
    LEFTARG = @extschema@.request_hash, RIGHTARG = @extschema@.request_hash,
    FUNCTION = @extschema@.request_hash_le,
    COMMUTATOR = OPERATOR(@extschema@.>=), NEGATOR = OPERATOR(@extschema@.>),
    RESTRICT = scalarlesel, JOIN = scalarlejoinsel
);
CREATE OPERATOR @extschema@.> (
    LEFTARG = @extschema@.request_hash, RIGHTARG = @extschema@.request_hash,
    FUNCTION = @extschema@.request_hash_gt,
    COMMUTATOR = OPERATOR(@extschema@.<), NEGATOR = OPERATOR(@extschema@.<=),
    RESTRICT = scalargtsel, JOIN = scalargtjoinsel
);
CREATE OPERATOR @extschema@.>= (
    LEFTARG = @extschema@.request_hash, RIGHTARG = @extschema@.request_hash,
    FUNCTION = @extschema@.request_hash_ge,
    COMMUTATOR = OPERATOR(@extschema@.<=), NEGATOR = OPERATOR(@extschema@.<),
    RESTRICT = scalargesel, JOIN = scalargejoinsel
);

CREATE OPERATOR CLASS @extschema@.request_hash_ops
    DEFAULT FOR TYPE @extschema@.request_hash USING btree AS
        OPERATOR 1 @extschema@.<,
        OPERATOR 2 @extschema@.<=,
        OPERATOR 3 @extschema@.=,
        OPERATOR 4 @extschema@.>=,
        OPERATOR 5 @extschema@.>,
        FUNCTION 1 @extschema@.request_hash_cmp(@extschema@.request_hash, @extschema@.request_hash);
CREATE OPERATOR CLASS @extschema@.request_hash_hash_ops
    DEFAULT FOR TYPE @extschema@.request_hash USING hash AS
        OPERATOR 1 @extschema@.=,
        FUNCTION 1 @extschema@.request_hash_hash(@extschema@.request_hash),
        FUNCTION 2 @extschema@.request_hash_hash_extended(@extschema@.request_hash, bigint);
COMMENT ON OPERATOR CLASS @extschema@.request_hash_ops USING btree IS 'default btree operator class for request_hash';
COMMENT ON OPERATOR CLASS @extschema@.request_hash_hash_ops USING hash IS 'default hash operator class for request_hash';
COMMENT ON OPERATOR FAMILY @extschema@.request_hash_ops USING btree IS 'btree operators of request_hash';
COMMENT ON OPERATOR FAMILY @extschema@.request_hash_hash_ops USING hash IS 'hash operators of request_hash';
COMMENT ON OPERATOR @extschema@.= (@extschema@.request_hash, @extschema@.request_hash) IS 'equal';
COMMENT ON OPERATOR @extschema@.<> (@extschema@.request_hash, @extschema@.request_hash) IS 'not equal';
COMMENT ON OPERATOR @extschema@.< (@extschema@.request_hash, @extschema@.request_hash) IS 'less than (byte-wise)';
COMMENT ON OPERATOR @extschema@.<= (@extschema@.request_hash, @extschema@.request_hash) IS 'less than or equal (byte-wise)';
COMMENT ON OPERATOR @extschema@.> (@extschema@.request_hash, @extschema@.request_hash) IS 'greater than (byte-wise)';
COMMENT ON OPERATOR @extschema@.>= (@extschema@.request_hash, @extschema@.request_hash) IS 'greater than or equal (byte-wise)';

-- ---------------------------------------------------------------------------
-- Storage: one row per (scope, key), in a schema of its own so that a user's
-- table of the same name never clashes. Only the C functions below write it,
-- through the executor's single-row routines (every index, triggers, and
-- any constraint a DBA adds); the layout is documented in src/store.hpp.
-- ---------------------------------------------------------------------------

CREATE SCHEMA idempotency;
COMMENT ON SCHEMA idempotency IS 'private storage of the idempotency extension';

-- Columns that never change after a claim come first: a completing update then
-- shares a long common prefix with the claim it replaces, which keeps its WAL
-- record small.  Nothing a completion changes is indexed, so it is a HOT update.
-- The default fillfactor suffices for that: page pruning removes the claim
-- versions a completion leaves behind, whereas a lower fillfactor left pages
-- half empty (measured with make bench: 553 against 313 bytes per key).
-- Columns added after 0.1.0 follow its columns, in the order the upgrade
-- scripts add them, so that installed and upgraded tables are alike.
-- status and attempt have no CHECK constraints: the executor compiles every
-- CHECK expression afresh for each single-row write, which cost 15% of the
-- CPU time of a new request (make bench, 0.2.0 development).  The library is
-- their only writer, and it refuses a version whose status or attempt is out
-- of range when it reads one (XX001).  (Constraints a DBA adds still apply.)
CREATE TABLE idempotency.keys (
    scope            text COLLATE "C" NOT NULL,
    key              text COLLATE "C" NOT NULL,
    request          @extschema@.request_hash NOT NULL,
    created_at       timestamptz NOT NULL,
    ttl              interval NOT NULL,
    expires_at       timestamptz NOT NULL,
    status           "char" NOT NULL,
    attempt          integer NOT NULL,
    lease_expires_at timestamptz,
    completed_at     timestamptz,
    response_status  integer,
    recovery_point   text,
    response_body    jsonb,
    response_headers jsonb,
    tenant           pg_catalog.regrole NOT NULL DEFAULT 0,
    lease            interval,
    response_body_bytes bytea,
    response_body_omitted boolean,
    claim_data       jsonb,
    sweep_at         timestamptz,
    shard_key        text,
    CONSTRAINT keys_pkey PRIMARY KEY (tenant, scope, key)
);
-- Nothing indexes the expiry: every index entry costs each new request its
-- bytes and a WAL record.  The expiry sweep reads the heap in block order
-- instead (see store.cpp), which costs the worker a few milliseconds per
-- sweep however large the table.  sweep_at, which 0.2.0 indexed for it,
-- stays NULL; it keeps its place so that the columns of an installed and an
-- updated table, and of Citus shards made before and after, line up.
COMMENT ON TABLE idempotency.keys IS
    'one row per (tenant, scope, key): the claim, its lease and the stored response (status p = in progress, c = completed)';
COMMENT ON COLUMN idempotency.keys.tenant IS
    'the role that owns the key with idempotency.tenant_isolation = role, else 0 (-); dumped as the role''s name';
COMMENT ON COLUMN idempotency.keys.sweep_at IS
    'unused since 0.3.0 (NULL); 0.2.0 indexed it for the expiry sweep';
COMMENT ON COLUMN idempotency.keys.shard_key IS
    'with Citus and a tenant column of type bigint, integer or uuid: the scope as that type, which idempotency_distribute() distributes the keys by; NULL otherwise';
-- Every role may name the objects of the schema, none of which grants PUBLIC
-- anything (sql/privileges.sql checks): with Citus, a role whose calls are
-- forwarded names idempotency.route on every node, where Citus does not
-- propagate a grant on the schema.
GRANT USAGE ON SCHEMA idempotency TO PUBLIC;
REVOKE ALL ON TABLE idempotency.keys FROM PUBLIC;
-- pg_dump must keep the keys: a restore that dropped them would let every
-- retried request run a second time.
SELECT pg_catalog.pg_extension_config_dump('idempotency.keys', '');

-- Always empty (no row passes its CHECK).  With Citus, idempotency_distribute()
-- distributes it by the keys' distribution column, co-located with them: a
-- call that reaches a node without its scope's shard is run on the shard's
-- node through a query on this table's shard there, which Citus runs as the
-- caller (see doc/citus.md, "Forwarded calls").  A role whose calls are to
-- be forwarded needs SELECT and UPDATE on this table, granted by the DBA
-- (Citus propagates that grant to the shards): not to PUBLIC, since a
-- routing UPDATE holds the shard group's metadata lock, which keeps shard
-- moves waiting, until its transaction ends.  The primary key is its replica identity: a shard move
-- by logical replication (Citus's default where every table has one) then
-- publishes the routing UPDATEs.
CREATE TABLE idempotency.route (
    tenant text COLLATE "C",
    CONSTRAINT route_stays_empty CHECK (false),
    CONSTRAINT route_pkey PRIMARY KEY (tenant)
);
COMMENT ON TABLE idempotency.route IS
    'always empty; with Citus, distributed with the keys: calls that reach a node without their scope''s shard are routed to it through this table';
REVOKE ALL ON TABLE idempotency.route FROM PUBLIC;

-- Always empty too.  With Citus and the keys kept on the coordinator, a
-- write of a key asks Citus to commit the transaction's distributed writes
-- in two phases, with the claim; from PostgreSQL 16 on, Citus's library
-- exports no routine for that, and the SQL-level way is an update of this
-- table made a reference table by the DBA (create_reference_table), which
-- Citus commits in two phases (see doc/citus.md, "Keys on the coordinator").
CREATE TABLE idempotency.two_phase (
    marked boolean,
    CONSTRAINT two_phase_stays_empty CHECK (false)
);
COMMENT ON TABLE idempotency.two_phase IS
    'always empty; with Citus and the keys on the coordinator, made a reference table: each transaction that writes a key updates it, so that Citus commits in two phases';
REVOKE ALL ON TABLE idempotency.two_phase FROM PUBLIC;

-- ---------------------------------------------------------------------------
-- API
-- ---------------------------------------------------------------------------

CREATE TYPE @extschema@.idempotency_outcome AS ENUM ('claimed', 'replay', 'in_progress', 'mismatch');
COMMENT ON TYPE @extschema@.idempotency_outcome IS
    'answer of idempotency_begin: claimed (run the request), replay (return the stored response), in_progress (409, retry later), mismatch (422, key reused for another request)';

-- The functions return named row types rather than OUT parameters: the
-- executor then takes the row descriptor from the type cache instead of
-- rebuilding it from pg_proc at every statement start (about 8% of a replay).
CREATE TYPE @extschema@.idempotency_begin_result AS (
    outcome @extschema@.idempotency_outcome, attempt integer,
    response_status integer, response_body jsonb, response_headers jsonb,
    recovery_point text, retry_after interval,
    created_at timestamptz, expires_at timestamptz,
    response_body_bytes bytea, response_body_omitted boolean,
    status text, lease_expires_at timestamptz, claim_data jsonb,
    retry_after_seconds integer);
COMMENT ON TYPE @extschema@.idempotency_begin_result IS 'result row of idempotency_begin';

CREATE FUNCTION @extschema@.idempotency_begin(
    scope text, key text, request @extschema@.request_hash,
    ttl interval DEFAULT NULL, lease interval DEFAULT NULL, wait interval DEFAULT NULL,
    claim_data jsonb DEFAULT NULL, take_over_mismatch boolean DEFAULT false)
    RETURNS @extschema@.idempotency_begin_result
    AS 'MODULE_PATHNAME', 'idempotency_begin' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.idempotency_begin(text, text, @extschema@.request_hash, interval, interval, interval, jsonb, boolean) IS
    'claim (scope, key) for this request in the calling transaction, or report its replay, in_progress or mismatch state';

CREATE FUNCTION @extschema@.idempotency_complete(
    scope text, key text, response_status integer,
    response_body jsonb DEFAULT NULL, response_headers jsonb DEFAULT NULL, attempt integer DEFAULT NULL,
    response_body_bytes bytea DEFAULT NULL, replace boolean DEFAULT false)
    RETURNS boolean
    AS 'MODULE_PATHNAME', 'idempotency_complete' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.idempotency_complete(text, text, integer, jsonb, jsonb, integer, bytea, boolean) IS
    'record the response of a claimed key (or, with replace and the attempt, of a completed one); false when a server error (>= 500) was not stored and the claim was dropped instead';

CREATE FUNCTION @extschema@.idempotency_checkpoint(
    scope text, key text, recovery_point text, lease interval DEFAULT NULL, attempt integer DEFAULT NULL)
    RETURNS timestamptz
    AS 'MODULE_PATHNAME', 'idempotency_checkpoint' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.idempotency_checkpoint(text, text, text, interval, integer) IS
    'record progress of a claimed key and extend its lease; returns the new lease end';

CREATE FUNCTION @extschema@.idempotency_release(scope text, key text, attempt integer DEFAULT NULL)
    RETURNS void
    AS 'MODULE_PATHNAME', 'idempotency_release' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.idempotency_release(text, text, integer) IS
    'end the lease of an in-progress claim so that the next begin claims it again with attempt + 1';

CREATE FUNCTION @extschema@.idempotency_forget(scope text, key text, attempt integer DEFAULT NULL)
    RETURNS boolean
    AS 'MODULE_PATHNAME', 'idempotency_forget' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.idempotency_forget(text, text, integer) IS
    'delete the record of a key (an unfinished claim of another transaction only with its attempt); false when there was none';

CREATE TYPE @extschema@.idempotency_lookup_result AS (
    status text, request @extschema@.request_hash, attempt integer,
    response_status integer, response_body jsonb, response_headers jsonb,
    recovery_point text, created_at timestamptz, lease_expires_at timestamptz,
    completed_at timestamptz, expires_at timestamptz,
    response_body_bytes bytea, response_body_omitted boolean,
    claim_data jsonb, committed boolean);
COMMENT ON TYPE @extschema@.idempotency_lookup_result IS 'result row of idempotency_lookup';

-- VOLATILE: with latest => true it reads the newest version, not the
-- statement's snapshot.  PARALLEL RESTRICTED: the caller's own deferred claim
-- is held in its backend, which a parallel worker cannot see.
CREATE FUNCTION @extschema@.idempotency_lookup(scope text, key text, latest boolean DEFAULT false)
    RETURNS SETOF @extschema@.idempotency_lookup_result
    AS 'MODULE_PATHNAME', 'idempotency_lookup' LANGUAGE C VOLATILE PARALLEL RESTRICTED ROWS 1;
COMMENT ON FUNCTION @extschema@.idempotency_lookup(text, text, boolean) IS
    'the live record of (scope, key) as the statement''s snapshot sees it, or with latest the newest one as idempotency_begin sees it; no row when absent or expired';

-- VOLATILE PARALLEL UNSAFE: it writes the rows of the caller's deferred
-- claims before it lists them.
CREATE FUNCTION @extschema@.idempotency_keys(
    scope text, after_key text DEFAULT NULL, max_keys integer DEFAULT 100)
    RETURNS TABLE (key text, status text, attempt integer, response_status integer,
                   created_at timestamptz, lease_expires_at timestamptz,
                   completed_at timestamptz, expires_at timestamptz, committed boolean)
    AS 'MODULE_PATHNAME', 'idempotency_keys' LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;
COMMENT ON FUNCTION @extschema@.idempotency_keys(text, text, integer) IS
    'a page of the live keys of a scope after after_key, in key order, without bodies';

CREATE FUNCTION @extschema@.idempotency_key_problem(scope text, key text) RETURNS text
    AS 'MODULE_PATHNAME', 'idempotency_key_problem' LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.idempotency_key_problem(text, text) IS
    'what makes a scope and key unacceptable to the other functions (empty, too long, null), or NULL: a 400 without an error';

REVOKE ALL ON FUNCTION @extschema@.idempotency_begin(text, text, @extschema@.request_hash, interval, interval, interval, jsonb, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idempotency_complete(text, text, integer, jsonb, jsonb, integer, bytea, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idempotency_checkpoint(text, text, text, interval, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idempotency_release(text, text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idempotency_forget(text, text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idempotency_lookup(text, text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idempotency_keys(text, text, integer) FROM PUBLIC;

-- ---------------------------------------------------------------------------
-- Expiry and statistics
-- ---------------------------------------------------------------------------

CREATE FUNCTION @extschema@.idempotency_expire(max_rows bigint DEFAULT NULL) RETURNS bigint
    AS 'MODULE_PATHNAME', 'idempotency_expire' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.idempotency_expire(bigint) IS
    'delete up to max_rows expired keys of this database now (all when NULL); returns the number deleted';

-- Numbers only (seconds as double precision, times as seconds since the
-- epoch), which exporters such as postgres_exporter can read.
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
    AS 'MODULE_PATHNAME', 'idempotency_stats' LANGUAGE C VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.idempotency_stats() IS
    'counters of the whole server since it started; NULL unless the library is in shared_preload_libraries';

-- The per-scope summary: derived from idempotency.keys by
-- idempotency_scope_stats_refresh() (the worker calls the same code), so that
-- reading it does not scan the keys.  Not registered with
-- pg_extension_config_dump: pg_dump leaves it out, and the next refresh after
-- a restore rebuilds it.
CREATE TABLE idempotency.scope_stats (
    scope                         text COLLATE "C" NOT NULL,
    in_progress                   bigint NOT NULL,
    completed                     bigint NOT NULL,
    expired                       bigint NOT NULL,
    oldest_created_at             timestamptz NOT NULL,
    oldest_in_progress_created_at timestamptz,
    refreshed_at                  timestamptz NOT NULL,
    CONSTRAINT scope_stats_pkey PRIMARY KEY (scope)
);
COMMENT ON TABLE idempotency.scope_stats IS
    'per scope, the keys table as of refreshed_at (derived: rebuilt by idempotency_scope_stats_refresh() and the worker, not dumped)';
REVOKE ALL ON TABLE idempotency.scope_stats FROM PUBLIC;

CREATE FUNCTION @extschema@.idempotency_scope_stats_refresh() RETURNS bigint
    AS 'MODULE_PATHNAME', 'idempotency_scope_stats_refresh'
    LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.idempotency_scope_stats_refresh() IS
    'summarise the keys table per scope now, for idempotency_scope_stats() (reads the whole table); returns the number of scopes';

-- Numbers only, with the scope as the label, as for idempotency_stats().
CREATE FUNCTION @extschema@.idempotency_scope_stats(
    OUT scope text, OUT in_progress bigint, OUT completed bigint, OUT expired bigint,
    OUT oldest_claim_age_seconds double precision,
    OUT oldest_in_progress_age_seconds double precision,
    OUT summary_age_seconds double precision)
    RETURNS SETOF record
    LANGUAGE sql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
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

REVOKE ALL ON FUNCTION @extschema@.idempotency_expire(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idempotency_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.idempotency_stats() TO pg_monitor;
REVOKE ALL ON FUNCTION @extschema@.idempotency_scope_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.idempotency_scope_stats() TO pg_monitor;
REVOKE ALL ON FUNCTION @extschema@.idempotency_scope_stats_refresh() FROM PUBLIC;

-- ---------------------------------------------------------------------------
-- Citus: the keys co-located with the business tables (doc/citus.md).
-- The same definition is in the 0.1.0--0.2.0 upgrade.  Citus's functions and catalogs are named only inside the body,
-- which PL/pgSQL plans when it runs: the extension does not need Citus.
-- ---------------------------------------------------------------------------

-- The functions Citus delegates by their scope, with the scope of type
-- scope_type: the extension's text functions, or the variants
-- create_scope_variants() made.
CREATE FUNCTION idempotency.routed_functions(scope_type regtype)
    RETURNS SETOF regprocedure
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
SELECT p.oid::pg_catalog.regprocedure
  FROM pg_catalog.pg_proc AS p
  JOIN pg_catalog.pg_depend AS d
    ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
   AND d.objid OPERATOR(pg_catalog.=) p.oid
   AND d.deptype OPERATOR(pg_catalog.=) 'e'
  JOIN pg_catalog.pg_extension AS e
    ON e.oid OPERATOR(pg_catalog.=) d.refobjid
   AND e.extname OPERATOR(pg_catalog.=) 'idempotency'
 WHERE p.proname OPERATOR(pg_catalog.=) ANY (ARRAY['idempotency_begin', 'idempotency_complete',
         'idempotency_checkpoint', 'idempotency_release', 'idempotency_forget',
         'idempotency_lookup', 'idempotency_keys'])
   AND p.proargtypes[0] OPERATOR(pg_catalog.=) scope_type
 ORDER BY p.proname
$$;
COMMENT ON FUNCTION idempotency.routed_functions(regtype) IS
    'the API functions Citus delegates by their scope, with the scope of the given type';
REVOKE ALL ON FUNCTION idempotency.routed_functions(regtype) FROM PUBLIC;

-- For Citus tenants of type bigint, integer or uuid: the functions that Citus
-- delegates by their scope, with the scope as a bigint or a uuid.  Citus
-- delegates a call only when its scope converts to the tenant column's type
-- by an assignment cast, which text has not (and a bigint has to integer).
-- The scope is the argument's text, so they name the text functions' keys.
-- idempotency_distribute() creates them on every node, as members of the
-- extension with the text functions' grants, and only then: elsewhere the
-- functions' names stay unique, as GRANT ... ON FUNCTION idempotency_begin
-- without an argument list needs.  Returns the variants it created.
CREATE FUNCTION idempotency.create_scope_variants(scope_type regtype)
    RETURNS SETOF regprocedure
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    api record;
    variant regprocedure;
    grantee oid;
BEGIN
    IF scope_type OPERATOR(pg_catalog.<>) ALL (ARRAY['pg_catalog.int8'::pg_catalog.regtype,
                                                     'pg_catalog.uuid'::pg_catalog.regtype]) THEN
        RAISE EXCEPTION 'scope variants are of type bigint or uuid, not %', scope_type
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR api IN
        SELECT p.oid, p.proname, p.pronamespace, p.proacl, p.proowner,
               pg_catalog.format('%I.%I(%s)', p.pronamespace::pg_catalog.regnamespace, p.proname,
                                 pg_catalog.regexp_replace(pg_catalog.pg_get_function_arguments(p.oid),
                                                           '^scope text', 'scope ' OPERATOR(pg_catalog.||) scope_type::text))
                 OPERATOR(pg_catalog.||) ' RETURNS ' OPERATOR(pg_catalog.||) pg_catalog.pg_get_function_result(p.oid)
                 OPERATOR(pg_catalog.||) pg_catalog.format(' AS %L, %L LANGUAGE c', p.probin, p.prosrc)
                 OPERATOR(pg_catalog.||) CASE p.provolatile WHEN 'v' THEN ' VOLATILE' WHEN 's' THEN ' STABLE' ELSE ' IMMUTABLE' END
                 OPERATOR(pg_catalog.||) CASE p.proparallel WHEN 'u' THEN ' PARALLEL UNSAFE' WHEN 'r' THEN ' PARALLEL RESTRICTED' ELSE ' PARALLEL SAFE' END
                 OPERATOR(pg_catalog.||) CASE WHEN p.proretset THEN ' ROWS ' OPERATOR(pg_catalog.||) p.prorows::text ELSE '' END
                 AS definition
          FROM idempotency.routed_functions('pg_catalog.text') AS f
          JOIN pg_catalog.pg_proc AS p ON p.oid OPERATOR(pg_catalog.=) f.f
         ORDER BY p.proname
    LOOP
        BEGIN
            EXECUTE 'CREATE FUNCTION ' OPERATOR(pg_catalog.||) api.definition;
        EXCEPTION WHEN duplicate_function THEN
            CONTINUE; -- made by an earlier call
        END;
        SELECT q.oid INTO variant
          FROM pg_catalog.pg_proc AS q
         WHERE q.proname OPERATOR(pg_catalog.=) api.proname
           AND q.pronamespace OPERATOR(pg_catalog.=) api.pronamespace
           AND q.proargtypes[0] OPERATOR(pg_catalog.=) scope_type;
        EXECUTE pg_catalog.format('ALTER EXTENSION idempotency ADD FUNCTION %s', variant);
        EXECUTE pg_catalog.format('COMMENT ON FUNCTION %s IS %L', variant,
            pg_catalog.format('%s(text, ...) with the scope as a %s, for Citus tenants (see idempotency_distribute)',
                              api.proname, scope_type));
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', variant);
        FOR grantee IN
            SELECT a.grantee FROM pg_catalog.aclexplode(api.proacl) AS a
             WHERE a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
               AND a.grantee OPERATOR(pg_catalog.<>) api.proowner
        LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', variant,
                CASE WHEN grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                     ELSE grantee::pg_catalog.regrole::text END);
        END LOOP;
        RETURN NEXT variant;
    END LOOP;
END
$$;
COMMENT ON FUNCTION idempotency.create_scope_variants(regtype) IS
    'for idempotency_distribute: the API functions Citus delegates by their scope, with the scope as a bigint or a uuid';
REVOKE ALL ON FUNCTION idempotency.create_scope_variants(regtype) FROM PUBLIC;

CREATE FUNCTION @extschema@.idempotency_distribute(colocate_with regclass) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    dist record;
    column_type oid;
    column_collation oid;
    distribution_column text;
    scope_type oid;
    api regprocedure;
    alter_keys text;
    alter_route text;
    problem text;
    problem_state text;
    ddl_propagation text;
    node record;
    keys_distributed boolean;
    alter_tables text[] := '{}';
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension AS e
                    WHERE e.extname OPERATOR(pg_catalog.=) 'citus') THEN
        RAISE EXCEPTION 'Citus is not installed in this database'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Run CREATE EXTENSION citus, add the worker nodes, then call this function.';
    END IF;
    IF pg_catalog.current_setting('idempotency.tenant_isolation', true) OPERATOR(pg_catalog.=) 'role' THEN
        RAISE EXCEPTION 'idempotency.tenant_isolation = role is not supported with distributed keys'
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'Role OIDs differ between Citus nodes, and shard moves copy them as they are.',
                  HINT = 'Use one scope per tenant: the value of the tenant column.';
    END IF;
    keys_distributed := EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p
                                 WHERE p.logicalrelid OPERATOR(pg_catalog.=) 'idempotency.keys'::regclass);
    IF EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p
                WHERE p.logicalrelid OPERATOR(pg_catalog.=) 'idempotency.route'::regclass) THEN
        RAISE EXCEPTION 'idempotency.keys is already distributed'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    -- Keys distributed by 0.2.0 (by a text scope): only the routing table
    -- is distributed now, with them.
    IF keys_distributed AND NOT EXISTS (
           SELECT FROM pg_catalog.pg_dist_partition AS k, pg_catalog.pg_dist_partition AS t
            WHERE k.logicalrelid OPERATOR(pg_catalog.=) 'idempotency.keys'::regclass
              AND t.logicalrelid OPERATOR(pg_catalog.=) colocate_with
              AND t.colocationid OPERATOR(pg_catalog.=) k.colocationid) THEN
        RAISE EXCEPTION 'table % is not co-located with idempotency.keys, which is already distributed', colocate_with
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass the table the keys were distributed with.';
    END IF;
    SELECT p.partmethod, p.repmodel,
           pg_catalog.column_to_column_name(p.logicalrelid, p.partkey) AS column_name
      INTO dist
      FROM pg_catalog.pg_dist_partition AS p
     WHERE p.logicalrelid OPERATOR(pg_catalog.=) colocate_with;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table % is not distributed', colocate_with
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Distribute it by its tenant column (bigint, integer, uuid or text COLLATE "C") with create_distributed_table() first.';
    END IF;
    IF dist.partmethod OPERATOR(pg_catalog.<>) 'h' THEN
        RAISE EXCEPTION 'table % is not hash-distributed', colocate_with
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'The keys of a scope must be stored with the rows of its tenant: a reference, single-shard or Citus local table has no tenant column to co-locate them by.';
    END IF;
    IF dist.repmodel OPERATOR(pg_catalog.<>) 's' THEN
        RAISE EXCEPTION 'table % has more than one placement per shard', colocate_with
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'Citus delegates a function call to a node only for tables with one placement per shard (citus.shard_replication_factor = 1).';
    END IF;
    SELECT a.atttypid, a.attcollation INTO column_type, column_collation
      FROM pg_catalog.pg_attribute AS a
     WHERE a.attrelid OPERATOR(pg_catalog.=) colocate_with
       AND a.attname OPERATOR(pg_catalog.=) dist.column_name;
    IF column_type OPERATOR(pg_catalog.=) 'pg_catalog.text'::pg_catalog.regtype
       AND column_collation OPERATOR(pg_catalog.=) 'pg_catalog."C"'::pg_catalog.regcollation THEN
        distribution_column := 'scope';
        scope_type := 'pg_catalog.text'::pg_catalog.regtype;
    ELSIF column_type OPERATOR(pg_catalog.=) ANY (ARRAY['pg_catalog.int8'::pg_catalog.regtype,
                                                         'pg_catalog.int4'::pg_catalog.regtype,
                                                         'pg_catalog.uuid'::pg_catalog.regtype]) THEN
        -- Citus co-locates tables only by columns of one type: shard_key
        -- becomes the tenant column's type, holding each key's scope read as
        -- that type, and joins the primary key, as Citus requires of the
        -- distribution column.
        IF NOT keys_distributed THEN
            alter_keys := pg_catalog.format(
                'ALTER TABLE idempotency.keys ALTER COLUMN shard_key TYPE %1$s USING scope::%1$s, '
                'DROP CONSTRAINT keys_pkey, '
                'ADD CONSTRAINT keys_pkey PRIMARY KEY (tenant, scope, key, shard_key)',
                column_type::pg_catalog.regtype);
            BEGIN
                EXECUTE alter_keys;
            EXCEPTION WHEN data_exception THEN
                GET STACKED DIAGNOSTICS problem = MESSAGE_TEXT, problem_state = RETURNED_SQLSTATE;
                RAISE EXCEPTION 'the scope of a stored key is not a value of type %, the type of the distribution column % of table %',
                                column_type::pg_catalog.regtype, dist.column_name, colocate_with
                    USING ERRCODE = problem_state, DETAIL = problem,
                          HINT = 'Every scope must be a tenant''s value. Forget the keys of other scopes, or wait for them to expire, then call this function again.';
            END;
            alter_tables := alter_tables OPERATOR(pg_catalog.||) alter_keys;
        END IF;
        scope_type := CASE WHEN column_type OPERATOR(pg_catalog.=) 'pg_catalog.uuid'::pg_catalog.regtype
                           THEN 'pg_catalog.uuid'::pg_catalog.regtype
                           ELSE 'pg_catalog.int8'::pg_catalog.regtype END;
        -- The variants belong to the extension: made on each node by its
        -- own function, as its script made the text functions, not
        -- propagated by Citus.
        ddl_propagation := pg_catalog.current_setting('citus.enable_ddl_propagation');
        PERFORM pg_catalog.set_config('citus.enable_ddl_propagation', 'off', true);
        PERFORM idempotency.create_scope_variants(scope_type::pg_catalog.regtype);
        PERFORM pg_catalog.set_config('citus.enable_ddl_propagation', ddl_propagation, true);
        distribution_column := 'shard_key';
    ELSE
        RAISE EXCEPTION 'the distribution column % of table % is not of type bigint, integer, uuid or text COLLATE "C"',
                        dist.column_name, colocate_with
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'The keys are distributed by the scope read as the tenant column''s type; these are the types this extension reads and tests.',
                  HINT = 'Declare the tenant column bigint, integer, uuid or text COLLATE "C", and pass its value as the scope.';
    END IF;
    -- The routing table's column, of the type of the keys' distribution
    -- column (the table holds no row to convert; set whatever a failed call
    -- left on a worker).
    alter_route := pg_catalog.format('ALTER TABLE idempotency.route ALTER COLUMN tenant TYPE %s USING NULL',
                                     CASE WHEN scope_type OPERATOR(pg_catalog.=) 'pg_catalog.text'::pg_catalog.regtype
                                          THEN 'pg_catalog.text COLLATE "C"'
                                          ELSE column_type::pg_catalog.regtype::text END);
    EXECUTE alter_route;
    alter_tables := alter_tables OPERATOR(pg_catalog.||) alter_route;
    -- The workers have the tables too (Citus created the extension on
    -- them), and Citus checks their columns there; and the calls it
    -- delegates need the variants there: the same changes, which Citus
    -- runs in a transaction of its own on each (one statement, whose error
    -- Citus reports).  Their tables are empty and unused (the functions
    -- refuse the keys), so the changes are harmless if the distribution
    -- fails after them, and made again by the next call.
    FOR node IN
        SELECT * FROM pg_catalog.run_command_on_workers(pg_catalog.format(
            'DO $do$ DECLARE statement text; BEGIN '
            'PERFORM pg_catalog.set_config(''citus.enable_ddl_propagation'', ''off'', true); '
            'FOREACH statement IN ARRAY %L::text[] LOOP EXECUTE statement; END LOOP; '
            '%s'
            'END $do$',
            alter_tables,
            CASE WHEN scope_type OPERATOR(pg_catalog.=) 'pg_catalog.text'::pg_catalog.regtype THEN ''
                 ELSE pg_catalog.format('PERFORM idempotency.create_scope_variants(%L); ',
                                        scope_type::pg_catalog.regtype) END))
    LOOP
        IF NOT node.success THEN
            RAISE EXCEPTION 'could not change the tables of the extension on node %:%', node.nodename, node.nodeport
                USING ERRCODE = 'object_not_in_prerequisite_state', DETAIL = node.result;
        END IF;
    END LOOP;
    IF NOT keys_distributed THEN
        PERFORM pg_catalog.create_distributed_table('idempotency.keys', distribution_column,
                                                    colocate_with => colocate_with::text);
        -- The rows were copied to the shards; the table itself is a shell now.
        PERFORM pg_catalog.truncate_local_data_after_distributing_table('idempotency.keys');
    END IF;
    PERFORM pg_catalog.create_distributed_table('idempotency.route', 'tenant',
                                                colocate_with => 'idempotency.keys');
    -- Each call is delegated to the node of its scope's shard, also inside a
    -- transaction block (force_delegation), where it joins the transaction
    -- on that node.  With a typed tenant, the variants whose scope is a
    -- bigint (for bigint and integer tenants) or a uuid (see
    -- create_scope_variants).  The text functions then run where they are
    -- called: on the coordinator they are forwarded to the shard's node
    -- (through idempotency.route), in a distributed handler they find the
    -- local shard.
    FOR api IN SELECT * FROM idempotency.routed_functions(scope_type::pg_catalog.regtype) LOOP
        PERFORM pg_catalog.create_distributed_function(api, 'scope',
                    colocate_with => 'idempotency.keys', force_delegation => true);
    END LOOP;
END
$$;
COMMENT ON FUNCTION @extschema@.idempotency_distribute(regclass) IS
    'with Citus: distribute idempotency.keys by the scope read as the tenant column''s type (bigint, integer, uuid or text COLLATE "C"), co-located with that table, and delegate the API functions to the scope''s node';
REVOKE ALL ON FUNCTION @extschema@.idempotency_distribute(regclass) FROM PUBLIC;

-- Without shared_preload_libraries the functions work, but nothing expires
-- keys and nothing counts (after a restore into a fresh cluster, say): say so,
-- as a WARNING, since CREATE EXTENSION runs its script with NOTICEs off.
-- (The call is unqualified, resolved through the search_path CREATE EXTENSION
-- sets, because @extschema@ must not appear inside a quoted body.)
DO $$
BEGIN
    IF NOT (SELECT s.preloaded FROM idempotency_stats() AS s) THEN
        RAISE WARNING 'idempotency is not in shared_preload_libraries: keys will not expire by themselves and idempotency_stats() counts nothing'
            USING HINT = 'Add idempotency to shared_preload_libraries and restart, or schedule SELECT idempotency_expire(); see doc/operations.md, "Expiry".';
    END IF;
END
$$;
