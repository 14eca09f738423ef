// Package idempotencyotel gives each request that the idempotency middleware protects an
// OpenTelemetry span, under the names of src/protocol.txt ("observability") that every
// package of the project exports: a span idempotency.request with the attributes
// idempotency.outcome, idempotency.route, idempotency.scope, idempotency.key_sha256 and
// idempotency.attempt. The key itself is never exported: only the hex SHA-256 of its
// UTF-8 bytes. It is a module of its own, so that the middleware's module requires
// nothing but the standard library; it uses OpenTelemetry's trace API, stable since 1.0
// (Debian 12 ships 1.1.0, golang-opentelemetry-otel-dev). Metrics: README.md,
// "Observability" (an OnOutcome hook).
package idempotencyotel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"

	idempotency "github.com/pg-idempotency/idempotency/middleware/go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// instrumentation is the tracer's name, as in every package of the project.
const instrumentation = "pg-idempotency"

// Tracing returns an idempotency.Observer (Options.Observer) that starts a span for each
// protected request in the request's context, a child of the server's span there, and
// ends it with the request's course, before its answer is sent. The handler's context
// holds the span, so that its own spans (a database call's) are its children. With a nil
// provider it uses the global one (otel.GetTracerProvider()) as it is at each request.
func Tracing(provider trace.TracerProvider) idempotency.Observer {
	return &tracing{provider: provider}
}

type tracing struct{ provider trace.TracerProvider }

// spanKey holds the request's span in its context: the one Finish ends, never the
// server's (which trace.SpanFromContext would give with a no-op provider).
type spanKey struct{}

func (t *tracing) Start(r *http.Request) *http.Request {
	provider := t.provider
	if provider == nil {
		provider = otel.GetTracerProvider()
	}
	ctx, span := provider.Tracer(instrumentation).Start(r.Context(), idempotency.NameRequestSpan,
		trace.WithSpanKind(trace.SpanKindInternal))
	return r.WithContext(context.WithValue(ctx, spanKey{}, span))
}

func (t *tracing) Finish(r *http.Request, course idempotency.Course) {
	span, _ := r.Context().Value(spanKey{}).(trace.Span)
	if span == nil {
		return
	}
	span.SetAttributes(Attributes(course)...)
	if course.Outcome == "error" {
		span.SetStatus(codes.Error, "")
	}
	span.End()
}

// Attributes are the span's attributes of a request's course: its outcome and route, and
// once its key was read, the key's scope and hash; its attempt once claimed.
func Attributes(course idempotency.Course) []attribute.KeyValue {
	attributes := []attribute.KeyValue{
		attribute.String(idempotency.NameOutcomeAttribute, course.Outcome),
		attribute.String(idempotency.NameRouteAttribute, course.Route),
	}
	if course.Key != "" {
		sum := sha256.Sum256([]byte(course.Key))
		attributes = append(attributes,
			attribute.String(idempotency.NameScopeAttribute, course.Scope),
			attribute.String(idempotency.NameKeySHA256Attribute, hex.EncodeToString(sum[:])))
	}
	if course.Attempt > 0 {
		attributes = append(attributes, attribute.Int64(idempotency.NameAttemptAttribute, course.Attempt))
	}
	return attributes
}
