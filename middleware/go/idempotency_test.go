package idempotency

// The package's glue, with no server: what the middleware decides before it reaches the
// database, the response it holds, and its reading of src/protocol.txt (protocol.go).
// The routers and the drivers' errors are in integration/ (test/t/057_go_middleware.pl
// runs both); what every package does, with every option, is the conformance suite's
// (test/conformance, test/t/056).

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

// untouched is a middleware whose database is never reached: its requests end earlier.
func untouched(options Options, next http.Handler) http.Handler {
	options.ErrorLog = log.New(io.Discard, "", 0)
	return Middleware(nil, options)(next)
}

func serve(h http.Handler, r *http.Request) *http.Response {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

func problemOf(t *testing.T, res *http.Response) map[string]interface{} {
	t.Helper()
	var doc map[string]interface{}
	body, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(body, &doc); err != nil ||
		res.Header.Get("Content-Type") != "application/problem+json" ||
		doc["type"] != "about:blank" || doc["title"] == "" || doc["status"] != float64(res.StatusCode) {
		t.Fatalf("not a problem answer: %d %v %s", res.StatusCode, res.Header, body)
	}
	if res.Header.Get("Content-Length") != fmt.Sprint(len(body)) {
		t.Errorf("Content-Length %q, body of %d bytes", res.Header.Get("Content-Length"), len(body))
	}
	return doc
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: true} }

var neverRun = http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("the handler ran") })

