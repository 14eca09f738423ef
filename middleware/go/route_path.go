//go:build !go1.23

package idempotency

import "net/http"

// muxPattern is empty before Go 1.23, whose http.Request records no pattern: the route
// is then named by its path (Options.Route).
func muxPattern(*http.Request) string { return "" }
