package org.pgidempotency;

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
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

    private final Options options;
    private final String scope;
    private final String key;
    private final Connection connection;
    private final boolean autoCommitBefore;
    private Integer attempt;
    private String recoveryPoint;
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
     * Claims the key: null when claimed (run the handler, then {@link #finish}), else the
     * answer to send without running it.
     */
    Answer begin(Request request) throws SQLException {
        List<Object> parameters = new ArrayList<>(List.of(scope, key, request.method(),
            request.route(), request.path(), request.query()));
        // The body by the server's rule for every package: a JSON body by its value, any
        // other by its bytes.
        parameters.add(request.contentType() != null ? request.contentType() : "");
        parameters.add(request.body());
        StringBuilder named = new StringBuilder();
        for (String[] option : new String[][] {{"ttl", options.ttl()},
            {"lease", options.lease()}, {"wait", options.waitFor()}}) {
            if (option[1] != null) {
                named.append(", ").append(option[0]).append(" => ?::interval");
                parameters.add(option[1]);
            }
        }
        String sql = "SELECT outcome::text, response_status, response_headers::text,"
            + " response_body_bytes, response_body_omitted, retry_after_seconds, attempt,"
            + " recovery_point,"
            + " current_setting('idempotency.max_response_bytes', true)"
            + " FROM idempotency_begin(?, ?, request_hash_parts(?::text, ?::text, ?::text,"
            + " ?::text, request_hash_body(?::text, ?::bytea)::text)" + named + ")";
        try (PreparedStatement statement = connection.prepareStatement(sql)) {
            for (int i = 0; i < parameters.size(); i++) {
                statement.setObject(i + 1, parameters.get(i));
            }
            try (ResultSet row = statement.executeQuery()) {
                row.next();
                String outcome = row.getString(1);
                if (outcome.equals("claimed")) {
                    attempt = row.getInt(7);
                    recoveryPoint = row.getString(8);
                    responseLimit = bytes(row.getString(9));
                    if (options.twoPhase()) {
                        connection.commit();
                    }
                    return null;
                }
                Answer answer = switch (outcome) {
                    case "replay" -> row.getBoolean(5)
                        ? Answer.problem(500, "The stored response has no body", "The response"
                            + " to this Idempotency-Key was stored without its body, being over"
                            + " the server's idempotency.max_response_bytes, and cannot be"
                            + " replayed as it was first sent.", null)
                        : replay(row.getInt(2), row.getString(3), row.getBytes(4));
                    case "in_progress" -> Answer.problem(409,
                        "A request with this Idempotency-Key is in progress", null,
                        retryAfter(row));
                    default -> Answer.problem(422,
                        "The Idempotency-Key was used for a different request", null, null);
                };
                connection.rollback();
                return answer;
            }
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

    /** Retry-After: the lease's rest, and at least a second when the row tells none. */
    private static int retryAfter(ResultSet row) throws SQLException {
        int seconds = row.getInt(6);
        return row.wasNull() ? 1 : Math.max(seconds, 1);
    }

    private static Answer replay(int status, String storedHeaders, byte[] body) {
        List<Map.Entry<String, String>> headers = new ArrayList<>();
        if (storedHeaders != null) {
            Json.readHeaders(storedHeaders).forEach(
                (name, values) -> values.forEach(value -> headers.add(Map.entry(name, value))));
        }
        headers.add(Map.entry("Idempotent-Replayed", "true"));
        return new Answer(status, headers, body == null ? new byte[0] : body);
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
            return Answer.tooLarge();
        }
        if (status >= 500 && !options.storeServerErrors()) {
            giveUp();
            return null;
        }
        try {
            if (status >= 500) {
                // The server stores a server error only with this setting (its default is
                // off): set for this transaction, as the option asks.
                try (Statement set = connection.createStatement()) {
                    set.execute("SET LOCAL idempotency.store_server_errors = on");
                }
            }
            if (complete(status, headers, body)) {
                connection.commit();
            } else {
                giveUp(); // not stored: its work must not commit without it
            }
            return null;
        } catch (SQLException e) {
            giveUp();
            if ("54000".equals(e.getSQLState())) {
                return Answer.tooLarge();
            }
            throw e;
        }
    }

    /** idempotency_complete: whether the response was stored. */
    private boolean complete(int status, Map<String, List<String>> headers, byte[] body)
        throws SQLException {
        try (PreparedStatement complete = connection.prepareStatement(
            "SELECT idempotency_complete(?, ?, ?, response_headers => ?::jsonb,"
                + " response_body_bytes => ?, attempt => ?, omit_oversized => false)")) {
            complete.setString(1, scope);
            complete.setString(2, key);
            complete.setInt(3, status);
            complete.setString(4, Json.headers(headers));
            complete.setBytes(5, body);
            // One transaction: the claim is this transaction's own, whatever its attempt.
            complete.setObject(6, options.twoPhase() ? attempt : null, java.sql.Types.INTEGER);
            try (ResultSet stored = complete.executeQuery()) {
                stored.next();
                return stored.getBoolean(1);
            }
        }
    }

    /**
     * The handler failed, or its response is not kept: its work rolls back, and in two-phase
     * mode the committed claim is released, so that a retry goes on at once.
     */
    void giveUp() throws SQLException {
        connection.rollback();
        if (key == null || !options.twoPhase()) {
            return;
        }
        try (PreparedStatement release = connection.prepareStatement(
            "SELECT idempotency_release(?, ?, attempt => ?)")) {
            release.setString(1, scope);
            release.setString(2, key);
            release.setInt(3, attempt);
            release.executeQuery().close();
            connection.commit();
        } catch (SQLException e) {
            // The lease ends by itself; a newer attempt may hold the key already (IK003).
            connection.rollback();
        }
    }

    /** Two-phase mode: records progress and renews the lease, committed with the work so far. */
    void checkpoint(String point) throws SQLException {
        if (key == null || !options.twoPhase()) {
            throw new IllegalStateException("checkpoint() needs two-phase mode (the lease option)"
                + " and a key");
        }
        try (PreparedStatement checkpoint = connection.prepareStatement(
            "SELECT idempotency_checkpoint(?, ?, ?, attempt => ?)")) {
            checkpoint.setString(1, scope);
            checkpoint.setString(2, key);
            checkpoint.setString(3, point);
            checkpoint.setInt(4, attempt);
            checkpoint.executeQuery().close();
        }
        connection.commit();
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
