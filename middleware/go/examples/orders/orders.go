package main

import (
	"database/sql"
	"encoding/json"
	"net/http"

	idempotency "github.com/pg-idempotency/idempotency/middleware/go"
)

func routes(db *sql.DB) http.Handler {
	mux := http.NewServeMux()
	protect := idempotency.Middleware(db, idempotency.Options{})
	mux.Handle("/orders", protect(http.HandlerFunc(createOrder)))
	return mux
}

func createOrder(w http.ResponseWriter, r *http.Request) {
	var order struct{ Item string }
	json.NewDecoder(r.Body).Decode(&order)
	var id int64
	err := idempotency.Tx(r.Context()).QueryRowContext(r.Context(),
		"INSERT INTO orders (item) VALUES ($1) RETURNING id", order.Item).Scan(&id)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError) // 5xx: rolled back
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]int64{"order": id})
}
