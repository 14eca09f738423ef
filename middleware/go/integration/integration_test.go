// The middleware against a server with the extension, over real HTTP, through lib/pq and
// pgx v4's stdlib: every test runs once per driver. The options, the routers it must fit
// as they are (the standard ServeMux, chi, gorilla/mux), two-phase mode, the size limit
// and the SQLSTATE map. The database comes from libpq's environment (PGHOST, PGPORT,
// PGDATABASE, PGUSER) and must have the extension and a table orders (id bigserial, item
// text); test/t/057_go_middleware.pl provides them and runs this module offline, directly
// and through PgBouncer in transaction mode. There, IDEMPOTENCY_POOLED is set (no startup
// options reach the server) and IDEMPOTENCY_PGX_DSN has what pgx needs before PgBouncer
// 1.21 (statement_cache_mode=describe, doc/reference.md).
package integration

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
	"os"
	"strconv"
	"strings"
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

func TestFirstAnswerAndReplay(t *testing.T) {
	eachDriver(t, "", func(t *testing.T, db *sql.DB) {
		var claim idempotency.Claim
		srv := serveWith(db, idempotency.Options{}, func(w http.ResponseWriter, r *http.Request) {
			claim = *idempotency.ClaimFromContext(r.Context())
			order(w, r)
		})
		defer srv.Close()
		key, item := fresh("key"), fresh("item")
		first := post(t, srv.URL, key, item)
		if first.status != 201 || first.replayed() || first.header.Get("X-Not-Stored") != "yes" {
			t.Fatalf("first: %+v", first)
		}
		if claim.Key() != key || claim.Scope() != "" || claim.Attempt() != 1 {
			t.Errorf("the handler's claim: key %q, scope %q, attempt %d", claim.Key(), claim.Scope(), claim.Attempt())
		}
		if _, ok := claim.RecoveryPoint(); ok {
			t.Errorf("a fresh claim has a recovery point")
		}
		retry := post(t, srv.URL, key, item)
		if retry.status != 201 || !retry.replayed() || retry.body != first.body ||
			retry.header.Get("Content-Type") != "application/json" ||
			retry.header.Get("Location") != first.header.Get("Location") ||
			retry.header.Get("Content-Length") != strconv.Itoa(len(first.body)) ||
			retry.header.Get("X-Not-Stored") != "" {
			t.Errorf("retry %+v of first %+v", retry, first)
		}
		if n := orders(t, db, item); n != 1 {
			t.Errorf("%d orders", n)
		}
		if err := claim.Checkpoint(context.Background(), "x"); err != idempotency.ErrNotTwoPhase {
			t.Errorf("Checkpoint outside two-phase mode: %v", err)
		}
	})
}

func TestKeyOptional(t *testing.T) {
	eachDriver(t, "", func(t *testing.T, db *sql.DB) {
		srv := serveWith(db, idempotency.Options{KeyOptional: true}, func(w http.ResponseWriter, r *http.Request) {
			if idempotency.ClaimFromContext(r.Context()).Key() != "" {
				t.Errorf("a request without a key has one")
			}
			if r.URL.Query().Get("panic") != "" {
				idempotency.Tx(r.Context()).Exec("INSERT INTO orders (item) VALUES ('panicked')")
				panic("as asked")
			}
			order(w, r)
		})
		defer srv.Close()
		item := fresh("item")
		if a := post(t, srv.URL, "", item); a.status != 201 || orders(t, db, item) != 1 {
			t.Errorf("without a key: %+v, %d orders: want it run and committed", a, orders(t, db, item))
		}
		if a := post(t, srv.URL+"?panic=1", "", item); !isProblem(a, 500) {
			t.Errorf("a panic without a key: %+v", a)
		}
		if a := post(t, srv.URL+"?status=503", "", item); a.status != 503 || orders(t, db, item) != 1 {
			t.Errorf("a 503 without a key: %+v, %d orders: want it rolled back", a, orders(t, db, item))
		}
		if n := orders(t, db, "panicked"); n != 0 {
			t.Errorf("a panic's work committed")
		}
	})
}

