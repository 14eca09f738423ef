//go:build go1.23

// This module's go line (1.19) would keep the ServeMux of Go 1.21, without patterns.
//go:debug httpmuxgo121=0

package idempotency

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestRouteIsTheMuxPattern(t *testing.T) {
	routes := map[string]string{}
	mux := http.NewServeMux()
	for _, pattern := range []string{"POST /orders/{id}", "/refunds/{id}"} {
		pattern := pattern
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) { routes[pattern] = defaultRoute(r) })
	}
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/orders/7", nil))
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/refunds/8", nil))
	if routes["POST /orders/{id}"] != "/orders/{id}" || routes["/refunds/{id}"] != "/refunds/{id}" {
		t.Errorf("routes %v: want the patterns without their methods", routes)
	}
	if got := defaultRoute(httptest.NewRequest("POST", "/orders/7", nil)); got != "/orders/7" {
		t.Errorf("a request no pattern matched is named by its path, not %q", got)
	}
}
