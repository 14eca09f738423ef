package idempotency

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
)

// response is what the middleware sends: the handler's (buffered), a replay, or a problem.
type response struct {
	status  int
	header  http.Header
	body    []byte
	outcome string // what the request came to (src/protocol.txt, "outcomes")
}

// send writes the response whole, with its Content-Length.
func (a *response) send(w http.ResponseWriter) {
	h := w.Header()
	for name, values := range a.header {
		h[name] = values
	}
	if bodyAllowed(a.status) {
		h.Set("Content-Length", strconv.Itoa(len(a.body)))
	} else {
		h.Del("Content-Length")
	}
	w.WriteHeader(a.status)
	if bodyAllowed(a.status) {
		w.Write(a.body)
	}
}

// bodyAllowed is RFC 9110's rule, which net/http enforces: no body with 1xx, 204 or 304.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// problem is an answer of the middleware's own, an RFC 9457 problem document.
func problem(status int, title, detail string, retryAfter int) *response {
	body, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail,omitempty"`
	}{problemType, title, status, detail})
	h := http.Header{"Content-Type": {problemContentType}}
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	return &response{status: status, header: h, body: body}
}

// render fills a template's "{name}"s in from values (the others stay as they are).
func render(template string, values map[string]interface{}) string {
	return placeholder.ReplaceAllStringFunc(template, func(whole string) string {
		if value, ok := values[whole[1:len(whole)-1]]; ok {
			return fmt.Sprint(value)
		}
		return whole
	})
}

var placeholder = regexp.MustCompile(`\{\w+\}`)

// answer is one of the protocol's answers (protocol.go): values fill its title and its
// detail in.
func answer(a protocolAnswer, values map[string]interface{}) *response {
	reply := problem(a.status, render(a.title, values), render(a.detail, values), 0)
	reply.outcome = a.outcome
	return reply
}

// answerRetrying is an answer with Retry-After: the seconds given, at least 1.
func answerRetrying(a protocolAnswer, seconds int) *response {
	if seconds < 1 {
		seconds = 1
	}
	reply := answer(a, nil)
	reply.header.Set("Retry-After", strconv.Itoa(seconds))
	return reply
}

// replay is a stored response, as idempotency_complete stored it.
func replay(status int, headers sql.NullString, body []byte) *response {
	h := http.Header{}
	if headers.Valid {
		var stored map[string]json.RawMessage
		if json.Unmarshal([]byte(headers.String), &stored) == nil {
			for name, raw := range stored {
				// A string, or an array of strings for a repeated field.
				var one string
				var many []string
				if json.Unmarshal(raw, &one) == nil {
					h.Add(name, one)
				} else if json.Unmarshal(raw, &many) == nil {
					for _, value := range many {
						h.Add(name, value)
					}
				}
			}
		}
	}
	h.Set(replayedHeader, "true")
	return &response{status: status, header: h, body: body, outcome: outcomeReplayed}
}

// storedHeaders is the jsonb of the response headers to store: those named and the
// protocol's representation headers, a string each, or an array of strings for a
// repeated field.
func storedHeaders(h http.Header, names []string) (string, error) {
	stored := map[string]interface{}{}
	for _, name := range append(append([]string{}, names...), representationHeaders...) {
		values := h.Values(name)
		switch len(values) {
		case 0:
		case 1:
			stored[http.CanonicalHeaderKey(name)] = values[0]
		default:
			stored[http.CanonicalHeaderKey(name)] = values
		}
	}
	text, err := json.Marshal(stored)
	return string(text), err
}

// recorder is the http.ResponseWriter the handler writes to: it holds the response until
// it is stored and committed, so that nothing reaches the client that may roll back. It
// keeps at most limit bytes of body (-1: no limit); past that, overflow is set and the
// rest dropped, since the response cannot be stored whole.
type recorder struct {
	header   http.Header
	status   int
	body     []byte
	limit    int64
	overflow bool
	written  bool // WriteHeader or Write was called: the handler answered through it
}

func newRecorder(limit int64) *recorder {
	return &recorder{header: http.Header{}, limit: limit}
}

func (w *recorder) Header() http.Header { return w.header }

// WriteHeader records the first final status; informational ones (1xx) are not sent.
func (w *recorder) WriteHeader(status int) {
	w.written = true
	if w.status == 0 && status >= 200 {
		w.status = status
	}
}

func (w *recorder) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if w.overflow {
		return len(p), nil
	}
	if w.limit >= 0 && int64(len(w.body))+int64(len(p)) > w.limit {
		w.overflow, w.body = true, nil
		return len(p), nil
	}
	w.body = append(w.body, p...)
	return len(p), nil
}

// Flush lets a streaming handler run unchanged: the response is held until it is stored,
// so there is nothing to send yet.
func (w *recorder) Flush() {}

// result is the response as net/http would send it: status 200 when none was written,
// and the Content-Type it would sniff from the body when the handler set none, so that
// the stored headers are those the client gets.
func (w *recorder) result() *response {
	status := w.status
	if status == 0 {
		status = http.StatusOK
	}
	if _, set := w.header["Content-Type"]; !set && w.header.Get("Content-Encoding") == "" &&
		len(w.body) > 0 && bodyAllowed(status) {
		w.header.Set("Content-Type", http.DetectContentType(w.body))
	}
	return &response{status: status, header: w.header, body: w.body}
}
