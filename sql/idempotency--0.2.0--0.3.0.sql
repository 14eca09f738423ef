\echo Use "CREATE EXTENSION idempotency" to load this file. \quit

-- ---------------------------------------------------------------------------
-- Volatility and parallel safety by what the functions do
-- ---------------------------------------------------------------------------

-- idempotency_keys() writes the rows of the caller's deferred claims before it
-- lists them: a write, which a parallel worker cannot make.
ALTER FUNCTION @extschema@.idempotency_keys(text, text, integer) VOLATILE PARALLEL UNSAFE;
-- idempotency_lookup() reads the caller's deferred claims, held in its own
-- backend: a parallel worker would not see them.
ALTER FUNCTION @extschema@.idempotency_lookup(text, text, boolean) PARALLEL RESTRICTED;
