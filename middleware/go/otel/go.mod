module github.com/pg-idempotency/idempotency/middleware/go/otel

go 1.19
