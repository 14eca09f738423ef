import jakarta.servlet.Filter;
import jakarta.servlet.ServletContext;
import jakarta.servlet.ServletException;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.Map;
import javax.sql.DataSource;
import org.apache.catalina.Context;
import org.apache.catalina.startup.Tomcat;
import org.apache.tomcat.jdbc.pool.PoolProperties;
import org.pgidempotency.Idempotency;
import org.pgidempotency.IdempotencyFilter;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * The conformance suite's application (test/conformance/README.md) in an embedded Tomcat,
 * with Tomcat's default connector settings, over pgjdbc with its default settings, pooled
 * by Tomcat's JDBC pool as a deployment's connections are: each pooled connection serves
 * request after request, so pgjdbc prepares the statements it runs often by name. Routes
 * are registered through the Servlet API, as a web application's initializer does.
 *
 * <p>Usage: java ConformanceApp PORT, with the database in libpq's environment.
 */
public final class ConformanceApp {
    /** The options application's outcomes, counted by its onOutcome hook. */
    private static final Map<String, Integer> OUTCOMES = new java.util.concurrent.ConcurrentHashMap<>();

    public static void main(String[] args) throws Exception {
        DataSource database = dataSource(System.getenv());
        Tomcat tomcat = new Tomcat();
        tomcat.setBaseDir(Files.createTempDirectory("conformance-tomcat").toString());
        tomcat.setHostname("127.0.0.1");
        tomcat.setPort(Integer.parseInt(args[0]));
        tomcat.getConnector().setProperty("address", "127.0.0.1");
        // Compression where a servlet container does it, in the connector: outside every
        // filter, so the filter stores the servlet's own bytes and a replay is compressed
        // again for a client that accepts gzip (/compressed/orders).
        tomcat.getConnector().setProperty("compression", "on");
        Context context = tomcat.addContext("", null);
        context.addServletContainerInitializer((classes, servletContext) ->
            routes(servletContext, database), null);
        tomcat.start();
        tomcat.getServer().await();
    }

    private static void routes(ServletContext context, DataSource database) {
        IdempotencyFilter.Hook tenant = request -> {
            String value = request.getHeader("X-Tenant");
            if ("fail".equals(value)) {
                throw new IllegalStateException("the tenant hook fails, as the request asks");
            }
            return value == null ? "public" : value;
        };
        // /parsed/orders: a filter before the middleware reads the body, as a parser would.
        context.addFilter("parser", (Filter) (request, response, chain) -> {
            request.setAttribute("parsed", request.getReader().lines().toList());
            chain.doFilter(request, response);
        }).addMappingForUrlPatterns(null, true, "/parsed/orders");
        context.addFilter("idempotency", IdempotencyFilter.builder(database).tenant(tenant).build())
            .addMappingForUrlPatterns(null, true, "/orders", "/refunds", "/parsed/orders", "/compressed/orders");
        context.addFilter("waiting", IdempotencyFilter.builder(database).tenant(tenant)
            .waitFor(Duration.ofSeconds(30)).build())
            .addMappingForUrlPatterns(null, true, "/waiting/orders");
        context.addServlet("orders", new Orders())
            .addMapping("/orders", "/refunds", "/waiting/orders", "/parsed/orders", "/compressed/orders");
        // The options application: a servlet mapping has no parameters, so the route hook
        // names the route as JAX-RS would ("/options/orders/{id: \d+}").
        context.addFilter("options", IdempotencyFilter.builder(database).tenant(tenant)
            .header("Request-Key").required(false)
            .storedHeaders("Content-Type", "Location", "X-Order").ttl(Duration.ofHours(1))
            .lease(Duration.ofSeconds(1)).scopePerRoute(true).storeServerErrors(true)
            .methods("POST", "PUT").maxRequestBytes(1024)
            .onOutcome((outcome, request) -> OUTCOMES.merge(outcome, 1, Integer::sum))
            .route(request -> request.getServletPath()
                + (request.getPathInfo() != null && request.getPathInfo().matches("/\\d+")
                    ? "/{id: \\d+}" : ""))
            .build())
            .addMappingForUrlPatterns(null, true, "/options/*");
        context.addServlet("options", new OptionsOrders(database))
            .addMapping("/options/orders/*", "/options/refunds/*");
        // The options application's outcomes (its onOutcome hook), as JSON.
        context.addServlet("outcomes", new HttpServlet() {
            @Override
            protected void doGet(HttpServletRequest request, HttpServletResponse response)
                throws IOException {
                StringBuilder json = new StringBuilder("{");
                OUTCOMES.forEach((outcome, count) -> json.append(json.length() > 1 ? ", " : "")
                    .append('"').append(outcome).append("\": ").append(count));
                response.setContentType("application/json");
                response.getWriter().print(json.append('}'));
            }
        }).addMapping("/options/outcomes");
        context.addServlet("health", new HttpServlet() {
            @Override
            protected void doGet(HttpServletRequest request, HttpServletResponse response)
                throws IOException {
                response.getWriter().print("ok");
            }
        }).addMapping("/health");
    }

