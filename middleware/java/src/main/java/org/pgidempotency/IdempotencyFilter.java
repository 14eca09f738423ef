package org.pgidempotency;

import jakarta.servlet.Filter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.FilterConfig;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.http.HttpServletMapping;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.sql.SQLException;
import java.time.Duration;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.function.BiConsumer;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import javax.naming.InitialContext;
import javax.naming.NamingException;
import javax.sql.DataSource;

/**
 * The Idempotency-Key filter: runs each protected request's handler at most once per key,
 * in the transaction that claims the key, and answers retries with the stored response
 * (middleware/README.md has the behaviour every package of the project shares).
 *
 * <p>Made with {@link #builder(DataSource)}, or declared in web.xml and configured by its
 * init parameters (the {@code dataSource} parameter names a DataSource in JNDI). The
 * handler finds the transaction's connection with {@link Idempotency#connection}.
 */
public final class IdempotencyFilter implements Filter {
    /**
     * A tenant, scope or route hook: a value of the container's own request. An exception
     * in a tenant or scope hook answers 500 problem+json and runs nothing.
     */
    @FunctionalInterface
    public interface Hook {
        String apply(HttpServletRequest request) throws Exception;
    }

    /**
     * The outcome hook: called once per protected request, before its answer is sent, with
     * what it came to ({@code claimed}, {@code replayed}, {@code in_flight}, {@code mismatch},
     * {@code conflict}, {@code too_large}, {@code refused}, {@code unprotected},
     * {@code error}: middleware/README.md, "Observability") and the container's own request.
     * What it throws is logged, never answered.
     */
    @FunctionalInterface
    public interface OutcomeHook {
        void accept(String outcome, HttpServletRequest request) throws Exception;
    }

    private final Builder builder;
    private volatile Options options;

    /** A filter configured by its init parameters (web.xml, {@code @WebFilter}). */
    public IdempotencyFilter() {
        this.builder = new Builder(null);
    }

    private IdempotencyFilter(Builder builder) {
        this.builder = builder.copy();
        this.options = builder.options();
    }

    /** A builder of a filter over {@code dataSource}, with the default options. */
    public static Builder builder(DataSource dataSource) {
        if (dataSource == null) {
            throw new IllegalArgumentException("dataSource is null");
        }
        return new Builder(dataSource);
    }

    /**
     * Applies the init parameters over the builder's options, if there are any: each
     * parameter has the name of a builder method (see {@link Builder#initParameter}).
     */
    @Override
    public void init(FilterConfig config) throws ServletException {
        if (!config.getInitParameterNames().hasMoreElements() && options != null) {
            return;
        }
        Builder configured = builder.copy();
        try {
            for (String name : Collections.list(config.getInitParameterNames())) {
                configured.initParameter(name, config.getInitParameter(name));
            }
            options = configured.options();
        } catch (IllegalArgumentException | IllegalStateException e) {
            throw new ServletException("IdempotencyFilter " + config.getFilterName() + ": "
                + e.getMessage(), e);
        }
    }

