package org.pgidempotency;

import java.util.List;
import java.util.Set;
import javax.sql.DataSource;

/**
 * The settings of one filter, checked (IdempotencyFilter.Builder makes them).
 *
 * @param dataSource where each protected request's connection comes from
 * @param header the request header that carries the key
 * @param required whether a request without the key is answered 400 (else it runs
 *     unprotected)
 * @param storedHeaders response headers stored and replayed, in lower case
 * @param storeServerErrors whether responses of status 500 or more are stored
 * @param waitFor interval text: how long to wait for a request in flight instead of answering
 *     409, or null
 * @param ttl interval text: how long a completed key replays, or null for the server's
 *     default
 * @param lease interval text: two-phase mode's lease, or null for one transaction
 * @param tenant the tenant hook, or null
 * @param scope the scope hook, or null
 * @param route the route hook, or null (the servlet mapping's pattern)
 * @param scopePerRoute whether keys are scoped per method and route pattern as well
 * @param methods the methods protected, in upper case
 * @param maxRequestBytes the largest request body read; a larger one is answered 413
 * @param onOutcome the outcome hook, or null
 */
record Options(DataSource dataSource, String header, boolean required, List<String> storedHeaders,
    boolean storeServerErrors, String waitFor, String ttl, String lease,
    IdempotencyFilter.Hook tenant, IdempotencyFilter.Hook scope, IdempotencyFilter.Hook route,
    boolean scopePerRoute,
    Set<String> methods, long maxRequestBytes, IdempotencyFilter.OutcomeHook onOutcome) {

    boolean twoPhase() {
        return lease != null;
    }
}
