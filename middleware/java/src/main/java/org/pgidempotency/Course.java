package org.pgidempotency;

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Types;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The course of one request through the extension's SQL functions, knowing nothing of
 * servlets: the framework-neutral core.
 *
 * <pre>
 *   claimed      the handler runs in the claim's transaction; finish() stores its response
 *   replay       the stored status, headers and body, plus Idempotent-Replayed: true
 *   in_progress  409 with Retry-After (after waiting, with the wait option)
 *   mismatch     422
 * </pre>
 *
 * With the lease option (two-phase mode) the claim commits at once; the handler's work
 * commits at its checkpoints and with its response, which is fenced by the attempt.
 * Without a key ({@code key == null}) the handler runs unprotected, in a transaction.
 */
final class Course implements AutoCloseable {
    /** The parts of a request's fingerprint (middleware/README.md, "Fingerprint"). */
    record Request(String method, String route, String path, String query, String contentType,
        byte[] body) {}

    private static final Pattern BYTES = Pattern.compile("(\\d+)(B|kB|MB|GB|TB)?");

    /** Numbers the statements that end a transaction (see {@link #end}). */
    private static final AtomicLong ENDS = new AtomicLong();

    private final Options options;
    private final String scope;
    private final String key;
    private final Connection connection;
    private final boolean autoCommitBefore;
    private Integer attempt;
    private String recoveryPoint;
    // The server transaction begin ran in, which complete must run in too; null in
    // two-phase mode, where they differ by design.
    private String transaction;
    // Past this many body bytes a response cannot be stored: the server's
    // idempotency.max_response_bytes, which counts the body and the headers together.
    private long responseLimit = Long.MAX_VALUE;

    private Course(Options options, String scope, String key, Connection connection)
        throws SQLException {
        this.options = options;
        this.scope = scope;
        this.key = key;
        this.connection = connection;
        this.autoCommitBefore = connection.getAutoCommit();
        connection.setAutoCommit(false);
    }

