// The application every conformance setup serves (test/conformance/README.md), over the
// standard library's ServeMux and database/sql with the driver its first argument names:
// "postgres" (lib/pq) or "pgx" (pgx v4's stdlib). It listens on its second argument and
// takes the database from libpq's environment (PGHOST, PGPORT, PGDATABASE, PGUSER), which
// both drivers read.
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
	"time"

	_ "github.com/jackc/pgx/v4/stdlib"
	_ "github.com/lib/pq"
	idempotency "github.com/pg-idempotency/idempotency/middleware/go"
)

func main() {
	if len(os.Args) != 3 {
		log.Fatalf("usage: %s postgres|pgx 127.0.0.1:PORT", os.Args[0])
	}
	db, err := sql.Open(os.Args[1], "")
	if err != nil {
		log.Fatal(err)
	}
	protect := idempotency.Middleware(db, idempotency.Options{Tenant: tenant})
	waiting := idempotency.Middleware(db, idempotency.Options{Tenant: tenant, Wait: 30 * time.Second})
	order := http.HandlerFunc(createOrder)
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	mux.Handle("/orders", protect(order))
	mux.Handle("/refunds", protect(order))
	mux.Handle("/waiting/orders", waiting(order))
	// Go has no body parser to place before the middleware: the same as /orders.
	mux.Handle("/parsed/orders", protect(order))
	log.Fatal(http.ListenAndServe(os.Args[2], mux))
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
