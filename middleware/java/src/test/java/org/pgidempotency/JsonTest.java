package org.pgidempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** What is a JSON document (fingerprinted by value), and the stored headers' object. */
class JsonTest {
    private static boolean isDocument(String text) {
        return Json.documentOrNull(text.getBytes(StandardCharsets.UTF_8)) != null;
    }

    @Test
    void documentsAsRfc8259WritesThem() {
        for (String text : List.of("{}", "[]", " {\"a\": [1, -0, 2.5e-3, 1E+9, true, false, null]}\n",
            "\"\\u00e9\\n\\/\"", "\"\\ud83d\\ude00\"", "0", "-1.5", "{\"a\":{\"b\":[[],{}]}}", "\t[\r\n]")) {
            assertNotNull(Json.documentOrNull(text.getBytes(StandardCharsets.UTF_8)), text);
        }
    }

    @Test
    void notDocuments() {
        for (String text : List.of("", " ", "01", "1.", ".5", "-", "1e", "- 1", "[1,]", "{\"a\"}",
            "{\"a\":1,}", "{a:1}", "'a'", "\"a", "\"\t\"", "\"\\x\"", "\"\\u12\"", "nul", "[1] 2",
            "NaN", "Infinity", "[1}", "{\"a\":1]", "\f[]", "\uFEFF[]",
            // What jsonb refuses, though RFC 8259 allows it.
            "\"\\u0000\"", "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800x\"", "\"\\ud800\\u0041\"")) {
            assertNull(Json.documentOrNull(text.getBytes(StandardCharsets.UTF_8)), text);
        }
    }

    @Test
    void invalidUtf8IsNotADocument() {
        assertNull(Json.documentOrNull(new byte[] {'"', (byte) 0xff, '"'}));
    }

    @Test
    void deepNestingNeedsNoStack() {
        int depth = 1_000_000;
        String text = "[".repeat(depth) + "]".repeat(depth);
        assertEquals(true, isDocument(text));
        assertEquals(false, isDocument("[".repeat(depth) + "]".repeat(depth - 1)));
    }

    @Test
    void quoteEscapes() {
        assertEquals("\"a\\\"b\\\\c\\nd\\u0001é\"", Json.quote("a\"b\\c\nd\u0001é"));
    }

    @Test
    void headersRoundTrip() {
        Map<String, List<String>> headers = new LinkedHashMap<>();
        headers.put("content-type", List.of("application/json"));
        headers.put("set-cookie", List.of("a=1", "b=\"2\""));
        String text = Json.headers(headers);
        assertEquals("{\"content-type\": \"application/json\", \"set-cookie\": [\"a=1\", \"b=\\\"2\\\"\"]}",
            text);
        assertEquals(headers, Json.readHeaders(text));
        assertEquals(Map.of(), Json.readHeaders("{}"));
        assertEquals(Map.of("x", List.of()), Json.readHeaders("{\"x\": []}"));
        assertThrows(IllegalArgumentException.class, () -> Json.readHeaders("{\"x\": 1}"));
    }
}
