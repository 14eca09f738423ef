package org.pgidempotency;

import jakarta.servlet.ReadListener;
import jakarta.servlet.ServletInputStream;
import jakarta.servlet.http.HttpServletRequest;
import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.net.URLDecoder;
import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Enumeration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * The request with its body read once, for the fingerprint, and given again to the handler
 * (and to the hooks): each getInputStream() and getReader() reads it from the start, and
 * the parameters of a form body are parsed from it, as the container would have.
 */
final class BufferedRequest extends SynchronousRequest {
    /** Why a request is answered before anything runs. */
    static final class Refused extends Exception {
        private static final long serialVersionUID = 1L;
        final transient Answer answer;

        Refused(Answer answer) {
            super(null, null, false, false);
            this.answer = answer;
        }
    }

    private final byte[] body;
    private Map<String, String[]> parameters;

    private BufferedRequest(HttpServletRequest request, byte[] body) {
        super(request);
        this.body = body;
    }

    /**
     * Reads the body of {@code request}, refusing one over {@code limit} bytes (413) and one
     * that something before the filter has read already (500, saying what to change).
     */
    static BufferedRequest read(HttpServletRequest request, long limit)
        throws IOException, Refused {
        long declared = request.getContentLengthLong();
        if (declared > limit) {
            throw tooLarge(limit);
        }
        InputStream in;
        try {
            ServletInputStream stream = request.getInputStream();
            if (declared < 0 && request.getHeader("Transfer-Encoding") != null
                && stream.isFinished()) {
                throw consumed();
            }
            in = stream;
        } catch (IllegalStateException e) { // getReader() was called
            throw consumed();
        }
        ByteArrayOutputStream out = new ByteArrayOutputStream(
            (int) Math.min(Math.max(declared, 0), limit));
        byte[] chunk = new byte[8192];
        for (int n; (n = in.read(chunk)) >= 0; ) {
            out.write(chunk, 0, n);
            if (out.size() > limit) {
                throw tooLarge(limit);
            }
        }
        if (declared > 0 && out.size() < declared) {
            throw consumed();
        }
        return new BufferedRequest(request, out.toByteArray());
    }

    private static Refused tooLarge(long limit) {
        return new Refused(Answer.of(Protocol.BODY_TOO_LARGE,
            Map.of("limit", limit, "option", "maxRequestBytes")));
    }

    private static Refused consumed() {
        return new Refused(Answer.of(Protocol.BODY_READ_BEFORE, Map.of("fix", "Something before "
            + "the idempotency filter read the request body, which the filter needs for the "
            + "request's fingerprint: map the filter before any filter that reads the body.")));
    }

    byte[] body() {
        return body;
    }

    @Override
    public ServletInputStream getInputStream() {
        ByteArrayInputStream in = new ByteArrayInputStream(body);
        return new ServletInputStream() {
            @Override
            public int read() {
                return in.read();
            }

            @Override
            public int read(byte[] buffer, int offset, int length) {
                return in.read(buffer, offset, length);
            }

            @Override
            public boolean isFinished() {
                return in.available() == 0;
            }

            @Override
            public boolean isReady() {
                return true;
            }

            @Override
            public void setReadListener(ReadListener listener) {
                throw new IllegalStateException("non-blocking reads need asynchronous "
                    + "processing, which the idempotency filter does not support");
            }
        };
    }

    @Override
    public BufferedReader getReader() {
        return new BufferedReader(new InputStreamReader(getInputStream(), charset()));
    }

    @Override
    public int getContentLength() {
        return body.length;
    }

    @Override
    public long getContentLengthLong() {
        return body.length;
    }

    /** The body's charset as the container reads it: as declared, else ISO-8859-1. */
    private Charset charset() {
        String declared = getCharacterEncoding();
        return declared == null ? StandardCharsets.ISO_8859_1 : Charset.forName(declared);
    }

    // ------------------------------------------------------------ parameters

    @Override
    public String getParameter(String name) {
        String[] values = parameters().get(name);
        return values == null ? null : values[0];
    }

    @Override
    public Map<String, String[]> getParameterMap() {
        return parameters();
    }

    @Override
    public Enumeration<String> getParameterNames() {
        return Collections.enumeration(parameters().keySet());
    }

    @Override
    public String[] getParameterValues(String name) {
        String[] values = parameters().get(name);
        return values == null ? null : values.clone();
    }

    /**
     * The query string's parameters, then a form body's (the container no longer sees the
     * body, which the filter read).
     */
    private Map<String, String[]> parameters() {
        if (parameters == null) {
            Map<String, List<String>> found = new LinkedHashMap<>();
            decodeForm(getQueryString(), StandardCharsets.UTF_8, found);
            String type = getContentType();
            if (type != null && type.toLowerCase(Locale.ROOT).split(";", 2)[0].trim()
                .equals("application/x-www-form-urlencoded")) {
                decodeForm(new String(body, charset()), charset(), found);
            }
            Map<String, String[]> map = new LinkedHashMap<>();
            found.forEach((name, values) -> map.put(name, values.toArray(new String[0])));
            parameters = Collections.unmodifiableMap(map);
        }
        return parameters;
    }

    private static void decodeForm(String form, Charset charset, Map<String, List<String>> into) {
        if (form == null || form.isEmpty()) {
            return;
        }
        for (String pair : form.split("&")) {
            if (pair.isEmpty()) {
                continue;
            }
            int equals = pair.indexOf('=');
            String name = equals < 0 ? pair : pair.substring(0, equals);
            String value = equals < 0 ? "" : pair.substring(equals + 1);
            into.computeIfAbsent(decode(name, charset), n -> new ArrayList<>())
                .add(decode(value, charset));
        }
    }

    private static String decode(String text, Charset charset) {
        try {
            return URLDecoder.decode(text, charset);
        } catch (IllegalArgumentException e) { // a malformed escape: the text as sent
            return text;
        }
    }
}
