package org.pgidempotency;

import java.nio.charset.StandardCharsets;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * An answer the package gives instead of the handler's: a replay, or a problem document
 * (RFC 9457, {@code application/problem+json}).
 *
 * @param status the HTTP status
 * @param headers header names and their values, in order
 * @param body the body, sent with its Content-Length
 */
record Answer(int status, List<Map.Entry<String, String>> headers, byte[] body) {

    /** How the SQLSTATE map (ErrorCodes, generated) answers one SQLSTATE. */
    record Mapped(int status, String title, Integer retryAfter) {}

    static final String TOO_LARGE = "The response is too large to store";

    /** A problem document; {@code detail} and {@code retryAfter} may be null. */
    static Answer problem(int status, String title, String detail, Integer retryAfter) {
        List<Map.Entry<String, String>> headers = new ArrayList<>();
        headers.add(Map.entry("Content-Type", "application/problem+json"));
        if (retryAfter != null) {
            headers.add(Map.entry("Retry-After", retryAfter.toString()));
        }
        String document = "{\"type\": \"about:blank\", \"title\": " + Json.quote(title)
            + ", \"status\": " + status
            + (detail == null ? "" : ", \"detail\": " + Json.quote(detail)) + "}";
        return new Answer(status, headers, document.getBytes(StandardCharsets.UTF_8));
    }

    /** The answer the SQLSTATE map gives to {@code error}, or null: a server error. */
    static Answer forError(SQLException error) {
        for (Throwable cause = error; cause != null; cause = cause.getCause()) {
            if (cause instanceof SQLException sql && sql.getSQLState() != null) {
                Mapped mapped = ErrorCodes.ANSWERS.get(sql.getSQLState());
                return mapped == null ? null
                    : problem(mapped.status(), mapped.title(), null, mapped.retryAfter());
            }
        }
        return null;
    }

    /** A key header whose bytes are not UTF-8 ({@link Course#key}). */
    static Answer keyNotUtf8() {
        return problem(400, "The Idempotency-Key header is not valid UTF-8", null, null);
    }

    /**
     * A request whose begin and complete ran in different server transactions: a pooler split
     * its transaction, and part of its work may have run outside it. Nothing is acknowledged,
     * and the operator learns which setting to change.
     */
    static Answer split() {
        return problem(500, "The request's transaction was split by a connection pooler",
            "idempotency_begin and idempotency_complete ran in different server transactions,"
            + " so the work was rolled back and nothing was stored. Behind a pooler in"
            + " transaction mode (PgBouncer before 1.21), pgjdbc needs prepareThreshold=0; from"
            + " PgBouncer 1.21 set max_prepared_statements; or use the pooler's session mode.",
            null);
    }

    /**
     * A response over idempotency.max_response_bytes: it cannot be stored whole, so its
     * work rolled back and the client learns why, rather than a later replay answering
     * something else than the first answer.
     */
    static Answer tooLarge() {
        return problem(500, TOO_LARGE, "The response is larger than the server's "
            + "idempotency.max_response_bytes allows, so it was not stored and its work was "
            + "rolled back. Raise the setting or make the response smaller.", null);
    }
}
