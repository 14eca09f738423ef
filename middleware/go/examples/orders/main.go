// The README's example (orders.go) as a program: go run . serves it on :8080, with the
// database of libpq's environment (PGHOST, PGDATABASE, PGUSER, ...).
package main

import (
	"database/sql"
	"log"
	"net/http"

	_ "github.com/lib/pq"
)

func main() {
	db, err := sql.Open("postgres", "")
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe(":8080", routes(db)))
}
