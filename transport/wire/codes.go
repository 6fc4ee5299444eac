package wire

import "net/http"

// ErrorCode is one stable error code of the API (docs/design.md §5): its HTTP status, whether a
// client should send the same request again, the WebSocket close code of a session that ends with
// it, and what it means. Codes never change meaning once released; new ones may be added.
type ErrorCode struct {
	Code   string
	Status int
	// Retry is set when the same request may succeed later unchanged (with backoff): the server
	// is stopping or recovering, or a limit frees up with time. A client must not repeat any
	// other refusal as it is.
	Retry bool
	// Close is the WebSocket close code a worker's session closes with when it ends for this
	// reason.
	Close   int
	Meaning string
}

// WebSocket close codes the server uses, beyond the standard ones (1000 normal, 1001 going
// away at shutdown, 1007 a frame that is not JSON, 1008 a protocol violation, 1009 too big,
// 1013 try again later).
const (
	CloseSessionReplaced = 4000 // another connection of the same worker took over
	CloseWorkerRevoked   = 4003 // the worker was revoked or its token expired: do not reconnect
	CloseHeartbeatMissed = 4008 // no heartbeat for three intervals
)

// RFC 6455 close codes the table uses.
const (
	closeInvalidData     = 1007 // a frame that is not JSON the server takes
	closePolicyViolation = 1008 // the worker sent what the protocol refuses
	closeTryAgainLater   = 1013 // the server cannot take the session now
)

// Transport's own codes; the rest come from the behaviours (actors.Code).
const (
	CodeInvalidJSON      = "INVALID_JSON"
	CodeUnsupportedMedia = "UNSUPPORTED_MEDIA_TYPE"
	CodeBadHandshake     = "BAD_HANDSHAKE"
	CodeNotFound         = "NOT_FOUND"
	CodeMethodNotAllowed = "METHOD_NOT_ALLOWED"
	CodeCrossSiteRequest = "CROSS_SITE_REQUEST"
	CodeHostNotAllowed   = "HOST_NOT_ALLOWED"
	CodeOriginNotAllowed = "ORIGIN_NOT_ALLOWED"
	CodeNotReady         = "NOT_READY"
	CodeStandby          = "STANDBY"
	CodeInternal         = "INTERNAL"
	CodeHistoryGone      = "HISTORY_GONE"
)

// The table's columns, named.
const (
	retry   = true
	noRetry = false
	// A session ends with the close code of its reason: an auth code says "do not reconnect",
	// a server code "reconnect later", anything else "the worker broke the protocol".
	closeAuth    = CloseWorkerRevoked
	closeServer  = closeTryAgainLater
	closeRequest = closePolicyViolation
)

