module github.com/pg-idempotency/idempotency/middleware/go/conformance

go 1.19
