package idempotency

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The extension's SQL functions, one statement text each (a driver that prepares and
// caches statements, as pgx does, reuses them). Parameters are typed in the text, so
// that every driver binds them alike.
const (
	// The body's fingerprint part is the server's rule for every package,
	// request_hash_body(content type, body): a JSON body by its value, any other by its
	// bytes. The last column is the largest response the server stores
	// (maxResponseBytes), so that a streaming handler's response is buffered no further
	// than that; NULL where the setting does not exist (the SQL edition, which keeps its
	// limit in a table: the response is then buffered whole, and the server refuses one
	// over its limit).
	beginSQL = `SELECT b.outcome::text, b.attempt, b.response_status, b.response_headers::text,
       b.response_body_bytes, b.response_body_omitted, b.retry_after_seconds, b.recovery_point,
       pg_catalog.current_setting('idempotency.max_response_bytes', true), ` + serverTransaction + `
  FROM idempotency_begin($1::text, $2::text,
         request_hash_parts($3::text, $4::text, $5::text, $6::text,
           request_hash_body($7::text, $8::bytea)::text),
         ttl => $9::interval, lease => $10::interval, wait => $11::interval) b`
	// omit_oversized => false: a response over idempotency.max_response_bytes raises
	// 54000 instead of being stored without its body, so that it is never acknowledged.
	// It completes only in the server transaction that begin ran in ($7, begin's
	// serverTransaction; NULL in two-phase mode, where they differ by design), and is
	// NULL otherwise: a pooler split the request's transaction.
	completeSQL = `SELECT CASE WHEN $7::text IS NULL OR $7::text = ` + serverTransaction + `
         THEN idempotency_complete($1::text, $2::text, $3::integer,
           response_headers => $4::jsonb, response_body_bytes => $5::bytea,
           attempt => $6::integer, omit_oversized => false) END`
	checkpointSQL        = `SELECT idempotency_checkpoint($1::text, $2::text, $3::text, attempt => $4::integer)`
	releaseSQL           = `SELECT idempotency_release($1::text, $2::text, attempt => $3::integer)`
	storeServerErrorsSQL = `SELECT pg_catalog.set_config('idempotency.store_server_errors', 'on', true)`
)

// serverTransaction names the server transaction a statement runs in: the server process
// and the transaction's start, as text that no setting changes. A pooler in transaction
// mode runs a transaction on one server connection from BEGIN to its end, so begin and
// complete name the same one unless the transaction was split: ended early (a driver's
// named statement run as another client's COMMIT or ROLLBACK, on a server connection
// where the name was prepared by that client) with the rest run elsewhere.
const serverTransaction = `pg_catalog.concat(pg_catalog.pg_backend_pid(), ' ',
         pg_catalog.to_char(pg_catalog.timezone('UTC', pg_catalog.now()), 'YYYY-MM-DD HH24:MI:SS.US'))`

// fingerprint is what request_hash_parts hashes (middleware.fingerprint).
type fingerprint struct {
	method, route, path, query string
	contentType                string
	body                       []byte
}

// begun is idempotency_begin's answer, with the server's limit on a stored response.
type begun struct {
	outcome          string
	attempt          int64
	status           int
	headers          sql.NullString
	body             []byte
	bodyOmitted      bool
	retryAfter       int
	recoveryPoint    sql.NullString
	maxResponseBytes int64
	transaction      string // serverTransaction where begin ran
}

func begin(ctx context.Context, tx *sql.Tx, scope, key string, f fingerprint, o Options, lease time.Duration) (*begun, error) {
	var b begun
	var attempt, status, retryAfter sql.NullInt64
	var omitted sql.NullBool
	var limit sql.NullString
	err := tx.QueryRowContext(ctx, beginSQL, scope, key, f.method, f.route, f.path, f.query, f.contentType, nonNil(f.body),
		interval(o.TTL), interval(lease), interval(o.Wait)).Scan(&b.outcome, &attempt, &status, &b.headers,
		&b.body, &omitted, &retryAfter, &b.recoveryPoint, &limit, &b.transaction)
	if err != nil {
		return nil, err
	}
	b.attempt, b.status, b.retryAfter, b.bodyOmitted = attempt.Int64, int(status.Int64), int(retryAfter.Int64), omitted.Bool
	b.maxResponseBytes = maxResponseBytes(limit.String)
	return &b, nil
}

// maxResponseBytes reads the setting as the server shows a size in bytes ("1MB",
// "2000B", "0"; PostgreSQL 15's pg_size_bytes cannot read "B"), or -1 if it cannot: the
// response is then buffered whole, and idempotency_complete still refuses it with 54000.
func maxResponseBytes(setting string) int64 {
	digits := strings.TrimRight(setting, "kMGTB")
	n, err := strconv.ParseInt(digits, 10, 64)
	unit, ok := map[string]int64{"": 1, "B": 1, "kB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}[setting[len(digits):]]
	if err != nil || !ok || n < 0 {
		return -1
	}
	return n * unit
}

// interval is a duration as interval text, exact to the microsecond, or NULL (the
// server's setting) for 0.
func interval(d time.Duration) interface{} {
	if d <= 0 {
		return nil
	}
	return fmt.Sprintf("%d microseconds", d.Microseconds())
}

// nonNil makes an absent body the empty one: a nil []byte is NULL to some drivers.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
