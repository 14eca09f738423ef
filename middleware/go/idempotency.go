// Package idempotency is net/http middleware for Idempotency-Key over the idempotency
// PostgreSQL extension, through database/sql with any driver (lib/pq, pgx's stdlib, ...).
//
// The extension's SQL functions do the work (claim, arbitration, storage, replay); this
// package turns a request into their arguments and their answers into HTTP responses:
//
//	claimed      the handler runs in the claim's transaction, idempotency.Tx(r.Context());
//	             its response is stored with its writes, committed, then sent
//	replay       the stored status, headers and body byte for byte, Idempotent-Replayed: true
//	in_progress  409 with Retry-After (or, with Options.Wait, the first one's answer)
//	mismatch     422
//	no key       400, or with Options.KeyOptional the handler runs unprotected
//
// Middleware returns a func(http.Handler) http.Handler, so it fits the standard ServeMux,
// chi and gorilla/mux as they are. middleware/README.md in the repository is the behaviour
// every package of the project shares; this package's README gives the Go specifics.
package idempotency

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"regexp"
	"runtime/debug"
	"strings"
	"time"
	"unicode/utf8"
)

// Options configure Middleware. The zero value gives the defaults every package of the
// project shares.
type Options struct {
	// Header is the request header that carries the key. Default "Idempotency-Key".
	Header string
	// KeyOptional runs a request without the header unprotected: in a transaction, with
	// nothing stored. By default such a request is answered 400.
	KeyOptional bool
	// StoredHeaders are the response headers stored with the response and replayed.
	// Default Content-Type and Location.
	StoredHeaders []string
	// StoreServerErrors stores responses with status 500 or more. By default they are not
	// stored: the transaction rolls back, so a retry runs the handler again.
	StoreServerErrors bool
	// Wait is how long a duplicate waits for the request in flight with its key (then
	// answering with its response) instead of answering 409 at once. Default 0: the
	// server's idempotency.default_wait, 0 unless the DBA changed it.
	Wait time.Duration
	// TTL is how long a completed key replays. Default 0: the server's
	// idempotency.default_ttl (1 day).
	TTL time.Duration
	// Tenant returns the request's tenant, the namespace of its keys (the scope). An error
	// answers 500 and runs nothing. Default: no tenant, the empty string.
	Tenant func(*http.Request) (string, error)
	// ScopePerRoute scopes keys per route as well: the scope is then
	// "<tenant> <METHOD> <route>" ("<METHOD> <route>" without a Tenant hook), for APIs whose
	// clients reuse keys across routes on purpose. By default the same key sent to another
	// route is another request (422).
	ScopePerRoute bool
	// Scope returns the whole scope, replacing Tenant and ScopePerRoute. On Citus, return
	// the tenant column's value (doc/citus.md). An error answers 500 and runs nothing.
	Scope func(*http.Request) (string, error)
	// Route names the route a request was routed to, a part of its fingerprint (and of
	// its scope with ScopePerRoute), as a pattern that the package puts in its canonical
	// form (middleware/README.md: "{id}" for "{id:[0-9]+}" or ":id", "*" for "{rest...}"
	// or "*rest"), the same in every package: a pattern in the brace syntax (ServeMux,
	// chi, gorilla/mux) or, when a segment starts with ":" or "*" and a name, in the
	// colon syntax (gin, echo). Default: the pattern an adapter recorded with WithRoute,
	// else the ServeMux pattern that matched it, less its method (Go 1.23 and later, where
	// http.Request has Pattern), else the path. With chi:
	// chi.RouteContext(r.Context()).RoutePattern(); with gorilla/mux:
	// mux.CurrentRoute(r).GetPathTemplate().
	Route func(*http.Request) string
	// Methods are the methods protected; requests of others pass through untouched.
	// Default POST and PATCH.
	Methods []string
	// MaxRequestBytes is the largest request body read; a larger one is answered 413
	// before anything runs. Default 1 MiB.
	MaxRequestBytes int64
	// Lease turns on two-phase mode, for handlers that call other systems: the claim
	// commits at once with this lease; the handler may checkpoint (Claim.Checkpoint),
	// which commits; its response is stored in a transaction of its own, fenced by the
	// attempt, and a handler whose lease ended and was taken over gets 409.
	Lease time.Duration
	// OnOutcome is called once per protected request (of Methods), before its answer is
	// sent, with what it came to: one of "claimed", "replayed", "in_flight", "mismatch",
	// "conflict", "too_large", "refused", "unprotected", "error" (middleware/README.md,
	// "Observability"), and the request. It is the place for a counter or a span's
	// attribute; it must not block. Its panic is logged to ErrorLog, never answered.
	OnOutcome func(outcome string, r *http.Request)
	// Observer follows each protected request (of Methods) from its start to its outcome,
	// for tracing: the module middleware/go/otel's Tracing is one, which gives each an
	// OpenTelemetry span (README.md, "Observability"). Its panic is logged to ErrorLog,
	// never answered; it must not block.
	Observer Observer
	// ErrorLog receives what is answered 500 for a reason the client cannot see: a
	// database error, a failing hook, a handler's panic. Default: the log package's
	// standard logger.
	ErrorLog *log.Logger
}

