// The application every conformance setup serves (test/conformance/README.md), over the
// standard library's ServeMux and database/sql with the driver its first argument names:
// "postgres" (lib/pq) or "pgx" (pgx v4's stdlib), and the options application on chi, the
// router whose patterns name a route with parameters; or, with a third argument, the same
// two applications on that framework (gin.go, echo.go, which conformance/run builds in
// where the framework is installed). It listens on its second argument and takes the
// database from libpq's environment (PGHOST, PGPORT, PGDATABASE, PGUSER), which both
// drivers read.
package main

import (
	"database/sql"
	"encoding/json"
	"errors"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	_ "github.com/jackc/pgx/v4/stdlib"
	_ "github.com/lib/pq"
	idempotency "github.com/pg-idempotency/idempotency/middleware/go"
)

func main() {
	if len(os.Args) != 3 && len(os.Args) != 4 {
		log.Fatalf("usage: %s postgres|pgx 127.0.0.1:PORT [FRAMEWORK]", os.Args[0])
	}
	db, err := sql.Open(os.Args[1], "")
	if err != nil {
		log.Fatal(err)
	}
	if len(os.Args) == 4 {
		app, ok := frameworks[os.Args[3]]
		if !ok {
			log.Fatalf("%s is not built in", os.Args[3])
		}
		log.Fatal(http.ListenAndServe(os.Args[2], app(db)))
	}
	protect := idempotency.Middleware(db, defaultOptions)
	waiting := idempotency.Middleware(db, waitingOptions)
	order := http.HandlerFunc(createOrder)
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	mux.Handle("/orders", protect(order))
	mux.Handle("/refunds", protect(order))
	mux.Handle("/waiting/orders", waiting(order))
	// Go has no body parser to place before the middleware: the same as /orders.
	mux.Handle("/parsed/orders", protect(order))
	mux.Handle("/options/", optionsApp(db))
	// chi's Compress inside the middleware, which then holds gzip bytes for a client that
	// accepts them.
	compressed := chi.NewRouter()
	compressed.With(protect, middleware.Compress(5)).Post("/compressed/orders", order)
	mux.Handle("/compressed/", compressed)
	log.Fatal(http.ListenAndServe(os.Args[2], mux))
}

// frameworks are the applications on other frameworks than ServeMux and chi, by name.
var frameworks = map[string]func(*sql.DB) http.Handler{}

// The options of the first application's routes and of the options application but its
// route hook (test/conformance/README.md).
var (
	defaultOptions = idempotency.Options{Tenant: tenant}
	waitingOptions = idempotency.Options{Tenant: tenant, Wait: 30 * time.Second}
	optionsOptions = idempotency.Options{
		Header: "Request-Key", KeyOptional: true, StoredHeaders: []string{"Content-Type", "Location", "X-Order"},
		TTL: time.Hour, Tenant: tenant, Lease: time.Second, ScopePerRoute: true, StoreServerErrors: true,
		Methods: []string{http.MethodPost, http.MethodPut}, MaxRequestBytes: 1024, OnOutcome: countOutcome,
	}
)

// outcomes counts the options application's outcomes (its OnOutcome hook), which GET
// /options/outcomes answers.
var outcomes = struct {
	sync.Mutex
	counts map[string]int
}{counts: map[string]int{}}

func countOutcome(outcome string, _ *http.Request) {
	outcomes.Lock()
	defer outcomes.Unlock()
	outcomes.counts[outcome]++
}

