package org.pgidempotency;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;
import static org.pgidempotency.TestApp.count;
import static org.pgidempotency.TestApp.post;
import static org.pgidempotency.TestApp.request;
import static org.pgidempotency.TestApp.scalar;
import static org.pgidempotency.TestApp.send;
import static org.pgidempotency.TestApp.text;

import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.util.List;
import java.util.UUID;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The filter's glue in an embedded Tomcat over the test database: the response capture, the
 * request body, the handler's connection, the hooks, init parameters, a two-phase handler
 * that fails after its checkpoint, the two ways a response is over the server's limit and
 * the SQLSTATE map. (What every package does, with every option, is test/conformance's,
 * which test/t/056 runs against this package.)
 */
class FilterTest {
    @BeforeAll
    static void start() throws Exception {
        assumeTrue(TestApp.configured(), "PGHOST and PGDATABASE name the test database");
        TestApp.start();
    }

    private static String fresh(String what) {
        return what + "-" + UUID.randomUUID();
    }

    private static String header(HttpResponse<byte[]> response, String name) {
        return response.headers().firstValue(name).orElse(null);
    }

    private static void assertReplay(HttpResponse<byte[]> first, HttpResponse<byte[]> retry) {
        assertEquals(first.statusCode(), retry.statusCode());
        assertArrayEquals(first.body(), retry.body());
        assertEquals("true", header(retry, "Idempotent-Replayed"));
        assertNull(header(first, "Idempotent-Replayed"));
        assertEquals(header(first, "Content-Type"), header(retry, "Content-Type"));
        assertEquals(header(first, "Location"), header(retry, "Location"));
        assertEquals(String.valueOf(retry.body().length), header(retry, "Content-Length"));
        assertEquals(String.valueOf(first.body().length), header(first, "Content-Length"));
    }

    private static void assertProblem(HttpResponse<byte[]> response, int status, String words) {
        assertEquals(status, response.statusCode(), text(response));
        assertEquals("application/problem+json", header(response, "Content-Type"));
        assertTrue(text(response).startsWith("{\"type\": \"about:blank\", \"title\": "),
            text(response));
        assertTrue(text(response).contains("\"status\": " + status), text(response));
        assertTrue(text(response).contains(words), text(response));
    }

    /** The record of a key, as idempotency_lookup gives it: status, attempt, scope found. */
    private static String record(String scope, String key) throws Exception {
        return scalar("SELECT status || ' ' || attempt FROM idempotency_lookup(?, ?)", scope, key);
    }

    @Test
    void theOutcomeHookIsToldEachOutcomeOnceWithTheRequest() throws Exception {
        TestApp.OUTCOMES.clear();
        String key = fresh("key");
        String item = fresh("item");
        assertEquals(201, post("/told?item=" + item, key, "{}").statusCode());
        assertEquals(201, post("/told?item=" + item, key, "{}").statusCode());
        assertEquals(422, post("/told?item=" + item, key, "{\"other\": 1}").statusCode());
        assertEquals(500, post("/told?do=throw&item=" + fresh("item"), fresh("key"), "{}").statusCode());
        assertEquals(400, post("/told", null, "{}").statusCode());
        assertEquals(List.of("claimed POST", "replayed POST", "mismatch POST", "claimed POST",
            "refused POST"), TestApp.OUTCOMES);
    }

    @Test
    void theTenantIsTheScopeAndScopeHooksReplaceIt() throws Exception {
        String key = fresh("key");
        HttpRequest.Builder request = request("/tenant").header("Idempotency-Key", key)
            .header("X-Tenant", "t1").POST(HttpRequest.BodyPublishers.ofString(""));
        assertEquals(201, send(request.build()).statusCode());
        assertEquals("completed 1", record("t1", key));
        assertEquals(201, send(request("/scope-hook").header("Idempotency-Key", key)
            .header("X-Tenant", "t1").POST(HttpRequest.BodyPublishers.ofString("")).build())
            .statusCode());
        assertEquals("completed 1", record("S:t1", key));
    }

