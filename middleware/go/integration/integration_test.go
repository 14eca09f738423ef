// The middleware's glue against a server with the extension, over real HTTP, through
// lib/pq and pgx v4's stdlib: every test runs once per driver. The routers it must fit as
// they are (chi, gorilla/mux), the SQLSTATE map as both drivers' errors give it, and a
// handler's http.ErrAbortHandler; what every package does, with every option, is the
// conformance suite's (test/conformance, test/t/056). The database comes from libpq's environment (PGHOST, PGPORT,
// PGDATABASE, PGUSER) and must have the extension and a table orders (id bigserial, item
// text); test/t/057_go_middleware.pl provides them and runs this module offline, directly
// and through PgBouncer in transaction mode. There, IDEMPOTENCY_POOLED is set (no startup
// options reach the server) and IDEMPOTENCY_PGX_DSN has what pgx needs before PgBouncer
// 1.21 (statement_cache_mode=describe, doc/reference.md).
package integration

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/gorilla/mux"
	_ "github.com/jackc/pgx/v4/stdlib"
	_ "github.com/lib/pq"
	idempotency "github.com/pg-idempotency/idempotency/middleware/go"
)

var drivers = []string{"postgres", "pgx"} // lib/pq, pgx v4

var run = strconv.FormatInt(time.Now().UnixNano(), 36)
var serial int64

// fresh is a name no other test or run uses, for keys and items.
func fresh(what string) string {
	return fmt.Sprintf("%s-%s-%d", what, run, atomic.AddInt64(&serial, 1))
}

// eachDriver runs test once per driver, with a database opened with dsn (libpq keywords,
// such as options='-c ...', on top of the environment's).
func eachDriver(t *testing.T, dsn string, test func(t *testing.T, db *sql.DB)) {
	if dsn != "" && os.Getenv("IDEMPOTENCY_POOLED") != "" {
		t.Skip("a pooler passes no startup options to the server")
	}
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			opened := dsn
			if driver == "pgx" {
				opened = strings.TrimSpace(dsn + " " + os.Getenv("IDEMPOTENCY_PGX_DSN"))
			}
			db, err := sql.Open(driver, opened)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			test(t, db)
		})
	}
}

// query runs a statement on a connection of its own, outside any request: its one
// value as text, "" for NULL or no row.
func query(t *testing.T, db *sql.DB, statement string, args ...interface{}) string {
	t.Helper()
	var v sql.NullString
	if err := db.QueryRow(statement, args...).Scan(&v); err != nil && err != sql.ErrNoRows {
		t.Errorf("%s: %v", statement, err)
	}
	return v.String
}

func orders(t *testing.T, db *sql.DB, item string) int {
	n, _ := strconv.Atoi(query(t, db, "SELECT count(*) FROM orders WHERE item = $1", item))
	return n
}

var quiet = log.New(io.Discard, "", 0)

