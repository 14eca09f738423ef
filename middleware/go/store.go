package idempotency

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The statements are src/protocol.txt's, generated into protocol.go (beginSQL,
// completeSQL, checkpointSQL, releaseSQL), with the names of their parameters in order
// (beginParams, ...); args binds them by name. Parameters are typed in the texts, so that
// every driver binds them alike, and a driver that prepares and caches statements, as pgx
// does, reuses them.

// args is a statement's parameters in the order of its names.
func args(names []string, values map[string]interface{}) []interface{} {
	bound := make([]interface{}, len(names))
	for i, name := range names {
		bound[i] = values[name]
	}
	return bound
}

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
	transaction      string // the server transaction begin ran in
}

// begin runs idempotency_begin with the request's fingerprint: request_hash_parts(method,
// route, path, query string, body), the body hashed by the server's rule for every package
// (request_hash_body): a JSON body by its value, any other by its bytes. Its row's
// max_response_bytes is the largest response the server stores, so that a streaming
// handler's response is buffered no further than that.
func begin(ctx context.Context, tx *sql.Tx, scope, key string, f fingerprint, o Options, lease time.Duration) (*begun, error) {
	var b begun
	var attempt, status, retryAfter sql.NullInt64
	var omitted sql.NullBool
	var limit sql.NullString
	columns := map[string]interface{}{
		"outcome": &b.outcome, "attempt": &attempt, "response_status": &status, "response_headers": &b.headers,
		"response_body_bytes": &b.body, "response_body_omitted": &omitted, "retry_after_seconds": &retryAfter,
		"recovery_point": &b.recoveryPoint, "max_response_bytes": &limit, "server_transaction": &b.transaction,
	}
	dest := make([]interface{}, len(beginColumns))
	for i, name := range beginColumns {
		dest[i] = columns[name]
	}
	err := tx.QueryRowContext(ctx, beginSQL, args(beginParams, map[string]interface{}{
		"scope": scope, "key": key, "method": f.method, "route": f.route, "path": f.path, "query": f.query,
		"content_type": f.contentType, "body": nonNil(f.body),
		"ttl": interval(o.TTL), "lease": interval(lease), "wait": interval(o.Wait),
	})...).Scan(dest...)
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