// withDefaults fills in the defaults of src/protocol.txt (protocol.go) and the route:
// the hook's pattern in its canonical form.
func (o Options) withDefaults() Options {
	if o.Header == "" {
		o.Header = defaultHeader
	}
	if o.StoredHeaders == nil {
		o.StoredHeaders = defaultStoredHeaders
	}
	if o.Route == nil {
		o.Route = defaultRoute
	} else {
		hook := o.Route
		o.Route = func(r *http.Request) string { return canonicalPattern(hook(r)) }
	}
	if o.Methods == nil {
		o.Methods = defaultMethods
	}
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = defaultMaxRequestBytes
	}
	if o.ErrorLog == nil {
		o.ErrorLog = log.Default()
	}
	return o
}

// defaultRoute is the pattern an adapter recorded (WithRoute), else the ServeMux pattern
// without its method, in its canonical form, where the Go release records it
// (muxPattern), else the path as sent.
func defaultRoute(r *http.Request) string {
	if pattern, ok := r.Context().Value(routeKey{}).(string); ok && pattern != "" {
		return canonicalPattern(pattern)
	}
	if pattern := muxPattern(r); pattern != "" {
		if space := strings.IndexAny(pattern, " \t"); space >= 0 {
			pattern = strings.TrimLeft(pattern[space:], " \t")
		}
		return canonicalRoute("brace", pattern)
	}
	return r.URL.EscapedPath()
}

// compiledRules are routeRules (protocol.go), compiled.
var compiledRules = func() map[string][]*regexp.Regexp {
	compiled := map[string][]*regexp.Regexp{}
	for syntax, rules := range routeRules {
		for _, rule := range rules {
			compiled[syntax] = append(compiled[syntax], regexp.MustCompile(rule[0]))
		}
	}
	return compiled
}()

// canonicalRoute is a route pattern in its canonical form (src/protocol.txt, "route
// rules"): "brace" for ServeMux, chi, gorilla/mux and what a Route hook returns.
func canonicalRoute(syntax, pattern string) string {
	for i, rule := range compiledRules[syntax] {
		pattern = rule.ReplaceAllString(pattern, routeRules[syntax][i][1])
	}
	return pattern
}

// colonSyntax finds a parameter of the colon syntax (gin's and echo's ":id", "*rest"): a
// segment that starts with ":" or "*" and a name, which no brace pattern has.
var colonSyntax = regexp.MustCompile(`(?:^|/)[:*]\w`)

// canonicalPattern is the canonical form of a pattern in the brace or the colon syntax.
func canonicalPattern(pattern string) string {
	if colonSyntax.MatchString(pattern) {
		return canonicalRoute("colon", pattern)
	}
	return canonicalRoute("brace", pattern)
}

// latin1 is a header's or a query string's bytes a character each (ISO-8859-1), as the
// other packages' servers hand them over: valid text whatever the bytes, the same text in
// every package.
func latin1(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			runes := make([]rune, len(s))
			for j := 0; j < len(s); j++ {
				runes[j] = rune(s[j])
			}
			return string(runes)
		}
	}
	return s
}

// Middleware returns middleware that makes the requests of options.Methods that it wraps
// idempotent, with the keys stored through db in the extension's table.
func Middleware(db *sql.DB, options Options) func(http.Handler) http.Handler {
	o := options.withDefaults()
	return func(next http.Handler) http.Handler {
		return &middleware{db: db, options: o, next: next}
	}
}

