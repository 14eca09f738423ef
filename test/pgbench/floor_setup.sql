-- The probes of the SQL edition's floor (make bench-cost COST_EDITION=sql,
-- which runs this after schema.sql and grants what the probes call to the
-- application role; doc/performance.md, "The SQL edition"): what PL/pgSQL
-- costs for the contract's replay and new request when the functions do
-- nothing else -- SECURITY DEFINER, owned by the superuser, over the
-- edition's own table, as the edition's functions are.  They are not the
-- contract: no argument checks (but floor_replay_checked's and
-- floor_replay_front's), no key lock, no outcome but replay and claimed.
--   floor_replay.sql          floor_begin's replay: one read into the answer
--   floor_checks.sql          the same read, with the checks the contract
--                             makes before a replay, in the same statement
--   floor_front.sql           the same checks, the arguments' made by an
--                             inlined LANGUAGE sql front at planning
--   floor_new_fn.sql          ext_new_request over floor_begin (read, then
--                             INSERT, which queues the IK004 trigger as the
--                             edition's claim does) and floor_complete
--   floor_new_fn_lease.sql    the same with a lease: no IK004 trigger

CREATE FUNCTION idempotency.floor_begin(scope text, key text, request request_hash, ttl interval DEFAULT NULL,
                                        lease interval DEFAULT NULL)
    RETURNS idempotency_begin_result
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    AS $$
#variable_conflict use_column
DECLARE
    answer idempotency.begin_row;
    now pg_catalog.timestamptz;
BEGIN
    SELECT CASE WHEN k.status OPERATOR(pg_catalog.=) 'c'::pg_catalog."char"
                     AND k.request OPERATOR(pg_catalog.=) pg_catalog.decode(floor_begin.request, 'hex')
                THEN idempotency.outcome('replay') END,
           k.attempt, k.response_status, k.response_body, k.response_headers, NULL, NULL,
           k.created_at, k.expires_at, k.response_body_bytes, k.response_body_omitted, 'completed',
           k.lease_expires_at, NULL, NULL
      INTO answer
      FROM idempotency.keys AS k
     WHERE k.tenant OPERATOR(pg_catalog.=) 0::pg_catalog.regrole
       AND k.scope OPERATOR(pg_catalog.=) floor_begin.scope COLLATE "C"
       AND k.key OPERATOR(pg_catalog.=) floor_begin.key COLLATE "C";
    IF FOUND THEN
        RETURN answer;
    END IF;
    now := pg_catalog.clock_timestamp();
    INSERT INTO idempotency.keys AS x (tenant, scope, key, request, created_at, ttl, attempt, writer,
                                       status, expires_at, lease, lease_expires_at, unsettled_since)
    VALUES (0::pg_catalog.regrole, floor_begin.scope, floor_begin.key, pg_catalog.decode(floor_begin.request, 'hex'),
            now, '86400 seconds', 1, pg_catalog.pg_current_xact_id(), 'p', now OPERATOR(pg_catalog.+) '86400 seconds'::pg_catalog.interval,
            '60 seconds', now OPERATOR(pg_catalog.+) '60 seconds'::pg_catalog.interval,
            CASE WHEN floor_begin.lease IS NULL THEN pg_catalog.statement_timestamp() END);
    RETURN ROW(idempotency.outcome('claimed'), 1, NULL, NULL, NULL, NULL, NULL, now,
               now OPERATOR(pg_catalog.+) '86400 seconds'::pg_catalog.interval, NULL, NULL, 'in_progress',
               now OPERATOR(pg_catalog.+) '60 seconds'::pg_catalog.interval, NULL, NULL)::idempotency.begin_row;
END
$$;

CREATE FUNCTION idempotency.floor_complete(scope text, key text, response_status integer, response_body jsonb)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    AS $$
#variable_conflict use_column
BEGIN
    UPDATE idempotency.keys AS x SET
        status = 'c', completed_at = pg_catalog.clock_timestamp(),
        expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) x.ttl,
        lease = NULL, lease_expires_at = NULL, unsettled_since = NULL,
        response_status = floor_complete.response_status, response_body = floor_complete.response_body,
        response_body_omitted = false
     WHERE x.tenant OPERATOR(pg_catalog.=) 0::pg_catalog.regrole
       AND x.scope OPERATOR(pg_catalog.=) floor_complete.scope COLLATE "C"
       AND x.key OPERATOR(pg_catalog.=) floor_complete.key COLLATE "C"
       AND x.writer OPERATOR(pg_catalog.=) pg_catalog.pg_current_xact_id_if_assigned()
       AND x.status OPERATOR(pg_catalog.=) 'p'::pg_catalog."char";
    RETURN FOUND;
END
$$;

-- ext_new_request over the floor; with_lease: a claim with a lease, which
-- queues no IK004 trigger.
CREATE FUNCTION floor_new_request(p_key text, p_request request_hash, with_lease boolean) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    answer idempotency_begin_result;
BEGIN
    answer := idempotency.floor_begin('bench', p_key, p_request,
                                      lease => CASE WHEN with_lease THEN '60 seconds'::interval END);
    IF answer.outcome <> 'claimed' THEN
        RETURN answer.outcome::text;
    END IF;
    INSERT INTO orders (idem_key, item, qty) VALUES (p_key, 'book', 1);
    IF NOT idempotency.floor_complete('bench', p_key, 201, '{"order": "created"}') THEN
        RETURN 'not stored';
    END IF;
    RETURN 'created';
END
$$;

-- floor_begin's replay with the least checking the contract allows before a
-- replay, all in its one statement: claim_data, ttl, lease and wait as
-- given (a ttl or lease that is a time alone), the session's key limit, a
-- read-only transaction, and the record's expiry.  (A row found has a key
-- within the owner's default limit, 1024 bytes: no length check.)
CREATE FUNCTION idempotency.floor_replay_checked(
    scope text, key text, request request_hash, ttl interval DEFAULT NULL, lease interval DEFAULT NULL,
    wait interval DEFAULT NULL, claim_data jsonb DEFAULT NULL, take_over_mismatch boolean DEFAULT false)
    RETURNS idempotency_begin_result
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    AS $$
#variable_conflict use_column
DECLARE
    answer idempotency.begin_row;
BEGIN
    SELECT CASE WHEN k.status OPERATOR(pg_catalog.=) 'c'::pg_catalog."char"
                     AND k.request OPERATOR(pg_catalog.=) pg_catalog.decode(floor_replay_checked.request, 'hex')
                     AND k.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
                     AND floor_replay_checked.claim_data IS NULL
                     AND pg_catalog.current_setting('idempotency.max_key_length', true) IS NULL
                     AND pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'off'
                     AND (floor_replay_checked.ttl IS NULL OR idempotency.time_span_ok(floor_replay_checked.ttl))
                     AND (floor_replay_checked.lease IS NULL OR idempotency.time_span_ok(floor_replay_checked.lease))
                     AND (floor_replay_checked.wait IS NULL
                          OR floor_replay_checked.wait OPERATOR(pg_catalog.>=) '0'::pg_catalog.interval
                             AND floor_replay_checked.wait OPERATOR(pg_catalog.<=) '1 hour'::pg_catalog.interval)
                THEN idempotency.outcome('replay') END,
           k.attempt, k.response_status, k.response_body, k.response_headers, NULL, NULL,
           k.created_at, k.expires_at, k.response_body_bytes, k.response_body_omitted, 'completed',
           k.lease_expires_at, NULL, NULL
      INTO answer
      FROM idempotency.keys AS k
     WHERE k.tenant OPERATOR(pg_catalog.=) 0::pg_catalog.regrole
       AND k.scope OPERATOR(pg_catalog.=) floor_replay_checked.scope COLLATE "C"
       AND k.key OPERATOR(pg_catalog.=) floor_replay_checked.key COLLATE "C";
    RETURN answer;
END
$$;

-- The same checks with those of the arguments moved into a LANGUAGE sql
-- front that the planner inlines, so that a constant ttl, lease, wait and
-- claim_data are checked once, when the statement is planned: what is left
-- in PL/pgSQL is the session's key limit, a read-only transaction and the
-- record's expiry.  (The inner function must then be executable by the
-- application role itself, which could call it with args_ok forged.)
CREATE FUNCTION idempotency.floor_replay_inner(scope text, key text, digest bytea, args_ok boolean)
    RETURNS idempotency_begin_result
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    AS $$
#variable_conflict use_column
DECLARE
    answer idempotency.begin_row;
