\echo Use "CREATE EXTENSION idempotency" to load this file. \quit

-- The update from 0.4.0.  A fresh CREATE EXTENSION of 0.5.0 runs the 0.3.0
-- install script, the update to 0.4.0 and then this one.

-- ---------------------------------------------------------------------------
-- Keys stored under a 128-bit digest
-- ---------------------------------------------------------------------------

-- The primary key was (tenant, scope, key): every request descended it
-- comparing text, and every new key wrote its scope and key into it again.
-- From 0.5.0 on it is one fixed-width column, a 128-bit keyed hash of the
-- three (SipHash-2-4 under the secret below; src/key_digest.hpp gives the
-- construction), with the key's columns kept in the row and compared after
-- each fetch: two keys with one digest are an error (IK008), never taken
-- for one another.
--
-- The secret: 16 random bytes, one row, made by the first write that needs
-- it (the library's), or below when there are keys to rewrite.  Registered
-- with pg_extension_config_dump, so that pg_dump keeps it with the keys: a
-- restore brings both (the install script makes none, so the dumped row is
-- the only one).  It never changes; the keys' digests are only found with it.
CREATE TABLE idempotency.digest_secret (
    secret bytea NOT NULL
        CONSTRAINT digest_secret_16_bytes
        CHECK (pg_catalog.octet_length(secret) OPERATOR(pg_catalog.=) 16)
);
CREATE UNIQUE INDEX digest_secret_one_row ON idempotency.digest_secret ((true));
COMMENT ON INDEX idempotency.digest_secret_one_row IS 'keeps idempotency.digest_secret to one row';
COMMENT ON TABLE idempotency.digest_secret IS
    'the secret of the keys'' digests (one row, made by the first write, kept by pg_dump with the keys): never change or delete it';
REVOKE ALL ON TABLE idempotency.digest_secret FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('idempotency.digest_secret', '');

-- The one way to compute a key's digest in this database, for whatever
-- moves keys into idempotency.keys: this update, and the move from the SQL
-- edition (doc/operations.md, "Moving keys in").  It makes the secret when
-- there is none, so it needs a writable transaction then.
CREATE FUNCTION idempotency.key_digest(tenant pg_catalog.regrole, scope text, key text)
    RETURNS uuid
    AS 'MODULE_PATHNAME', 'idempotency_key_digest' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.key_digest(pg_catalog.regrole, text, text) IS
    'the digest idempotency.keys stores the key (tenant, scope, key) under in this database; makes the database''s secret if it has none';
REVOKE ALL ON FUNCTION idempotency.key_digest(pg_catalog.regrole, text, text) FROM PUBLIC;

-- The new column, at the end (as each version's are), then one rewrite of
-- the table that fills it, and the new primary key built once, sorted.  (An
-- UPDATE instead would leave every row's old version behind, and write each
-- new one into the old primary key.)  Measured: doc/operations.md,
-- "Updating to 0.5.0".
ALTER TABLE idempotency.keys ADD COLUMN digest uuid;
COMMENT ON COLUMN idempotency.keys.digest IS
    'the primary key: a 128-bit keyed digest of (tenant, scope, key) under idempotency.digest_secret';
ALTER TABLE idempotency.keys
    ALTER COLUMN digest TYPE uuid USING idempotency.key_digest(tenant, scope, key),
    ALTER COLUMN digest SET NOT NULL,
    DROP CONSTRAINT keys_pkey,
    ADD CONSTRAINT keys_pkey PRIMARY KEY (digest);
