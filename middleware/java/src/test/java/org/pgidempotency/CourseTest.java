package org.pgidempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

/** What the core reads of the server's answers without a server. */
class CourseTest {
    @Test
    void theLimitAsShowGivesIt() {
        assertEquals(1024 * 1024, Course.bytes("1MB"));
        assertEquals(1000, Course.bytes("1000B"));
        assertEquals(536870911, Course.bytes("536870911B"));
        assertEquals(3L << 40, Course.bytes("3TB"));
        assertEquals(0, Course.bytes("0"));
        assertEquals(Long.MAX_VALUE, Course.bytes(null)); // the setting is not there
        assertEquals(Long.MAX_VALUE, Course.bytes("1 MB"));
    }
}
