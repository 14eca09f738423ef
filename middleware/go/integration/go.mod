module github.com/pg-idempotency/idempotency/middleware/go/integration

go 1.19
