package org.pgidempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.servlet.FilterConfig;
import jakarta.servlet.ServletContext;
import jakarta.servlet.ServletException;
import java.lang.reflect.Field;
import java.time.Duration;
import java.util.Collections;
import java.util.Enumeration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;
import org.postgresql.ds.PGSimpleDataSource;

/** The builder's checks and defaults, and init parameters. */
class OptionsTest {
    private static final DataSource SOURCE = new PGSimpleDataSource();

    private static Options options(IdempotencyFilter filter) throws ReflectiveOperationException {
        Field field = IdempotencyFilter.class.getDeclaredField("options");
        field.setAccessible(true);
        return (Options) field.get(filter);
    }

    private static FilterConfig config(Map<String, String> parameters) {
        return new FilterConfig() {
            @Override
            public String getFilterName() {
                return "test";
            }

            @Override
            public ServletContext getServletContext() {
                return null;
            }

            @Override
            public String getInitParameter(String name) {
                return parameters.get(name);
            }

            @Override
            public Enumeration<String> getInitParameterNames() {
                return Collections.enumeration(parameters.keySet());
            }
        };
    }

    @Test
    void defaults() throws Exception {
        Options options = options(IdempotencyFilter.builder(SOURCE).build());
        assertEquals("Idempotency-Key", options.header());
        assertTrue(options.required());
        assertEquals(List.of("content-type", "location"), options.storedHeaders());
        assertEquals(false, options.storeServerErrors());
        assertEquals(null, options.waitFor());
        assertEquals(null, options.ttl());
        assertEquals(false, options.twoPhase());
        assertEquals(false, options.scopePerRoute());
        assertEquals(Set.of("POST", "PATCH"), options.methods());
        assertEquals(1024 * 1024, options.maxRequestBytes());
    }

    @Test
    void theBuildersMethodsAreTheProtocolsOptions() {
        Set<String> methods = new java.util.HashSet<>();
        for (java.lang.reflect.Method method : IdempotencyFilter.Builder.class.getMethods()) {
            methods.add(method.getName());
        }
        for (String option : Protocol.OPTIONS) {
            assertTrue(methods.contains(option), "the builder has no method " + option);
        }
    }

    @Test
    void theRouteRulesGiveTheProtocolsExamples() {
        for (List<String> example : Protocol.ROUTE_EXAMPLES) {
            if (example.get(0).equals("brace")) {
                assertEquals(example.get(2), IdempotencyFilter.canonicalRoute(example.get(1)),
                    example.get(1));
            }
        }
        assertEquals("/orders/*", IdempotencyFilter.canonicalRoute("/orders/*")); // a mapping
    }

    @Test
    void durationsAreIntervalsPostgresqlReads() throws Exception {
        Options options = options(IdempotencyFilter.builder(SOURCE).waitFor(Duration.ofMillis(2500))
            .ttl(Duration.ofDays(2)).lease(Duration.ofMinutes(2)).build());
        assertEquals("PT2.5S", options.waitFor());
        assertEquals("PT48H", options.ttl());
        assertEquals("PT2M", options.lease());
        assertTrue(options.twoPhase());
    }

    @Test
    void badValuesAreRefusedAtOnce() {
        IdempotencyFilter.Builder builder = IdempotencyFilter.builder(SOURCE);
        assertThrows(IllegalArgumentException.class, () -> IdempotencyFilter.builder(null));
        assertThrows(IllegalArgumentException.class, () -> builder.ttl(Duration.ZERO));
        assertThrows(IllegalArgumentException.class, () -> builder.lease(Duration.ofSeconds(-1)));
        assertThrows(IllegalArgumentException.class, () -> builder.waitFor(Duration.ofSeconds(-1)));
        assertThrows(IllegalArgumentException.class, () -> builder.header(" "));
        assertThrows(IllegalArgumentException.class, () -> builder.maxRequestBytes(-1));
        assertThrows(IllegalArgumentException.class, () -> builder.methods("POST", ""));
    }

    @Test
    void initParametersOverTheBuilder() throws Exception {
        IdempotencyFilter filter = IdempotencyFilter.builder(SOURCE).header("X-Old").build();
        Map<String, String> parameters = new LinkedHashMap<>();
        parameters.put("header", "X-Key");
        parameters.put("required", "false");
        parameters.put("storedHeaders", "Content-Type, X-Order ,");
        parameters.put("storeServerErrors", "true");
        parameters.put("wait", "30 seconds");
        parameters.put("ttl", "1 day");
        parameters.put("lease", "PT2M");
        parameters.put("scopePerRoute", "true");
        parameters.put("methods", "post,put");
        parameters.put("maxRequestBytes", "100");
        filter.init(config(parameters));
        Options options = options(filter);
        assertEquals("X-Key", options.header());
        assertEquals(false, options.required());
        assertEquals(List.of("content-type", "x-order"), options.storedHeaders());
        assertEquals(true, options.storeServerErrors());
        assertEquals("30 seconds", options.waitFor());
        assertEquals("1 day", options.ttl());
        assertEquals("PT2M", options.lease());
        assertEquals(true, options.scopePerRoute());
        assertEquals(Set.of("POST", "PUT"), options.methods());
        assertEquals(100, options.maxRequestBytes());
        assertEquals(SOURCE, options.dataSource());
    }

    @Test
    void badInitParametersFailTheFilter() {
        for (Map<String, String> parameters : List.of(Map.of("hedaer", "X-Key"),
            Map.of("required", "yes"), Map.of("maxRequestBytes", "1MB"), Map.of("wait", ""))) {
            ServletException error = assertThrows(ServletException.class,
                () -> IdempotencyFilter.builder(SOURCE).build().init(config(parameters)),
                parameters.toString());
            assertTrue(error.getMessage().startsWith("IdempotencyFilter test: "), error.getMessage());
        }
        ServletException unknown = assertThrows(ServletException.class,
            () -> new IdempotencyFilter().init(config(Map.of("hedaer", "X-Key"))));
        assertTrue(unknown.getMessage().contains("known: dataSource, header,"), unknown.getMessage());
        ServletException noSource = assertThrows(ServletException.class,
            () -> new IdempotencyFilter().init(config(Map.of())));
        assertTrue(noSource.getMessage().contains("no DataSource"), noSource.getMessage());
    }
}
