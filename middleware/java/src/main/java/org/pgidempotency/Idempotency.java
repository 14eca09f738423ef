package org.pgidempotency;

import jakarta.servlet.ServletRequest;
import java.sql.Connection;
import java.sql.SQLException;

/**
 * What a handler behind {@link IdempotencyFilter} gets: the connection in the claim's
 * transaction, and in two-phase mode its claim. Found on the request:
 * {@code Idempotency.connection(request)} or {@code Idempotency.of(request)}.
 *
 * <p>The filter commits the transaction with the stored response, or rolls it back when the
 * handler throws: the handler never commits, rolls back or closes the connection itself
 * (commit(), rollback() and setAutoCommit() throw; close() does nothing).
 */
public final class Idempotency {
    /** The request attribute that holds it. */
    public static final String ATTRIBUTE = Idempotency.class.getName();

    private final Course course;
    private final Connection connection;

    Idempotency(Course course) {
        this.course = course;
        this.connection = course.handlerConnection();
    }

    /**
     * The request's idempotency context.
     *
     * @throws IllegalStateException when no IdempotencyFilter handled the request (it is not
     *     mapped to the request's URL, or does not protect its method)
     */
    public static Idempotency of(ServletRequest request) {
        if (request.getAttribute(ATTRIBUTE) instanceof Idempotency idempotency) {
            return idempotency;
        }
        throw new IllegalStateException("no IdempotencyFilter handled this request: map the "
            + "filter to its URL, for its method");
    }

    /** The connection in the claim's transaction: {@code of(request).connection()}. */
    public static Connection connection(ServletRequest request) {
        return of(request).connection();
    }

    /** The connection in the claim's transaction, which the filter commits or rolls back. */
    public Connection connection() {
        return connection;
    }

    /** The key's scope (the tenant, by default). */
    public String scope() {
        return course.scope();
    }

    /** The Idempotency-Key, or null when a request without one runs unprotected. */
    public String key() {
        return course.key();
    }

    /** The attempt this request holds (1, or more after takeovers), or null without a key. */
    public Integer attempt() {
        return course.attempt();
    }

    /**
     * Two-phase mode: the recovery point an earlier attempt recorded (after a takeover), or
     * the last one this attempt recorded; null for a fresh claim.
     */
    public String recoveryPoint() {
        return course.recoveryPoint();
    }

    /**
     * Two-phase mode: records progress (null: keeps the last recovery point) and renews the
     * lease, and commits it with the work done so far. Fenced by the attempt: a handler whose
     * lease ended and was taken over gets IK003.
     *
     * @throws IllegalStateException without the lease option, or without a key
     */
    public void checkpoint(String recoveryPoint) throws SQLException {
        course.checkpoint(recoveryPoint);
    }
}
