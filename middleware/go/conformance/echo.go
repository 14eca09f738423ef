// The conformance applications on echo v4 (Debian: golang-github-labstack-echo-dev), its
// handlers writing through echo's Response, behind the adapter of README.md, "gin and
// echo".
package main

import (
	"database/sql"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	idempotency "github.com/pg-idempotency/idempotency/middleware/go"
)

// idempotencyEcho runs the rest of echo's chain inside the middleware: echo's Response
// writes through the middleware's writer while it runs, and an error the chain returns
// is answered there by echo's error handler, so that it is what the middleware stores.
// The route is echo's pattern.
func idempotencyEcho(protect func(http.Handler) http.Handler) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			res := c.Response()
			protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c.SetRequest(r)
				if w != http.ResponseWriter(res) { // not a request that passes through
					original := res.Writer
					res.Writer = w
					defer func() { res.Writer, res.Committed, res.Size = original, false, 0 }()
				}
				if err := next(c); err != nil {
					c.Error(err)
				}
			})).ServeHTTP(res, idempotency.WithRoute(c.Request(), c.Path()))
			return nil
		}
	}
}

func init() {
	frameworks["echo"] = func(db *sql.DB) http.Handler {
		e := echo.New()
		e.HideBanner, e.HidePort = true, true
		protect := idempotencyEcho(idempotency.Middleware(db, defaultOptions))
		waiting := idempotencyEcho(idempotency.Middleware(db, waitingOptions))
		order := echo.WrapHandler(http.HandlerFunc(createOrder)) // writes to c.Response()
		e.GET("/health", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
		e.POST("/orders", order, protect)
		e.POST("/refunds", order, protect)
		e.POST("/waiting/orders", order, waiting)
		// echo has no body parser to place before the middleware: the same as /orders.
		e.POST("/parsed/orders", order, protect)
		// echo's Gzip, inside the middleware.
		e.POST("/compressed/orders", order, protect, middleware.Gzip())
		options := idempotencyEcho(idempotency.Middleware(db, optionsOptions))
		handler := echo.WrapHandler(optionsOrder(db))
		e.POST("/options/orders/:id", handler, options)
		e.PUT("/options/orders/:id", handler, options)
		e.PATCH("/options/orders/:id", handler, options)
		e.POST("/options/refunds/:id", handler, options)
		e.GET("/options/outcomes", echo.WrapHandler(http.HandlerFunc(outcomeCounts)))
		return e
	}
}
