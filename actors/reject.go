package actors

import "fmt"

// Code is a stable rejection code. Each is in the one table of codes (wire.ErrorCodes), which
// gives its HTTP status, whether to retry, its WebSocket close code and its meaning; a test
// fails when one is missing there.
type Code string

// Rejection codes. Their meaning never changes once released; new ones may be added.
const (
	CodeInvalidArgument      Code = "INVALID_ARGUMENT"
	CodePayloadTooLarge      Code = "PAYLOAD_TOO_LARGE"
	CodeJobNotFound          Code = "JOB_NOT_FOUND"
	CodeWorkerNotFound       Code = "WORKER_NOT_FOUND"
	CodeReservationNotFound  Code = "RESERVATION_NOT_FOUND"
	CodeLeaseMismatch        Code = "LEASE_MISMATCH"
	CodeAlreadyTerminal      Code = "ALREADY_TERMINAL"
	CodeNotDeadLettered      Code = "NOT_DEAD_LETTERED"
	CodeJobExpired           Code = "JOB_EXPIRED"
	CodeNotFinished          Code = "JOB_NOT_FINISHED"
	CodeCompletionConflict   Code = "COMPLETION_CONFLICT"
	CodeSessionClosed        Code = "SESSION_CLOSED"
	CodeSignatureInvalid     Code = "SIGNATURE_INVALID"
	CodeIdempotencyKeyReused Code = "IDEMPOTENCY_KEY_REUSED"
	CodeQuotaExceeded        Code = "QUOTA_EXCEEDED"
	CodeWorkerRevoked        Code = "WORKER_REVOKED"
	CodeUnauthenticated      Code = "UNAUTHENTICATED"
	CodeTokenExpired         Code = "TOKEN_EXPIRED"
	CodePermissionDenied     Code = "PERMISSION_DENIED"
	CodeEnrollTokenUsedUp    Code = "ENROLL_TOKEN_USED_UP"
	CodeAPIKeyNotFound       Code = "API_KEY_NOT_FOUND"
	CodeTokenRenewedRecently Code = "TOKEN_RENEWED_RECENTLY"
	CodeUnavailable          Code = "UNAVAILABLE"
	CodeInvalidFlow          Code = "INVALID_FLOW"
	CodeFlowNotFound         Code = "FLOW_NOT_FOUND"
	CodeFlowEnded            Code = "FLOW_ENDED"
	CodeFlowStep             Code = "FLOW_STEP"
	CodeInvalidSchedule      Code = "INVALID_SCHEDULE"
	CodeScheduleNotFound     Code = "SCHEDULE_NOT_FOUND"
	CodeScheduleExists       Code = "SCHEDULE_EXISTS"
	CodeRateLimitNotFound    Code = "RATE_LIMIT_NOT_FOUND"
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