    @Test
    void theCapturedHeadersAreStoredAsTheHandlerSetThem() throws Exception {
        String key = fresh("key");
        HttpRequest put = request("/options?do=headers").header("X-Key", key)
            .PUT(HttpRequest.BodyPublishers.ofString("")).build();
        HttpResponse<byte[]> first = send(put);
        HttpResponse<byte[]> retry = send(put);
        assertEquals(200, first.statusCode());
        assertEquals("7", header(first, "Content-Length")); // not the handler's 999
        assertReplay(first, retry);
        assertEquals(List.of("a=1", "b=2"), retry.headers().allValues("Set-Cookie"));
        assertEquals("e", header(retry, "X-Extra"));
        assertEquals("n", header(first, "X-Not-Stored"));
        assertNull(header(retry, "X-Not-Stored"));
    }

    @Test
    void aRouteHookNamesTheRouteInItsCanonicalForm() throws Exception {
        String key = fresh("key");
        assertEquals(201, post("/routed/7", key, "{}").statusCode());
        assertEquals("completed 1", record("POST /routed/{id}", key));
    }

    @Test
    void aHookThatFailsAnswers500ProblemJson() throws Exception {
        String item = fresh("item");
        HttpResponse<byte[]> answer = send(request("/tenant?item=" + item)
            .header("Idempotency-Key", fresh("key")).POST(HttpRequest.BodyPublishers.ofString(""))
            .build());
        assertProblem(answer, 500, "The tenant or scope hook failed"); // no X-Tenant: null
        assertEquals(0, count(item));
    }

    @Test
    void sendErrorAndSendRedirectAreStoredAndReplayed() throws Exception {
        String item = fresh("item");
        String key = fresh("key");
        HttpResponse<byte[]> error = post("/default?do=send-error&item=" + item, key, "");
        assertProblem(error, 404, "No such thing");
        assertReplay(error, post("/default?do=send-error&item=" + item, key, ""));
        String redirected = fresh("key");
        HttpResponse<byte[]> redirect = post("/default?do=redirect&item=" + item, redirected, "");
        assertEquals(302, redirect.statusCode());
        assertReplay(redirect, post("/default?do=redirect&item=" + item, redirected, ""));
        assertEquals(2, count(item)); // client errors and redirects are answers: stored
    }

    @Test
    void aWritersCharsetIsFixedWhenItIsTaken() throws Exception {
        for (String charset : new String[] {"UTF-8", null}) {
            String key = fresh("key");
            String path = "/default?do=writer" + (charset == null ? "" : "&charset=" + charset);
            HttpResponse<byte[]> first = post(path, key, "");
            String expected = charset == null ? "ISO-8859-1" : charset;
            assertEquals("text/plain;charset=" + expected, header(first, "Content-Type"));
            assertArrayEquals("h\u00e9llo w\u00f6rld".getBytes(expected), first.body());
            assertReplay(first, post(path, key, ""));
        }
    }

    @Test
    void theHandlerCannotEndTheTransaction() throws Exception {
        String item = fresh("item");
        HttpResponse<byte[]> answer = post("/default?do=guard&item=" + item, fresh("key"), "");
        assertEquals("commit refused: 25000", text(answer));
        assertEquals(1, count(item));
        assertEquals(1, count(item + "-after-close"));
    }

    @Test
    void theBodyIsReadAgainAndFormsGiveParameters() throws Exception {
        String form = "a=1&b=%C3%A9&a=2";
        HttpResponse<byte[]> answer = send(request("/default?do=echo&q=%20x").header(
            "Idempotency-Key", fresh("key")).header("Content-Type",
            "application/x-www-form-urlencoded; charset=UTF-8").POST(
            HttpRequest.BodyPublishers.ofString(form)).build());
        assertEquals("{a=1|2, b=\u00e9, do=echo, q= x} true " + form.length(), text(answer));
    }

    @Test
    void startAsyncAndCheckpointWithoutALeaseFailTheHandler() throws Exception {
        // Asynchronous processing would answer after the filter stored the response.
        for (String what : new String[] {"async", "checkpoint"}) {
            String item = fresh("item");
            assertEquals(500, post("/default?do=" + what + "&item=" + item, fresh("key"), "")
                .statusCode(), what);
            assertEquals(0, count(item), what);
        }
    }

    @Test
    void aMultipartBodyHasNoPartsBehindTheFilter() throws Exception {
        HttpResponse<byte[]> answer = send(request("/default?do=parts").header("Idempotency-Key",
            fresh("key")).header("Content-Type", "multipart/form-data; boundary=b").POST(
            HttpRequest.BodyPublishers.ofString("--b\r\nContent-Disposition: form-data; name=\"a\""
                + "\r\n\r\n1\r\n--b--\r\n")).build());
        assertEquals("parts: 0", text(answer));
    }