// ErrorCodes is the one table of error codes: the server's answers, the WebSocket close codes,
// the OpenAPI description and docs/errors.md all come from it, and a test fails when a code the
// behaviours use is missing.
var ErrorCodes = []ErrorCode{
	{"INVALID_ARGUMENT", http.StatusBadRequest, noRetry, closeRequest, "A field is missing, malformed or out of range; the message names it."},
	{CodeInvalidJSON, http.StatusBadRequest, noRetry, closeInvalidData, "The body is empty, not JSON, more than one JSON value, not UTF-8, nested deeper than 512 levels, holds a key twice in one object (at any level, payload included), or is not I-JSON (RFC 7493: a number past a double's range, a lone surrogate); the message names the key or the place."},
	{"SIGNATURE_INVALID", http.StatusBadRequest, noRetry, closeRequest, "A completion's Ed25519 signature does not verify against the worker's registered public key."},
	{CodeBadHandshake, http.StatusBadRequest, noRetry, closeRequest, "The WebSocket endpoint was called without a valid WebSocket upgrade; long-poll instead, or fix the client."},
	{"UNAUTHENTICATED", http.StatusUnauthorized, noRetry, closeAuth, "No credential, or one the server does not know."},
	{"TOKEN_EXPIRED", http.StatusUnauthorized, noRetry, closeAuth, "The token expired, or was renewed and its grace ran out; register again or use the new token."},
	{"PERMISSION_DENIED", http.StatusForbidden, noRetry, closeAuth, "A valid credential that may not do this (a revoked API key, a key where the admin token is needed)."},
	{"WORKER_REVOKED", http.StatusForbidden, noRetry, closeAuth, "The worker was revoked; its tokens never work again."},
	{"ENROLL_TOKEN_USED_UP", http.StatusForbidden, noRetry, closeAuth, "The enroll token has no registrations left."},
	{CodeCrossSiteRequest, http.StatusForbidden, noRetry, closeRequest, "A state-changing request from a page of another site, which the server refuses."},
	{CodeHostNotAllowed, http.StatusForbidden, noRetry, closeRequest, "Under --auth none the Host header must name this server (a DNS-rebinding guard)."},
	{CodeOriginNotAllowed, http.StatusForbidden, noRetry, closeRequest, "Under --auth none only pages of this server may call it."},
	{"INVALID_FLOW", http.StatusBadRequest, noRetry, closeRequest, "The flow file is not valid: YAML, an unknown or forbidden key, a cycle, an unknown need, too many steps; details name the place."},
	{CodeNotFound, http.StatusNotFound, noRetry, closeRequest, "No route has this path."},
	{"INVALID_SCHEDULE", http.StatusBadRequest, noRetry, closeRequest, "The schedule is not valid: its name, cron expression (one that never fires, or an @every outside 1 s to a year), time zone, overlap, catch_up or job; details name the field."},
	{"SCHEDULE_NOT_FOUND", http.StatusNotFound, noRetry, closeRequest, "No schedule has this id, or it is another tenant's, or it was deleted."},
	{"FLOW_NOT_FOUND", http.StatusNotFound, noRetry, closeRequest, "No flow has this id, or it is another tenant's."},
	{"JOB_NOT_FOUND", http.StatusNotFound, noRetry, closeRequest, "No job has this id, or it is another tenant's."},
	{"WORKER_NOT_FOUND", http.StatusNotFound, noRetry, closeAuth, "No worker has this id, or it is another tenant's."},
	{"RATE_LIMIT_NOT_FOUND", http.StatusNotFound, noRetry, closeRequest, "The tenant has no rate limit of this name (details name it): a job may only name limits set with PUT /v1/rate-limits/{name}."},
	{"RESERVATION_NOT_FOUND", http.StatusNotFound, noRetry, closeRequest, "No active reservation has this id: unknown, another tenant's, consumed, released or expired."},
	{"API_KEY_NOT_FOUND", http.StatusNotFound, noRetry, closeRequest, "No API key has this id."},
	{CodeMethodNotAllowed, http.StatusMethodNotAllowed, noRetry, closeRequest, "The path exists, but not with this method."},
	{"LEASE_MISMATCH", http.StatusConflict, noRetry, closeRequest, "The lease named is not the job's current lease, or not this worker's: drop the job."},
	{"ALREADY_TERMINAL", http.StatusConflict, noRetry, closeRequest, "The job has already succeeded, failed or been cancelled."},
	{"NOT_DEAD_LETTERED", http.StatusConflict, noRetry, closeRequest, "Only a dead-lettered job can be re-driven."},
	{"JOB_EXPIRED", http.StatusGone, noRetry, closeRequest, "The job finished and left every view: its retention ended, or it was deleted or purged."},
	{CodeHistoryGone, http.StatusGone, noRetry, closeRequest, "Records this read needs are archived in segments that are not here (deleted by --archive-keep or an operator, or lost) or that do not read (damaged); details name the records (first, last) where known, and whether they were deleted on purpose (pruned)."},
	{"FLOW_ENDED", http.StatusConflict, noRetry, closeRequest, "The flow has already succeeded, failed or been cancelled."},
	{"SCHEDULE_EXISTS", http.StatusConflict, noRetry, closeRequest, "The tenant has a schedule of this name with another definition; details name it. Delete it first."},
	{"FLOW_STEP", http.StatusConflict, noRetry, closeRequest, "The job is a step of a flow, which decides what follows it; act on the flow instead."},
	{"JOB_NOT_FINISHED", http.StatusConflict, noRetry, closeRequest, "Only a job that succeeded, failed or was cancelled can be deleted; cancel it first."},
	{"COMPLETION_CONFLICT", http.StatusConflict, noRetry, closeRequest, "The job was already completed with a different output."},
	{"SESSION_CLOSED", http.StatusConflict, noRetry, closeRequest, "The worker's session ended; open another (reconnect or poll again)."},
	{"PAYLOAD_TOO_LARGE", http.StatusRequestEntityTooLarge, noRetry, closeRequest, "A body, payload, output or event is over its limit; the message names the limit."},
	{CodeUnsupportedMedia, http.StatusUnsupportedMediaType, noRetry, closeRequest, "The body must be sent with Content-Type: application/json."},
	{"IDEMPOTENCY_KEY_REUSED", http.StatusUnprocessableEntity, noRetry, closeRequest, "The idempotency key was used with a different body within 24 h."},
	{"QUOTA_EXCEEDED", http.StatusTooManyRequests, noRetry, closeRequest, "The tenant's max_active is reached; wait for jobs to finish or raise the quota, do not retry blindly."},
	{"TOKEN_RENEWED_RECENTLY", http.StatusTooManyRequests, retry, closeRequest, "The worker token is too new to renew, or a renewal is in flight; renew later."},
	{CodeInternal, http.StatusInternalServerError, retry, closeServer, "The server hit a bug; the request id in the answer finds it in the server's log."},
	{"UNAVAILABLE", http.StatusServiceUnavailable, retry, closeServer, "The event log failed or the server is stopping; nothing of this request was acknowledged."},
	{CodeNotReady, http.StatusServiceUnavailable, retry, closeServer, "The server is rebuilding its projections from the log; try again shortly."},
	{CodeStandby, http.StatusServiceUnavailable, retry, closeServer, "The server is a hot standby of a replicated log; send the request to the leader, whose URL is in details.leader and the Tether-Leader header when known."},
}

var byCode = func() map[string]ErrorCode {
	m := make(map[string]ErrorCode, len(ErrorCodes))
	for _, c := range ErrorCodes {
		m[c.Code] = c
	}
	return m
}()

// LookupCode finds a code in the table.
func LookupCode(code string) (ErrorCode, bool) {
	c, ok := byCode[code]
	return c, ok
}

// StatusOf is the HTTP status of an error code. A code not in the table (from a newer server)
// is a 500: the client cannot know what to fix.
func StatusOf(code string) int {
	if c, ok := byCode[code]; ok {
		return c.Status
	}
	return http.StatusInternalServerError
}

// CloseOf is the WebSocket close code of a session that ends with an error code; a code not in
// the table closes as a server error.
func CloseOf(code string) int {
	if c, ok := byCode[code]; ok {
		return c.Close
	}
	return closeServer
}

// LeaderHeader carries, on a standby's 503 STANDBY answer, the URL clients reach the leader at.
const LeaderHeader = "Tether-Leader"
