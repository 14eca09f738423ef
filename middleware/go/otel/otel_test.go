package idempotencyotel

// The spans, asserted from the SDK's in-memory exporter: with no server, the answers the
// middleware gives before the database (no key, a failing tenant hook); with one
// (PGDATABASE and libpq's other variables, as test/t/057 sets them), a claim and its
// replay. The key itself is in no attribute.

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"

	_ "github.com/lib/pq"
	idempotency "github.com/pg-idempotency/idempotency/middleware/go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// traced is a middleware over db whose spans go to the exporter it returns, under a
// server's span whose context the requests of request() carry.
func traced(t *testing.T, db *sql.DB, options idempotency.Options, next http.Handler) (http.Handler, *tracetest.InMemoryExporter, func(string, string) *http.Request) {
	exporter := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { provider.Shutdown(context.Background()) })
	ctx, server := provider.Tracer("server").Start(context.Background(), "POST")
	t.Cleanup(func() { server.End() })
	options.Observer = Tracing(provider)
	options.ErrorLog = log.New(io.Discard, "", 0)
	request := func(path, key string) *http.Request {
		r := httptest.NewRequest("POST", path, strings.NewReader(`{"item":"tea"}`)).WithContext(ctx)
		r.Header.Set("Content-Type", "application/json")
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		return r
	}
	return idempotency.Middleware(db, options)(next), exporter, request
}

// spanOf is the only span of the middleware's that the exporter holds, checked for its
// name, its parent (the server's) and the raw key in its attributes.
func spanOf(t *testing.T, exporter *tracetest.InMemoryExporter, key string) tracetest.SpanStub {
	t.Helper()
	spans := exporter.GetSpans()
	exporter.Reset()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1: %+v", len(spans), spans)
	}
	span := spans[0]
	if span.Name != "idempotency.request" {
		t.Errorf("span %q", span.Name)
	}
	if !span.Parent.IsValid() {
		t.Error("the span is not the server span's child")
	}
	for _, a := range span.Attributes {
		if key != "" && strings.Contains(a.Value.Emit(), key) {
			t.Errorf("the key itself is exported in %s = %q", a.Key, a.Value.Emit())
		}
	}
	return span
}

func attributesOf(span tracetest.SpanStub) map[string]interface{} {
	m := map[string]interface{}{}
	for _, a := range span.Attributes {
		m[string(a.Key)] = a.Value.AsInterface()
	}
	return m
}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

var neverRun = http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("the handler ran") })

func TestSpanWithNoKey(t *testing.T) {
	h, exporter, request := traced(t, nil, idempotency.Options{}, neverRun)
	h.ServeHTTP(httptest.NewRecorder(), request("/orders", ""))
	got := attributesOf(spanOf(t, exporter, ""))
	want := map[string]interface{}{"idempotency.outcome": "refused", "idempotency.route": "/orders"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("attributes %v, want %v", got, want)
	}
}

func TestSpanOfAnError(t *testing.T) {
	failing := func(*http.Request) (string, error) { return "", errors.New("no tenant") }
	h, exporter, request := traced(t, nil, idempotency.Options{Tenant: failing}, neverRun)
	h.ServeHTTP(httptest.NewRecorder(), request("/orders/7", "secret-key-1"))
	span := spanOf(t, exporter, "secret-key-1")
	want := map[string]interface{}{"idempotency.outcome": "error", "idempotency.route": "/orders/7"}
	if got := attributesOf(span); !reflect.DeepEqual(got, want) {
		t.Errorf("attributes %v, want %v", got, want)
	}
	if span.Status.Code != codes.Error {
		t.Errorf("status %v, want Error", span.Status)
	}
}

// The attributes of a course, from the protocol's names: the hash of the key, never the key.
func TestAttributes(t *testing.T) {
	got := Attributes(idempotency.Course{Outcome: "claimed", Route: "/orders/{id}", Scope: "acme", Key: "é-1", Attempt: 2})
	want := []attribute.KeyValue{
		attribute.String("idempotency.outcome", "claimed"), attribute.String("idempotency.route", "/orders/{id}"),
		attribute.String("idempotency.scope", "acme"), attribute.String("idempotency.key_sha256", sha256hex("é-1")),
		attribute.Int64("idempotency.attempt", 2),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("attributes %v, want %v", got, want)
	}
}

// With a server: the handler runs under the span; a claim, then its replay.
func TestSpansOfAClaimAndItsReplay(t *testing.T) {
	if os.Getenv("PGDATABASE") == "" {
		t.Skip("no server: PGDATABASE is not set (test/t/057 sets it)")
	}
	db, err := sql.Open("postgres", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var inside trace.SpanContext
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside = trace.SpanFromContext(r.Context()).SpanContext()
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"order":1}`)
	})
	h, exporter, request := traced(t, db, idempotency.Options{Tenant: func(*http.Request) (string, error) { return "acme", nil }}, handler)
	key := fmt.Sprintf("otel-span-key-%d", os.Getpid())
	for i, outcome := range []string{"claimed", "replayed"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, request("/orders", key))
		if w.Code != http.StatusCreated {
			t.Fatalf("answer %d: %d %s", i, w.Code, w.Body)
		}
		span := spanOf(t, exporter, key)
		want := map[string]interface{}{"idempotency.outcome": outcome, "idempotency.route": "/orders",
			"idempotency.scope": "acme", "idempotency.key_sha256": sha256hex(key)}
		if outcome == "claimed" {
			want["idempotency.attempt"] = int64(1)
			if !inside.Equal(span.SpanContext) {
				t.Error("the handler's context does not hold the request's span")
			}
		}
		if got := attributesOf(span); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: attributes %v, want %v", outcome, got, want)
		}
		if span.Status.Code == codes.Error {
			t.Errorf("%s: status %v", outcome, span.Status)
		}
	}
}
