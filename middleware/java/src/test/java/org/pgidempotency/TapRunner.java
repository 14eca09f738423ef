package org.pgidempotency;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.platform.engine.TestExecutionResult;
import org.junit.platform.engine.discovery.DiscoverySelectors;
import org.junit.platform.launcher.Launcher;
import org.junit.platform.launcher.TestExecutionListener;
import org.junit.platform.launcher.TestIdentifier;
import org.junit.platform.launcher.TestPlan;
import org.junit.platform.launcher.core.LauncherDiscoveryRequestBuilder;
import org.junit.platform.launcher.core.LauncherFactory;

/**
 * Runs the package's JUnit tests and prints TAP (one "ok N - Class: test" or "not ok" line
 * per test, a skipped one marked "# SKIP"), for test/t/058_java_middleware.pl. Exits 1 when
 * a test failed.
 */
public final class TapRunner {
    public static void main(String[] args) {
        AtomicInteger count = new AtomicInteger();
        AtomicInteger failed = new AtomicInteger();
        TestExecutionListener tap = new TestExecutionListener() {
            private TestPlan plan;

            @Override
            public void testPlanExecutionStarted(TestPlan testPlan) {
                plan = testPlan;
            }

            @Override
            public void executionSkipped(TestIdentifier test, String reason) {
                if (test.isTest()) {
                    System.out.println("ok " + count.incrementAndGet() + " - " + name(test)
                        + " # SKIP " + reason);
                }
            }

            @Override
            public void executionFinished(TestIdentifier test, TestExecutionResult result) {
                boolean passed = result.getStatus() == TestExecutionResult.Status.SUCCESSFUL;
                if (test.isTest() || !passed) {
                    if (!passed) {
                        failed.incrementAndGet();
                    }
                    System.out.println((passed ? "ok " : "not ok ") + count.incrementAndGet()
                        + " - " + name(test));
                }
                result.getThrowable().ifPresent(error -> {
                    StringWriter trace = new StringWriter();
                    error.printStackTrace(new PrintWriter(trace));
                    trace.toString().lines().limit(30).forEach(line -> System.out.println("# " + line));
                });
            }

            private String name(TestIdentifier test) {
                String parent = plan.getParent(test).map(TestIdentifier::getDisplayName)
                    .orElse("");
                return parent + ": " + test.getDisplayName();
            }
        };
        Launcher launcher = LauncherFactory.create();
        launcher.execute(LauncherDiscoveryRequestBuilder.request()
            .selectors(DiscoverySelectors.selectPackage(TapRunner.class.getPackageName()))
            .build(), tap);
        System.out.println("1.." + count.get());
        System.exit(failed.get() == 0 ? 0 : 1);
    }
}
