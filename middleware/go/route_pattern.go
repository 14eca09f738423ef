//go:build go1.23

package idempotency

import "net/http"

// muxPattern is the ServeMux pattern that matched the request (http.Request.Pattern,
// Go 1.23 and later), empty when no pattern did.
func muxPattern(r *http.Request) string { return r.Pattern }
