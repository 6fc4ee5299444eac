package actors

import "fmt"

// Code is a stable rejection code; transport maps each to one HTTP status in one place.
type Code string

// Rejection codes. Their meaning never changes once released; new ones may be added.
const (
	CodeInvalidArgument      Code = "INVALID_ARGUMENT"       // 400
	CodePayloadTooLarge      Code = "PAYLOAD_TOO_LARGE"      // 413
	CodeJobNotFound          Code = "JOB_NOT_FOUND"          // 404
	CodeWorkerNotFound       Code = "WORKER_NOT_FOUND"       // 404
	CodeReservationNotFound  Code = "RESERVATION_NOT_FOUND"  // 404
	CodeLeaseMismatch        Code = "LEASE_MISMATCH"         // 409
	CodeAlreadyTerminal      Code = "ALREADY_TERMINAL"       // 409
	CodeNotDeadLettered      Code = "NOT_DEAD_LETTERED"      // 409
	CodeCompletionConflict   Code = "COMPLETION_CONFLICT"    // 409
	CodeSessionClosed        Code = "SESSION_CLOSED"         // 409
	CodeSignatureInvalid     Code = "SIGNATURE_INVALID"      // 400
	CodeIdempotencyKeyReused Code = "IDEMPOTENCY_KEY_REUSED" // 422
	CodeQuotaExceeded        Code = "QUOTA_EXCEEDED"         // 429
	CodeWorkerRevoked        Code = "WORKER_REVOKED"         // 403
	CodeUnauthenticated      Code = "UNAUTHENTICATED"        // 401: no credential, or an unknown one
	CodeTokenExpired         Code = "TOKEN_EXPIRED"          // 401
	CodePermissionDenied     Code = "PERMISSION_DENIED"      // 403: a valid credential that may not do this
	CodeEnrollTokenUsedUp    Code = "ENROLL_TOKEN_USED_UP"   // 403
	CodeAPIKeyNotFound       Code = "API_KEY_NOT_FOUND"      // 404
	CodeTokenRenewedRecently Code = "TOKEN_RENEWED_RECENTLY" // 429: the current token is too new to renew
	CodeUnavailable          Code = "UNAVAILABLE"            // 503: the log failed, the server is stopping
)

// Rejection is a refused command: a value, not a failure of the broker.
type Rejection struct {
	Code    Code           `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

func (r *Rejection) Error() string { return string(r.Code) + ": " + r.Message }

func reject(code Code, format string, args ...any) *Rejection {
	return &Rejection{Code: code, Message: fmt.Sprintf(format, args...)}
}

// unavailable is the answer to a command whose events could not be made durable (err set),
// or nil when they are.
func unavailable(err error) *Rejection {
	if err == nil {
		return nil
	}
	return reject(CodeUnavailable, "the event log failed and the server is stopping: %v", err)
}