type middleware struct {
	db      *sql.DB
	options Options
	next    http.Handler
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for _, method := range m.options.Methods {
		if r.Method == method {
			var course Course
			r = m.start(r, &course)
			reply := m.answer(r, &course)
			m.outcome(reply.outcome, r)
			course.Outcome = reply.outcome
			m.finish(r, course)
			reply.send(w)
			return
		}
	}
	m.next.ServeHTTP(w, r)
}

// outcome calls the OnOutcome hook, whose panic is logged, not answered.
func (m *middleware) outcome(outcome string, r *http.Request) {
	if m.options.OnOutcome == nil {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			m.options.ErrorLog.Printf("idempotency: the OnOutcome hook panicked: %v", p)
		}
	}()
	m.options.OnOutcome(outcome, r)
}

// Observer follows each protected request, for tracing (Options.Observer).
type Observer interface {
	// Start is called first, before the body is read, with the request; the request it
	// returns (its context holding a span, say) is the one the middleware goes on with,
	// the one its handler gets.
	Start(r *http.Request) *http.Request
	// Finish is called last, with the request Start returned and what the request came
	// to, before its answer is sent (after OnOutcome).
	Finish(r *http.Request, course Course)
}

// Course is what an Observer learns of a protected request.
type Course struct {
	Outcome string // as OnOutcome's
	Route   string // the canonical route pattern, a part of the fingerprint
	Scope   string // the key's scope; "" with no key, or when its hook failed
	Key     string // the key, the header's bytes; "" with none, or not UTF-8
	Attempt int64  // the claim's attempt (two-phase mode: more than 1 after a takeover); 0 unclaimed
}

// start calls the Observer's Start, whose panic is logged and leaves the request as it was.
func (m *middleware) start(r *http.Request, course *Course) (started *http.Request) {
	if m.options.Observer == nil {
		return r
	}
	course.Route = m.options.Route(r)
	defer func() {
		if p := recover(); p != nil {
			m.options.ErrorLog.Printf("idempotency: the Observer's Start panicked: %v", p)
			started = r
		}
	}()
	if started = m.options.Observer.Start(r); started == nil {
		started = r
	}
	return started
}

// finish calls the Observer's Finish, whose panic is logged, not answered.
func (m *middleware) finish(r *http.Request, course Course) {
	if m.options.Observer == nil {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			m.options.ErrorLog.Printf("idempotency: the Observer's Finish panicked: %v", p)
		}
	}()
	m.options.Observer.Finish(r, course)
}

// answer is the whole course of a protected request, up to what to send; it fills in
// course what an Observer learns.
func (m *middleware) answer(r *http.Request, course *Course) *response {
	body, refused := m.readBody(r)
	if refused != nil {
		return refused
	}
	keys := r.Header.Values(m.options.Header)
	if len(keys) == 0 {
		if !m.options.KeyOptional {
			return answer(answerKeyRequired, map[string]interface{}{"header": m.options.Header})
		}
		return m.unprotected(r)
	}
	// The key is the header's bytes, as UTF-8 text, in every package of the project.
	if !utf8.ValidString(keys[0]) {
		return answer(answerKeyNotUTF8, map[string]interface{}{"header": m.options.Header})
	}
	scope, err := m.scope(r)
	if err != nil {
		m.options.ErrorLog.Printf("idempotency: the tenant or scope hook failed: %v", err)
		return answer(answerHookFailed, nil)
	}
	course.Scope, course.Key = scope, keys[0]
	lease := m.options.Lease
	var session session = m.db
	if lease > 0 {
		conn, err := m.db.Conn(r.Context())
		if err != nil {
			return m.failure(r, err)
		}
		defer conn.Close()
		session = conn
	}
	tx, err := session.BeginTx(r.Context(), nil)
	if err != nil {
		return m.failure(r, err)
	}
	begun, err := begin(r.Context(), tx, scope, keys[0], m.fingerprint(r, body), m.options, lease)
	if err != nil {
		tx.Rollback()
		return m.failure(r, err)
	}
	if begun.outcome != "claimed" {
		tx.Rollback() // a replay or a refusal wrote nothing
		return m.unclaimed(begun)
	}
	course.Attempt = begun.attempt
	c := &Claim{session: session, ctx: r.Context(), tx: tx, scope: scope, key: keys[0], attempt: begun.attempt,
		recoveryPoint: begun.recoveryPoint, lease: lease, transaction: begun.transaction}
	if lease > 0 {
		c.transaction = "" // the claim commits here; complete runs in a later transaction
		// Two-phase: the claim commits at once; the handler writes in a new transaction.
		if err := tx.Commit(); err != nil {
			return m.failure(r, err)
		}
		if c.tx, err = session.BeginTx(r.Context(), nil); err != nil {
			c.abandon(m.options.ErrorLog)
			return m.failure(r, err)
		}
	}
	return m.run(r, c, begun.maxResponseBytes)
}

