-- The functions' variants with a bigint or uuid scope, which Citus tenants
-- of those types need (api.sql tests the text functions).
-- (Quietly: without shared_preload_libraries it warns; t/001_preload.pl tests that.)
SET client_min_messages = error;
CREATE EXTENSION idempotency;
RESET client_min_messages;

-- The variants with a bigint or uuid scope, which idempotency_distribute()
-- makes for Citus tenants of those types (made here without Citus), with the
-- text functions' grants; a second call makes nothing.
CREATE ROLE regress_idem_variant_user;
GRANT EXECUTE ON FUNCTION idempotency_begin(text, text, request_hash, interval, interval, interval, jsonb, boolean)
    TO regress_idem_variant_user;
SELECT * FROM idempotency.create_scope_variants('bigint');
SELECT * FROM idempotency.create_scope_variants('uuid');
SELECT * FROM idempotency.create_scope_variants('bigint');
SELECT * FROM idempotency.create_scope_variants('integer');
SELECT p.oid::regprocedure AS variant, obj_description(p.oid, 'pg_proc') AS comment,
       has_function_privilege('regress_idem_variant_user', p.oid, 'EXECUTE') AS user_may,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_may,
       provolatile, proparallel, prorows
  FROM pg_proc p
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
 WHERE p.proname IN ('idempotency_begin', 'idempotency_lookup', 'idempotency_keys')
   AND p.proargtypes[0] <> 'text'::regtype
 ORDER BY p.oid::regprocedure::text;
SELECT pg_get_function_result('idempotency_keys(uuid, text, integer)'::regprocedure) =
       pg_get_function_result('idempotency_keys(text, text, integer)'::regprocedure) AS same_result;
-- They name the scope of the value's text: the same key as the text
-- functions'.  A string, NULL or a varchar still calls the text functions;
-- an integer calls the bigint ones.
SELECT outcome FROM idempotency_begin(42, 'typed', request_hash('r'::text), lease => '1 minute');
SELECT outcome FROM idempotency_begin('42', 'typed', request_hash('r'::text));
SELECT scope, pg_typeof(scope) FROM idempotency.keys WHERE key = 'typed';
SELECT idempotency_complete(42::bigint, 'typed', 201, '{"n": 42}');
SELECT outcome, response_body FROM idempotency_begin('42'::varchar, 'typed', request_hash('r'::text));
SELECT status FROM idempotency_lookup(42, 'typed');
SELECT key FROM idempotency_keys(42::bigint);
SELECT outcome FROM idempotency_begin('A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'::uuid, 'typed', request_hash('r'::text), lease => '1 minute');
SELECT idempotency_checkpoint('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, 'typed', 'step 1') IS NOT NULL AS checkpointed;
SELECT status, recovery_point FROM idempotency_lookup('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'typed');
SELECT idempotency_release('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, 'typed');
SELECT idempotency_forget('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, 'typed', attempt => 1);
SELECT idempotency_forget(42, 'typed');
SELECT outcome FROM idempotency_begin(NULL, 'typed', request_hash('r'::text));
SELECT outcome FROM idempotency_begin(NULL::bigint, 'typed', request_hash('r'::text));
DROP OWNED BY regress_idem_variant_user;
DROP ROLE regress_idem_variant_user;

DROP EXTENSION idempotency;
