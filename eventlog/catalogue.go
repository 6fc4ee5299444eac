package eventlog

import (
	"encoding/json"
	"fmt"
	"reflect"
	"time"
)

// The event catalogue: every event type the broker writes, with its payload. Field names are the
// JSON names in the log; the log is the schema, so a field is never renamed or repurposed, only
// added. Times are RFC 3339 UTC, durations are milliseconds, IDs are ULIDs, secrets appear only
// as SHA-256 hashes (hex).

// Every event belongs to exactly one stream, named by the entity it changes.

// JobStream names the stream of one job's events.
func JobStream(jobID string) string { return jobStreamPrefix + jobID }

// jobStreamPrefix begins the name of every job's stream.
const jobStreamPrefix = "job/"

// JobOf returns the job of an event of a job's stream, which is JobStream of it, and false for
// an event of another stream: what p.Stream() says, without building the stream's name, which
// the projections' fold of every job event did only to cut it off again.
func JobOf(p Payload) (string, bool) {
	switch e := p.(type) {
	case JobSubmitted:
		return e.JobID, true
	case JobScheduled:
		return e.JobID, true
	case JobLeased:
		return e.JobID, true
	case JobLeaseExtended:
		return e.JobID, true
	case JobProgress:
		return e.JobID, true
	case JobSucceeded:
		return e.JobID, true
	case JobFailed:
		return e.JobID, true
	case JobRetryScheduled:
		return e.JobID, true
	case JobLeaseExpired:
		return e.JobID, true
	case JobLeaseReleased:
		return e.JobID, true
	case JobDeadLettered:
		return e.JobID, true
	case JobCancelRequested:
		return e.JobID, true
	case JobCancelled:
		return e.JobID, true
	case JobRedriven:
		return e.JobID, true
	case JobExpired:
		return e.JobID, true
	}
	return "", false
}

// WorkerStream names the stream of one worker's events.
func WorkerStream(workerID string) string { return "worker/" + workerID }

// TenantStream names the stream of one tenant's intake, quota and credential events.
func TenantStream(tenant string) string { return "tenant/" + tenant }

// FlowStream names the stream of one flow's events; its steps' jobs have streams of their own.
func FlowStream(flowID string) string { return "flow/" + flowID }

// ScheduleStream names the stream of one schedule's events; the jobs it fires have streams of
// their own.
func ScheduleStream(scheduleID string) string { return "schedule/" + scheduleID }

// Payload is a typed event payload from the catalogue.
type Payload interface {
	// EventType is the event's type name in the log, e.g. "job.submitted".
	EventType() string
	// Stream names the stream the event belongs to: the job, worker, tenant, flow or schedule
	// it changes (JobStream(e.JobID) for a job's event). A payload type without it is not an
	// event, and does not compile as one.
	Stream() string
}

// ---- job/<id> ----------------------------------------------------------------------------

