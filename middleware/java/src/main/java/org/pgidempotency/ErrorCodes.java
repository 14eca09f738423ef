// Generated from src/errcodes.txt by src/errcodes.pl (make errcodes): do not edit.
package org.pgidempotency;

import java.util.Map;

/** SQLSTATE -> the answer for every answer other than 500 (doc/reference.md, "Errors"). */
final class ErrorCodes {
    static final Map<String, Answer.Mapped> ANSWERS = Map.ofEntries(
        Map.entry("IK006", new Answer.Mapped(400, "The Idempotency-Key header is empty or too long", null)),
        Map.entry("IK003", new Answer.Mapped(409, "A newer attempt of this request took over", 1)),
        Map.entry("IK005", new Answer.Mapped(503, "Service unavailable, retry", 1)),
        Map.entry("55006", new Answer.Mapped(409, "A request with this Idempotency-Key is in progress", 1)),
        Map.entry("25006", new Answer.Mapped(503, "Service unavailable, retry", 1)),
        Map.entry("57014", new Answer.Mapped(503, "Service unavailable, retry", 1)),
        Map.entry("55P03", new Answer.Mapped(503, "Service unavailable, retry", 1)),
        Map.entry("40P01", new Answer.Mapped(503, "Service unavailable, retry", 1)),
        Map.entry("53200", new Answer.Mapped(503, "Service unavailable, retry", 1)));

    private ErrorCodes() {}
}