BEGIN
    SELECT CASE WHEN k.status OPERATOR(pg_catalog.=) 'c'::pg_catalog."char"
                     AND k.request OPERATOR(pg_catalog.=) floor_replay_inner.digest
                     AND k.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
                     AND floor_replay_inner.args_ok
                     AND pg_catalog.current_setting('idempotency.max_key_length', true) IS NULL
                     AND pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'off'
                THEN idempotency.outcome('replay') END,
           k.attempt, k.response_status, k.response_body, k.response_headers, NULL, NULL,
           k.created_at, k.expires_at, k.response_body_bytes, k.response_body_omitted, 'completed',
           k.lease_expires_at, NULL, NULL
      INTO answer
      FROM idempotency.keys AS k
     WHERE k.tenant OPERATOR(pg_catalog.=) 0::pg_catalog.regrole
       AND k.scope OPERATOR(pg_catalog.=) floor_replay_inner.scope COLLATE "C"
       AND k.key OPERATOR(pg_catalog.=) floor_replay_inner.key COLLATE "C";
    RETURN answer;
END
$$;
CREATE FUNCTION floor_replay_front(
    scope text, key text, request request_hash, ttl interval DEFAULT NULL, lease interval DEFAULT NULL,
    wait interval DEFAULT NULL, claim_data jsonb DEFAULT NULL, take_over_mismatch boolean DEFAULT false)
    RETURNS idempotency_begin_result
    LANGUAGE sql VOLATILE
    RETURN idempotency.floor_replay_inner(
        scope, key, pg_catalog.decode(request, 'hex'),
        claim_data IS NULL AND (ttl IS NULL OR idempotency.time_span_ok(ttl))
        AND (lease IS NULL OR idempotency.time_span_ok(lease))
        AND (wait IS NULL OR wait OPERATOR(pg_catalog.>=) '0'::pg_catalog.interval
                             AND wait OPERATOR(pg_catalog.<=) '1 hour'::pg_catalog.interval));
