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

import java.io.ByteArrayInputStream;
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
 * The filter in an embedded Tomcat over the test database: every option, the response
 * capture, the request body, two-phase mode and the error answers. (The HTTP behaviour
 * every package shares is test/conformance's, which test/t/056 runs against this package.)
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
    void aNewRequestRunsOnceAndItsRetryReplays() throws Exception {
        String key = fresh("key");
        String item = fresh("item");
        HttpResponse<byte[]> first = post("/default?item=" + item, key, "{}");
        assertEquals(201, first.statusCode());
        assertEquals("application/json", header(first, "Content-Type"));
        assertTrue(header(first, "Location").startsWith("/things/"));
        assertReplay(first, post("/default?item=" + item, key, "{}"));
        assertEquals(1, count(item));
        assertEquals("completed 1", record("", key)); // the scope: no tenant, the empty string
    }

    @Test
    void otherMethodsPassThrough() throws Exception {
        HttpResponse<byte[]> get = send(request("/default?do=none").header("Idempotency-Key",
            fresh("key")).GET().build());
        assertEquals("none", text(get));
        HttpResponse<byte[]> put = send(request("/default?do=none").header("Idempotency-Key",
            fresh("key")).PUT(HttpRequest.BodyPublishers.ofString("{}")).build());
        assertEquals("none", text(put));
    }

    @Test
    void aMissingKeyAnswers400OrRunsUnprotected() throws Exception {
        String item = fresh("item");
        assertProblem(post("/default?item=" + item, null, "{}"), 400,
            "The Idempotency-Key header is required");
        assertEquals(0, count(item));
        HttpResponse<byte[]> unprotected = post("/optional?item=" + item, null, "{}");
        assertEquals(201, unprotected.statusCode());
        assertTrue(text(unprotected).endsWith("\"key\": null}"), text(unprotected));
        assertEquals(201, post("/optional?item=" + item, null, "{}").statusCode());
        assertEquals(2, count(item)); // committed, and run again: nothing is stored
    }

    @Test
    void theFingerprintIsMethodRoutePathQueryAndBody() throws Exception {
        String key = fresh("key");
        assertEquals(201, post("/default?x=1", key, "{\"b\": 2, \"a\": [1, 2]}").statusCode());
        assertEquals("t", scalar("SELECT request = request_hash_parts('POST', '/default', '/default',"
            + " 'x=1', request_hash_jsonb('{\"a\":[1,2],\"b\":2}')::text)"
            + " FROM idempotency_lookup('', ?)", key));
        // A JSON body by its value, not its spelling.
        assertEquals("true", header(post("/default?x=1", key, "{\"a\":[1,2],  \"b\":2}"),
            "Idempotent-Replayed"));
        String other = fresh("key");
        HttpResponse<byte[]> notJson = send(request("/default").header("Idempotency-Key", other)
            .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(
                "{not json")).build());
        assertEquals(201, notJson.statusCode());
        assertEquals("t", scalar("SELECT request = request_hash_parts('POST', '/default', '/default',"
            + " '', request_hash('{not json'::bytea)::text) FROM idempotency_lookup('', ?)", other));
        // JSON that jsonb refuses is fingerprinted by its bytes, rather than failing.
        String nul = fresh("key");
        assertEquals(201, post("/default", nul, "{\"a\": \"\\u0000\"}").statusCode());
        assertEquals("t", scalar("SELECT request = request_hash_parts('POST', '/default', '/default',"
            + " '', request_hash(convert_to('{\"a\": \"\\u0000\"}', 'UTF8'))::text)"
            + " FROM idempotency_lookup('', ?)", nul));
        assertProblem(post("/default?x=2", key, "{\"a\": [1, 2], \"b\": 2}"), 422,
            "used for a different request");
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
    void scopePerRouteLetsOneKeyServeTwoRoutes() throws Exception {
        String key = fresh("key");
        for (String route : List.of("/scoped/a", "/scoped/b")) {
            HttpResponse<byte[]> answer = send(request(route).header("Idempotency-Key", key)
                .header("X-Tenant", "t1").POST(HttpRequest.BodyPublishers.ofString("")).build());
            assertEquals(201, answer.statusCode());
            assertEquals("completed 1", record("t1 POST " + route, key));
        }
    }

    @Test
    void optionsNameTheHeaderMethodsStoredHeadersAndServerErrors() throws Exception {
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
        // Without X-Key: 400 naming it.
        assertProblem(send(request("/options").header("Idempotency-Key", key)
            .PUT(HttpRequest.BodyPublishers.ofString("")).build()), 400, "The X-Key header");
        // storeServerErrors: a 503 is stored with its work.
        String item = fresh("item");
        HttpRequest failing = request("/options?do=status&code=503&item=" + item)
            .header("X-Key", fresh("key")).POST(HttpRequest.BodyPublishers.ofString("")).build();
        HttpResponse<byte[]> stored = send(failing);
        assertEquals(503, stored.statusCode());
        assertReplay(stored, send(failing));
        assertEquals(1, count(item));
    }

    @Test
    void aBodyOverTheLimitAnswers413AndRunsNothing() throws Exception {
        String item = fresh("item");
        assertProblem(send(request("/options?item=" + item).header("X-Key", fresh("key"))
            .POST(HttpRequest.BodyPublishers.ofString("x".repeat(101))).build()), 413,
            "maxRequestBytes");
        // Chunked, without a Content-Length.
        assertProblem(send(request("/options?item=" + item).header("X-Key", fresh("key"))
            .POST(HttpRequest.BodyPublishers.ofInputStream(
                () -> new ByteArrayInputStream(new byte[200]))).build()), 413, "100 bytes");
        assertEquals(0, count(item));
        assertEquals(201, send(request("/options?item=" + item).header("X-Key", fresh("key"))
            .POST(HttpRequest.BodyPublishers.ofString("x".repeat(100))).build()).statusCode());
    }

    @Test
    void serverErrorsAndFailuresRollBackAndRunAgain() throws Exception {
        String key = fresh("key");
        String item = fresh("item");
        for (int i = 0; i < 2; i++) {
            HttpResponse<byte[]> answer = post("/default?do=status&code=503&item=" + item, key, "");
            assertEquals(503, answer.statusCode());
            assertEquals("status 503", text(answer));
            assertNull(header(answer, "Idempotent-Replayed"));
        }
        String thrown = fresh("item");
        for (int i = 0; i < 2; i++) {
            HttpResponse<byte[]> answer = post("/default?do=throw&item=" + thrown, key + "-t", "");
            assertEquals(500, answer.statusCode());
            assertNull(header(answer, "Location"));
        }
        assertEquals(0, count(item));
        assertEquals(0, count(thrown));
        assertNull(record("", key));
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
    void twoPhaseAnswers409WhenANewerAttemptTookOver() throws Exception {
        String key = fresh("key");
        assertProblem(post("/lease?do=takeover", key, ""), 409, "A newer attempt");
        assertEquals("in_progress 2", record("", key));
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
    void aReplayWithoutItsBodyAnswers500() throws Exception {
        String key = fresh("key");
        // Stored by another caller, without omit_oversized => false: the body is omitted.
        try (Connection connection = TestApp.dataSource(null).getConnection()) {
            connection.setAutoCommit(false);
            for (String sql : new String[] {
                "SELECT set_config('idempotency.max_response_bytes', '4', true), ?",
                "SELECT idempotency_begin('', ?, request_hash_parts('POST', '/default', '/default',"
                    + " '', request_hash_jsonb('{}')::text))",
                "SELECT idempotency_complete('', ?, 201, response_body_bytes => '\\x7878787878787878')"}) {
                try (PreparedStatement statement = connection.prepareStatement(sql)) {
                    statement.setString(1, key);
                    statement.executeQuery().close();
                }
            }
            connection.commit();
        }
        assertProblem(post("/default", key, "{}"), 500, "stored without its body");
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
