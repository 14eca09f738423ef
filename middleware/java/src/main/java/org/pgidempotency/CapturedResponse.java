package org.pgidempotency;

import jakarta.servlet.ServletOutputStream;
import jakarta.servlet.WriteListener;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.servlet.http.HttpServletResponseWrapper;
import java.io.ByteArrayOutputStream;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.Charset;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The handler's response, held until it is stored and committed. Status and headers go to
 * the container's response, which sends nothing before the filter writes the body; the
 * body is buffered, flush() included, so that a streaming handler's pieces are stored and
 * sent as one. Past {@code limit} bytes the body cannot be stored: it is dropped (the
 * request's work rolls back, see Course.finish) rather than held in memory.
 *
 * <p>sendError() and sendRedirect() are answered here too, so that what they answer can
 * be stored: sendError with a problem document (the container's error pages would be made
 * after the filter, out of its reach), sendRedirect with a 302 and its Location.
 */
final class CapturedResponse extends HttpServletResponseWrapper {
    private final long limit;
    private final ByteArrayOutputStream body = new ByteArrayOutputStream();
    private long written;
    private ServletOutputStream stream;
    private PrintWriter writer;
    private Charset writerCharset;
    private boolean ended;

    CapturedResponse(HttpServletResponse response, long limit) {
        super(response);
        this.limit = limit;
    }

    /** Whether the body was over the limit, and dropped. */
    boolean oversized() {
        return written > limit;
    }

    /** The body as written (empty once oversized). */
    byte[] body() {
        if (writer != null) {
            writer.flush();
        }
        return body.toByteArray();
    }

    /** The headers of {@code names} (lower case) that the response has, by name. */
    Map<String, List<String>> headers(List<String> names) {
        Map<String, List<String>> found = new LinkedHashMap<>();
        for (String name : names) {
            List<String> values = new ArrayList<>();
            if (name.equals("content-type")) {
                // Containers keep it apart from the other headers.
                if (getContentType() != null) {
                    values.add(getContentType());
                }
            } else {
                values.addAll(getHeaders(name));
            }
            if (!values.isEmpty()) {
                found.put(name, values);
            }
        }
        return found;
    }

    private void write(byte[] bytes, int offset, int length) {
        if (ended) {
            return;
        }
        written += length;
        if (written > limit) {
            body.reset();
        } else {
            body.write(bytes, offset, length);
        }
    }

    @Override
    public ServletOutputStream getOutputStream() {
        if (writer != null) {
            throw new IllegalStateException("getWriter() has already been called");
        }
        if (stream == null) {
            stream = new Buffer();
        }
        return stream;
    }

    @Override
    public PrintWriter getWriter() {
        if (stream != null) {
            throw new IllegalStateException("getOutputStream() has already been called");
        }
        if (writer == null) {
            // As the container does: the charset is fixed now, and named in Content-Type.
            writerCharset = Charset.forName(getCharacterEncoding());
            super.setCharacterEncoding(writerCharset.name());
            writer = new PrintWriter(new OutputStreamWriter(new Buffer(), writerCharset));
        }
        return writer;
    }

    @Override
    public void setCharacterEncoding(String charset) {
        if (writer == null) {
            super.setCharacterEncoding(charset);
        }
    }

    @Override
    public void setContentType(String type) {
        super.setContentType(type);
        if (writer != null) {
            super.setCharacterEncoding(writerCharset.name());
        }
    }

    // The filter sends the Content-Length of what it sends.
    @Override
    public void setContentLength(int length) {}

    @Override
    public void setContentLengthLong(long length) {}

    @Override
    public void setHeader(String name, String value) {
        if (!name.equalsIgnoreCase("Content-Length")) {
            super.setHeader(name, value);
        }
    }

    @Override
    public void addHeader(String name, String value) {
        if (!name.equalsIgnoreCase("Content-Length")) {
            super.addHeader(name, value);
        }
    }

    @Override
    public void setIntHeader(String name, int value) {
        setHeader(name, Integer.toString(value));
    }

    @Override
    public void addIntHeader(String name, int value) {
        addHeader(name, Integer.toString(value));
    }

    // Nothing reaches the client before the response is stored.
    @Override
    public void flushBuffer() {
        if (writer != null) {
            writer.flush();
        }
    }

    @Override
    public boolean isCommitted() {
        return ended;
    }

    @Override
    public void setBufferSize(int size) {}

    @Override
    public void resetBuffer() {
        if (ended) {
            throw new IllegalStateException("the response has been sent");
        }
        if (writer != null) {
            writer.flush();
        }
        body.reset();
        written = 0;
    }

    @Override
    public void reset() {
        resetBuffer();
        super.reset();
        stream = null;
        writer = null;
    }

    @Override
    public void sendError(int status) {
        sendError(status, null);
    }

    @Override
    public void sendError(int status, String message) {
        reset();
        Answer problem = Answer.problem(status, message == null || message.isEmpty()
            ? "Error " + status : message, null, null, "claimed");
        setStatus(status);
        problem.headers().forEach(header -> setHeader(header.getKey(), header.getValue()));
        write(problem.body(), 0, problem.body().length);
        ended = true;
    }

    @Override
    public void sendRedirect(String location) {
        reset();
        setStatus(SC_FOUND);
        setHeader("Location", location);
        ended = true;
    }

    /** The buffer behind getOutputStream() and getWriter(). */
    private final class Buffer extends ServletOutputStream {
        @Override
        public void write(int b) {
            CapturedResponse.this.write(new byte[] {(byte) b}, 0, 1);
        }

        @Override
        public void write(byte[] bytes, int offset, int length) {
            CapturedResponse.this.write(bytes, offset, length);
        }

        @Override
        public void flush() {}

        @Override
        public boolean isReady() {
            return true;
        }

        @Override
        public void setWriteListener(WriteListener listener) {
            throw new IllegalStateException("non-blocking writes need asynchronous "
                + "processing, which the idempotency filter does not support");
        }
    }
}
