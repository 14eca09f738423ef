package main

// The README's example as written, against the database of libpq's environment (with
// the extension and a table orders (id bigserial, item text)): a new order, its replay,
// and one row (test/t/057_go_middleware.pl runs it).

import (
	"database/sql"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestExample(t *testing.T) {
	db, err := sql.Open("postgres", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	srv := httptest.NewServer(routes(db))
	defer srv.Close()
	item := "example-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var bodies []string
	for try := 0; try < 2; try++ {
		r, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(`{"item": "`+item+`"}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", item)
		res, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 201 || (try == 1) != (res.Header.Get("Idempotent-Replayed") == "true") {
			t.Errorf("try %d: %d %v %s", try, res.StatusCode, res.Header, body)
		}
		bodies = append(bodies, string(body))
	}
	var orders int
	db.QueryRow("SELECT count(*) FROM orders WHERE item = $1", item).Scan(&orders)
	if bodies[0] != bodies[1] || !strings.HasPrefix(bodies[0], `{"order":`) || orders != 1 {
		t.Errorf("answers %q, %d orders", bodies, orders)
	}
}