    /**
     * The key a header's value carries: its bytes read as UTF-8, as in every package of the
     * project, so that a retry moved to another package finds its key; null when they are not
     * UTF-8. Servlet containers (Tomcat, Jetty, Undertow) give a header a character per byte
     * (ISO-8859-1); a value with a character past U+00FF was decoded before, and is taken as
     * it is.
     */
    static String key(String header) {
        try {
            if (header.chars().allMatch(c -> c <= 0xFF)) {
                return StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(header.getBytes(StandardCharsets.ISO_8859_1)))
                    .toString();
            }
            StandardCharsets.UTF_8.newEncoder() // no lone surrogate
                .onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT)
                .encode(CharBuffer.wrap(header));
            return header;
        } catch (CharacterCodingException e) {
            return null;
        }
    }

    /** A course on a connection of its own, in a transaction. */
    static Course open(Options options, String scope, String key) throws SQLException {
        Connection connection = options.dataSource().getConnection();
        try {
            return new Course(options, scope, key, connection);
        } catch (SQLException | RuntimeException e) {
            connection.close();
            throw e;
        }
    }

    /**
     * A statement of the protocol (src/protocol.txt, generated into {@link Protocol}), its
     * parameters bound from {@code values} by name. The texts type every parameter.
     */
    private PreparedStatement prepare(String sql, List<String> names, Map<String, Object> values)
        throws SQLException {
        PreparedStatement statement = connection.prepareStatement(sql);
        try {
            for (int i = 0; i < names.size(); i++) {
                Object value = values.get(names.get(i));
                if (value == null) {
                    statement.setNull(i + 1, Types.NULL);
                } else {
                    statement.setObject(i + 1, value);
                }
            }
            return statement;
        } catch (SQLException | RuntimeException e) {
            statement.close();
            throw e;
        }
    }

    /**
     * Claims the key: null when claimed (run the handler, then {@link #finish}), else the
     * answer to send without running it. The fingerprint is request_hash_parts(method, route,
     * path, query string, body), the body by the server's rule for every package
     * (request_hash_body): a JSON body by its value, any other by its bytes.
     */
    Answer begin(Request request) throws SQLException {
        Map<String, Object> values = new HashMap<>();
        values.put("scope", scope);
        values.put("key", key);
        values.put("method", request.method());
        values.put("route", request.route());
        values.put("path", request.path());
        values.put("query", request.query());
        values.put("content_type", request.contentType() != null ? request.contentType() : "");
        values.put("body", request.body());
        values.put("ttl", options.ttl());
        values.put("lease", options.lease());
        values.put("wait", options.waitFor());
        List<String> columns = Protocol.SQL_BEGIN_COLUMNS;
        try (PreparedStatement statement = prepare(Protocol.SQL_BEGIN, Protocol.SQL_BEGIN_PARAMS,
            values); ResultSet row = statement.executeQuery()) {
            row.next();
            String outcome = row.getString(columns.indexOf("outcome") + 1);
            if (outcome.equals("claimed")) {
                attempt = row.getInt(columns.indexOf("attempt") + 1);
                recoveryPoint = row.getString(columns.indexOf("recovery_point") + 1);
                responseLimit = bytes(row.getString(columns.indexOf("max_response_bytes") + 1));
                if (options.twoPhase()) {
                    end("COMMIT");
                } else {
                    transaction = row.getString(columns.indexOf("server_transaction") + 1);
                }
                return null;
            }
            Answer answer = switch (outcome) {
                case "replay" -> row.getBoolean(columns.indexOf("response_body_omitted") + 1)
                    ? Answer.of(Protocol.BODY_OMITTED)
                    : replay(row.getInt(columns.indexOf("response_status") + 1),
                        row.getString(columns.indexOf("response_headers") + 1),
                        row.getBytes(columns.indexOf("response_body_bytes") + 1));
                case "in_progress" -> {
                    int seconds = row.getInt(columns.indexOf("retry_after_seconds") + 1);
                    yield Answer.retrying(Protocol.IN_PROGRESS, row.wasNull() ? null : seconds);
                }
                default -> Answer.of(Protocol.MISMATCH);
            };
            end("ROLLBACK");
            return answer;
        }
    }

    /**
     * A byte setting as SHOW gives it ("1MB", "1000B", "0"; pg_size_bytes() of PostgreSQL
     * 15 does not read "B"), or no limit when it is not one: the server's check stays.
     */
    static long bytes(String setting) {
        Matcher matcher = setting == null ? null : BYTES.matcher(setting);
        if (matcher == null || !matcher.matches()) {
            return Long.MAX_VALUE;
        }
        int shift = matcher.group(2) == null ? 0
            : 10 * List.of("B", "kB", "MB", "GB", "TB").indexOf(matcher.group(2));
        return Long.parseLong(matcher.group(1)) << shift;
    }

    private static Answer replay(int status, String storedHeaders, byte[] body) {
        List<Map.Entry<String, String>> headers = new ArrayList<>();
        if (storedHeaders != null) {
            Json.readHeaders(storedHeaders).forEach(
                (name, values) -> values.forEach(value -> headers.add(Map.entry(name, value))));
        }
        headers.add(Map.entry(Protocol.REPLAYED_HEADER, "true"));
        return new Answer(status, headers, body == null ? new byte[0] : body, "replayed");
    }

    /** Whether the request has no key and runs unprotected, nothing stored. */
    boolean unprotected() {
        return key == null;
    }

    /** How many body bytes a response may have and still be stored. */
    long responseLimit() {
        return key == null ? Long.MAX_VALUE : responseLimit;
    }

    /**
     * Stores the handler's response with its work and commits: null when the handler's
     * response goes out as it is, else the answer to send instead. A response that is not
     * kept (a server error, one over the limit) rolls the work back.
     *
     * @param oversized whether the body was over {@link #responseLimit()} (and is not given)
     */
    Answer finish(int status, Map<String, List<String>> headers, byte[] body, boolean oversized)
        throws SQLException {
        if (key == null) {
            connection.commit();
            return null;
        }
        if (oversized) {
            giveUp();
            return Answer.tooLarge(responseLimit);
        }
        if (status >= 500 && !options.storeServerErrors()) {
            giveUp();
            return null;
        }
        try {
            Boolean stored = complete(status, headers, body);
            if (stored == null) {
                // begin and complete ran in different server transactions: a pooler split
                // the request's, and part of its work may have run outside it.
                giveUp();
                return Answer.split();
            }
            if (stored) {
                end("COMMIT");
            } else {
                giveUp(); // not stored: its work must not commit without it
            }
            return null;
        } catch (SQLException e) {
            giveUp();
            if ("54000".equals(e.getSQLState())) {
                return Answer.tooLarge(responseLimit);
            }
            throw e;
        }
    }

    /**
     * idempotency_complete, in the server transaction begin ran in: whether the response was
     * stored, or null when the statement ran in another one. The protocol's statement turns
     * idempotency.store_server_errors on for its transaction first (a CASE evaluates its
     * condition before its result), so that a server error, which only the
     * storeServerErrors option sends here, is stored.
     */
    private Boolean complete(int status, Map<String, List<String>> headers, byte[] body)
        throws SQLException {
        Map<String, Object> values = new HashMap<>();
        values.put("transaction", transaction);
        values.put("scope", scope);
        values.put("key", key);
        values.put("status", status);
        values.put("headers", Json.headers(headers));
        values.put("body", body);
        // One transaction: the claim is this transaction's own, whatever its attempt.
        values.put("attempt", options.twoPhase() ? attempt : null);
        try (PreparedStatement complete = prepare(Protocol.SQL_COMPLETE,
            Protocol.SQL_COMPLETE_PARAMS, values); ResultSet stored = complete.executeQuery()) {
            stored.next();
            boolean value = stored.getBoolean(1);
            return stored.wasNull() ? null : value;
        }
    }

    /**
     * Ends the transaction, a claim's, with COMMIT or ROLLBACK, in a statement text used once.
     * pgjdbc runs commit() and rollback() as named prepared statements once a connection has
     * sent them prepareThreshold times (5). Behind a pooler in transaction mode (PgBouncer
     * before 1.21) a name prepared on one server connection can stand for another client's
     * statement on the next: a COMMIT run there as that client's ROLLBACK looks like a commit
     * (pgjdbc does not read the command tag), and a ROLLBACK run as a COMMIT commits work
     * that failed. A text sent once is never bound to a name prepared before: it runs as
     * itself, or fails. (Where no transaction is open, pgjdbc begins one first, which the
     * statement ends.)
     */
    private void end(String command) throws SQLException {
        try (Statement statement = connection.createStatement()) {
            statement.execute(command + " /* pg-idempotency " + ENDS.incrementAndGet() + " */");
        }
    }

    /**
     * The handler failed, or its response is not kept: its work rolls back, and in two-phase
     * mode the committed claim is released, so that a retry goes on at once.
     */
    void giveUp() throws SQLException {
        if (key == null) {
            connection.rollback();
            return;
        }
        end("ROLLBACK");
        if (!options.twoPhase()) {
            return;
        }
        Map<String, Object> values = new HashMap<>();
        values.put("scope", scope);
        values.put("key", key);
        values.put("attempt", attempt);
        try (PreparedStatement release = prepare(Protocol.SQL_RELEASE,
            Protocol.SQL_RELEASE_PARAMS, values)) {
            release.executeQuery().close();
            end("COMMIT");
        } catch (SQLException e) {
            // The lease ends by itself; a newer attempt may hold the key already (IK003).
            end("ROLLBACK");
        }
    }

    /** Two-phase mode: records progress and renews the lease, committed with the work so far. */
    void checkpoint(String point) throws SQLException {
        if (key == null || !options.twoPhase()) {
            throw new IllegalStateException("checkpoint() needs two-phase mode (the lease option)"
                + " and a key");
        }
        Map<String, Object> values = new HashMap<>();
        values.put("scope", scope);
        values.put("key", key);
        values.put("recovery_point", point);
        values.put("attempt", attempt);
        try (PreparedStatement checkpoint = prepare(Protocol.SQL_CHECKPOINT,
            Protocol.SQL_CHECKPOINT_PARAMS, values)) {
            checkpoint.executeQuery().close();
        }
        end("COMMIT");
        recoveryPoint = point;
    }

    String scope() {
        return scope;
    }

    String key() {
        return key;
    }

    Integer attempt() {
        return attempt;
    }

    String recoveryPoint() {
        return recoveryPoint;
    }

    /**
     * The connection as the handler gets it: the course ends the transaction and closes the
     * connection, so commit(), rollback(), setAutoCommit() and close() are refused (close()
     * is ignored, for code that closes what it was given).
     */
    Connection handlerConnection() {
        InvocationHandler guard = (proxy, method, arguments) -> {
            switch (method.getName()) {
                case "close":
                    return null;
                case "commit", "setAutoCommit":
                    throw new SQLException("the idempotency filter ends this transaction: "
                        + method.getName() + "() is not allowed on its connection", "25000");
                case "rollback":
                    if (arguments == null) {
                        throw new SQLException("the idempotency filter ends this transaction: "
                            + "throw from the handler to roll its work back", "25000");
                    }
                    break;
                default:
                    break;
            }
            try {
                return method.invoke(connection, arguments);
            } catch (InvocationTargetException e) {
                throw e.getCause();
            }
        };
        return (Connection) Proxy.newProxyInstance(Course.class.getClassLoader(),
            new Class<?>[] {Connection.class}, guard);
    }

    /**
     * Rolls back what is not committed and gives the connection back. Its errors are
     * dropped: the answer is decided by now, and a connection that fails here is closed, so
     * the server rolls back whatever it still holds.
     */
    @Override
    public void close() {
        try (connection) {
            connection.rollback();
            connection.setAutoCommit(autoCommitBefore);
        } catch (SQLException e) {
            // See above.
        }
    }
}
