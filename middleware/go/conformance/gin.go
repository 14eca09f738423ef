// The conformance applications on gin (Debian: golang-github-gin-gonic-gin-dev), its
// handlers writing through gin's context, behind the adapter of README.md, "gin and echo".
package main

import (
	"database/sql"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5/middleware"
	idempotency "github.com/pg-idempotency/idempotency/middleware/go"
)

// idempotencyGin runs the rest of gin's chain inside the middleware, writing through the
// middleware's writer (a GinWriter over it) and reading its request; the route is gin's
// pattern.
func idempotencyGin(protect func(http.Handler) http.Handler) gin.HandlerFunc {
	return func(c *gin.Context) {
		writer := c.Writer
		protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c.Request = r
			if w != http.ResponseWriter(writer) { // not a request that passes through
				c.Writer = idempotency.NewGinWriter(w, writer)
				defer func() { c.Writer = writer }()
			}
			c.Next()
		})).ServeHTTP(writer, idempotency.WithRoute(c.Request, c.FullPath()))
		c.Abort() // the chain ran inside, or must not run (a replay, a refusal)
	}
}

func init() {
	frameworks["gin"] = func(db *sql.DB) http.Handler {
		gin.SetMode(gin.ReleaseMode)
		router := gin.New()
		protect := idempotencyGin(idempotency.Middleware(db, defaultOptions))
		waiting := idempotencyGin(idempotency.Middleware(db, waitingOptions))
		order := gin.WrapF(createOrder) // writes to c.Writer, reads c.Request
		router.GET("/health", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
		router.POST("/orders", protect, order)
		router.POST("/refunds", protect, order)
		router.POST("/waiting/orders", waiting, order)
		// gin has no body parser to place before the middleware: the same as /orders.
		router.POST("/parsed/orders", protect, order)
		// No gin compression middleware in Debian: chi's Compress, inside.
		router.POST("/compressed/orders", protect, gin.WrapH(middleware.Compress(5)(http.HandlerFunc(createOrder))))
		options := idempotencyGin(idempotency.Middleware(db, optionsOptions))
		handler := gin.WrapF(optionsOrder(db))
		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodPatch} {
			router.Handle(method, "/options/orders/:id", options, handler)
		}
		router.POST("/options/refunds/:id", options, handler)
		router.GET("/options/outcomes", gin.WrapF(outcomeCounts))
		return router
	}
}
