module github.com/pg-idempotency/idempotency/middleware/go/examples

go 1.19
