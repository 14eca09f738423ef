package org.pgidempotency;

import jakarta.servlet.Filter;
import jakarta.servlet.FilterRegistration;
import jakarta.servlet.MultipartConfigElement;
import jakarta.servlet.ServletContext;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletRegistration;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.Map;
import java.util.TreeMap;
import javax.sql.DataSource;
import org.apache.catalina.Context;
import org.apache.catalina.LifecycleException;
import org.apache.catalina.startup.Tomcat;
import org.apache.tomcat.util.descriptor.web.ContextResource;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * An embedded Tomcat with a route per configuration of the filter, all served by one
 * handler whose behaviour the query parameter {@code do} chooses, over the database of
 * libpq's environment (PGHOST, PGPORT, PGDATABASE, PGUSER; TCP, which pgjdbc speaks).
 */
final class TestApp {
    private static Tomcat tomcat;
    private static int port;
    private static final HttpClient HTTP = HttpClient.newBuilder()
        .version(HttpClient.Version.HTTP_1_1).build();

    private TestApp() {}

    /** A DataSource on the test database, with {@code options} (libpq's) when not null. */
    static DataSource dataSource(String options) {
        PGSimpleDataSource source = new PGSimpleDataSource();
        source.setServerNames(new String[] {System.getenv("PGHOST")});
        source.setPortNumbers(new int[] {Integer.parseInt(System.getenv("PGPORT"))});
        source.setDatabaseName(System.getenv("PGDATABASE"));
        source.setUser(System.getenv("PGUSER"));
        source.setOptions(options);
        return source;
    }

    /**
     * Whether the README's example, middleware/java/examples/Orders.java, was compiled with
     * the tests (pom.xml's testCompile does).
     */
    static boolean exampleCompiled() {
        try {
            Class.forName("Orders");
            return true;
        } catch (ClassNotFoundException e) {
            return false;
        }
    }

    static boolean configured() {
        return System.getenv("PGHOST") != null && System.getenv("PGDATABASE") != null;
    }

    static synchronized void start() throws IOException, LifecycleException {
        if (tomcat != null) {
            return;
        }
        tomcat = new Tomcat();
        tomcat.setBaseDir(Files.createTempDirectory("idempotency-tomcat").toString());
        tomcat.setPort(0);
        tomcat.getConnector().setProperty("address", "127.0.0.1");
        tomcat.enableNaming();
        Context context = tomcat.addContext("", null);
        for (String name : new String[] {"jdbc/test", "jdbc/orders"}) {
            ContextResource resource = new ContextResource();
            resource.setName(name);
            resource.setType(PGSimpleDataSource.class.getName());
            resource.setProperty("factory", "org.postgresql.ds.common.PGObjectFactory");
            resource.setProperty("serverName", System.getenv("PGHOST"));
            resource.setProperty("portNumber", System.getenv("PGPORT"));
            resource.setProperty("databaseName", System.getenv("PGDATABASE"));
            resource.setProperty("user", System.getenv("PGUSER"));
            context.getNamingResources().addResource(resource);
        }
        if (exampleCompiled()) {
            context.addApplicationListener("Orders");
        }
        context.addServletContainerInitializer((classes, servletContext) -> routes(servletContext),
            null);
        tomcat.start();
        port = tomcat.getConnector().getLocalPort();
    }