func TestHeaderAndStoredHeaders(t *testing.T) {
	eachDriver(t, "", func(t *testing.T, db *sql.DB) {
		srv := serveWith(db, idempotency.Options{Header: "X-Request-Key", StoredHeaders: []string{"Location", "Set-Cookie"}},
			func(w http.ResponseWriter, r *http.Request) {
				w.Header().Add("Set-Cookie", "a=1")
				w.Header().Add("Set-Cookie", "b=2")
				order(w, r)
			})
		defer srv.Close()
		key, item := fresh("key"), fresh("item")
		if a := post(t, srv.URL, key, item); !isProblem(a, 400) {
			t.Errorf("Idempotency-Key where X-Request-Key is the header: %+v", a)
		}
		first := post(t, srv.URL, "", item, "X-Request-Key", key)
		retry := post(t, srv.URL, "", item, "X-Request-Key", key)
		if first.status != 201 || !retry.replayed() || strings.Join(retry.header.Values("Set-Cookie"), " ") != "a=1 b=2" ||
			retry.header.Get("Location") != first.header.Get("Location") || retry.body != first.body {
			t.Errorf("retry %+v of %+v", retry, first)
		}
	})
}

func TestServerErrors(t *testing.T) {
	eachDriver(t, "", func(t *testing.T, db *sql.DB) {
		var runs int64
		handler := func(w http.ResponseWriter, r *http.Request) { atomic.AddInt64(&runs, 1); order(w, r) }
		srv := serveWith(db, idempotency.Options{}, handler)
		defer srv.Close()
		key, item := fresh("key"), fresh("item")
		for i := 0; i < 2; i++ {
			if a := post(t, srv.URL+"?status=503", key, item); a.status != 503 || a.replayed() {
				t.Errorf("a 503: %+v", a)
			}
		}
		if runs != 2 || orders(t, db, item) != 0 {
			t.Errorf("a 503 ran %d times, %d orders: want it rolled back and run again", runs, orders(t, db, item))
		}
		stored := serveWith(db, idempotency.Options{StoreServerErrors: true}, handler)
		defer stored.Close()
		key = fresh("key")
		first := post(t, stored.URL+"?status=503", key, item)
		retry := post(t, stored.URL+"?status=503", key, item)
		if first.status != 503 || !retry.replayed() || retry.body != first.body || orders(t, db, item) != 1 {
			t.Errorf("StoreServerErrors: %+v then %+v, %d orders", first, retry, orders(t, db, item))
		}
	})
}

func TestTTL(t *testing.T) {
	eachDriver(t, "", func(t *testing.T, db *sql.DB) {
		srv := serveWith(db, idempotency.Options{TTL: 2*time.Hour + time.Microsecond}, order)
		defer srv.Close()
		key := fresh("key")
		post(t, srv.URL, key, fresh("item"))
		if got := query(t, db, "SELECT expires_at - completed_at FROM idempotency_lookup('', $1)", key); got != "02:00:00.000001" {
			t.Errorf("a completed key lives %q", got)
		}
	})
}

func TestTenantsAndScopes(t *testing.T) {
	tenant := func(r *http.Request) (string, error) { return r.Header.Get("X-Tenant"), nil }
	eachDriver(t, "", func(t *testing.T, db *sql.DB) {
		byTenant := http.NewServeMux()
		byTenant.Handle("/a", idempotency.Middleware(db, idempotency.Options{Tenant: tenant})(http.HandlerFunc(order)))
		byTenant.Handle("/b", idempotency.Middleware(db, idempotency.Options{Tenant: tenant})(http.HandlerFunc(order)))
		perRoute := http.NewServeMux()
		perRoute.Handle("/a", idempotency.Middleware(db, idempotency.Options{Tenant: tenant, ScopePerRoute: true})(http.HandlerFunc(order)))
		perRoute.Handle("/b", idempotency.Middleware(db, idempotency.Options{Tenant: tenant, ScopePerRoute: true})(http.HandlerFunc(order)))
		one, two := httptest.NewServer(byTenant), httptest.NewServer(perRoute)
		defer one.Close()
		defer two.Close()
		key, item := fresh("key"), fresh("item")
		t1 := post(t, one.URL+"/a", key, item, "X-Tenant", "t1")
		t2 := post(t, one.URL+"/a", key, item, "X-Tenant", "t2")
		if t1.status != 201 || t2.status != 201 || t1.body == t2.body || orders(t, db, item) != 2 {
			t.Errorf("two tenants, one key: %+v and %+v", t1, t2)
		}
		if again := post(t, one.URL+"/a", key, item, "X-Tenant", "t2"); !again.replayed() || again.body != t2.body {
			t.Errorf("t2's retry: %+v", again)
		}
		if a := post(t, one.URL+"/b", key, item, "X-Tenant", "t1"); !isProblem(a, 422) {
			t.Errorf("the same key on another route: %+v", a)
		}
		if query(t, db, "SELECT status FROM idempotency_lookup('t1', $1)", key) != "completed" {
			t.Errorf("the scope is not the tenant")
		}
		key = fresh("key")
		a, b := post(t, two.URL+"/a", key, item, "X-Tenant", "t1"), post(t, two.URL+"/b", key, item, "X-Tenant", "t1")
		if a.status != 201 || b.status != 201 ||
			query(t, db, "SELECT count(*) FROM idempotency_lookup('t1 POST /a', $1)", key) != "1" ||
			query(t, db, "SELECT count(*) FROM idempotency_lookup('t1 POST /b', $1)", key) != "1" {
			t.Errorf("ScopePerRoute: %+v, %+v", a, b)
		}
	})
}