func TestBodyReadBeforeIs500(t *testing.T) {
	r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"item": "a"}`))
	r.Header.Set("Idempotency-Key", "k")
	io.ReadAll(r.Body) // a middleware before this one
	res := serve(untouched(Options{}, neverRun), r)
	if res.StatusCode != 500 || !strings.Contains(problemOf(t, res)["detail"].(string), "before whatever reads") {
		t.Errorf("a body read before: %d", res.StatusCode)
	}
	r = httptest.NewRequest("POST", "/orders", strings.NewReader(`{"item": "a"}`))
	r.Header.Set("Idempotency-Key", "k")
	r.Body = http.MaxBytesReader(httptest.NewRecorder(), r.Body, 5) // an outer limit
	if res := serve(untouched(Options{}, neverRun), r); res.StatusCode != 413 {
		t.Errorf("over an http.MaxBytesReader's limit: %d", res.StatusCode)
	}
}

func TestRecorderHoldsTheResponse(t *testing.T) {
	w := newRecorder(-1)
	var _ http.Flusher = w // a streaming handler's type assertion holds
	w.WriteHeader(103)     // informational: not the answer
	w.Write([]byte("<html>"))
	w.WriteHeader(500) // too late, as in net/http
	w.Flush()
	w.Write([]byte("</html>"))
	got := w.result()
	if got.status != 200 || string(got.body) != "<html></html>" ||
		got.header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("got %d %v %q: want net/http's 200 and sniffed Content-Type", got.status, got.header, got.body)
	}
	w = newRecorder(-1)
	w.Header()["Content-Type"] = nil // net/http's way to send none
	w.Write([]byte("x"))
	if got := w.result(); got.header.Get("Content-Type") != "" {
		t.Errorf("a suppressed Content-Type was sniffed: %v", got.header)
	}
	w = newRecorder(-1)
	w.WriteHeader(204)
	if got := w.result(); got.status != 204 || len(got.body) != 0 {
		t.Errorf("got %d %q", got.status, got.body)
	}
}

func TestRecorderStopsAtTheLimit(t *testing.T) {
	w := newRecorder(10)
	for i := 0; i < 3; i++ {
		if n, err := w.Write([]byte("0123")); n != 4 || err != nil {
			t.Fatalf("Write: %d %v: the handler carries on", n, err)
		}
	}
	if !w.overflow || len(w.body) != 0 {
		t.Errorf("12 bytes over a limit of 10: overflow %v, %d bytes kept", w.overflow, len(w.body))
	}
	w = newRecorder(10)
	w.Write([]byte("0123456789"))
	if w.overflow || len(w.body) != 10 {
		t.Errorf("10 bytes at a limit of 10: overflow %v, %d bytes kept", w.overflow, len(w.body))
	}
}

func TestStoredHeadersReplay(t *testing.T) {
	h := http.Header{}
	h.Set("content-type", "application/json")
	h.Add("Set-Cookie", "a=1")
	h.Add("Set-Cookie", "b=2")
	h.Set("X-Not-Stored", "x")
	stored, err := storedHeaders(h, []string{"Content-Type", "location", "set-cookie"})
	if err != nil || stored != `{"Content-Type":"application/json","Set-Cookie":["a=1","b=2"]}` {
		t.Fatalf("stored %s, %v", stored, err)
	}
	// As this package stores them, and as the Node package does (lower-case names).
	for _, text := range []string{stored, `{"content-type":"application/json","set-cookie":["a=1","b=2"]}`} {
		a := replay(201, nullString(text), []byte("{}"))
		want := http.Header{"Content-Type": {"application/json"}, "Set-Cookie": {"a=1", "b=2"},
			"Idempotent-Replayed": {"true"}}
		if !reflect.DeepEqual(a.header, want) || a.status != 201 || string(a.body) != "{}" {
			t.Errorf("replay of %s: %d %v %q", text, a.status, a.header, a.body)
		}
	}
}

func TestSendSetsContentLength(t *testing.T) {
	w := httptest.NewRecorder()
	(&response{status: 201, header: http.Header{"Content-Length": {"99"}}, body: []byte("abc")}).send(w)
	if w.Code != 201 || w.Header().Get("Content-Length") != "3" || w.Body.String() != "abc" {
		t.Errorf("sent %d %v %q", w.Code, w.Header(), w.Body)
	}
	w = httptest.NewRecorder()
	(&response{status: 204, header: http.Header{}}).send(w)
	if w.Header().Get("Content-Length") != "" {
		t.Errorf("a 204 with Content-Length")
	}
}

func TestFingerprintParts(t *testing.T) {
	m := &middleware{options: Options{}.withDefaults()}
	r := httptest.NewRequest("POST", "/orders/a%2Fb?x=1&y=\xe9", nil)
	r.Header.Set("Content-Type", "application/merge-patch+json; note=\"caf\xe9\"")
	f := m.fingerprint(r, []byte(`{"item": "a"}`))
	// The query string and the content type a character per byte, as every package reads them.
	want := fingerprint{method: "POST", route: "/orders/a%2Fb", path: "/orders/a%2Fb", query: "x=1&y=\u00e9",
		contentType: "application/merge-patch+json; note=\"caf\u00e9\"", body: []byte(`{"item": "a"}`)}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("got %+v, want %+v", f, want)
	}
}

func TestScope(t *testing.T) {
	r := httptest.NewRequest("POST", "/orders", nil)
	tenant := func(r *http.Request) (string, error) { return "t1", nil }
	for _, c := range []struct {
		options Options
		scope   string
	}{
		{Options{ScopePerRoute: true, Route: func(*http.Request) string { return "/orders/{id:[0-9]+}" }}, "POST /orders/{id}"},
		{Options{Tenant: func(*http.Request) (string, error) { return "", nil }, ScopePerRoute: true}, " POST /orders"},
		{Options{Tenant: tenant, ScopePerRoute: true, Scope: func(*http.Request) (string, error) { return "all", nil }}, "all"},
	} {
		m := &middleware{options: c.options.withDefaults()}
		if got, err := m.scope(r); got != c.scope || err != nil {
			t.Errorf("%+v: scope %q, %v; want %q", c.options, got, err, c.scope)
		}
	}
	// A hook's panic is its failure: 500, nothing run.
	res := serve(untouched(Options{Tenant: func(*http.Request) (string, error) { panic("no tenant") }}, neverRun),
		func() *http.Request {
			r := httptest.NewRequest("POST", "/orders", nil)
			r.Header.Set("Idempotency-Key", "k")
			return r
		}())
	if res.StatusCode != 500 {
		t.Errorf("a tenant hook that panics: %d", res.StatusCode)
	}
	problemOf(t, res)
}

type codedError struct{ code string }

func (e codedError) Error() string    { return "coded" }
func (e codedError) SQLState() string { return e.code }

func TestSQLStateThroughWrapping(t *testing.T) {
	if got := sqlstate(fmt.Errorf("begin: %w", codedError{"55P03"})); got != "55P03" {
		t.Errorf("sqlstate = %q", got)
	}
	if got := sqlstate(errors.New("no code")); got != "" {
		t.Errorf("sqlstate = %q", got)
	}
	if a := sqlstateAnswers["IK006"]; a.status != 400 {
		t.Errorf("IK006 answers %d", a.status)
	}
}

func TestIntervalIsExact(t *testing.T) {
	if got := interval(0); got != nil {
		t.Errorf("0 is the server's setting (NULL), not %v", got)
	}
	if got := interval(36*time.Hour + 1500*time.Nanosecond); got != "129600000001 microseconds" {
		t.Errorf("interval = %v", got)
	}
}

func TestMaxResponseBytesReadsTheSetting(t *testing.T) {
	for setting, bytes := range map[string]int64{"1MB": 1 << 20, "2000B": 2000, "0": 0, "512kB": 512 << 10,
		"1GB": 1 << 30, "": -1, "1 MB": -1, "MB": -1, "1XB": -1} {
		if got := maxResponseBytes(setting); got != bytes {
			t.Errorf("maxResponseBytes(%q) = %d, want %d", setting, got, bytes)
		}
	}
}

func TestRouteRulesGiveTheProtocolsExamples(t *testing.T) {
	for _, e := range routeExamples {
		if got := canonicalRoute(e[0], e[1]); got != e[2] {
			t.Errorf("%s %q: %q, want %q", e[0], e[1], got, e[2])
		}
	}
}

func TestOptionsAreTheProtocols(t *testing.T) {
	fields := map[string]bool{}
	for _, field := range reflect.VisibleFields(reflect.TypeOf(Options{})) {
		fields[field.Name] = true
	}
	for _, name := range optionNames {
		if !fields[name] {
			t.Errorf("Options has no field %s", name)
		}
	}
	o := Options{}.withDefaults()
	if o.Header != "Idempotency-Key" || o.MaxRequestBytes != 1<<20 || !reflect.DeepEqual(o.Methods, []string{"POST", "PATCH"}) {
		t.Errorf("defaults %+v", o)
	}
}

func TestLatin1(t *testing.T) {
	for in, want := range map[string]string{"": "", "ascii; x=1": "ascii; x=1", "caf\xe9": "caf\u00e9",
		"caf\xc3\xa9": "caf\u00c3\u00a9"} {
		if got := latin1(in); got != want {
			t.Errorf("latin1(%q) = %q, want %q", in, got, want)
		}
	}
}

// A Route hook's pattern, or an adapter's (WithRoute), in gin's and echo's colon syntax or
// the brace syntax, is put in its canonical form.
func TestRoutePatternSyntaxes(t *testing.T) {
	for pattern, canonical := range map[string]string{
		"/orders/:id": "/orders/{id}", "/files/*rest": "/files/*", "/orders/:id/items/:item": "/orders/{id}/items/{item}",
		"/orders/{id:[0-9]+}": "/orders/{id}", "/orders/{id}": "/orders/{id}", "/orders": "/orders", "/files/*": "/files/*",
	} {
		if got := canonicalPattern(pattern); got != canonical {
			t.Errorf("%s: %s, want %s", pattern, got, canonical)
		}
		r := WithRoute(httptest.NewRequest("POST", "/x", nil), pattern)
		if got := (Options{}).withDefaults().Route(r); got != canonical {
			t.Errorf("WithRoute(%s): the route is %s, want %s", pattern, got, canonical)
		}
	}
}

// A GinWriter writes through the middleware's writer as gin's own writer would: the
// status when the body starts (or WriteHeaderNow), and its accounts.
func TestGinWriter(t *testing.T) {
	w := newRecorder(-1)
	g := NewGinWriter(w, httptest.NewRecorder())
	if g.Written() || g.Size() != -1 || g.Status() != 200 {
		t.Fatalf("a new writer: written %v, size %d, status %d", g.Written(), g.Size(), g.Status())
	}
	g.WriteHeader(201)
	g.WriteHeader(202) // gin's: the last before the body
	if w.written {
		t.Error("the status was sent before the body")
	}
	g.Header().Set("Content-Type", "application/json")
	g.WriteString(`{"a":`)
	g.Flush()
	g.Write([]byte(`1}`))
	g.WriteHeader(500) // too late
	got := w.result()
	if got.status != 202 || string(got.body) != `{"a":1}` || got.header.Get("Content-Type") != "application/json" ||
		!g.Written() || g.Size() != 7 || g.Status() != 202 {
		t.Errorf("got %d %v %q; written %v, size %d, status %d", got.status, got.header, got.body,
			g.Written(), g.Size(), g.Status())
	}
	if _, _, err := g.Hijack(); err == nil {
		t.Error("a held response was hijacked")
	}
	w = newRecorder(-1)
	g = NewGinWriter(w, httptest.NewRecorder())
	g.WriteHeader(204) // c.Status(204), and gin's WriteHeaderNow after the chain
	g.WriteHeaderNow()
	if got := w.result(); !w.written || got.status != 204 {
		t.Errorf("WriteHeaderNow: written %v, status %d", w.written, got.status)
	}
}

// OnOutcome is called once per protected request, before its answer is sent, with the
// request; not for a method that passes through; its panic is not answered.
func TestOnOutcome(t *testing.T) {
	var got []string
	var sent bool
	options := Options{OnOutcome: func(outcome string, r *http.Request) {
		got = append(got, outcome+" "+r.URL.Path)
		if sent {
			t.Error("called after the answer was sent")
		}
	}}
	h := untouched(options, neverRun)
	w := &sentRecorder{ResponseRecorder: httptest.NewRecorder(), sent: &sent}
	h.ServeHTTP(w, httptest.NewRequest("POST", "/orders", strings.NewReader("{}")))
	sent = false
	big := httptest.NewRequest("POST", "/orders", strings.NewReader(strings.Repeat("x", 2<<20)))
	big.Header.Set("Idempotency-Key", "k")
	h.ServeHTTP(&sentRecorder{ResponseRecorder: httptest.NewRecorder(), sent: &sent}, big)
	passed := httptest.NewRequest("GET", "/orders", nil)
	untouched(options, http.NotFoundHandler()).ServeHTTP(httptest.NewRecorder(), passed)
	if want := []string{"refused /orders", "too_large /orders"}; !reflect.DeepEqual(got, want) {
		t.Errorf("outcomes %q, want %q", got, want)
	}
	panicky := untouched(Options{OnOutcome: func(string, *http.Request) { panic("the hook fails") }}, neverRun)
	if res := serve(panicky, httptest.NewRequest("POST", "/orders", nil)); res.StatusCode != 400 {
		t.Errorf("a hook's panic changed the answer: %d", res.StatusCode)
	}
}

type sentRecorder struct {
	*httptest.ResponseRecorder
	sent *bool
}

func (w *sentRecorder) WriteHeader(status int) {
	*w.sent = true
	w.ResponseRecorder.WriteHeader(status)
}

type observed struct{}

type recordingObserver struct{ courses []Course }

func (o *recordingObserver) Start(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), observed{}, true))
}

func (o *recordingObserver) Finish(r *http.Request, course Course) {
	if r.Context().Value(observed{}) == nil {
		panic("Finish got another request than Start returned")
	}
	o.courses = append(o.courses, course)
}

type panickingObserver struct{ in string }

func (o panickingObserver) Start(r *http.Request) *http.Request {
	if o.in == "Start" {
		panic("Start fails")
	}
	return nil // the request as it was
}

func (o panickingObserver) Finish(*http.Request, Course) {
	if o.in == "Finish" {
		panic("Finish fails")
	}
}

// An Observer sees each protected request from its start, whose request the middleware
// goes on with (the hooks get it), to its course: the route, and the key and scope once
// read; its panic is not answered.
func TestObserver(t *testing.T) {
	o := &recordingObserver{}
	tenantSaw := false
	options := Options{Observer: o, Tenant: func(r *http.Request) (string, error) {
		tenantSaw = r.Context().Value(observed{}) != nil
		return "", errors.New("no tenant")
	}}
	h := untouched(options, neverRun)
	serve(h, httptest.NewRequest("POST", "/orders", nil))
	keyed := httptest.NewRequest("POST", "/orders/7", nil)
	keyed.Header.Set("Idempotency-Key", "k-1")
	if res := serve(h, keyed); res.StatusCode != 500 {
		t.Errorf("the tenant hook's failure: %d", res.StatusCode)
	}
	serve(untouched(options, http.NotFoundHandler()), httptest.NewRequest("GET", "/orders", nil))
	want := []Course{{Outcome: "refused", Route: "/orders"}, {Outcome: "error", Route: "/orders/7"}}
	if !reflect.DeepEqual(o.courses, want) || !tenantSaw {
		t.Errorf("courses %+v (the tenant hook saw Start's request: %v), want %+v", o.courses, tenantSaw, want)
	}
	for _, in := range []string{"Start", "Finish"} {
		h := untouched(Options{Observer: panickingObserver{in}}, neverRun)
		if res := serve(h, httptest.NewRequest("POST", "/orders", nil)); res.StatusCode != 400 {
			t.Errorf("a panic in %s changed the answer: %d", in, res.StatusCode)
		}
	}
}
