package wire

import "net/http"

// statusOf gives each stable error code its one HTTP status (DESIGN §5). The server answers
// with it; a client reading a WebSocket ack's error classifies it the same way.
var statusOf = map[string]int{
	"INVALID_ARGUMENT":       http.StatusBadRequest,
	"INVALID_JSON":           http.StatusBadRequest,
	"SIGNATURE_INVALID":      http.StatusBadRequest,
	"BAD_HANDSHAKE":          http.StatusBadRequest,
	"UNAUTHENTICATED":        http.StatusUnauthorized,
	"TOKEN_EXPIRED":          http.StatusUnauthorized,
	"WORKER_REVOKED":         http.StatusForbidden,
	"PERMISSION_DENIED":      http.StatusForbidden,
	"ENROLL_TOKEN_USED_UP":   http.StatusForbidden,
	"NOT_FOUND":              http.StatusNotFound,
	"JOB_NOT_FOUND":          http.StatusNotFound,
	"WORKER_NOT_FOUND":       http.StatusNotFound,
	"RESERVATION_NOT_FOUND":  http.StatusNotFound,
	"API_KEY_NOT_FOUND":      http.StatusNotFound,
	"METHOD_NOT_ALLOWED":     http.StatusMethodNotAllowed,
	"LEASE_MISMATCH":         http.StatusConflict,
	"ALREADY_TERMINAL":       http.StatusConflict,
	"NOT_DEAD_LETTERED":      http.StatusConflict,
	"COMPLETION_CONFLICT":    http.StatusConflict,
	"SESSION_CLOSED":         http.StatusConflict,
	"PAYLOAD_TOO_LARGE":      http.StatusRequestEntityTooLarge,
	"IDEMPOTENCY_KEY_REUSED": http.StatusUnprocessableEntity,
	"QUOTA_EXCEEDED":         http.StatusTooManyRequests,
	"TOKEN_RENEWED_RECENTLY": http.StatusTooManyRequests,
	"UNAVAILABLE":            http.StatusServiceUnavailable,
	"NOT_READY":              http.StatusServiceUnavailable,
}

// StatusOf is the HTTP status of an error code; an unknown code is a 400.
func StatusOf(code string) int {
	if s, ok := statusOf[code]; ok {
		return s
	}
	return http.StatusBadRequest
}