// The middleware fits chi and gorilla/mux as they are, their route patterns naming the
// route (Options.Route).
func TestRouters(t *testing.T) {
	chiPattern := func(r *http.Request) string { return chi.RouteContext(r.Context()).RoutePattern() }
	muxPattern := func(r *http.Request) string { p, _ := mux.CurrentRoute(r).GetPathTemplate(); return p }
	eachDriver(t, "", func(t *testing.T, db *sql.DB) {
		c := chi.NewRouter()
		c.With(idempotency.Middleware(db, idempotency.Options{Route: chiPattern, ScopePerRoute: true})).
			Post("/orders/{id}", order)
		g := mux.NewRouter()
		g.HandleFunc("/orders/{id}", order).Methods("POST")
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

func TestTwoPhase(t *testing.T) {
	eachDriver(t, "", func(t *testing.T, db *sql.DB) {
		var fail int32
		handler := func(w http.ResponseWriter, r *http.Request) {
			claim := idempotency.ClaimFromContext(r.Context())
			item := r.URL.Query().Get("item")
			if query(t, db, "SELECT committed FROM idempotency_lookup('', $1, latest => true)", claim.Key()) != "true" {
				t.Errorf("the claim is not committed before the handler runs")
			}
			point, resumed := claim.RecoveryPoint()
			if resumed != (claim.Attempt() > 1) || (resumed && point != "charged") {
				t.Errorf("attempt %d with recovery point %q, %v", claim.Attempt(), point, resumed)
			}
			if !resumed {
				before := claim.Tx()
				before.Exec("INSERT INTO orders (item) VALUES ($1)", item+"-charge")
				if err := claim.Checkpoint(r.Context(), "charged"); err != nil {
					t.Errorf("Checkpoint: %v", err)
					return
				}
				if _, err := before.Exec("SELECT 1"); err != sql.ErrTxDone || claim.Tx() == before {
					t.Errorf("the transaction before the checkpoint is still open: %v", err)
				}
				if orders(t, db, item+"-charge") != 1 {
					t.Errorf("the checkpoint did not commit the writes before it")
				}
			}
			idempotency.Tx(r.Context()).Exec("INSERT INTO orders (item) VALUES ($1)", item)
			if atomic.CompareAndSwapInt32(&fail, 1, 0) {
				panic("after the checkpoint")
			}
			w.WriteHeader(201)
			fmt.Fprintf(w, "attempt %d", claim.Attempt())
		}
		srv := serveWith(db, idempotency.Options{Lease: time.Minute}, handler)
		defer srv.Close()
		key, item := fresh("key"), fresh("item")
		url := srv.URL + "?item=" + item
		atomic.StoreInt32(&fail, 1)
		if a := post(t, url, key, item); !isProblem(a, 500) || orders(t, db, item) != 0 || orders(t, db, item+"-charge") != 1 {
			t.Errorf("a panic after the checkpoint: %+v; the write after it must roll back, the one before not", a)
		}
		// Released: the retry takes over at once, without waiting out the minute's lease.
		resumed := post(t, url, key, item)
		if resumed.status != 201 || resumed.body != "attempt 2" || orders(t, db, item) != 1 || orders(t, db, item+"-charge") != 1 {
			t.Errorf("the retry: %+v", resumed)
		}
		if a := post(t, url, key, item); !a.replayed() || a.body != "attempt 2" {
			t.Errorf("its replay: %+v", a)
		}
	})
}

// A handler whose lease ended and whose key another attempt took over stores nothing:
// 409, and its writes roll back.
func TestTwoPhaseTakeover(t *testing.T) {
	eachDriver(t, "", func(t *testing.T, db *sql.DB) {
		held, release := make(chan struct{}), make(chan struct{})
		key, item := fresh("key"), fresh("item")
		srv := serveWith(db, idempotency.Options{Lease: 200 * time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
			attempt := idempotency.ClaimFromContext(r.Context()).Attempt()
			idempotency.Tx(r.Context()).Exec("INSERT INTO orders (item) VALUES ($1)", fmt.Sprintf("%s-%d", item, attempt))
			if attempt == 1 {
				close(held)
				<-release
			}
			w.WriteHeader(201)
		})
		defer srv.Close()
		done := make(chan answer)
		go func() { done <- post(t, srv.URL, key, item) }()
		<-held
		// The duplicate gets 409 until the lease ends, then takes the key over.
		var takeover answer
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if takeover = post(t, srv.URL, key, item); takeover.status != 409 {
				break
			}
		}
		close(release)
		stale := <-done
		if takeover.status != 201 || !isProblem(stale, 409) || orders(t, db, item+"-1") != 0 || orders(t, db, item+"-2") != 1 {
			t.Errorf("takeover %+v, stale attempt %+v, orders %d and %d", takeover, stale,
				orders(t, db, item+"-1"), orders(t, db, item+"-2"))
		}
	})
}

// The limit: a response the server would store without its body is never acknowledged.
func TestResponseLimit(t *testing.T) {
	eachDriver(t, "options='-c idempotency.max_response_bytes=2000'", func(t *testing.T, db *sql.DB) {
		srv := serveWith(db, idempotency.Options{}, func(w http.ResponseWriter, r *http.Request) {
			size, _ := strconv.Atoi(r.URL.Query().Get("size"))
			idempotency.Tx(r.Context()).Exec("INSERT INTO orders (item) VALUES ($1)", r.URL.Query().Get("item"))
			w.Header().Set("Location", "/orders/"+strings.Repeat("9", 100))
			w.Write([]byte(strings.Repeat("x", size)))
		})
		defer srv.Close()
		// Over it once stored (the headers count), and over it while being written.
		for _, size := range []int{1990, 2500} {
			key, item := fresh("key"), fresh("item")
			url := fmt.Sprintf("%s?size=%d&item=%s", srv.URL, size, item)
			for i := 0; i < 2; i++ {
				if a := post(t, url, key, item); !isProblem(a, 500) || !strings.Contains(a.body, "idempotency.max_response_bytes (2000 bytes)") {
					t.Errorf("%d bytes, try %d: %+v", size, i, a)
				}
			}
			if n := orders(t, db, item); n != 0 {
				t.Errorf("%d bytes: %d orders", size, n)
			}
		}
		key, item := fresh("key"), fresh("item")
		if a := post(t, fmt.Sprintf("%s?size=1000&item=%s", srv.URL, item), key, item); a.status != 200 || len(a.body) != 1000 {
			t.Errorf("under the limit: %+v", a)
		}
	})
}

// claimBySQL claims key for a request {"item": item} to the server's root, as the
// middleware would, in a transaction it leaves open for the caller to end.
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
func TestOmittedBodyIsNotReplayed(t *testing.T) {
	eachDriver(t, "", func(t *testing.T, db *sql.DB) {
		srv := serveWith(db, idempotency.Options{}, order)
		defer srv.Close()
		key, item := fresh("key"), fresh("item")
		tx := claimBySQL(t, db, key, item)
		defer tx.Rollback()
		for _, statement := range []string{
			"SET LOCAL idempotency.max_response_bytes = 10",
			"SELECT idempotency_complete('', $1, 201, response_body_bytes => convert_to(repeat('x', 100), 'UTF8'),\n" +
				"                            omit_oversized => true)",
		} {
			if _, err := tx.Exec(statement, []interface{}{key}[:strings.Count(statement, "$")]...); err != nil {
				t.Fatalf("%s: %v", statement, err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if a := post(t, srv.URL, key, item); !isProblem(a, 500) || !strings.Contains(a.body, "idempotency.max_response_bytes") {
			t.Errorf("the replay of a record without its body: %+v", a)
		}
	})
}

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
