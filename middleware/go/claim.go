package idempotency

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"time"
)

// A Claim is what the handler of a protected request gets through its request's context:
// the transaction its writes go in, and in two-phase mode the attempt and the recovery
// point. A Claim belongs to its request's goroutine.
type Claim struct {
	session       session
	ctx           context.Context // the request's: a client that goes away rolls back
	tx            *sql.Tx
	scope, key    string // key "": a request run unprotected (Options.KeyOptional)
	attempt       int64
	recoveryPoint sql.NullString
	lease         time.Duration
	// transaction is the server transaction begin ran in (serverTransaction), which
	// complete must run in too; "" in two-phase mode, where they differ by design.
	transaction string
}

type claimKey struct{}

// errSplit is complete's when it did not run in begin's server transaction: a pooler
// split the request's transaction (middleware.split answers it).
var errSplit = errors.New("idempotency: idempotency_begin and idempotency_complete ran in different server transactions")

// session begins the request's transactions: the *sql.DB, or in two-phase mode one
// *sql.Conn for all of them, so that the handler's transaction, begun after the claim's
// commit, needs no second connection from the pool.
type session interface {
	BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
	ExecContext(context.Context, string, ...interface{}) (sql.Result, error)
}

// ClaimFromContext returns the claim of the request whose context ctx is, or nil outside
// a request the middleware protects.
func ClaimFromContext(ctx context.Context) *Claim {
	c, _ := ctx.Value(claimKey{}).(*Claim)
	return c
}

// Tx returns the transaction of the request whose context ctx is: the claim's, which the
// middleware commits with the stored response, or rolls back. It is nil outside a request
// the middleware protects. In two-phase mode, a Checkpoint commits it and begins the next.
func Tx(ctx context.Context) *sql.Tx {
	if c := ClaimFromContext(ctx); c != nil {
		return c.tx
	}
	return nil
}

// Tx is the transaction the handler writes in now.
func (c *Claim) Tx() *sql.Tx { return c.tx }

// Scope is the namespace of the claimed key (see Options.Tenant).
func (c *Claim) Scope() string { return c.scope }

// Key is the request's Idempotency-Key, empty for a request without one run unprotected
// (Options.KeyOptional).
func (c *Claim) Key() string { return c.key }

// Attempt is 1 for a fresh claim, and one more for each takeover of a claim whose lease
// ended (two-phase mode).
func (c *Claim) Attempt() int64 { return c.attempt }

// RecoveryPoint is what an earlier attempt recorded with Checkpoint before its lease
// ended, and whether there is one.
func (c *Claim) RecoveryPoint() (string, bool) { return c.recoveryPoint.String, c.recoveryPoint.Valid }

// ErrNotTwoPhase is returned by Checkpoint outside two-phase mode (Options.Lease), where
// committing the claim before its response would leave it unfinished.
var ErrNotTwoPhase = errors.New("idempotency: Checkpoint needs two-phase mode (Options.Lease)")

// Checkpoint records recoveryPoint for whoever takes the key over should this attempt's
// lease end, renews the lease, and commits with them what the handler wrote so far
// (after a call to a payment provider, say). Tx then returns a new transaction, in which
// the handler's later writes commit with its response; a transaction got before is done.
// It fails with the SQLSTATE IK003 when another attempt has taken the key over.
func (c *Claim) Checkpoint(ctx context.Context, recoveryPoint string) error {
	if c.lease <= 0 {
		return ErrNotTwoPhase
	}
	if c.tx == nil {
		return sql.ErrTxDone
	}
	if _, err := c.tx.ExecContext(ctx, checkpointSQL, c.scope, c.key, recoveryPoint, c.attempt); err != nil {
		return err
	}
	err := c.tx.Commit()
	c.tx = nil
	if err != nil {
		return err
	}
	c.recoveryPoint = sql.NullString{String: recoveryPoint, Valid: true}
	c.tx, err = c.session.BeginTx(c.ctx, nil)
	return err
}

// complete stores the response with idempotency_complete and commits it with the
// handler's writes (a request run unprotected has nothing to store).
func (c *Claim) complete(answer *response, o Options) error {
	if c.tx == nil {
		return sql.ErrTxDone
	}
	if c.key == "" {
		return c.tx.Commit()
	}
	if answer.status >= 500 {
		// Options.StoreServerErrors: the server stores a 5xx only with its setting on.
		if _, err := c.tx.ExecContext(c.ctx, storeServerErrorsSQL); err != nil {
			return err
		}
	}
	headers, err := storedHeaders(answer.header, o.StoredHeaders)
	if err != nil {
		return err
	}
	var transaction interface{} // NULL: not checked
	if c.transaction != "" {
		transaction = c.transaction
	}
	var stored sql.NullBool
	if err := c.tx.QueryRowContext(c.ctx, completeSQL, c.scope, c.key, answer.status, headers,
		nonNil(answer.body), c.attempt, transaction).Scan(&stored); err != nil {
		return err
	}
	if !stored.Valid {
		return errSplit
	}
	if !stored.Bool {
		return errors.New("idempotency_complete did not store the response")
	}
	return c.tx.Commit()
}

// abandon rolls the handler's work back; in two-phase mode it also releases the
// committed claim, so that a retry goes on at once instead of waiting out the lease.
func (c *Claim) abandon(errorLog *log.Logger) {
	if c.tx != nil {
		c.tx.Rollback()
		c.tx = nil
	}
	if c.lease <= 0 || c.key == "" {
		return
	}
	// The request's context may be why the handler failed (the client went away); the
	// release must still reach the server.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.session.ExecContext(ctx, releaseSQL, c.scope, c.key, c.attempt); err != nil && sqlstate(err) != "IK003" {
		// Its lease ends by itself; IK003: a newer attempt holds it already.
		errorLog.Printf("idempotency: releasing a claim failed, its lease will end by itself: %v", err)
	}
}