// readBody reads the request body for the fingerprint and puts it back for the handler:
// nil, or the answer instead: 413 when it is over the limit, 500 when something before
// the middleware has read it already.
func (m *middleware) readBody(r *http.Request) ([]byte, *response) {
	limit := m.options.MaxRequestBytes
	tooLarge := answer(answerBodyTooLarge, map[string]interface{}{"limit": limit, "option": "MaxRequestBytes"})
	if r.ContentLength > limit {
		return nil, tooLarge
	}
	var body []byte
	if r.Body != nil {
		var err error
		body, err = io.ReadAll(io.LimitReader(r.Body, limit+1))
		var over *http.MaxBytesError // an http.MaxBytesReader's, placed before
		switch {
		case errors.As(err, &over) || int64(len(body)) > limit:
			return nil, tooLarge
		case err != nil:
			return nil, answer(answerBodyUnreadable, nil)
		}
	}
	// net/http fails a body shorter than its Content-Length: a shorter one was read.
	if r.ContentLength > 0 && int64(len(body)) != r.ContentLength {
		const fix = "Place the idempotency middleware before whatever reads the request body."
		m.options.ErrorLog.Print("idempotency: the request body was read before the middleware. ", fix)
		return nil, answer(answerBodyReadBefore, map[string]interface{}{"fix": fix})
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, nil
}

// scope is the request's namespace of keys: the Scope hook's, or the tenant's (with the
// route's method and name when ScopePerRoute). A hook's panic is its error.
func (m *middleware) scope(r *http.Request) (scope string, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	if m.options.Scope != nil {
		return m.options.Scope(r)
	}
	tenant := ""
	if m.options.Tenant != nil {
		if tenant, err = m.options.Tenant(r); err != nil {
			return "", err
		}
	}
	if m.options.ScopePerRoute {
		values := map[string]interface{}{"tenant": tenant, "method": r.Method, "route": m.options.Route(r)}
		if m.options.Tenant == nil {
			return render(scopePerRouteNoTenant, values), nil
		}
		return render(scopePerRoute, values), nil
	}
	return tenant, nil
}

// fingerprint is the parts of request_hash_parts(method, route, path, query string, body),
// the body hashed by the server's rule for every package (request_hash_body, which
// reads the content type): one request has one fingerprint whichever package serves it.
// The query string and the content type are their bytes a character each, as every
// package passes them (latin1).
func (m *middleware) fingerprint(r *http.Request, body []byte) fingerprint {
	return fingerprint{method: r.Method, route: m.options.Route(r), path: r.URL.EscapedPath(),
		query: latin1(r.URL.RawQuery), contentType: latin1(r.Header.Get("Content-Type")), body: body}
}

// unclaimed answers a request whose key is not this request's to run.
func (m *middleware) unclaimed(b *begun) *response {
	switch b.outcome {
	case "replay":
		if b.bodyOmitted {
			return answer(answerBodyOmitted, nil)
		}
		return replay(b.status, b.headers, b.body)
	case "in_progress":
		return answerRetrying(answerInProgress, b.retryAfter)
	default:
		return answer(answerMismatch, nil)
	}
}

// run runs the handler in the claim's transaction and stores its response, or gives the
// claim up when it fails or answers a server error. maxResponseBytes -1: no limit.
func (m *middleware) run(r *http.Request, c *Claim, maxResponseBytes int64) *response {
	ran := outcomeClaimed // the handler ran: its answer, a failure's too, is the claim's
	if c.key == "" {
		ran = outcomeUnprotected
	}
	w := newRecorder(maxResponseBytes)
	if panicked, value := m.serve(w, r.WithContext(context.WithValue(r.Context(), claimKey{}, c))); panicked {
		c.abandon(m.options.ErrorLog)
		failed := m.panicked(value)
		failed.outcome = ran
		return failed
	}
	answer := w.result()
	answer.outcome = ran
	switch {
	case !w.written:
		c.abandon(m.options.ErrorLog)
		return m.wroteNothing()
	case w.overflow:
		c.abandon(m.options.ErrorLog)
		return m.responseTooLarge(maxResponseBytes)
	case answer.status >= http.StatusInternalServerError && !m.options.StoreServerErrors:
		c.abandon(m.options.ErrorLog)
		return answer
	}
	if err := c.complete(answer, m.options); err != nil {
		c.abandon(m.options.ErrorLog)
		switch {
		case errors.Is(err, errSplit):
			return m.split()
		case sqlstate(err) == "54000":
			return m.responseTooLarge(maxResponseBytes)
		}
		return m.failure(r, err)
	}
	return answer
}

// split answers a request whose begin and complete ran in different server transactions
// (errSplit): its work was rolled back, and the operator learns which setting to change.
func (m *middleware) split() *response {
	m.options.ErrorLog.Print("idempotency: ", render(answerSplit.detail, map[string]interface{}{"drivers": splitDrivers}))
	return answer(answerSplit, map[string]interface{}{"drivers": splitDrivers})
}

// unprotected runs a request without a key (KeyOptional) in a transaction of its own, as
// a claimed one, with nothing stored.
func (m *middleware) unprotected(r *http.Request) *response {
	tx, err := m.db.BeginTx(r.Context(), nil)
	if err != nil {
		return m.failure(r, err)
	}
	return m.run(r, &Claim{session: m.db, ctx: r.Context(), tx: tx}, -1)
}

// serve runs the handler and recovers its panic, which is answered 500 once the work is
// rolled back, as chi's Recoverer does; http.ErrAbortHandler is panicked again after
// that, so that the server aborts the response as net/http defines.
func (m *middleware) serve(w *recorder, r *http.Request) (panicked bool, value interface{}) {
	defer func() {
		if value = recover(); value != nil {
			panicked = true
			if value != http.ErrAbortHandler {
				m.options.ErrorLog.Printf("idempotency: panic in the handler, its work rolled back: %v\n%s",
					value, debug.Stack())
			}
		}
	}()
	m.next.ServeHTTP(w, r)
	return false, nil
}

// wroteNothing answers a handler that neither wrote nor set a status through the
// middleware's writer. Stored, it would replay an empty 200 to every retry: the handler
// wrote to another writer (a gin or echo handler behind an adapter that did not hand it
// the middleware's, README.md "gin and echo"), or wrote nothing at all.
func (m *middleware) wroteNothing() *response {
	m.options.ErrorLog.Print("idempotency: the handler wrote nothing through the middleware's ResponseWriter, " +
		"so nothing was stored and its work was rolled back; with gin or echo, use the adapter in the package's README")
	return answer(answerInternalError, nil)
}

func (m *middleware) panicked(value interface{}) *response {
	if value == http.ErrAbortHandler {
		panic(value)
	}
	return answer(answerInternalError, nil)
}

func (m *middleware) responseTooLarge(limit int64) *response {
	setting := "idempotency.max_response_bytes"
	if limit >= 0 {
		setting += fmt.Sprintf(" (%d bytes)", limit)
	}
	m.options.ErrorLog.Printf("idempotency: a response over %s was not stored, and its work was rolled back", setting)
	return answer(answerResponseTooLarge, map[string]interface{}{"setting": setting})
}

// failure answers a database error: by the SQLSTATE map (src/errcodes.txt) when a retry
// or the client can resolve it, else 500, logged unless the client has gone.
func (m *middleware) failure(r *http.Request, err error) *response {
	if a, ok := sqlstateAnswers[sqlstate(err)]; ok {
		return answerRetrying(a, a.retryAfter)
	}
	if r.Context().Err() == nil {
		m.options.ErrorLog.Printf("idempotency: a database call failed: %v", err)
	}
	return answer(answerDatabaseError, nil)
}

// sqlstate is the SQLSTATE of a driver's error: lib/pq's *pq.Error and pgx's
// *pgconn.PgError both have the method SQLState.
func sqlstate(err error) string {
	var coded interface{ SQLState() string }
	if errors.As(err, &coded) {
		return coded.SQLState()
	}
	return ""
}