    private static void routes(ServletContext context) {
        DataSource database = dataSource(null);
        IdempotencyFilter.Hook tenant = request -> request.getHeader("X-Tenant");
        filter(context, "default", IdempotencyFilter.builder(database).build(), "/default");
        filter(context, "tenant", IdempotencyFilter.builder(database).tenant(tenant).build(),
            "/tenant");
        filter(context, "routed", IdempotencyFilter.builder(database).scopePerRoute(true)
            .route(request -> request.getServletPath() + "/{id:[0-9]+}").build(), "/routed/*");
        filter(context, "scope-hook", IdempotencyFilter.builder(database).tenant(tenant)
            .scopePerRoute(true).scope(request -> "S:" + request.getHeader("X-Tenant")).build(),
            "/scope-hook");
        filter(context, "options", IdempotencyFilter.builder(database).header("X-Key")
            .methods("POST", "PUT").storedHeaders("Content-Type", "Set-Cookie", "X-Extra")
            .storeServerErrors(true).maxRequestBytes(100).build(), "/options");
        filter(context, "told", IdempotencyFilter.builder(database).onOutcome((outcome, request) -> {
            OUTCOMES.add(outcome + " " + request.getMethod());
            throw new IllegalStateException("the outcome hook fails: logged, never answered");
        }).build(), "/told");
        filter(context, "lease", IdempotencyFilter.builder(database)
            .lease(Duration.ofMinutes(1)).build(), "/lease");
        filter(context, "small", IdempotencyFilter.builder(
            dataSource("-c idempotency.max_response_bytes=1000")).build(), "/small");
        filter(context, "timeout", IdempotencyFilter.builder(
            dataSource("-c statement_timeout=300")).waitFor(Duration.ofSeconds(30)).build(),
            "/timeout");
        context.addFilter("reader", (Filter) (request, response, chain) -> {
            request.getInputStream().readAllBytes();
            chain.doFilter(request, response);
        }).addMappingForUrlPatterns(null, true, "/reader-first");
        filter(context, "after-reader", IdempotencyFilter.builder(database).build(),
            "/reader-first");
        FilterRegistration.Dynamic configured = context.addFilter("init", IdempotencyFilter.class);
        configured.setInitParameters(Map.of("dataSource", "java:comp/env/jdbc/test",
            "header", "X-Key", "methods", "PUT"));
        configured.addMappingForUrlPatterns(null, true, "/init");
        ServletRegistration.Dynamic handler = context.addServlet("handler", new Handler());
        handler.addMapping("/default", "/told", "/tenant", "/routed/*", "/scope-hook", "/options", "/lease",
            "/small", "/timeout", "/reader-first", "/init");
        handler.setAsyncSupported(true);
        handler.setMultipartConfig(new MultipartConfigElement(""));
    }

    /** What the /told filter's outcome hook was called with: "outcome METHOD". */
    static final java.util.List<String> OUTCOMES = new java.util.concurrent.CopyOnWriteArrayList<>();

    private static void filter(ServletContext context, String name, Filter filter,
        String... patterns) {
        context.addFilter(name, filter).addMappingForUrlPatterns(null, true, patterns);
    }

    // ------------------------------------------------------------ requests