    @Override
    public void doFilter(ServletRequest servletRequest, ServletResponse servletResponse,
        FilterChain chain) throws IOException, ServletException {
        Options options = this.options;
        if (options == null) {
            throw new ServletException("IdempotencyFilter was not initialised: give it a "
                + "DataSource (the builder, or the dataSource init parameter)");
        }
        if (!(servletRequest instanceof HttpServletRequest request)
            || !(servletResponse instanceof HttpServletResponse response)
            || !options.methods().contains(request.getMethod())) {
            chain.doFilter(servletRequest, servletResponse);
            return;
        }
        String header = request.getHeader(options.header());
        try {
            if (header == null) {
                if (options.required()) {
                    send(request, response, options, Answer.of(Protocol.KEY_REQUIRED,
                        Map.of("header", options.header())));
                    return;
                }
                try (Course course = Course.open(options, null, null)) {
                    run(course, new SynchronousRequest(request), response, chain, options);
                }
                return;
            }
            String key = Course.key(header);
            if (key == null) {
                send(request, response, options,
                    Answer.of(Protocol.KEY_NOT_UTF8, Map.of("header", options.header())));
                return;
            }
            BufferedRequest buffered = BufferedRequest.read(request, options.maxRequestBytes());
            String route = route(buffered, options);
            String scope = scopeOf(buffered, route, options);
            try (Course course = Course.open(options, scope, key)) {
                Answer answer = course.begin(new Course.Request(request.getMethod(), route,
                    request.getRequestURI(),
                    request.getQueryString() == null ? "" : request.getQueryString(),
                    request.getContentType(), buffered.body()));
                if (answer != null) {
                    send(request, response, options, answer);
                } else {
                    run(course, buffered, response, chain, options);
                }
            }
        } catch (BufferedRequest.Refused refused) {
            send(request, response, options, refused.answer);
        } catch (HookFailed failed) {
            request.getServletContext().log("idempotency: " + failed.getMessage(),
                failed.getCause());
            send(request, response, options, Answer.of(Protocol.HOOK_FAILED));
        } catch (SQLException e) {
            response.reset(); // the handler's status and headers, if it ran
            Answer answer = Answer.forError(e);
            if (answer == null) {
                request.getServletContext().log("idempotency: a database call failed (SQLSTATE "
                    + e.getSQLState() + "), the request was rolled back", e);
                answer = Answer.of(Protocol.DATABASE_ERROR);
            }
            send(request, response, options, answer);
        }
    }

    /** A tenant or scope hook that threw or returned null: answered 500, and logged. */
    private static final class HookFailed extends Exception {
        private static final long serialVersionUID = 1L;

        HookFailed(String message, Throwable cause) {
            super(message, cause);
        }
    }

    /**
     * Runs the handler on the claim, then sends its response once stored and committed, or
     * what to send instead. A handler that throws rolls its work back, and the container
     * answers 500.
     */
    private static void run(Course course, HttpServletRequest request,
        HttpServletResponse response, FilterChain chain, Options options)
        throws IOException, ServletException, SQLException {
        CapturedResponse captured = new CapturedResponse(response, course.responseLimit());
        request.setAttribute(Idempotency.ATTRIBUTE, new Idempotency(course));
        // The handler ran: its answer, a failure's too, is the claim's.
        String ran = course.unprotected() ? "unprotected" : "claimed";
        try {
            chain.doFilter(request, captured);
        } catch (IOException | ServletException | RuntimeException | Error e) {
            try {
                course.giveUp();
            } catch (SQLException rollback) {
                e.addSuppressed(rollback);
            }
            response.reset(); // the handler's headers are not the error's
            tell(request, options, ran);
            throw e;
        } finally {
            request.removeAttribute(Idempotency.ATTRIBUTE);
        }
        byte[] body = captured.body();
        Answer instead = course.finish(captured.getStatus(),
            captured.headers(storedAndRepresentation(options.storedHeaders())), body, captured.oversized());
        if (instead != null) {
            response.reset();
            send(request, response, options, instead);
        } else {
            tell(request, options, ran);
            response.setContentLengthLong(body.length);
            response.getOutputStream().write(body);
        }
    }

    /** The protocol's representation headers, in lower case as the stored headers' names are. */
    private static final List<String> REPRESENTATION_HEADERS = Protocol.REPRESENTATION_HEADERS.stream()
        .map(name -> name.toLowerCase(Locale.ROOT)).toList();

    /** The headers stored: those named, and the representation headers whatever is named. */
    private static List<String> storedAndRepresentation(List<String> named) {
        return Stream.concat(named.stream(), REPRESENTATION_HEADERS.stream())
            .distinct().toList();
    }

    /** Sends an answer of the filter's own, once the outcome hook has been told its outcome. */
    private static void send(HttpServletRequest request, HttpServletResponse response,
        Options options, Answer answer) throws IOException {
        tell(request, options, answer.outcome());
        send(response, answer);
    }

