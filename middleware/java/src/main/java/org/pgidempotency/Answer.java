package org.pgidempotency;

import java.nio.charset.StandardCharsets;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * An answer the package gives instead of the handler's: a replay, or a problem document
 * (RFC 9457, {@code application/problem+json}).
 *
 * @param status the HTTP status
 * @param headers header names and their values, in order
 * @param body the body, sent with its Content-Length
 * @param outcome what the request came to (src/protocol.txt, "outcomes"), for the
 *     onOutcome hook
 */
record Answer(int status, List<Map.Entry<String, String>> headers, byte[] body, String outcome) {

    private static final Pattern PLACEHOLDER = Pattern.compile("\\{(\\w+)\\}");

    /** A problem document; {@code detail} and {@code retryAfter} may be null. */
    static Answer problem(int status, String title, String detail, Integer retryAfter,
        String outcome) {
        List<Map.Entry<String, String>> headers = new ArrayList<>();
        headers.add(Map.entry("Content-Type", Protocol.PROBLEM_CONTENT_TYPE));
        if (retryAfter != null) {
            headers.add(Map.entry("Retry-After", retryAfter.toString()));
        }
        String document = "{\"type\": " + Json.quote(Protocol.PROBLEM_TYPE) + ", \"title\": "
            + Json.quote(title) + ", \"status\": " + status
            + (detail == null ? "" : ", \"detail\": " + Json.quote(detail)) + "}";
        return new Answer(status, headers, document.getBytes(StandardCharsets.UTF_8), outcome);
    }

    /** A template's "{name}"s filled in from {@code values} (the others left as they are). */
    static String render(String template, Map<String, ?> values) {
        if (template == null) {
            return null;
        }
        return PLACEHOLDER.matcher(template).replaceAll(match -> Matcher.quoteReplacement(
            values.containsKey(match.group(1)) ? String.valueOf(values.get(match.group(1)))
                : match.group()));
    }

    /**
     * One of the protocol's answers (src/protocol.txt): {@code values} fill its title and its
     * detail in.
     */
    static Answer of(Protocol.Spec spec, Map<String, ?> values) {
        return problem(spec.status(), render(spec.title(), values), render(spec.detail(), values),
            spec.retryAfter(), spec.outcome());
    }

    static Answer of(Protocol.Spec spec) {
        return of(spec, Map.of());
    }

    /** An answer whose Retry-After is the begin row's: {@code seconds}, at least 1. */
    static Answer retrying(Protocol.Spec spec, Integer seconds) {
        return problem(spec.status(), spec.title(), spec.detail(),
            Math.max(seconds == null ? 1 : seconds, 1), spec.outcome());
    }

    /** The answer the SQLSTATE map gives to {@code error}, or null: a server error. */
    static Answer forError(SQLException error) {
        for (Throwable cause = error; cause != null; cause = cause.getCause()) {
            if (cause instanceof SQLException sql && sql.getSQLState() != null) {
                Protocol.Spec mapped = Protocol.SQLSTATE_ANSWERS.get(sql.getSQLState());
                return mapped == null ? null : of(mapped);
            }
        }
        return null;
    }

    /**
     * A request whose begin and complete ran in different server transactions: a pooler split
     * its transaction, and part of its work may have run outside it. Nothing is acknowledged,
     * and the operator learns which setting to change.
     */
    static Answer split() {
        return of(Protocol.SPLIT, Map.of("drivers", Protocol.SPLIT_DRIVERS));
    }

    /**
     * A response over idempotency.max_response_bytes: it cannot be stored whole, so its
     * work rolled back and the client learns why, rather than a later replay answering
     * something else than the first answer.
     */
    static Answer tooLarge(long limit) {
        String setting = "idempotency.max_response_bytes";
        return of(Protocol.RESPONSE_TOO_LARGE, Map.of("setting",
            limit == Long.MAX_VALUE ? setting : setting + " (" + limit + " bytes)"));
    }
}
