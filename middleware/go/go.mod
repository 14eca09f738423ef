module github.com/pg-idempotency/idempotency/middleware/go

go 1.19