    /** Calls the outcome hook, whose exception is logged, never answered. */
    private static void tell(HttpServletRequest request, Options options, String outcome) {
        if (options.onOutcome() == null) {
            return;
        }
        try {
            options.onOutcome().accept(outcome, request);
        } catch (Exception | LinkageError e) {
            request.getServletContext().log("idempotency: the onOutcome hook failed", e);
        }
    }

    private static void send(HttpServletResponse response, Answer answer) throws IOException {
        response.setStatus(answer.status());
        for (Map.Entry<String, String> header : answer.headers()) {
            if (header.getKey().equalsIgnoreCase("Content-Type")) {
                response.setContentType(header.getValue());
            } else {
                response.addHeader(header.getKey(), header.getValue());
            }
        }
        response.setContentLengthLong(answer.body().length);
        response.getOutputStream().write(answer.body());
    }

    /**
     * The scope hook's value; else the tenant hook's (the empty string without one),
     * followed by the method and the route pattern with scopePerRoute.
     */
    private static String scopeOf(HttpServletRequest request, String route, Options options)
        throws HookFailed {
        if (options.scope() != null) {
            return hook("scope", options.scope(), request);
        }
        String tenant = options.tenant() == null ? null : hook("tenant", options.tenant(), request);
        if (!options.scopePerRoute()) {
            return tenant == null ? "" : tenant;
        }
        Map<String, String> values = new HashMap<>();
        values.put("tenant", tenant);
        values.put("method", request.getMethod());
        values.put("route", route);
        return Answer.render(tenant == null ? Protocol.SCOPE_PER_ROUTE_NO_TENANT
            : Protocol.SCOPE_PER_ROUTE, values);
    }

    private static String hook(String name, Hook hook, HttpServletRequest request)
        throws HookFailed {
        String value;
        try {
            value = hook.apply(request);
        } catch (Exception e) {
            throw new HookFailed("the " + name + " hook failed", e);
        }
        if (value == null) {
            throw new HookFailed("the " + name + " hook returned null", null);
        }
        return value;
    }

    /**
     * The route: the route hook's pattern, else the servlet mapping's that matched
     * ("/orders", "/api/*", "/"), in its canonical form (src/protocol.txt, "route rules"). A
     * servlet mapping has no parameters: the hook names a route with parameters
     * ("/orders/{id}"), in the form JAX-RS and Spring write it, for the route to be the same
     * in every package.
     */
    private static String route(HttpServletRequest request, Options options) throws HookFailed {
        String pattern;
        if (options.route() != null) {
            pattern = hook("route", options.route(), request);
        } else {
            HttpServletMapping mapping = request.getHttpServletMapping();
            pattern = mapping == null || mapping.getPattern() == null ? "" : mapping.getPattern();
        }
        return canonicalRoute(pattern);
    }

    private static final List<Map.Entry<Pattern, String>> ROUTE_RULES =
        Protocol.ROUTE_RULES.get("brace").stream()
            .map(rule -> Map.entry(Pattern.compile(rule.get(0)), rule.get(1))).toList();

    /** A pattern in its canonical form, by the rules of the "brace" syntax. */
    static String canonicalRoute(String pattern) {
        for (Map.Entry<Pattern, String> rule : ROUTE_RULES) {
            pattern = rule.getKey().matcher(pattern).replaceAll(rule.getValue());
        }
        return pattern;
    }

    /**
     * The options of an {@link IdempotencyFilter}. Each has a default; see
     * middleware/java/README.md.
     */
    public static final class Builder implements Cloneable {
        private DataSource dataSource;
        private String header = Protocol.DEFAULT_HEADER;
        private boolean required = Protocol.DEFAULT_REQUIRED;
        private List<String> storedHeaders = Protocol.DEFAULT_STORED_HEADERS.stream()
            .map(name -> name.toLowerCase(Locale.ROOT)).toList();
        private boolean storeServerErrors = Protocol.DEFAULT_STORE_SERVER_ERRORS;
        private String wait = Protocol.DEFAULT_WAIT;
        private String ttl = Protocol.DEFAULT_TTL;
        private String lease = Protocol.DEFAULT_LEASE;
        private Hook tenant;
        private Hook scope;
        private Hook route;
        private boolean scopePerRoute = Protocol.DEFAULT_SCOPE_PER_ROUTE;
        private Set<String> methods = Set.copyOf(Protocol.DEFAULT_METHODS);
        private long maxRequestBytes = Protocol.DEFAULT_MAX_REQUEST_BYTES;
        private OutcomeHook onOutcome;