// JobSubmitted records that a client submitted the job. It is queued, unless a JobScheduled follows in the
// same append (a delay or run_at in the future).
type JobSubmitted struct {
	JobID          string            `json:"job_id"`
	Tenant         string            `json:"tenant"`
	Queue          string            `json:"queue"`
	Type           string            `json:"type"`
	Payload        json.RawMessage   `json:"payload"`
	Priority       int               `json:"priority"`
	Labels         map[string]string `json:"labels,omitempty"`
	MaxAttempts    int               `json:"max_attempts"`
	LeaseTTLMillis int64             `json:"lease_ttl_ms"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	// RequestHash is the SHA-256 (hex) of the canonical submit request, compared when the same
	// idempotency key comes again.
	RequestHash   string `json:"request_hash,omitempty"`
	ReservationID string `json:"reservation_id,omitempty"`
	APIKeyID      string `json:"api_key_id,omitempty"` // who submitted it, for audits
	// ResultTTLMillis, if set, is how long the job stays once it succeeded or was cancelled,
	// instead of the server's retention.
	ResultTTLMillis int64 `json:"result_ttl_ms,omitempty"`
	// FlowID and FlowStep name the flow step the job runs, if it is one.
	FlowID   string `json:"flow_id,omitempty"`
	FlowStep string `json:"flow_step,omitempty"`
	// ScheduleID names the schedule that fired the job, if one did.
	ScheduleID string `json:"schedule_id,omitempty"`
	// ConcurrencyKey, if set, is the key whose leases the dispatcher caps at the queue's (or the
	// tenant's) max_running_per_key (TenantKeyLimitSet).
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
	// RateLimits names the tenant's rate limits each lease of the job takes a token from
	// (TenantRateLimitSet).
	RateLimits []RateLimitUse `json:"rate_limits,omitempty"`
	// Traceparent is the W3C trace context the job's work continues (the submitter's, or its
	// flow's), handed to the worker with every assignment.
	Traceparent string `json:"traceparent,omitempty"`
}

// RateLimitUse names a rate limit a job takes a token from when it is leased: the tenant's
// limit Name, in its bucket for Key (one bucket per key; "" is the limit's own bucket).
type RateLimitUse struct {
	Name string `json:"name"`
	Key  string `json:"key,omitempty"`
}

// JobScheduled records that the job waits until RunAt before it can be leased (a delayed submit).
type JobScheduled struct {
	JobID  string    `json:"job_id"`
	RunAt  time.Time `json:"run_at"`
	Reason string    `json:"reason"` // ScheduledDelay or ScheduledRunAt
}

// Why a submitted job waits: the submit asked for a delay, or named a run_at.
const (
	ScheduledDelay = "delay"
	ScheduledRunAt = "run_at"
)

// JobLeased records that the dispatcher granted the job to a worker. At most one lease per job is valid;
// every worker operation on the job must carry LeaseID, and a completion must echo Nonce.
type JobLeased struct {
	JobID     string    `json:"job_id"`
	LeaseID   string    `json:"lease_id"`
	WorkerID  string    `json:"worker_id"`
	SessionID string    `json:"session_id,omitempty"`
	Nonce     string    `json:"nonce"`
	Attempt   int       `json:"attempt"`
	ExpiresAt time.Time `json:"expires_at"`
	// RateGrants are the tokens the lease took from the job's rate limits' buckets.
	RateGrants []RateGrant `json:"rate_grants,omitempty"`
}

// RateGrant is a token a lease took from a bucket of a rate limit (RateLimitUse): FullAt is
// when the bucket is full again, which is all of its state.
type RateGrant struct {
	Name   string    `json:"name"`
	Key    string    `json:"key,omitempty"`
	FullAt time.Time `json:"full_at"`
}

// JobLeaseExtended records that a lease's expiry moved without a heartbeat being logged: the
// fresh lease_ttl of grace every active lease gets after a restart, or after a stall of the
// server in which it could not hear its workers. Heartbeats themselves are not events.
type JobLeaseExtended struct {
	JobID     string    `json:"job_id"`
	LeaseID   string    `json:"lease_id"`
	ExpiresAt time.Time `json:"expires_at"`
	Reason    string    `json:"reason"` // ExtendedRestartGrace or ExtendedStallGrace
}

// Why a lease was extended without a heartbeat.
const (
	// ExtendedRestartGrace: every active lease gets it after a restart (or a takeover).
	ExtendedRestartGrace = "restart_grace"
	// ExtendedStallGrace: a lease that would have run out while the server was stalled (a
	// SIGSTOP, a frozen VM, a long pause), or within its lease_ttl after, runs lease_ttl from
	// the end of the stall: its worker's heartbeats may be waiting unread in a socket.
	ExtendedStallGrace = "stall_grace"
)

// JobProgress records that the worker holding the lease appended an event (a log line, progress, or any
// worker-defined type) to the job. It is streamed to clients as it is.
type JobProgress struct {
	JobID   string          `json:"job_id"`
	LeaseID string          `json:"lease_id"`
	Kind    string          `json:"event_type"` // "log", "progress", or a worker-defined type
	Data    json.RawMessage `json:"data,omitempty"`
	// WorkerSeq is the worker's own number for the event within its lease, if it numbers them:
	// a repeat of a number is acknowledged and not written again.
	WorkerSeq int `json:"worker_seq,omitempty"`
}

// JobSucceeded records that the current lease holder completed the job. Terminal.
type JobSucceeded struct {
	JobID      string          `json:"job_id"`
	LeaseID    string          `json:"lease_id"`
	Attempt    int             `json:"attempt"`
	Output     json.RawMessage `json:"output"`
	OutputHash string          `json:"output_hash"`         // hex SHA-256 of the canonical output
	Signature  string          `json:"signature,omitempty"` // base64 Ed25519, when the worker has a key
}

// JobFailed records that the current lease holder reported a failed attempt. A JobRetryScheduled or a
// JobDeadLettered (or, for a cancel-requested job, a JobCancelled) follows in the same append.
// A completion of a cancel-requested job is written as a JobFailed too, with ErrorCode
// "cancelled" and a message naming the output's hash: a cancel asked for wins, the completion
// is the worker's acknowledgement, and its output is not kept.
type JobFailed struct {
	JobID     string `json:"job_id"`
	LeaseID   string `json:"lease_id"`
	Attempt   int    `json:"attempt"`
	ErrorCode string `json:"error_code"`
	Message   string `json:"message,omitempty"`
	Retryable bool   `json:"retryable"`
}

// JobRetryScheduled records that after a failed attempt the job waits out its backoff, then is
// queued again.
type JobRetryScheduled struct {
	JobID         string    `json:"job_id"`
	Attempt       int       `json:"attempt"` // the attempt that failed
	BackoffMillis int64     `json:"backoff_ms"`
	RunAt         time.Time `json:"run_at"`
}

// JobLeaseExpired records that the lease ran out without a completion or failure. It counts as a failed
// attempt; a JobRetryScheduled, JobDeadLettered or JobCancelled follows in the same append.
type JobLeaseExpired struct {
	JobID    string `json:"job_id"`
	LeaseID  string `json:"lease_id"`
	WorkerID string `json:"worker_id"`
	Attempt  int    `json:"attempt"`
	// Reason is LeaseExpiredRanOut when the lease ran out, LeaseExpiredWorkerRevoked when the
	// worker was revoked and its leases were released at once.
	Reason string `json:"reason,omitempty"`
}

// Why a lease expired.
const (
	LeaseExpiredRanOut        = "expired"
	LeaseExpiredWorkerRevoked = "worker_revoked"
)

// JobLeaseReleased records that a lease ended with the job not attempted: the assignment never
// reached the worker (LeaseUndelivered: a long poll ended first, the connection died before the
// frame was written; LeaseUnacknowledged: found so after a restart), or the worker gave the job
// back untried or unfinished (a clean stop, a command that could not start). No attempt is spent and the job is queued again at once, unless
// the job had been released ReleasesMax times in a row (actors): then AttemptSpent is set, the
// release counts as a failed attempt, and a JobRetryScheduled or JobDeadLettered follows in the
// same append. A cancel-requested job is cancelled instead (a JobCancelled follows).
type JobLeaseReleased struct {
	JobID    string `json:"job_id"`
	LeaseID  string `json:"lease_id"`
	WorkerID string `json:"worker_id"`
	Attempt  int    `json:"attempt"` // the attempt the lease was granted for
	// Reason is the server's own (LeaseUndelivered, LeaseUnacknowledged), or the worker's code
	// (ReleasedWorkerStopping, ReleasedStartFailed, ReleasedWorkerRestarted from the Go worker,
	// any short code from
	// another).
	Reason       string `json:"reason"`
	Message      string `json:"message,omitempty"`
	AttemptSpent bool   `json:"attempt_spent,omitempty"`
}

// The server's own reasons for a JobLeaseReleased, which no worker may give.
const (
	// LeaseUndelivered: the assignment never reached the worker.
	LeaseUndelivered = "undelivered"
	// LeaseUnacknowledged: a lease made before a restart or a takeover, whose worker, heard
	// from since, does not hold it, and which no worker ever acknowledged (it wrote nothing
	// under it): its assignment never reached the worker (a leader that died as it appended
	// the lease, a crash before the assignment left).
	LeaseUnacknowledged = "unacknowledged"
)

// ServerReleaseReasons lists the server's own reasons for a JobLeaseReleased, which a worker's
// release may not give (actors), nor the SDKs (sdk/python/tether/_codes.py) or the API's
// description (transport/openapi) allow.
func ServerReleaseReasons() []string { return []string{LeaseUndelivered, LeaseUnacknowledged} }

// The reasons the Go worker (transport/client) gives a job back with: it is stopping, the
// job's command could not start, or it was restarted after it died running the job (kill -9,
// the OOM killer), whose leftover processes it ended. The server writes the worker's code as
// it comes.
const (
	ReleasedWorkerStopping  = "worker_stopping"
	ReleasedStartFailed     = "start_failed"
	ReleasedWorkerRestarted = "worker_restarted"
)

// Dead-letter reasons.
const (
	DeadMaxAttempts  = "max_attempts"
	DeadNonRetryable = "non_retryable"
	DeadLeaseExpired = "lease_expired"
)

// JobDeadLettered records that the job failed for good: terminal (status "failed") until re-driven.
type JobDeadLettered struct {
	JobID   string `json:"job_id"`
	Reason  string `json:"reason"` // DeadMaxAttempts, DeadNonRetryable or DeadLeaseExpired
	Attempt int    `json:"attempt"`
}

// JobCancelRequested records that a client asked to cancel a leased job; the worker is told, and the job is
// cancelled when the lease ends, however it ends: the worker fails it (with "cancelled"), completes
// it (the output is not kept), gives it back, or its lease expires.
type JobCancelRequested struct {
	JobID    string `json:"job_id"`
	APIKeyID string `json:"api_key_id,omitempty"`
}

// JobCancelled records that the job will not run (again). Terminal.
type JobCancelled struct {
	JobID    string `json:"job_id"`
	Reason   string `json:"reason"` // a Cancelled* reason
	APIKeyID string `json:"api_key_id,omitempty"`
}

// Why a job was cancelled: a client asked (a queued or scheduled job, at once); the worker
// holding a cancel-requested job acknowledged it, or its lease expired, or it gave the job back;
// or the job was a step of a flow that failed or was cancelled.
const (
	CancelledRequested          = "requested"
	CancelledWorkerAcknowledged = "worker_acknowledged"
	CancelledLeaseExpired       = "lease_expired"
	CancelledLeaseReleased      = "lease_released"
	CancelledFlowFailed         = "flow_" + FlowFailed
	CancelledFlowCancelled      = "flow_" + FlowCancelled
)

// JobRedriven records that a dead-lettered job was put back in its queue with a fresh attempt budget.
type JobRedriven struct {
	JobID       string `json:"job_id"`
	MaxAttempts int    `json:"max_attempts"`
	APIKeyID    string `json:"api_key_id,omitempty"`
}

// JobExpired records that a finished job left every view: its retention ended, a client
// deleted it, a purge of dead letters took it, or its tenant had more dead letters than the cap.
// It is the job's last event.
type JobExpired struct {
	JobID    string `json:"job_id"`
	Reason   string `json:"reason"` // ExpiredRetention, ExpiredDeleted, ExpiredPurged or ExpiredDeadCap
	APIKeyID string `json:"api_key_id,omitempty"`
}

// The reasons a job expires.
const (
	ExpiredRetention = "retention"
	ExpiredDeleted   = "deleted"
	ExpiredPurged    = "purged"
	ExpiredDeadCap   = "dead_cap"
)

// ---- flow/<id> ---------------------------------------------------------------------------

// JobTemplate is a job defined ahead of its submit: a flow's step, a schedule's job. Its
// fields are those of JobSubmitted.
type JobTemplate struct {
	Queue           string            `json:"queue"`
	Type            string            `json:"type"`
	Payload         json.RawMessage   `json:"payload,omitempty"`
	Priority        int               `json:"priority,omitempty"`
	MaxAttempts     int               `json:"max_attempts"`
	LeaseTTLMillis  int64             `json:"lease_ttl_ms"`
	Labels          map[string]string `json:"labels,omitempty"`
	ResultTTLMillis int64             `json:"result_ttl_ms,omitempty"`
	ConcurrencyKey  string            `json:"concurrency_key,omitempty"`
	RateLimits      []RateLimitUse    `json:"rate_limits,omitempty"`
}

// FlowStep is one step of a flow: the job it becomes once every step it needs has succeeded.
// The template's fields are the step's own in the JSON (embedded).
type FlowStep struct {
	Name string `json:"name"`
	JobTemplate
	Needs []string `json:"needs,omitempty"`
	// ContinueOnFailure: the step's failure does not fail the flow. The steps that need it
	// never run (a step runs only once every step it needs has succeeded); the others go on.
	ContinueOnFailure bool `json:"continue_on_failure,omitempty"`
}

// FlowSubmitted records a flow: a DAG of steps, in name order. The steps that need nothing
// are submitted as jobs in the same append.
type FlowSubmitted struct {
	FlowID string `json:"flow_id"`
	Tenant string `json:"tenant"`
	Name   string `json:"name"`
	// YAMLSHA256 and YAMLBytes identify the file the flow was submitted as, if it was one.
	YAMLSHA256     string     `json:"yaml_sha256,omitempty"`
	YAMLBytes      int        `json:"yaml_bytes,omitempty"`
	Steps          []FlowStep `json:"steps"`
	IdempotencyKey string     `json:"idempotency_key,omitempty"`
	RequestHash    string     `json:"request_hash,omitempty"`
	APIKeyID       string     `json:"api_key_id,omitempty"`
	// Traceparent is the W3C trace context of the submit; the flow's steps' jobs continue it.
	Traceparent string `json:"traceparent,omitempty"`
}

// FlowStepSkipped records that a step will never run.
type FlowStepSkipped struct {
	FlowID string `json:"flow_id"`
	Step   string `json:"step"`
	Reason string `json:"reason"` // a Skipped* reason
}

// Why a step was skipped: its flow failed or was cancelled first, a step it needs ended
// without succeeding (a failure its flow tolerates, or a skip), or the payload it would get,
// its own with its needs' outputs, is over the payload limit (which fails the flow).
const (
	SkippedFlowFailed       = "flow_failed"
	SkippedFlowCancelled    = "flow_cancelled"
	SkippedNeedNotSucceeded = "need_not_succeeded"
	SkippedPayloadTooLarge  = "payload_too_large"
)

// FlowEnded records a flow's end, once: FlowSucceeded when no step is left to run and every
// step that failed (or was cancelled) had continue_on_failure, FlowFailed at the first that did
// not, FlowCancelled when a client cancelled the flow. Its steps' jobs still live are cancelled
// after it.
type FlowEnded struct {
	FlowID string `json:"flow_id"`
	Status string `json:"status"`
	// Step names the step whose failure failed the flow.
	Step     string `json:"step,omitempty"`
	APIKeyID string `json:"api_key_id,omitempty"` // who cancelled it
}

// FlowExpired records that an ended flow left the views: its retention (the server's, as for a
// finished job) ended after it ended and each of its steps' jobs finished. It is the flow's
// last event; its steps' jobs expire on their own.
type FlowExpired struct {
	FlowID string `json:"flow_id"`
	Reason string `json:"reason"` // ExpiredRetention
}

// A flow's ends.
const (
	FlowSucceeded = "succeeded"
	FlowFailed    = "failed"
	FlowCancelled = "cancelled"
)

// ---- schedule/<id> -----------------------------------------------------------------------

// ScheduleCreated records a schedule: a job fired at each tick of a cron expression, read in a
// time zone. Its ticks are those after its creation (or its last resume).
type ScheduleCreated struct {
	ScheduleID string      `json:"schedule_id"`
	Tenant     string      `json:"tenant"`
	Name       string      `json:"name"`
	Cron       string      `json:"cron"`
	Timezone   string      `json:"timezone"`
	Job        JobTemplate `json:"job"` // submitted at each firing
	// Overlap is OverlapSkip or OverlapAllow; CatchUp is CatchUpNone or CatchUpOne.
	Overlap  string `json:"overlap"`
	CatchUp  string `json:"catch_up"`
	APIKeyID string `json:"api_key_id,omitempty"`
}

// What a schedule does at a tick while the job of its last firing is live: skip the tick, or
// fire anyway.
const (
	OverlapSkip  = "skip"
	OverlapAllow = "allow"
)

// What a schedule does with the ticks it missed (the server was down, or its clock jumped):
// skip them all, or fire once for the newest and skip the others.
const (
	CatchUpNone = "none"
	CatchUpOne  = "one"
)

// ScheduleFired records that a schedule fired for a tick; the job.submitted of the job it fired
// follows in the same append. Late: the tick was missed, and this is its catch-up.
type ScheduleFired struct {
	ScheduleID string    `json:"schedule_id"`
	Tick       time.Time `json:"tick"`
	JobID      string    `json:"job_id"`
	Late       bool      `json:"late,omitempty"`
}

// ScheduleSkipped records that a schedule will not fire for its ticks from From to To, both
// included, and why. Ticks is how many ticks that is; events written before it was recorded
// have none, and were counted as one.
type ScheduleSkipped struct {
	ScheduleID string    `json:"schedule_id"`
	From       time.Time `json:"from"`
	To         time.Time `json:"to"`
	Reason     string    `json:"reason"` // a SkippedTick* reason
	Ticks      int       `json:"ticks,omitempty"`
}

// Why ticks were skipped: missed (past the grace, and catch_up did not take them), the job of
// the last firing was still live (overlap: skip), or the tenant's max_active was reached.
const (
	SkippedTickMissed  = "missed"
	SkippedTickOverlap = "overlap"
	SkippedTickQuota   = "quota"
)

// SchedulePaused records that a schedule stopped firing; its ticks until it is resumed are
// never due.
type SchedulePaused struct {
	ScheduleID string `json:"schedule_id"`
	APIKeyID   string `json:"api_key_id,omitempty"`
}

// ScheduleResumed records that a paused schedule fires again, at its ticks after this event.
type ScheduleResumed struct {
	ScheduleID string `json:"schedule_id"`
	APIKeyID   string `json:"api_key_id,omitempty"`
}

// ScheduleDeleted records a schedule's end: it fires no more, and leaves the views. The jobs it
// fired are not touched.
type ScheduleDeleted struct {
	ScheduleID string `json:"schedule_id"`
	APIKeyID   string `json:"api_key_id,omitempty"`
}

// ---- worker/<id> -------------------------------------------------------------------------

// WorkerRegistered records that a worker enrolled and was issued a token (stored only as its hash).
type WorkerRegistered struct {
	WorkerID      string            `json:"worker_id"`
	Tenant        string            `json:"tenant"`
	Name          string            `json:"name"`
	Queues        []string          `json:"queues"`
	Capacity      int               `json:"capacity"`
	PublicKey     string            `json:"public_key,omitempty"` // base64 Ed25519 public key
	Labels        map[string]string `json:"labels,omitempty"`
	TokenHash     string            `json:"token_hash"`
	ExpiresAt     time.Time         `json:"expires_at"`
	EnrollTokenID string            `json:"enroll_token_id,omitempty"`
}

// WorkerTokenRotated records that the worker renewed its token. The token it renewed with
// (PreviousTokenHash) keeps working until PreviousValidUntil, in case the answer with the new
// one was lost; any older token stops working.
type WorkerTokenRotated struct {
	WorkerID           string    `json:"worker_id"`
	TokenHash          string    `json:"token_hash"`
	ExpiresAt          time.Time `json:"expires_at"`
	PreviousTokenHash  string    `json:"previous_token_hash"`
	PreviousValidUntil time.Time `json:"previous_valid_until"`
}

// WorkerRevoked records that the worker may no longer connect; its session ends and its leases
// are released for retry at once.
type WorkerRevoked struct {
	WorkerID string `json:"worker_id"`
	By       string `json:"by"` // "admin" or the id of the API key that revoked it
	Reason   string `json:"reason,omitempty"`
}

// WorkerExpired records that a worker's registration left the views: it could no longer be
// used (its token expired, or it was revoked), it held no session and no lease, and the
// server's retention (--retain) had passed since then and since it was last seen. Its token is
// unknown from then on; its stream stays in the log.
type WorkerExpired struct {
	WorkerID string `json:"worker_id"`
	Reason   string `json:"reason"` // WorkerGoneTokenExpired or WorkerGoneRevoked
}

// Why a worker's registration ended.
const (
	WorkerGoneTokenExpired = "token_expired"
	WorkerGoneRevoked      = "revoked"
)

// WorkerSessionStarted records that the worker connected.
type WorkerSessionStarted struct {
	WorkerID  string `json:"worker_id"`
	SessionID string `json:"session_id"`
	Transport string `json:"transport"` // "websocket" or "longpoll"
	Capacity  int    `json:"capacity"`
}

// WorkerSessionEnded records that the worker disconnected, went silent, was revoked, or the server
// stopped.
type WorkerSessionEnded struct {
	WorkerID  string `json:"worker_id"`
	SessionID string `json:"session_id"`
	Reason    string `json:"reason"` // an Ended* reason
}

// Why a worker's session ended: its connection closed, a newer connection of the same worker
// replaced it, or its actor restarted (EndedClosed); it sent no heartbeat for too long; the
// worker was revoked; the server stopped. Transport closes a WebSocket with a code for each.
const (
	EndedClosed           = "closed"
	EndedHeartbeatTimeout = "heartbeat_timeout"
	EndedRevoked          = "revoked"
	EndedShutdown         = "shutdown"
)

// SessionEndReasons lists every Ended* reason, for the tables keyed by them.
func SessionEndReasons() []string {
	return []string{EndedClosed, EndedHeartbeatTimeout, EndedRevoked, EndedShutdown}
}

// ---- tenant/<name> -----------------------------------------------------------------------

// TenantQuotaSet records the tenant's new limits. Zero means unlimited.
type TenantQuotaSet struct {
	Tenant     string `json:"tenant"`
	MaxActive  int    `json:"max_active"`
	MaxRunning int    `json:"max_running"`
}

// ReservationMade records that one slot of the tenant's max_active is held until ExpiresAt.
type ReservationMade struct {
	Tenant        string    `json:"tenant"`
	ReservationID string    `json:"reservation_id"`
	ExpiresAt     time.Time `json:"expires_at"`
}

// ReservationConsumed records that a submit named the reservation; its slot became the job's.
type ReservationConsumed struct {
	Tenant        string `json:"tenant"`
	ReservationID string `json:"reservation_id"`
	JobID         string `json:"job_id"`
}

// ReservationReleased records that the client gave the slot back.
type ReservationReleased struct {
	Tenant        string `json:"tenant"`
	ReservationID string `json:"reservation_id"`
}

// ReservationExpired records that the reservation's TTL ran out unused.
type ReservationExpired struct {
	Tenant        string `json:"tenant"`
	ReservationID string `json:"reservation_id"`
}

// APIKeyCreated records a new API key for the tenant (stored only as its hash).
type APIKeyCreated struct {
	Tenant  string `json:"tenant"`
	KeyID   string `json:"key_id"`
	KeyHash string `json:"key_hash"`
}

// APIKeyRevoked records that the key no longer works.
type APIKeyRevoked struct {
	Tenant string `json:"tenant"`
	KeyID  string `json:"key_id"`
}

// QueuePaused records that the tenant's queue assigns nothing until a QueueResumed. It keeps
// taking submits; leases that were on their way when it paused still arrive.
type QueuePaused struct {
	Tenant   string `json:"tenant"`
	Queue    string `json:"queue"`
	APIKeyID string `json:"api_key_id,omitempty"` // who paused it; empty for the admin
}

// QueueResumed records that a paused queue assigns jobs again.
type QueueResumed struct {
	Tenant   string `json:"tenant"`
	Queue    string `json:"queue"`
	APIKeyID string `json:"api_key_id,omitempty"`
}

// TenantKeyLimitSet records how many leases one concurrency key of the tenant may hold at once:
// in Queue's jobs, or with Queue empty in every queue without a limit of its own (the
// tenant's default). Nil clears it: the queue follows the default again, or, for the default,
// keys are not limited. Zero also means unlimited, for a queue over a default. The dispatcher
// decides it and acts on it at once; leases on their way when it lowered the limit still
// arrive.
type TenantKeyLimitSet struct {
	Tenant           string `json:"tenant"`
	Queue            string `json:"queue,omitempty"`
	MaxRunningPerKey *int   `json:"max_running_per_key"`
	APIKeyID         string `json:"api_key_id,omitempty"` // who set it; empty for the admin
}

// TenantRateLimitSet records a rate limit of the tenant, new or changed: a token bucket that
// holds at most Burst tokens and gains Rate tokens a second, on the dispatcher's clock, one
// bucket per key the tenant's jobs name it with (RateLimitUse). The dispatcher decides it and
// acts on it at once, at At on its clock: a changed limit's buckets keep the tokens they hold
// then, up to the new Burst, and gain them at the new Rate from there.
type TenantRateLimitSet struct {
	Tenant   string    `json:"tenant"`
	Name     string    `json:"name"`
	Rate     float64   `json:"rate"`
	Burst    int       `json:"burst"`
	At       time.Time `json:"at"`
	APIKeyID string    `json:"api_key_id,omitempty"` // who set it; empty for the admin
}

// TenantRateLimitDeleted records that a rate limit is gone: the jobs that name it are no
// longer held back by it.
type TenantRateLimitDeleted struct {
	Tenant   string `json:"tenant"`
	Name     string `json:"name"`
	APIKeyID string `json:"api_key_id,omitempty"`
}

// EnrollTokenCreated records a token that lets Uses workers register for the tenant until ExpiresAt.
type EnrollTokenCreated struct {
	Tenant    string    `json:"tenant"`
	TokenID   string    `json:"token_id"`
	TokenHash string    `json:"token_hash"`
	Uses      int       `json:"uses"`
	ExpiresAt time.Time `json:"expires_at"`
}

// EnrollTokenUsed records that a worker registered with the token; one use is gone.
type EnrollTokenUsed struct {
	Tenant   string `json:"tenant"`
	TokenID  string `json:"token_id"`
	WorkerID string `json:"worker_id"`
}

func (JobSubmitted) EventType() string           { return "job.submitted" }
func (JobScheduled) EventType() string           { return "job.scheduled" }
func (JobLeased) EventType() string              { return "job.leased" }
func (JobLeaseExtended) EventType() string       { return "job.lease_extended" }
func (JobProgress) EventType() string            { return "job.progress" }
func (JobSucceeded) EventType() string           { return "job.succeeded" }
func (JobFailed) EventType() string              { return "job.failed" }
func (JobRetryScheduled) EventType() string      { return "job.retry_scheduled" }
func (JobLeaseExpired) EventType() string        { return "job.lease_expired" }
func (JobLeaseReleased) EventType() string       { return "job.lease_released" }
func (JobDeadLettered) EventType() string        { return "job.dead_lettered" }
func (JobCancelRequested) EventType() string     { return "job.cancel_requested" }
func (JobCancelled) EventType() string           { return "job.cancelled" }
func (JobRedriven) EventType() string            { return "job.redriven" }
func (JobExpired) EventType() string             { return "job.expired" }
func (WorkerRegistered) EventType() string       { return "worker.registered" }
func (WorkerTokenRotated) EventType() string     { return "worker.token_rotated" }
func (WorkerRevoked) EventType() string          { return "worker.revoked" }
func (WorkerSessionStarted) EventType() string   { return "worker.session_started" }
func (WorkerSessionEnded) EventType() string     { return "worker.session_ended" }
func (WorkerExpired) EventType() string          { return "worker.expired" }
func (TenantQuotaSet) EventType() string         { return "tenant.quota_set" }
func (ReservationMade) EventType() string        { return "tenant.reservation_made" }
func (ReservationConsumed) EventType() string    { return "tenant.reservation_consumed" }
func (ReservationReleased) EventType() string    { return "tenant.reservation_released" }
func (ReservationExpired) EventType() string     { return "tenant.reservation_expired" }
func (APIKeyCreated) EventType() string          { return "tenant.api_key_created" }
func (APIKeyRevoked) EventType() string          { return "tenant.api_key_revoked" }
func (EnrollTokenCreated) EventType() string     { return "tenant.enroll_token_created" }
func (EnrollTokenUsed) EventType() string        { return "tenant.enroll_token_used" }
func (QueuePaused) EventType() string            { return "tenant.queue_paused" }
func (QueueResumed) EventType() string           { return "tenant.queue_resumed" }
func (TenantKeyLimitSet) EventType() string      { return "tenant.key_limit_set" }
func (TenantRateLimitSet) EventType() string     { return "tenant.rate_limit_set" }
func (TenantRateLimitDeleted) EventType() string { return "tenant.rate_limit_deleted" }
func (FlowSubmitted) EventType() string          { return "flow.submitted" }
func (FlowStepSkipped) EventType() string        { return "flow.step_skipped" }
func (FlowEnded) EventType() string              { return "flow.ended" }
func (FlowExpired) EventType() string            { return "flow.expired" }
func (ScheduleCreated) EventType() string        { return "schedule.created" }
func (ScheduleFired) EventType() string          { return "schedule.fired" }
func (ScheduleSkipped) EventType() string        { return "schedule.skipped" }
func (SchedulePaused) EventType() string         { return "schedule.paused" }
func (ScheduleResumed) EventType() string        { return "schedule.resumed" }
func (ScheduleDeleted) EventType() string        { return "schedule.deleted" }

// Each payload names its stream from its own fields: the entity it changes.

func (e JobSubmitted) Stream() string           { return JobStream(e.JobID) }
func (e JobScheduled) Stream() string           { return JobStream(e.JobID) }
func (e JobLeased) Stream() string              { return JobStream(e.JobID) }
func (e JobLeaseExtended) Stream() string       { return JobStream(e.JobID) }
func (e JobProgress) Stream() string            { return JobStream(e.JobID) }
func (e JobSucceeded) Stream() string           { return JobStream(e.JobID) }
func (e JobFailed) Stream() string              { return JobStream(e.JobID) }
func (e JobRetryScheduled) Stream() string      { return JobStream(e.JobID) }
func (e JobLeaseExpired) Stream() string        { return JobStream(e.JobID) }
func (e JobLeaseReleased) Stream() string       { return JobStream(e.JobID) }
func (e JobDeadLettered) Stream() string        { return JobStream(e.JobID) }
func (e JobCancelRequested) Stream() string     { return JobStream(e.JobID) }
func (e JobCancelled) Stream() string           { return JobStream(e.JobID) }
func (e JobRedriven) Stream() string            { return JobStream(e.JobID) }
func (e JobExpired) Stream() string             { return JobStream(e.JobID) }
func (e WorkerRegistered) Stream() string       { return WorkerStream(e.WorkerID) }
func (e WorkerTokenRotated) Stream() string     { return WorkerStream(e.WorkerID) }
func (e WorkerRevoked) Stream() string          { return WorkerStream(e.WorkerID) }
func (e WorkerSessionStarted) Stream() string   { return WorkerStream(e.WorkerID) }
func (e WorkerSessionEnded) Stream() string     { return WorkerStream(e.WorkerID) }
func (e WorkerExpired) Stream() string          { return WorkerStream(e.WorkerID) }
func (e TenantQuotaSet) Stream() string         { return TenantStream(e.Tenant) }
func (e ReservationMade) Stream() string        { return TenantStream(e.Tenant) }
func (e ReservationConsumed) Stream() string    { return TenantStream(e.Tenant) }
func (e ReservationReleased) Stream() string    { return TenantStream(e.Tenant) }
func (e ReservationExpired) Stream() string     { return TenantStream(e.Tenant) }
func (e APIKeyCreated) Stream() string          { return TenantStream(e.Tenant) }
func (e APIKeyRevoked) Stream() string          { return TenantStream(e.Tenant) }
func (e EnrollTokenCreated) Stream() string     { return TenantStream(e.Tenant) }
func (e EnrollTokenUsed) Stream() string        { return TenantStream(e.Tenant) }
func (e QueuePaused) Stream() string            { return TenantStream(e.Tenant) }
func (e QueueResumed) Stream() string           { return TenantStream(e.Tenant) }
func (e TenantKeyLimitSet) Stream() string      { return TenantStream(e.Tenant) }
func (e TenantRateLimitSet) Stream() string     { return TenantStream(e.Tenant) }
func (e TenantRateLimitDeleted) Stream() string { return TenantStream(e.Tenant) }
func (e FlowSubmitted) Stream() string          { return FlowStream(e.FlowID) }
func (e FlowStepSkipped) Stream() string        { return FlowStream(e.FlowID) }
func (e FlowEnded) Stream() string              { return FlowStream(e.FlowID) }
func (e FlowExpired) Stream() string            { return FlowStream(e.FlowID) }
func (e ScheduleCreated) Stream() string        { return ScheduleStream(e.ScheduleID) }
func (e ScheduleFired) Stream() string          { return ScheduleStream(e.ScheduleID) }
func (e ScheduleSkipped) Stream() string        { return ScheduleStream(e.ScheduleID) }
func (e SchedulePaused) Stream() string         { return ScheduleStream(e.ScheduleID) }
func (e ScheduleResumed) Stream() string        { return ScheduleStream(e.ScheduleID) }
func (e ScheduleDeleted) Stream() string        { return ScheduleStream(e.ScheduleID) }

// catalogue maps each event type to its payload's Go type.
var catalogue = func() map[string]reflect.Type {
	m := make(map[string]reflect.Type)
	for _, p := range Catalogue() {
		m[p.EventType()] = reflect.TypeOf(p)
	}
	return m
}()

// Catalogue returns a zero value of every payload type, in catalogue order.
func Catalogue() []Payload {
	return []Payload{
		JobSubmitted{}, JobScheduled{}, JobLeased{}, JobLeaseExtended{}, JobProgress{},
		JobSucceeded{}, JobFailed{}, JobRetryScheduled{}, JobLeaseExpired{}, JobDeadLettered{},
		JobCancelRequested{}, JobCancelled{}, JobRedriven{}, JobLeaseReleased{}, JobExpired{},
		WorkerRegistered{}, WorkerTokenRotated{}, WorkerRevoked{}, WorkerSessionStarted{},
		WorkerSessionEnded{}, WorkerExpired{},
		TenantQuotaSet{}, ReservationMade{}, ReservationConsumed{}, ReservationReleased{},
		ReservationExpired{}, APIKeyCreated{}, APIKeyRevoked{}, EnrollTokenCreated{},
		EnrollTokenUsed{}, QueuePaused{}, QueueResumed{}, TenantKeyLimitSet{},
		TenantRateLimitSet{}, TenantRateLimitDeleted{},
		FlowSubmitted{}, FlowStepSkipped{}, FlowEnded{}, FlowExpired{},
		ScheduleCreated{}, ScheduleFired{}, ScheduleSkipped{}, SchedulePaused{}, ScheduleResumed{},
		ScheduleDeleted{},
	}
}

// NewEvent encodes a payload as an event of the given stream.
func NewEvent(stream string, p Payload) (Event, error) {
	data, ok := appendPayload(nil, p)
	if !ok {
		var err error
		if data, err = json.Marshal(p); err != nil {
			return Event{}, fmt.Errorf("eventlog: encode %s: %w", p.EventType(), err)
		}
	}
	return Event{Stream: stream, Type: p.EventType(), Data: data, encoded: true}, nil
}

// Decode returns the typed payload of a record (a value, e.g. JobLeased, not a pointer). An
// unknown type gives ErrUnknownType and data that does not fit the type an error; neither panics.
func Decode(typ string, data []byte) (Payload, error) {
	if p, ok := scanPayload(typ, data); ok {
		return p, nil
	}
	return unmarshalPayload(typ, data)
}

// unmarshalPayload is Decode by encoding/json.
func unmarshalPayload(typ string, data []byte) (Payload, error) {
	t, ok := catalogue[typ]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownType, typ)
	}
	v := reflect.New(t)
	if err := json.Unmarshal(data, v.Interface()); err != nil {
		return nil, fmt.Errorf("eventlog: decode %s: %w", typ, err)
	}
	return v.Elem().Interface().(Payload), nil
}
