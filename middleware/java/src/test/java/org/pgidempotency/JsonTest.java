package org.pgidempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Problem documents' strings and the stored headers' object. */
class JsonTest {
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
        assertEquals(Map.of("x", List.of("\u0001é\ud83d\ude00")),
            Json.readHeaders("{\"x\": \"\\u0001\\u00e9\\ud83d\\ude00\"}"));
        assertThrows(IllegalArgumentException.class, () -> Json.readHeaders("{\"x\": 1}"));
    }
}