// order is the handler of the tests: it inserts {"item": ...} in the request's
// transaction and answers 201 (or ?status=) with the order and its Location.
func order(w http.ResponseWriter, r *http.Request) {
	var req struct{ Item string }
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var id int64
	if err := idempotency.Tx(r.Context()).QueryRowContext(r.Context(),
		"INSERT INTO orders (item) VALUES ($1) RETURNING id", req.Item).Scan(&id); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	status := http.StatusCreated
	if s := r.URL.Query().Get("status"); s != "" {
		status, _ = strconv.Atoi(s)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/orders/%d", id))
	w.Header().Set("X-Not-Stored", "yes")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"order": %d, "item": %q}`, id, req.Item)
}

// answer is an HTTP answer; status 0 and the error as body when none came.
type answer struct {
	status int
	header http.Header
	body   string
}

func (a answer) replayed() bool { return a.header.Get("Idempotent-Replayed") == "true" }

func post(t *testing.T, url, key, item string, headers ...string) answer {
	r, err := http.NewRequest("POST", url, strings.NewReader(fmt.Sprintf(`{"item": %q}`, item)))
	if err != nil {
		return answer{body: err.Error()}
	}
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		return answer{body: err.Error()}
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return answer{res.StatusCode, res.Header, string(body)}
}

// isProblem: application/problem+json with the status and a title.
func isProblem(a answer, status int) bool {
	var doc struct {
		Title  string
		Status int
	}
	return a.status == status && a.header.Get("Content-Type") == "application/problem+json" &&
		json.Unmarshal([]byte(a.body), &doc) == nil && doc.Status == status && doc.Title != ""
}

func serveWith(db *sql.DB, options idempotency.Options, handler http.HandlerFunc) *httptest.Server {
	if options.ErrorLog == nil {
		options.ErrorLog = quiet
	}
	return httptest.NewServer(idempotency.Middleware(db, options)(handler))
}

// The middleware fits chi and gorilla/mux as they are, their route patterns naming the
// route (Options.Route) in its canonical form: "{id:[0-9]+}" is "{id}", as in every
// package.
func TestRouters(t *testing.T) {
	chiPattern := func(r *http.Request) string { return chi.RouteContext(r.Context()).RoutePattern() }
	muxPattern := func(r *http.Request) string { p, _ := mux.CurrentRoute(r).GetPathTemplate(); return p }
	eachDriver(t, "", func(t *testing.T, db *sql.DB) {
		c := chi.NewRouter()
		c.With(idempotency.Middleware(db, idempotency.Options{Route: chiPattern, ScopePerRoute: true})).
			Post("/orders/{id:[0-9]+}", order)
		g := mux.NewRouter()
		g.HandleFunc("/orders/{id:[0-9]+}", order).Methods("POST")
		g.Use(idempotency.Middleware(db, idempotency.Options{Route: muxPattern, ScopePerRoute: true}))
		for name, router := range map[string]http.Handler{"chi": c, "gorilla/mux": g} {
			srv := httptest.NewServer(router)
			key, item := fresh("key"), fresh("item")
			first := post(t, srv.URL+"/orders/1", key, item)
			retry := post(t, srv.URL+"/orders/1", key, item)
			other := post(t, srv.URL+"/orders/2", key, item)
			if first.status != 201 || !retry.replayed() || retry.body != first.body || !isProblem(other, 422) {
				t.Errorf("%s: %+v, %+v, %+v", name, first, retry, other)
			}
			if query(t, db, "SELECT status FROM idempotency_lookup('POST /orders/{id}', $1)", key) != "completed" {
				t.Errorf("%s: the scope is not named by the route's pattern", name)
			}
			srv.Close()
		}
	})
}

func claimBySQL(t *testing.T, db *sql.DB, key, item string) *sql.Tx {
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`SELECT idempotency_begin('', $1,
	        request_hash_parts('POST', '/', '/', '', request_hash_jsonb($2::text)::text))`,
		key, fmt.Sprintf(`{"item": %q}`, item)); err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	return tx
}

// A record stored without its body (by another caller, within the server's limit then)
// is not replayed empty.
// The SQLSTATE map (src/errcodes.txt) reads both drivers' errors: IK006, a key the
// server refuses, is 400; 57014, a wait that statement_timeout ends, is 503 with
// Retry-After.
func TestSQLStateMap(t *testing.T) {
	eachDriver(t, "options='-c statement_timeout=100ms'", func(t *testing.T, db *sql.DB) {
		srv := serveWith(db, idempotency.Options{Wait: time.Minute}, order)
		defer srv.Close()
		if a := post(t, srv.URL, "", fresh("item"), "Idempotency-Key", ""); !isProblem(a, 400) ||
			!strings.Contains(a.body, "The Idempotency-Key header is empty or too long") {
			t.Errorf("an empty key: %+v", a)
		}
		key, item := fresh("key"), fresh("item")
		holder := claimBySQL(t, db, key, item)
		defer holder.Rollback()
		if a := post(t, srv.URL, key, item); !isProblem(a, 503) || a.header.Get("Retry-After") != "1" {
			t.Errorf("a wait cut short by statement_timeout: %+v", a)
		}
	})
}

// A handler that panics with http.ErrAbortHandler is rolled back, and the server aborts
// the response, as net/http defines.
func TestAbortHandler(t *testing.T) {
	eachDriver(t, "", func(t *testing.T, db *sql.DB) {
		srv := httptest.NewUnstartedServer(idempotency.Middleware(db, idempotency.Options{ErrorLog: quiet})(
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("abort") != "" {
					idempotency.Tx(r.Context()).Exec("INSERT INTO orders (item) VALUES ($1)", r.URL.Query().Get("item"))
					panic(http.ErrAbortHandler)
				}
				order(w, r)
			})))
		srv.Config.ErrorLog = quiet
		srv.Start()
		defer srv.Close()
		key, item := fresh("key"), fresh("item")
		r, _ := http.NewRequest("POST", srv.URL+"?abort=1&item="+item, strings.NewReader(`{}`))
		r.Header.Set("Idempotency-Key", key)
		if res, err := http.DefaultClient.Do(r); err == nil {
			res.Body.Close()
			t.Errorf("an aborted handler answered %d", res.StatusCode)
		} else if !errors.Is(err, io.EOF) {
			t.Errorf("an aborted handler: %v, not the end of the connection", err)
		}
		if a := post(t, srv.URL, key, item); a.status != 201 || orders(t, db, item) != 1 {
			t.Errorf("the retry after an abort: %+v, %d orders", a, orders(t, db, item))
		}
	})
}

// The adapter gin and echo users write first runs the framework's chain inside the
// middleware but lets it write to the framework's own writer, past the middleware's: the
// first client gets the handler's 201 straight away. The middleware, whose writer saw
// nothing, stores nothing and rolls the work back: never an empty 200 replayed to every
// retry (issue 45), and the log says which adapter to use.
func TestHandlerThatWrotePastTheMiddleware(t *testing.T) {
	eachDriver(t, "", func(t *testing.T, db *sql.DB) {
		var logged strings.Builder
		var mu sync.Mutex
		errorLog := log.New(lockedWriter{&mu, &logged}, "", 0)
		protect := idempotency.Middleware(db, idempotency.Options{ErrorLog: errorLog})
		srv := httptest.NewServer(http.HandlerFunc(func(outer http.ResponseWriter, r *http.Request) {
			protect(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				order(outer, r) // the framework's writer, not the middleware's
			})).ServeHTTP(outer, r)
		}))
		defer srv.Close()
		key, item := fresh("key"), fresh("item")
		post(t, srv.URL+"/orders", key, item)
		retry := post(t, srv.URL+"/orders", key, item)
		if retry.replayed() || (retry.status == 200 && retry.body == "") {
			t.Errorf("an empty replay: %+v", retry)
		}
		if status := query(t, db, "SELECT status FROM idempotency_lookup('', $1)", key); status == "completed" {
			t.Errorf("the key was stored (%s)", status)
		}
		if n := orders(t, db, item); n != 0 {
			t.Errorf("%d orders: the work of a response never stored was kept", n)
		}
		mu.Lock()
		defer mu.Unlock()
		if !strings.Contains(logged.String(), "wrote nothing through the middleware's ResponseWriter") {
			t.Errorf("nothing logged: %q", logged.String())
		}
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
