// The SQL surface through pgjdbc with its default settings: setString sends
// varchar, and after prepareThreshold (5) uses a statement is prepared on the
// server.  Each check prints a TAP line ("ok N - ..." or "not ok N - ...");
// t/051_jdbc.pl runs this and passes the lines on.
//
// Usage: java -cp postgresql.jar:DIR JdbcDefaults JDBC_URL
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Types;
import java.util.UUID;

public class JdbcDefaults {
    private static int checks = 0;

    private static void report(boolean ok, String what) {
        checks++;
        System.out.println((ok ? "ok " : "not ok ") + checks + " - pgjdbc: " + what);
    }

    // One request as a handler sends it: begin, the work, complete, with
    // every text parameter set by setString.  Returns the outcome.
    private static String request(Connection conn, String key, String body) throws SQLException {
        conn.setAutoCommit(false);
        try (PreparedStatement begin = conn.prepareStatement(
                 "SELECT outcome, response_status, retry_after_seconds "
                 + "FROM idempotency_begin(?, ?, request_hash_jsonb(?))");
             PreparedStatement complete = conn.prepareStatement(
                 "SELECT idempotency_complete(?, ?, 201, response_headers => ?::jsonb, "
                 + "response_body_bytes => ?)")) {
            begin.setString(1, "jdbc");
            begin.setString(2, key);
            begin.setString(3, body);
            String outcome;
            try (ResultSet rs = begin.executeQuery()) {
                rs.next();
                outcome = rs.getString(1);
            }
            if (outcome.equals("claimed")) {
                complete.setString(1, "jdbc");
                complete.setString(2, key);
                complete.setString(3, "{\"Content-Type\": \"application/json\"}");
                complete.setBytes(4, "{\"ok\": true}".getBytes(StandardCharsets.UTF_8));
                complete.executeQuery().close();
            }
            conn.commit();
            return outcome;
        } catch (SQLException e) {
            conn.rollback();
            throw e;
        }
    }

    public static void main(String[] args) throws Exception {
        try (Connection conn = DriverManager.getConnection(args[0])) {
            // request_hash(?) of a varchar hashes the text; it is not read as a
            // digest.  request_hash_jsonb(?) of a varchar hashes the document.
            boolean hashes = true;
            try (PreparedStatement ps = conn.prepareStatement(
                     "SELECT request_hash(?) = request_hash('abc'::text), "
                     + "request_hash_jsonb(?) = request_hash('{\"b\": 2, \"a\": 1}'::jsonb)")) {
                for (int i = 0; i < 8; i++) { // past prepareThreshold
                    ps.setString(1, "abc");
                    ps.setString(2, "{ \"a\": 1.0, \"b\": 2 }");
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        hashes &= rs.getBoolean(1) && rs.getBoolean(2);
                    }
                }
            }
            report(hashes, "request_hash(?) and request_hash_jsonb(?) take setString's varchar");

            // setObject(..., Types.CHAR) sends bpchar: hashed as the text too.
            boolean chars = true;
            try (PreparedStatement ps = conn.prepareStatement(
                     "SELECT request_hash(?) = request_hash('{\"a\": 1}'::text)")) {
                for (int i = 0; i < 8; i++) { // past prepareThreshold
                    ps.setObject(1, "{\"a\": 1}", Types.CHAR);
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        chars &= rs.getBoolean(1);
                    }
                }
            } catch (SQLException e) {
                chars = false;
                System.out.println("# " + e.getSQLState() + ": " + e.getMessage());
            }
            report(chars, "request_hash(?) takes setObject(..., Types.CHAR)'s bpchar");

            // New requests, then their retries, each past prepareThreshold.
            boolean claimed = true, replayed = true;
            String[] keys = new String[8];
            for (int i = 0; i < keys.length; i++) {
                keys[i] = UUID.randomUUID().toString();
                claimed &= request(conn, keys[i], "{\"item\": \"book\"}").equals("claimed");
            }
            for (String key : keys)
                replayed &= request(conn, key, "{ \"item\" : \"book\" }").equals("replay");
            report(claimed, "new requests are claimed, completed with headers set by setString");
            report(replayed, "their retries, spelled differently, replay");

            // The stored headers come back as text a handler can parse.
            conn.setAutoCommit(true);
            try (PreparedStatement ps = conn.prepareStatement(
                     "SELECT response_headers::text, response_body_bytes FROM idempotency_lookup(?, ?)")) {
                ps.setString(1, "jdbc");
                ps.setString(2, keys[0]);
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    report(rs.getString(1).equals("{\"Content-Type\": \"application/json\"}")
                               && new String(rs.getBytes(2), StandardCharsets.UTF_8).equals("{\"ok\": true}"),
                           "the stored headers and body read back as sent");
                }
            }

            // A holder's key: in_progress, with Retry-After as an int.
            String held = UUID.randomUUID().toString();
            try (Connection holder = DriverManager.getConnection(args[0])) {
                holder.setAutoCommit(false);
                try (PreparedStatement ps = holder.prepareStatement(
                         "SELECT outcome FROM idempotency_begin(?, ?, request_hash_jsonb(?))")) {
                    ps.setString(1, "jdbc");
                    ps.setString(2, held);
                    ps.setString(3, "{}");
                    ps.executeQuery().close();
                }
                try (PreparedStatement ps = conn.prepareStatement(
                         "SELECT outcome, retry_after_seconds FROM idempotency_begin(?, ?, request_hash_jsonb(?))")) {
                    ps.setString(1, "jdbc");
                    ps.setString(2, held);
                    ps.setString(3, "{}");
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        report(rs.getString(1).equals("in_progress") && rs.getInt(2) >= 1,
                               "a held key answers in_progress with retry_after_seconds as an int");
                    }
                }
                holder.rollback();
            }
        }
        System.out.println("1.." + checks);
    }
}
