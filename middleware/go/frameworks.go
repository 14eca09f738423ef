package idempotency

import (
	"bufio"
	"context"
	"net"
	"net/http"
)

// Glue for frameworks whose handlers write to a writer of their own rather than the
// http.ResponseWriter of the middleware around them (gin, echo): README.md, "gin and
// echo", has their adapters. The package imports neither framework.

type routeKey struct{}

// WithRoute returns r recording pattern as the route it was routed to, for Options.Route's
// default: an adapter's way to name the route where the framework knows it (gin's
// c.FullPath(), echo's c.Path()). The pattern is put in its canonical form.
func WithRoute(r *http.Request, pattern string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), routeKey{}, pattern))
}

// GinWriter is a gin.ResponseWriter (structurally: its methods are gin's interface) that
// writes through the middleware's http.ResponseWriter, which holds the response until it
// is stored. A gin adapter sets c.Writer to one for the handlers it runs, so that what
// they write is what the middleware stores: gin's own writer would send it past the
// middleware, which would then see a handler that wrote nothing.
type GinWriter struct {
	w        http.ResponseWriter // the middleware's
	original http.ResponseWriter // gin's, for CloseNotify
	status   int
	size     int // -1 until the header is written
}

// NewGinWriter returns a GinWriter over w, the middleware's writer; original is the
// writer gin gave the request (c.Writer), which still tells when the client goes away.
func NewGinWriter(w, original http.ResponseWriter) *GinWriter {
	return &GinWriter{w: w, original: original, status: http.StatusOK, size: -1}
}

func (g *GinWriter) Header() http.Header { return g.w.Header() }

// WriteHeader records the status, which the first Write or WriteHeaderNow sends, as gin's
// own writer does.
func (g *GinWriter) WriteHeader(status int) {
	if status > 0 && !g.Written() {
		g.status = status
	}
}

// WriteHeaderNow sends the recorded status.
func (g *GinWriter) WriteHeaderNow() {
	if !g.Written() {
		g.size = 0
		g.w.WriteHeader(g.status)
	}
}

func (g *GinWriter) Write(p []byte) (int, error) {
	g.WriteHeaderNow()
	n, err := g.w.Write(p)
	g.size += n
	return n, err
}

func (g *GinWriter) WriteString(s string) (int, error) { return g.Write([]byte(s)) }

// Status is the status written, or to be written.
func (g *GinWriter) Status() int { return g.status }

// Size is the number of body bytes written, -1 before the header.
func (g *GinWriter) Size() int { return g.size }

// Written reports whether the header was written.
func (g *GinWriter) Written() bool { return g.size != -1 }

// Flush sends the header; the middleware holds the body until it is stored.
func (g *GinWriter) Flush() {
	g.WriteHeaderNow()
	if f, ok := g.w.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack is not supported: the response is held until it is stored.
func (g *GinWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, http.ErrNotSupported
}

// CloseNotify is gin's writer's (http.CloseNotifier is deprecated: prefer the request's
// context, which the middleware passes on).
func (g *GinWriter) CloseNotify() <-chan bool {
	if n, ok := g.original.(http.CloseNotifier); ok { //nolint:staticcheck // gin's interface has it
		return n.CloseNotify()
	}
	return make(chan bool)
}

// Pusher is nil: no server push from a held response.
func (g *GinWriter) Pusher() http.Pusher { return nil }
