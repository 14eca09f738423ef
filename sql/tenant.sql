-- idempotency.tenant_isolation = role binds every scope to the calling role:
-- one role cannot read, replay, complete or even detect another role's keys,
-- also across SET ROLE within one session.
CREATE EXTENSION idempotency;
CREATE ROLE regress_tenant_a;
CREATE ROLE regress_tenant_b;
GRANT EXECUTE ON FUNCTION
    idempotency_begin(text, text, request_hash, interval, interval, interval),
    idempotency_complete(text, text, integer, jsonb, jsonb, integer),
    idempotency_release(text, text, integer),
    idempotency_lookup(text, text)
    TO regress_tenant_a, regress_tenant_b;
SET idempotency.tenant_isolation = role;

SET ROLE regress_tenant_a;
SELECT outcome FROM idempotency_begin('orders', 'k', request_hash('a''s request'::text));
SELECT idempotency_complete('orders', 'k', 201, '{"secret": "a"}');
SELECT outcome, response_body FROM idempotency_begin('orders', 'k', request_hash('a''s request'::text));

-- b sees nothing of a's key: no row, no mismatch, no replay of a's response
SET ROLE regress_tenant_b;
SELECT * FROM idempotency_lookup('orders', 'k');
SELECT outcome, response_body FROM idempotency_begin('orders', 'k', request_hash('a''s request'::text));
SELECT idempotency_complete('orders', 'k', 200, '{"secret": "b"}');
SELECT outcome, response_body FROM idempotency_begin('orders', 'k', request_hash('b''s request'::text));

-- and a still gets its own response
SET ROLE regress_tenant_a;
SELECT outcome, response_body FROM idempotency_begin('orders', 'k', request_hash('a''s request'::text));
SELECT status, response_body FROM idempotency_lookup('orders', 'k');
RESET ROLE;

-- The role cannot switch the mode off for itself.
SET ROLE regress_tenant_a;
SET idempotency.tenant_isolation = off;
RESET ROLE;

-- Stored scopes carry the owning role's OID.
SELECT scope = (SELECT oid FROM pg_roles WHERE rolname = 'regress_tenant_a') || '/orders' AS owned_by_a,
       response_body
  FROM idempotency.keys ORDER BY response_body::text;

-- With the mode off, the scopes are the caller's again (the owned ones unreachable).
RESET idempotency.tenant_isolation;
SELECT count(*) FROM idempotency_lookup('orders', 'k');

DROP EXTENSION idempotency;
DROP ROLE regress_tenant_a;
DROP ROLE regress_tenant_b;
