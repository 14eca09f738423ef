package org.pgidempotency;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The little JSON the package needs, without a library: the stored headers' object and the
 * text of problem documents. (Whether a request body is JSON, which decides how it is
 * fingerprinted, is the server's rule: request_hash_body.)
 */
final class Json {
    private final String text;
    private int at;

    private Json(String text) {
        this.text = text;
    }

    /** A JSON string literal of {@code value}. */
    static String quote(String value) {
        StringBuilder out = new StringBuilder(value.length() + 2).append('"');
        for (int i = 0; i < value.length(); i++) {
            char c = value.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        return out.append('"').toString();
    }

    /** The JSON object of header names to a value, or to an array of values when repeated. */
    static String headers(Map<String, List<String>> headers) {
        StringBuilder out = new StringBuilder("{");
        for (Map.Entry<String, List<String>> header : headers.entrySet()) {
            if (out.length() > 1) {
                out.append(", ");
            }
            out.append(quote(header.getKey())).append(": ");
            List<String> values = header.getValue();
            if (values.size() == 1) {
                out.append(quote(values.get(0)));
            } else {
                out.append('[');
                for (int i = 0; i < values.size(); i++) {
                    out.append(i > 0 ? ", " : "").append(quote(values.get(i)));
                }
                out.append(']');
            }
        }
        return out.append('}').toString();
    }

    /**
     * Reads what {@link #headers} writes, as idempotency_begin returns it: an object whose
     * values are strings or arrays of strings (the shape idempotency_complete accepts).
     */
    static Map<String, List<String>> readHeaders(String text) {
        Map<String, List<String>> headers = new LinkedHashMap<>();
        Json in = new Json(text);
        in.expect('{');
        if (!in.next('}')) {
            do {
                String name = in.string();
                in.expect(':');
                List<String> values = new ArrayList<>();
                if (in.next('[')) {
                    if (!in.next(']')) {
                        do {
                            values.add(in.string());
                        } while (in.next(','));
                        in.expect(']');
                    }
                } else {
                    values.add(in.string());
                }
                headers.put(name, values);
            } while (in.next(','));
            in.expect('}');
        }
        in.end();
        return headers;
    }

    // ------------------------------------------------------------------ the grammar

    private String string() {
        space();
        if (at >= text.length() || text.charAt(at) != '"') {
            throw new IllegalArgumentException("a string is missing");
        }
        at++;
        StringBuilder value = new StringBuilder();
        while (true) {
            if (at >= text.length()) {
                throw new IllegalArgumentException("a string does not end");
            }
            char c = text.charAt(at++);
            if (c == '"') {
                return value.toString();
            } else if (c < 0x20) {
                throw new IllegalArgumentException("a control character in a string");
            } else if (c != '\\') {
                value.append(c);
            } else if (at >= text.length()) {
                throw new IllegalArgumentException("an escape does not end");
            } else {
                char escaped = text.charAt(at++);
                switch (escaped) {
                    case '"', '\\', '/' -> value.append(escaped);
                    case 'b' -> value.append('\b');
                    case 'f' -> value.append('\f');
                    case 'n' -> value.append('\n');
                    case 'r' -> value.append('\r');
                    case 't' -> value.append('\t');
                    case 'u' -> value.append(hex()); // a surrogate pair is two escapes, two chars
                    default -> throw new IllegalArgumentException("an unknown escape");
                }
            }
        }
    }

    private char hex() {
        if (at + 4 > text.length()) {
            throw new IllegalArgumentException("a \\u escape is short");
        }
        int code = 0;
        for (int i = 0; i < 4; i++) {
            int digit = Character.digit(text.charAt(at++), 16);
            if (digit < 0) {
                throw new IllegalArgumentException("a \\u escape is not hexadecimal");
            }
            code = code * 16 + digit;
        }
        return (char) code;
    }

    private void space() {
        while (at < text.length() && " \t\n\r".indexOf(text.charAt(at)) >= 0) {
            at++;
        }
    }

    /** Whether {@code c} comes next (after spaces), taking it if so. */
    private boolean next(char c) {
        space();
        return take(c);
    }

    /** Whether {@code c} is the next character, taking it if so. */
    private boolean take(char c) {
        if (at < text.length() && text.charAt(at) == c) {
            at++;
            return true;
        }
        return false;
    }

    private void expect(char c) {
        if (!next(c)) {
            throw new IllegalArgumentException("'" + c + "' is missing");
        }
    }

    private void end() {
        space();
        if (at != text.length()) {
            throw new IllegalArgumentException("text after the value");
        }
    }
}