func outcomeCounts(w http.ResponseWriter, _ *http.Request) {
	outcomes.Lock()
	body, err := json.Marshal(outcomes.counts)
	outcomes.Unlock()
	if err != nil {
		panic(err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(body)
}

// optionsApp is the options application (test/conformance/README.md, "The options
// application"), on chi: the route is chi's pattern, "{id:[0-9]+}" and all.
func optionsApp(db *sql.DB) http.Handler {
	options := optionsOptions
	options.Route = func(r *http.Request) string { return chi.RouteContext(r.Context()).RoutePattern() }
	protect := idempotency.Middleware(db, options)
	order := optionsOrder(db)
	router := chi.NewRouter()
	router.Get("/options/outcomes", outcomeCounts)
	protected := router.With(protect)
	protected.Post("/options/orders/{id:[0-9]+}", order)
	protected.Put("/options/orders/{id:[0-9]+}", order)
	protected.Patch("/options/orders/{id:[0-9]+}", order)
	protected.Post("/options/refunds/{id:[0-9]+}", order)
	return router
}

type optionsRequest struct {
	Item       string  `json:"item"`
	Gate       *int64  `json:"gate"`
	Status     int     `json:"status"`
	Checkpoint *string `json:"checkpoint"`
}

type optionsAnswer struct {
	Order     int64   `json:"order"`
	Item      string  `json:"item"`
	Attempt   *int64  `json:"attempt"`
	Recovered *string `json:"recovered"`
}

// optionsOrder is the options application's handler: in the claim's transaction, or on
// the database (autocommit) for a request that passed through (PATCH). A checkpoint and
// the gate only on a claim without a recovery point: a takeover resumes after them.
func optionsOrder(db *sql.DB) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req optionsRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ctx := r.Context()
		claim := idempotency.ClaimFromContext(ctx)
		var answer optionsAnswer
		if claim != nil {
			attempt := claim.Attempt()
			answer.Attempt = &attempt
			if point, ok := claim.RecoveryPoint(); ok {
				answer.Recovered = &point
			}
			if req.Checkpoint != nil && answer.Recovered == nil {
				if err := claim.Checkpoint(ctx, *req.Checkpoint); err != nil {
					panic(err)
				}
			}
		}
		var queryRow func(string, ...interface{}) *sql.Row
		if claim != nil {
			queryRow = func(query string, args ...interface{}) *sql.Row {
				return claim.Tx().QueryRowContext(ctx, query, args...)
			}
		} else {
			queryRow = func(query string, args ...interface{}) *sql.Row { return db.QueryRowContext(ctx, query, args...) }
		}
		if req.Gate != nil && answer.Recovered == nil {
			var locked string
			if err := queryRow("SELECT pg_advisory_xact_lock_shared($1)::text", *req.Gate).Scan(&locked); err != nil {
				panic(err)
			}
		}
		if err := queryRow("INSERT INTO orders (item) VALUES ($1) RETURNING id", req.Item).Scan(&answer.Order); err != nil {
			panic(err)
		}
		answer.Item = req.Item
		body, err := json.Marshal(answer)
		if err != nil {
			panic(err)
		}
		status := req.Status
		if status == 0 {
			status = http.StatusCreated
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/orders/"+strconv.FormatInt(answer.Order, 10))
		w.Header().Set("X-Order", strconv.FormatInt(answer.Order, 10))
		w.WriteHeader(status)
		w.Write(body)
	}
}

// tenant reads X-Tenant: "public" without one, and the value "fail" fails.
func tenant(r *http.Request) (string, error) {
	switch t := r.Header.Get("X-Tenant"); t {
	case "":
		return "public", nil
	case "fail":
		return "", errors.New("the tenant hook fails, as asked")
	default:
		return t, nil
	}
}

type orderRequest struct {
	Item   string `json:"item"`
	Gate   *int64 `json:"gate"`
	Size   int    `json:"size"`
	Fail   string `json:"fail"`
	Stream bool   `json:"stream"`
	Status int    `json:"status"`
	Split  bool   `json:"split"`
}

type orderAnswer struct {
	Order int64  `json:"order"`
	Item  string `json:"item"`
	Pad   string `json:"pad,omitempty"`
}

// createOrder is the order handler, in the request's transaction.
func createOrder(w http.ResponseWriter, r *http.Request) {
	var req orderRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	tx := idempotency.Tx(r.Context())
	if req.Gate != nil {
		if _, err := tx.ExecContext(r.Context(), "SELECT pg_advisory_xact_lock_shared($1)", *req.Gate); err != nil {
			panic(err)
		}
	}
	var id int64
	if err := tx.QueryRowContext(r.Context(), "INSERT INTO orders (item) VALUES ($1) RETURNING id",
		req.Item).Scan(&id); err != nil {
		panic(err)
	}
	if req.Split { // the transaction ends early, as a pooler that splits it
		if _, err := tx.ExecContext(r.Context(), "COMMIT"); err != nil {
			panic(err)
		}
	}
	if req.Fail != "" {
		panic("the handler fails, as asked") // Go handlers are synchronous: "async" too
	}
	body, err := json.Marshal(orderAnswer{Order: id, Item: req.Item, Pad: strings.Repeat("x", req.Size)})
	if err != nil {
		panic(err)
	}
	status := req.Status
	if status == 0 {
		status = http.StatusCreated
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/orders/"+strconv.FormatInt(id, 10))
	w.WriteHeader(status)
	if !req.Stream {
		w.Write(body)
		return
	}
	third := len(body) / 3
	for _, piece := range [][]byte{body[:third], body[third : 2*third], body[2*third:]} {
		w.Write(piece)
		w.(http.Flusher).Flush()
	}
}