    /** The order handler. */
    private static final class Orders extends HttpServlet {
        @Override
        protected void doPost(HttpServletRequest request, HttpServletResponse response)
            throws IOException, ServletException {
            Connection db = Idempotency.connection(request);
            try {
                String body = new String(request.getInputStream().readAllBytes(),
                    StandardCharsets.UTF_8);
                // The database reads the JSON: the application needs no library for it.
                // jsonb refuses a lone surrogate escape, which a client may send (the suite
                // does, in a field the application ignores): surrogate escapes go first.
                try (PreparedStatement parse = db.prepareStatement("SELECT b->>'item',"
                    + " (b->>'gate')::bigint, (b->>'size')::int, b->>'fail',"
                    + " coalesce((b->>'stream')::boolean, false), coalesce((b->>'status')::int, 201),"
                    + " coalesce((b->>'split')::boolean, false)"
                    + " FROM (SELECT regexp_replace(?, '\\\\u[dD][89a-fA-F][0-9a-fA-F]{2}', '',"
                    + " 'g')::jsonb) AS t(b)")) {
                    parse.setString(1, body);
                    try (ResultSet order = parse.executeQuery()) {
                        order.next();
                        Long gate = order.getObject(2, Long.class);
                        if (gate != null) {
                            execute(db, "SELECT pg_advisory_xact_lock_shared(?)", gate);
                        }
                        answer(db, order, response);
                    }
                }
            } catch (SQLException e) {
                throw new ServletException(e);
            }
        }

        private static void answer(Connection db, ResultSet order, HttpServletResponse response)
            throws SQLException, IOException, ServletException {
            try (PreparedStatement insert = db.prepareStatement(
                "INSERT INTO orders (item) VALUES (?) RETURNING id, to_json(item)::text")) {
                insert.setString(1, order.getString(1));
                try (ResultSet made = insert.executeQuery()) {
                    made.next();
                    if (order.getBoolean(7)) { // the transaction ends early, as a pooler that splits it
                        try (java.sql.Statement split = db.createStatement()) {
                            split.execute("COMMIT");
                        }
                    }
                    String fail = order.getString(4);
                    if ("sync".equals(fail)) {
                        throw new IllegalStateException("the handler fails, as the request asks");
                    } else if ("async".equals(fail)) { // servlets here are synchronous
                        throw new ServletException("the handler fails, as the request asks");
                    }
                    Integer size = order.getObject(3, Integer.class);
                    String json = "{\"order\": " + made.getLong(1) + ", \"item\": "
                        + made.getString(2)
                        + (size == null ? "" : ", \"pad\": \"" + "x".repeat(size) + "\"") + "}";
                    response.setStatus(order.getInt(6));
                    response.setContentType("application/json");
                    response.setHeader("Location", "/orders/" + made.getLong(1));
                    byte[] bytes = json.getBytes(StandardCharsets.UTF_8);
                    if (order.getBoolean(5)) {
                        OutputStream out = response.getOutputStream();
                        int third = bytes.length / 3;
                        for (int[] piece : new int[][] {{0, third}, {third, third},
                            {2 * third, bytes.length - 2 * third}}) {
                            out.write(bytes, piece[0], piece[1]);
                            out.flush();
                        }
                    } else {
                        response.setCharacterEncoding("UTF-8");
                        response.getWriter().write(json);
                    }
                }
            }
        }

