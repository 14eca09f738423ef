// Code generated from src/errcodes.txt by src/errcodes.pl (make errcodes). DO NOT EDIT.

package idempotency

// sqlstateAnswers maps a SQLSTATE to the answer other than 500 (doc/reference.md,
// "Errors"): HTTP status, problem title, Retry-After seconds (0: none).
var sqlstateAnswers = map[string]sqlstateAnswer{
	"IK006": {400, "The Idempotency-Key header is empty or too long", 0},
	"IK003": {409, "A newer attempt of this request took over", 1},
	"IK005": {503, "Service unavailable, retry", 1},
	"55006": {409, "A request with this Idempotency-Key is in progress", 1},
	"25006": {503, "Service unavailable, retry", 1},
	"57014": {503, "Service unavailable, retry", 1},
	"55P03": {503, "Service unavailable, retry", 1},
	"40P01": {503, "Service unavailable, retry", 1},
	"53200": {503, "Service unavailable, retry", 1},
}
