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
import java.util.ArrayList;
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

    /**
     * The server transaction a statement runs in: the server process and the transaction's
     * start, as text that no setting changes. A pooler in transaction mode runs a transaction
     * on one server connection from BEGIN to its end, so begin and complete name the same one
     * unless the transaction was split: ended early (a driver's named statement run as
     * another client's COMMIT or ROLLBACK, where that client prepared the name) with the rest
     * run elsewhere.
     */
    static final String SERVER_TRANSACTION = "pg_catalog.concat(pg_catalog.pg_backend_pid(), ' ',"
        + " pg_catalog.to_char(pg_catalog.timezone('UTC', pg_catalog.now()),"
        + " 'YYYY-MM-DD HH24:MI:SS.US'))";

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
            + " current_setting('idempotency.max_response_bytes', true), " + SERVER_TRANSACTION
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
                        end("COMMIT");
                    } else {
                        transaction = row.getString(10);
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
                end("ROLLBACK");
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
                return Answer.tooLarge();
            }
            throw e;
        }
    }

    /**
     * idempotency_complete, in the server transaction begin ran in: whether the response was
     * stored, or null when the statement ran in another one. The server stores a server
     * error only with idempotency.store_server_errors on (its default is off): set for this
     * transaction first, as the option asks, in the same statement -- a CASE evaluates its
     * condition before its result (PostgreSQL's manual, "Expression Evaluation Rules").
     */
    private Boolean complete(int status, Map<String, List<String>> headers, byte[] body)
        throws SQLException {
        String serverErrors = status >= 500 ? " AND pg_catalog.set_config("
            + "'idempotency.store_server_errors', 'on', true) IS NOT NULL" : "";
        try (PreparedStatement complete = connection.prepareStatement(
            "SELECT CASE WHEN (?::text IS NULL OR ?::text = " + SERVER_TRANSACTION + ")"
                + serverErrors + " THEN idempotency_complete(?, ?, ?, response_headers => ?::jsonb,"
                + " response_body_bytes => ?, attempt => ?, omit_oversized => false) END")) {
            complete.setString(1, transaction);
            complete.setString(2, transaction);
            complete.setString(3, scope);
            complete.setString(4, key);
            complete.setInt(5, status);
            complete.setString(6, Json.headers(headers));
            complete.setBytes(7, body);
            // One transaction: the claim is this transaction's own, whatever its attempt.
            complete.setObject(8, options.twoPhase() ? attempt : null, java.sql.Types.INTEGER);
            try (ResultSet stored = complete.executeQuery()) {
                stored.next();
                boolean value = stored.getBoolean(1);
                return stored.wasNull() ? null : value;
            }
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
        try (PreparedStatement release = connection.prepareStatement(
            "SELECT idempotency_release(?, ?, attempt => ?)")) {
            release.setString(1, scope);
            release.setString(2, key);
            release.setInt(3, attempt);
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
        try (PreparedStatement checkpoint = connection.prepareStatement(
            "SELECT idempotency_checkpoint(?, ?, ?, attempt => ?)")) {
            checkpoint.setString(1, scope);
            checkpoint.setString(2, key);
            checkpoint.setString(3, point);
            checkpoint.setInt(4, attempt);
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