        private static void execute(Connection db, String sql, Object parameter)
            throws SQLException {
            try (PreparedStatement statement = db.prepareStatement(sql)) {
                statement.setObject(1, parameter);
                statement.executeQuery().close();
            }
        }
    }

    /**
     * The options application's handler: in the claim's transaction, or (a request that
     * passed through: PATCH) on a connection of its own, in autocommit. A checkpoint and the
     * gate only on a claim without a recovery point: a takeover resumes after them.
     */
    private static final class OptionsOrders extends HttpServlet {
        private final transient DataSource database;

        OptionsOrders(DataSource database) {
            this.database = database;
        }

        @Override
        protected void service(HttpServletRequest request, HttpServletResponse response)
            throws IOException, ServletException {
            Idempotency idem = request.getAttribute(Idempotency.ATTRIBUTE)
                instanceof Idempotency found ? found : null;
            String body = new String(request.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            try (Connection own = idem == null ? database.getConnection() : null) {
                Connection db = idem == null ? own : idem.connection();
                try (PreparedStatement parse = db.prepareStatement("SELECT b->>'item',"
                    + " (b->>'gate')::bigint, coalesce((b->>'status')::int, 201), b->>'checkpoint'"
                    + " FROM (SELECT ?::jsonb) AS t(b)")) {
                    parse.setString(1, body);
                    try (ResultSet order = parse.executeQuery()) {
                        order.next();
                        String recovered = idem == null ? null : idem.recoveryPoint();
                        if (idem != null && order.getString(4) != null && recovered == null) {
                            idem.checkpoint(order.getString(4));
                        }
                        Long gate = order.getObject(2, Long.class);
                        if (gate != null && recovered == null) {
                            Orders.execute(db, "SELECT pg_advisory_xact_lock_shared(?)", gate);
                        }
                        try (PreparedStatement insert = db.prepareStatement(
                            "WITH made AS (INSERT INTO orders (item) VALUES (?) RETURNING id, item)"
                            + " SELECT id, json_build_object('order', id, 'item', item,"
                            + " 'attempt', ?::int, 'recovered', ?::text)::text FROM made")) {
                            insert.setString(1, order.getString(1));
                            insert.setObject(2, idem == null ? null : idem.attempt(),
                                java.sql.Types.INTEGER);
                            insert.setString(3, recovered);
                            try (ResultSet made = insert.executeQuery()) {
                                made.next();
                                response.setStatus(order.getInt(3));
                                response.setContentType("application/json");
                                response.setHeader("Location", "/orders/" + made.getLong(1));
                                response.setHeader("X-Order", String.valueOf(made.getLong(1)));
                                response.getOutputStream().write(
                                    made.getString(2).getBytes(StandardCharsets.UTF_8));
                            }
                        }
                    }
                }
            } catch (SQLException e) {
                throw new ServletException(e);
            }
        }
    }

    /**
     * pgjdbc from libpq's variables (a PGHOST that is a directory is a Unix socket's) in
     * Tomcat's JDBC pool, with room for the 200 requests the suite sends at once.
     */
    private static DataSource dataSource(Map<String, String> environment) {
        PoolProperties pool = new PoolProperties();
        pool.setDataSource(pgjdbc(environment));
        pool.setInitialSize(0);
        pool.setMaxActive(200);
        pool.setMaxIdle(200);
        return new org.apache.tomcat.jdbc.pool.DataSource(pool);
    }

    private static DataSource pgjdbc(Map<String, String> environment) {
        PGSimpleDataSource source = new PGSimpleDataSource();
        String host = environment.getOrDefault("PGHOST", "localhost");
        int port = Integer.parseInt(environment.getOrDefault("PGPORT", "5432"));
        source.setPortNumbers(new int[] {port});
        source.setDatabaseName(environment.get("PGDATABASE"));
        source.setUser(environment.getOrDefault("PGUSER", System.getProperty("user.name")));
        source.setSslMode("disable");
        source.setGssEncMode("disable");
        if (host.startsWith("/")) {
            source.setServerNames(new String[] {"localhost"});
            source.setSocketFactory(UnixSocketFactory.class.getName());
            source.setSocketFactoryArg(Path.of(host, ".s.PGSQL." + port).toString());
        } else {
            source.setServerNames(new String[] {host});
        }
        return source;
    }
}