        private Builder(DataSource dataSource) {
            this.dataSource = dataSource;
        }

        /** A copy: the fields are immutable values, so a shallow one. */
        private Builder copy() {
            try {
                return (Builder) clone();
            } catch (CloneNotSupportedException e) {
                throw new AssertionError(e);
            }
        }

        /** The request header that carries the key (default {@code Idempotency-Key}). */
        public Builder header(String name) {
            header = nonEmpty("header", name);
            return this;
        }

        /**
         * Whether a request without the key is answered 400 (default); else its handler
         * runs unprotected, still in a transaction the filter commits.
         */
        public Builder required(boolean required) {
            this.required = required;
            return this;
        }

        /** The response headers stored and replayed (default Content-Type and Location). */
        public Builder storedHeaders(String... names) {
            storedHeaders = Arrays.stream(names).map(name -> nonEmpty("storedHeaders", name)
                .toLowerCase(Locale.ROOT)).distinct().toList();
            return this;
        }

        /**
         * Whether responses of status 500 or more are stored; by default they are not: the
         * work rolls back and a retry runs again.
         */
        public Builder storeServerErrors(boolean store) {
            storeServerErrors = store;
            return this;
        }

        /** How long a duplicate waits for the request in flight instead of answering 409. */
        public Builder waitFor(Duration duration) {
            wait = interval("waitFor", duration, false);
            return this;
        }

        /** How long a completed key replays (default: the server's idempotency.default_ttl). */
        public Builder ttl(Duration duration) {
            ttl = interval("ttl", duration, true);
            return this;
        }

        /**
         * Two-phase mode, for handlers that call other systems: the claim commits at once
         * with this lease; the handler may {@link Idempotency#checkpoint}; its response
         * commits with its work, fenced by the attempt.
         */
        public Builder lease(Duration duration) {
            lease = interval("lease", duration, true);
            return this;
        }

        /** The tenant hook: the scope of every key of the request (default: none, ""). */
        public Builder tenant(Hook hook) {
            tenant = hook;
            return this;
        }

        /** The scope hook, which replaces the tenant and scopePerRoute (on Citus: the tenant). */
        public Builder scope(Hook hook) {
            scope = hook;
            return this;
        }

        /**
         * The route hook: the pattern of the route a request reached, a part of its
         * fingerprint and of its scope with scopePerRoute (default: the servlet mapping's
         * pattern). A servlet mapping has no parameters: name a route with one as JAX-RS and
         * Spring write it ({@code /orders/{id}}), and the filter takes its canonical form,
         * the same in every package of the project.
         */
        public Builder route(Hook hook) {
            route = hook;
            return this;
        }

        /**
         * Scope keys per route as well: the scope is then {@code <tenant> <METHOD> <route
         * pattern>}, for clients that reuse a key on several routes on purpose.
         */
        public Builder scopePerRoute(boolean perRoute) {
            scopePerRoute = perRoute;
            return this;
        }

        /** The methods protected (default POST and PATCH); the others pass through. */
        public Builder methods(String... names) {
            Set<String> chosen = new LinkedHashSet<>();
            for (String name : names) {
                chosen.add(nonEmpty("methods", name).toUpperCase(Locale.ROOT));
            }
            methods = Set.copyOf(chosen);
            return this;
        }

        /** The largest request body read (default 1 MiB); a larger one is answered 413. */
        public Builder maxRequestBytes(long bytes) {
            if (bytes < 0) {
                throw new IllegalArgumentException("maxRequestBytes is negative");
            }
            maxRequestBytes = bytes;
            return this;
        }