    @Test
    void aBodyReadBeforeTheFilterAnswers500SayingWhatToChange() throws Exception {
        String item = fresh("item");
        assertProblem(post("/reader-first?item=" + item, fresh("key"), "{\"a\": 1}"), 500,
            "map the filter before any filter that reads the body");
        assertEquals(0, count(item));
    }

    @Test
    void twoPhaseKeepsCheckpointedWorkAndHandsTheRecoveryPointOver() throws Exception {
        String key = fresh("key");
        String item = fresh("item");
        assertEquals(500, send(request("/lease?do=checkpoint&item=" + item).header("Idempotency-Key",
            key).header("X-Fail", "yes").POST(HttpRequest.BodyPublishers.ofString("")).build())
            .statusCode());
        assertEquals(1, count(item)); // committed by its checkpoint
        assertEquals("in_progress 1", record("", key)); // released: the next attempt goes on
        HttpResponse<byte[]> second = post("/lease?do=checkpoint&item=" + item, key, "");
        assertEquals(201, second.statusCode());
        assertEquals("attempt 2, recovery point before: " + item, text(second));
        assertReplay(second, post("/lease?do=checkpoint&item=" + item, key, ""));
        assertEquals(2, count(item));
        assertEquals("completed 2", record("", key));
    }

    @Test
    void aResponseOverTheServersLimitRollsBackAndNamesTheSetting() throws Exception {
        // /small's connections have idempotency.max_response_bytes = 1000, which counts the
        // body and the headers: 5000 bytes are refused before they reach the server, 999
        // bytes and a Content-Type by the server (54000).
        for (int size : new int[] {5000, 999}) {
            String key = fresh("key");
            String item = fresh("item");
            for (int i = 0; i < 2; i++) {
                assertProblem(post("/small?do=size&n=" + size + "&item=" + item, key, ""), 500,
                    "idempotency.max_response_bytes");
            }
            assertEquals(0, count(item), "size " + size);
        }
        HttpResponse<byte[]> small = post("/small?do=size&n=100", fresh("key"), "");
        assertEquals(201, small.statusCode());
    }

    @Test
    void aSqlstateARetryResolvesAnswers503WithRetryAfter() throws Exception {
        // A claim held by an open transaction; /timeout waits for it (30 s) under a
        // statement_timeout of 300 ms: 57014.
        String key = fresh("key");
        try (Connection holder = TestApp.dataSource(null).getConnection()) {
            holder.setAutoCommit(false);
            try (PreparedStatement claim = holder.prepareStatement("SELECT idempotency_begin('', ?,"
                + " request_hash_parts('POST', '/timeout', '/timeout', '',"
                + " request_hash_jsonb('{}')::text))")) {
                claim.setString(1, key);
                claim.executeQuery().close();
            }
            HttpResponse<byte[]> answer = post("/timeout", key, "{}");
            assertProblem(answer, 503, "Service unavailable, retry");
            assertEquals("1", header(answer, "Retry-After"));
            holder.rollback();
        }
    }

    @Test
    void aFilterConfiguredByInitParameters() throws Exception {
        String key = fresh("key");
        String item = fresh("item");
        HttpRequest put = request("/init?item=" + item).header("X-Key", key)
            .PUT(HttpRequest.BodyPublishers.ofString("")).build();
        HttpResponse<byte[]> first = send(put);
        assertEquals(201, first.statusCode());
        assertReplay(first, send(put));
        assertEquals(1, count(item));
        assertEquals("none", text(post("/init?do=none", key, ""))); // POST is not protected here
    }

    @Test
    void theReadmeExample() throws Exception {
        assertTrue(TestApp.exampleCompiled(), "examples/Orders.java is compiled with the tests");
        String key = fresh("key");
        String item = fresh("book");
        HttpRequest order = request("/orders").header("Idempotency-Key", key)
            .header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString("{\"item\": \"" + item + "\"}")).build();
        HttpResponse<byte[]> first = send(order);
        assertEquals(201, first.statusCode());
        assertTrue(text(first).matches("\\{\"order\": \\d+\\}"), text(first));
        assertReplay(first, send(order));
        assertEquals("1", scalar("SELECT count(*) FROM orders WHERE item = ?", item));
    }
}
