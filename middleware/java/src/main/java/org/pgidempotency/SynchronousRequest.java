package org.pgidempotency;

import jakarta.servlet.AsyncContext;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletRequestWrapper;

/**
 * The request as a servlet behind the filter sees it: without asynchronous processing. The
 * filter stores the response and ends the transaction when the servlet returns, so a
 * response written later, on another thread, would be stored empty or not at all. Containers
 * do not all refuse startAsync() behind a filter that did not declare asyncSupported
 * (Tomcat allows it unless the filter says false), so the request refuses it itself.
 */
class SynchronousRequest extends HttpServletRequestWrapper {
    SynchronousRequest(HttpServletRequest request) {
        super(request);
    }

    @Override
    public boolean isAsyncSupported() {
        return false;
    }

    @Override
    public AsyncContext startAsync() {
        throw refused();
    }

    @Override
    public AsyncContext startAsync(ServletRequest request, ServletResponse response) {
        throw refused();
    }

    private static IllegalStateException refused() {
        return new IllegalStateException("the idempotency filter stores the response when the "
            + "servlet returns: asynchronous processing is not supported behind it");
    }
}
