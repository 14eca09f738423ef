// The SQL surface through pgx v4 (Debian 12 ships 4.15), as a Go handler calls
// it: a new request, a byte-exact replay, a changed request, a busy key's
// retry_after_seconds read as an integer, and 20 concurrent duplicates that
// write one order.  Connects with the connection string of its first argument
// (libpq's environment fills in the rest); the table orders (item text) must
// exist.  Prints one TAP line per check ("ok - ..." or "not ok - ...:
// detail"); test/t/054_pgx.pl passes them on.
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/jackc/pgx/v4"
)

var ctx = context.Background()

const beginSQL = `SELECT outcome::text, response_status, response_body_bytes, response_headers::text,
                         retry_after_seconds
                    FROM idempotency_begin('POST /orders', $1, request_hash_jsonb($2))`

type answer struct {
	outcome    string
	status     *int32
	body       []byte
	headers    *string
	retryAfter *int32
}

func report(ok bool, name string, detail interface{}) {
	if ok {
		fmt.Printf("ok - %s\n", name)
	} else {
		fmt.Printf("not ok - %s: %v\n", name, detail)
	}
}

func begin(tx pgx.Tx, key, body string) (answer, error) {
	var a answer
	err := tx.QueryRow(ctx, beginSQL, key, body).Scan(&a.outcome, &a.status, &a.body, &a.headers, &a.retryAfter)
	return a, err
}

// One request as a handler runs it: claim, the business write, the stored
// response, in one transaction.
func request(conn *pgx.Conn, key, body, item string) (answer, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return answer{}, err
	}
	defer tx.Rollback(ctx)
	a, err := begin(tx, key, body)
	if err != nil || a.outcome != "claimed" {
		return a, err
	}
	if _, err = tx.Exec(ctx, "INSERT INTO orders (item) VALUES ($1)", item); err != nil {
		return a, err
	}
	if _, err = tx.Exec(ctx, `SELECT idempotency_complete('POST /orders', $1, 201,
	                              response_body_bytes => $2, response_headers => $3::jsonb)`,
		key, []byte(`{"order": "`+item+`"}`), `{"Location": "/orders/`+item+`"}`); err != nil {
		return a, err
	}
	return a, tx.Commit(ctx)
}

func main() {
	dsn := os.Args[1]
	connect := func() *pgx.Conn {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			report(false, "connect", err)
			os.Exit(0)
		}
		return conn
	}
	conn := connect()
	defer conn.Close(ctx)
	key := fmt.Sprintf("pgx-%d", os.Getpid())

	a, err := request(conn, key, `{"item": "book"}`, "book")
	report(err == nil && a.outcome == "claimed", "a new request claims and completes", fmt.Sprint(a.outcome, err))
	// Run each statement more than the prepared-statement threshold of other
	// drivers: pgx prepares every statement from its first use anyway.
	for i := 0; i < 3; i++ {
		a, err = request(conn, key, `{"item":  "book"}`, "book")
	}
	report(err == nil && a.outcome == "replay" && a.status != nil && *a.status == 201 &&
		bytes.Equal(a.body, []byte(`{"order": "book"}`)) && a.headers != nil &&
		*a.headers == `{"Location": "/orders/book"}`,
		"a retry spelled otherwise replays status, body bytes and headers", fmt.Sprint(a.outcome, err))
	a, err = request(conn, key, `{"item": "pen"}`, "pen")
	report(err == nil && a.outcome == "mismatch", "a changed request is a mismatch", fmt.Sprint(a.outcome, err))

	// A key held by another transaction: retry_after_seconds scans as an int.
	holder := connect()
	tx, err := holder.Begin(ctx)
	if err == nil {
		_, err = begin(tx, key+"-busy", `{"item": "lamp"}`)
	}
	a, err2 := request(conn, key+"-busy", `{"item": "lamp"}`, "lamp")
	report(err == nil && err2 == nil && a.outcome == "in_progress" && a.retryAfter != nil && *a.retryAfter >= 1,
		"a busy key answers in_progress with retry_after_seconds as an integer", fmt.Sprint(a.outcome, err, err2))
	tx.Rollback(ctx)
	holder.Close(ctx)

	// 20 concurrent duplicates, each on a connection of its own.
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[string]int{}
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := connect()
			defer c.Close(ctx)
			a, err := request(c, key+"-once", `{"item": "once"}`, key+"-once")
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				outcomes["error: "+err.Error()]++
			} else {
				outcomes[a.outcome]++
			}
		}()
	}
	wg.Wait()
	var orders int
	err = conn.QueryRow(ctx, "SELECT count(*) FROM orders WHERE item = $1", key+"-once").Scan(&orders)
	report(err == nil && orders == 1 && outcomes["claimed"] == 1 &&
		outcomes["claimed"]+outcomes["in_progress"]+outcomes["replay"] == 20,
		"20 concurrent duplicates write one order", fmt.Sprint(orders, outcomes, err))
}
