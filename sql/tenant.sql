-- idempotency.tenant_isolation = role binds every key to the calling role
-- (current_user), held in a column of its own: one role cannot read, replay,
-- complete or even detect another role's keys, also across SET ROLE within
-- one session, and no scope that any role types reaches them.
-- (Quietly: without shared_preload_libraries it warns; t/001_preload.pl tests that.)
SET client_min_messages = error;
CREATE EXTENSION idempotency;
RESET client_min_messages;
CREATE ROLE regress_tenant_a;
CREATE ROLE regress_tenant_b;
CREATE ROLE regress_tenant_outsider;
GRANT EXECUTE ON FUNCTION idempotency_begin, idempotency_complete, idempotency_lookup,
    idempotency_forget, idempotency_keys
    TO regress_tenant_a, regress_tenant_b, regress_tenant_outsider;
SET idempotency.tenant_isolation = role;

SET ROLE regress_tenant_a;
BEGIN;
SELECT outcome FROM idempotency_begin('orders', 'k', request_hash('a''s request'::text));
SELECT idempotency_complete('orders', 'k', 201, '{"secret": "a"}');
COMMIT;
SELECT outcome, response_body FROM idempotency_begin('orders', 'k', request_hash('a''s request'::text));

-- b sees nothing of a's key: no row, no mismatch, no replay of a's response
SET ROLE regress_tenant_b;
SELECT * FROM idempotency_lookup('orders', 'k');
BEGIN;
SELECT outcome, response_body FROM idempotency_begin('orders', 'k', request_hash('a''s request'::text));
SELECT idempotency_complete('orders', 'k', 200, '{"secret": "b"}');
COMMIT;
SELECT outcome, response_body FROM idempotency_begin('orders', 'k', request_hash('b''s request'::text));

-- nor through the store's other operations: b's listing shows only b's key,
-- b's forget deletes only b's key, and b's newest-state lookup of a key a
-- holds in flight shows nothing (a's claim data least of all)
SELECT key, status, response_status FROM idempotency_keys('orders');
SELECT idempotency_forget('orders', 'k') AS forgot_own, idempotency_forget('orders', 'k') AS forgot_again;
SET ROLE regress_tenant_a;
SELECT outcome, attempt FROM idempotency_begin('orders', 'held', request_hash('r'::text), lease => '1 hour',
                                               claim_data => '{"card": "a''s"}');
SET ROLE regress_tenant_b;
SELECT count(*) AS seen FROM idempotency_lookup('orders', 'held', latest => true);
SELECT outcome, attempt, claim_data FROM idempotency_begin('orders', 'held', request_hash('x'::text), lease => '1 hour');
SELECT idempotency_forget('orders', 'held', attempt => 1) AS forgot_own_held;

-- and a still gets its own response
SET ROLE regress_tenant_a;
SELECT status, attempt, claim_data FROM idempotency_lookup('orders', 'held', latest => true);
SELECT outcome, response_body FROM idempotency_begin('orders', 'k', request_hash('a''s request'::text));
SELECT status, response_body FROM idempotency_lookup('orders', 'k');
RESET ROLE;

-- The role cannot switch the mode off for itself.
SET ROLE regress_tenant_a;
SET idempotency.tenant_isolation = off;
RESET ROLE;

-- A role without isolation cannot reach a tenant's keys through any scope,
-- the one 0.1.0 stored them under ('<oid of a>/orders') included: it gets
-- its own key there, and a's key is untouched by it.
RESET idempotency.tenant_isolation;
SELECT oid AS tenant_a FROM pg_roles WHERE rolname = 'regress_tenant_a' \gset
SET ROLE regress_tenant_outsider;
SELECT count(*) AS seen FROM idempotency_lookup(:'tenant_a' || '/orders', 'k');
SELECT count(*) AS seen FROM idempotency_lookup('orders', 'k');
SELECT outcome, response_body FROM idempotency_begin(:'tenant_a' || '/orders', 'k', request_hash('a''s request'::text), lease => '1 hour');
SELECT outcome, response_body FROM idempotency_begin('orders', 'k', request_hash('a''s request'::text), lease => '1 hour');
RESET ROLE;
SET idempotency.tenant_isolation = role;
SET ROLE regress_tenant_a;
SELECT outcome, response_body FROM idempotency_begin('orders', 'k', request_hash('a''s request'::text));
RESET ROLE;

-- The tenant is a column of its own; it shows (and dumps) as the role's name.
SELECT tenant, replace(scope, :'tenant_a', '<oid of a>') AS scope, status, response_body
  FROM idempotency.keys ORDER BY tenant::text, scope, key;

-- The keys of a role that is dropped are not inherited by a role created
-- later under the same name (another OID), and the next sweep deletes them.
CREATE ROLE regress_tenant_gone;
GRANT EXECUTE ON FUNCTION idempotency_begin, idempotency_complete TO regress_tenant_gone;
SET ROLE regress_tenant_gone;
BEGIN;
SELECT outcome FROM idempotency_begin('orders', 'k', request_hash('r'::text));
SELECT idempotency_complete('orders', 'k', 201, '{"secret": "gone"}');
COMMIT;
RESET ROLE;
DROP OWNED BY regress_tenant_gone;
DROP ROLE regress_tenant_gone;
CREATE ROLE regress_tenant_gone;
GRANT EXECUTE ON FUNCTION idempotency_begin TO regress_tenant_gone;
SET ROLE regress_tenant_gone;
SELECT outcome, response_body FROM idempotency_begin('orders', 'k', request_hash('r'::text), lease => '1 hour');
RESET ROLE;
SELECT idempotency_expire() >= 0 AS swept;
SELECT count(*) AS orphaned_keys FROM idempotency.keys
 WHERE tenant <> 0 AND tenant NOT IN (SELECT oid FROM pg_roles);
SELECT count(*) AS keys_of_the_new_role FROM idempotency.keys WHERE tenant = 'regress_tenant_gone'::regrole;

DROP EXTENSION idempotency;
DROP OWNED BY regress_tenant_a, regress_tenant_b, regress_tenant_outsider, regress_tenant_gone;
DROP ROLE regress_tenant_a;
DROP ROLE regress_tenant_b;
DROP ROLE regress_tenant_outsider;
DROP ROLE regress_tenant_gone;