    static HttpRequest.Builder request(String pathAndQuery) {
        return HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + pathAndQuery))
            .timeout(Duration.ofSeconds(60));
    }

    static HttpResponse<byte[]> send(HttpRequest request) throws IOException, InterruptedException {
        return HTTP.send(request, HttpResponse.BodyHandlers.ofByteArray());
    }

    /** POST of a JSON body with an Idempotency-Key (none when {@code key} is null). */
    static HttpResponse<byte[]> post(String pathAndQuery, String key, String json)
        throws IOException, InterruptedException {
        HttpRequest.Builder request = request(pathAndQuery).header("Content-Type",
            "application/json").POST(HttpRequest.BodyPublishers.ofString(json));
        if (key != null) {
            request.header("Idempotency-Key", key);
        }
        return send(request.build());
    }

    static String text(HttpResponse<byte[]> response) {
        return new String(response.body(), StandardCharsets.UTF_8);
    }

    // ------------------------------------------------------------ the database

    static long count(String item) throws SQLException {
        return Long.parseLong(scalar("SELECT count(*) FROM things WHERE item = ?", item));
    }

    /** The first column of the first row as text (null without a row). */
    static String scalar(String sql, Object... parameters) throws SQLException {
        try (Connection connection = dataSource(null).getConnection();
             PreparedStatement statement = connection.prepareStatement(sql)) {
            for (int i = 0; i < parameters.length; i++) {
                statement.setObject(i + 1, parameters[i]);
            }
            try (ResultSet row = statement.executeQuery()) {
                return row.next() ? row.getString(1) : null;
            }
        }
    }

    // ------------------------------------------------------------ the handler

    /**
     * What the handler does, by the query parameter {@code do} (default {@code insert}):
     * most write a row of {@code things} whose item is the parameter {@code item}, in the
     * request's transaction.
     */
    static final class Handler extends HttpServlet {
        private static final long serialVersionUID = 1L;

        @Override
        protected void service(HttpServletRequest request, HttpServletResponse response)
            throws IOException, ServletException {
            String what = request.getParameter("do") == null ? "insert" : request.getParameter("do");
            try {
                if (what.equals("none")) {
                    try {
                        Idempotency.of(request);
                        response.getWriter().print("some");
                    } catch (IllegalStateException e) {
                        response.getWriter().print("none");
                    }
                    return;
                }
                Idempotency idempotency = Idempotency.of(request);
                Connection connection = idempotency.connection();
                String item = request.getParameter("item");
                long id = item == null ? 0 : insert(connection, item);
                switch (what) {
                    case "insert" -> {
                        response.setStatus(201);
                        response.setContentType("application/json");
                        response.setHeader("Location", "/things/" + id);
                        response.getOutputStream().print("{\"thing\": " + id + ", \"key\": "
                            + (idempotency.key() == null ? "null" : "\"" + idempotency.key() + "\"")
                            + "}");
                    }
                    case "throw" -> {
                        response.setHeader("Location", "/things/" + id);
                        throw new IllegalStateException("the handler fails");
                    }
                    case "status" -> {
                        response.setStatus(Integer.parseInt(request.getParameter("code")));
                        response.getWriter().print("status " + request.getParameter("code"));
                    }
                    case "send-error" -> response.sendError(404, "No such thing");
                    case "redirect" -> response.sendRedirect("/things/" + id);
                    case "writer" -> {
                        response.setContentType("text/plain");
                        if (request.getParameter("charset") != null) {
                            response.setCharacterEncoding(request.getParameter("charset"));
                        }
                        response.getWriter().print("h\u00e9llo");
                        response.flushBuffer();
                        response.getWriter().print(" w\u00f6rld");
                        response.setCharacterEncoding("UTF-16"); // too late: ignored
                    }
                    case "headers" -> {
                        response.addHeader("Set-Cookie", "a=1");
                        response.addHeader("Set-Cookie", "b=2");
                        response.setHeader("X-Extra", "e");
                        response.setHeader("X-Not-Stored", "n");
                        response.setContentLength(999);
                        response.getOutputStream().print("headers");
                    }
                    case "guard" -> {
                        String refused = "";
                        try {
                            connection.commit();
                        } catch (SQLException e) {
                            refused = e.getSQLState();
                        }
                        connection.close();
                        insert(connection, item + "-after-close");
                        response.getWriter().print("commit refused: " + refused);
                    }
                    case "checkpoint" -> {
                        String before = idempotency.recoveryPoint();
                        idempotency.checkpoint(item);
                        if (request.getHeader("X-Fail") != null) {
                            throw new IllegalStateException("the handler fails after its checkpoint");
                        }
                        response.setStatus(201);
                        response.getWriter().print("attempt " + idempotency.attempt()
                            + ", recovery point before: " + before);
                    }
                    case "size" -> {
                        response.setStatus(201);
                        response.setContentType("application/octet-stream");
                        response.getOutputStream().write(
                            "x".repeat(Integer.parseInt(request.getParameter("n"))).getBytes(
                                StandardCharsets.US_ASCII));
                    }
                    case "echo" -> {
                        String first = new String(request.getInputStream().readAllBytes(),
                            StandardCharsets.UTF_8);
                        String again = request.getReader().lines().reduce("", String::concat);
                        Map<String, String> parameters = new TreeMap<>();
                        request.getParameterMap().forEach(
                            (name, values) -> parameters.put(name, String.join("|", values)));
                        response.setCharacterEncoding("UTF-8");
                        response.getWriter().print(parameters + " " + first.equals(again)
                            + " " + request.getContentLength());
                    }
                    case "async" -> request.startAsync().complete();
                    case "parts" -> response.getWriter().print("parts: "
                        + request.getParts().size());
                    default -> throw new IllegalArgumentException("no such do: " + what);
                }
            } catch (SQLException e) {
                throw new ServletException(e);
            }
        }

        private static long insert(Connection connection, String item) throws SQLException {
            try (PreparedStatement insert = connection.prepareStatement(
                "INSERT INTO things (item) VALUES (?) RETURNING id")) {
                insert.setString(1, item);
                try (ResultSet row = insert.executeQuery()) {
                    row.next();
                    return row.getLong(1);
                }
            }
        }
    }
}