        /**
         * The outcome hook, called once per protected request before its answer is sent
         * (default: none): for a counter or a span's attribute. See {@link OutcomeHook}.
         */
        public Builder onOutcome(OutcomeHook hook) {
            onOutcome = hook;
            return this;
        }

        public IdempotencyFilter build() {
            return new IdempotencyFilter(this);
        }

        /**
         * Sets the option {@code name} from text, as an init parameter gives it: the
         * builder's names, with lists comma-separated, booleans {@code true} or
         * {@code false}, {@code wait}, {@code ttl} and {@code lease} in PostgreSQL's interval
         * syntax ({@code 30 seconds}, {@code PT30S}), and {@code dataSource} the JNDI name of
         * a DataSource.
         */
        void initParameter(String name, String value) {
            Map<String, BiConsumer<Builder, String>> setters = Map.ofEntries(
                Map.entry("dataSource", (b, v) -> b.dataSource = lookup(v)),
                Map.entry("header", Builder::header),
                Map.entry("required", (b, v) -> b.required(bool(name, v))),
                Map.entry("storedHeaders", (b, v) -> b.storedHeaders(list(v))),
                Map.entry("storeServerErrors", (b, v) -> b.storeServerErrors(bool(name, v))),
                Map.entry("wait", (b, v) -> b.wait = nonEmpty(name, v)),
                Map.entry("ttl", (b, v) -> b.ttl = nonEmpty(name, v)),
                Map.entry("lease", (b, v) -> b.lease = nonEmpty(name, v)),
                Map.entry("scopePerRoute", (b, v) -> b.scopePerRoute(bool(name, v))),
                Map.entry("methods", (b, v) -> b.methods(list(v))),
                Map.entry("maxRequestBytes", (b, v) -> b.maxRequestBytes(number(name, v))));
            BiConsumer<Builder, String> setter = setters.get(name);
            if (setter == null) {
                throw new IllegalArgumentException("unknown init parameter \"" + name
                    + "\"; known: " + String.join(", ", setters.keySet().stream().sorted()
                        .toList()));
            }
            setter.accept(this, value == null ? "" : value.trim());
        }

        private Options options() {
            if (dataSource == null) {
                throw new IllegalStateException("no DataSource: give the builder one, or the "
                    + "JNDI name of one as the dataSource init parameter");
            }
            return new Options(dataSource, header, required, storedHeaders, storeServerErrors,
                wait, ttl, lease, tenant, scope, route, scopePerRoute, methods, maxRequestBytes,
                onOutcome);
        }

        private static DataSource lookup(String name) {
            try {
                if (new InitialContext().lookup(nonEmpty("dataSource", name))
                    instanceof DataSource found) {
                    return found;
                }
                throw new IllegalArgumentException("dataSource: " + name + " is not a DataSource");
            } catch (NamingException e) {
                throw new IllegalArgumentException("dataSource: " + name + " is not found: "
                    + e.getMessage(), e);
            }
        }

        /** ISO 8601 (PT30S), which PostgreSQL reads as an interval. */
        private static String interval(String option, Duration duration, boolean positive) {
            if (duration == null || duration.isNegative() || (positive && duration.isZero())) {
                throw new IllegalArgumentException(option + " must be "
                    + (positive ? "positive" : "zero or more"));
            }
            return duration.toString();
        }

        private static String nonEmpty(String option, String value) {
            if (value == null || value.isBlank()) {
                throw new IllegalArgumentException(option + " is empty");
            }
            return value;
        }

        private static boolean bool(String option, String value) {
            return switch (value) {
                case "true" -> true;
                case "false" -> false;
                default -> throw new IllegalArgumentException(option + " is \"" + value
                    + "\", not true or false");
            };
        }

        private static long number(String option, String value) {
            try {
                return Long.parseLong(value);
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException(option + " is \"" + value
                    + "\", not a number of bytes");
            }
        }

        private static String[] list(String value) {
            return Arrays.stream(value.split(",")).map(String::trim)
                .filter(item -> !item.isEmpty()).toArray(String[]::new);
        }
    }
}
