// Package wire is tether's wire contract (docs/design.md §5) as Go types: the JSON bodies of the
// HTTP API, the worker protocol's frames, and the error shape. The server (package transport) and
// the client (package transport/client) both use it, so they cannot drift apart; it imports
// nothing of the broker, so a program that only talks to tether does not link the server.
package wire

import (
	"encoding/json"
	"time"
)

// Error is the body of every error response: {"error":{"code","message","details"}}.
type Error struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is one error; Details is always an object, never null. RequestID is the
// answer's X-Request-Id, which the server's log lines about the request carry too.
type ErrorDetail struct {
	Code      string         `json:"code"`
	Message   string         `json:"message"`
	Details   map[string]any `json:"details"`
	RequestID string         `json:"request_id,omitempty"`
}

// JSONDepthMax caps how deep the arrays and objects of a body or a frame nest, its own object
// included, so a payload, an output or an event's data nests one level less. What is stored
// comes back inside a job resource and a list page, a few levels deeper, and must still load
// in the clients users run at their defaults: Python's json fails near 1,000 levels (its
// recursion limit, less the caller's own frames), Jackson stops at 1,000. encoding/json's
// 10,000 would let in what they cannot read back.
const JSONDepthMax = 512

// Receipt names the last event a state-changing request caused: its seq and chain hash.
type Receipt struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
}

// Lease is the current lease of a leased job.
type Lease struct {
	LeaseID   string    `json:"lease_id"`
	WorkerID  string    `json:"worker_id"`
	ExpiresAt time.Time `json:"expires_at"`
}

// JobError is the last failure of a job.
type JobError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Explanation answers GET /v1/jobs/{id}/explain: why the job is not running (a waiting job),
// whom it runs on (a leased one), or how it ended, from the dispatcher's own state. Code is
// stable; Details holds what the code names, and Message says it in words.
type Explanation struct {
	JobID   string             `json:"job_id"`
	Status  string             `json:"status"`
	Code    string             `json:"code"`
	Message string             `json:"message"`
	Details ExplanationDetails `json:"details"`
}

// ExplanationDetails are the facts behind an explanation; each code sets its own.
type ExplanationDetails struct {
	Queue            string     `json:"queue,omitempty"`
	RunAt            *time.Time `json:"run_at,omitempty"`       // scheduled, retry_backoff
	PausedSince      *time.Time `json:"paused_since,omitempty"` // queue_paused
	MaxRunning       int        `json:"max_running,omitempty"`  // tenant_quota
	Running          int        `json:"running,omitempty"`
	ConcurrencyKey   string     `json:"concurrency_key,omitempty"` // concurrency_key
	MaxRunningPerKey int        `json:"max_running_per_key,omitempty"`
	HeldBy           []string   `json:"held_by,omitempty"`    // the jobs that hold the key's leases
	RateLimit        string     `json:"rate_limit,omitempty"` // rate_limited: the limit whose token comes last
	RateLimitKey     string     `json:"rate_limit_key,omitempty"`
	Rate             float64    `json:"rate,omitempty"`
	Burst            int        `json:"burst,omitempty"`
	TokenAt          *time.Time `json:"token_at,omitempty"` // when that token is due
	Sessions         *int       `json:"sessions,omitempty"` // workers_busy: sessions serving the queue
	Capacity         *int       `json:"capacity,omitempty"`
	Leased           *int       `json:"leased,omitempty"`
	LastWorker       string     `json:"last_worker,omitempty"`    // no_worker_for_queue
	LastSeen         *time.Time `json:"last_seen,omitempty"`      // when the worker was last heard from
	Ahead            *int       `json:"ahead,omitempty"`          // behind_n, workers_busy: jobs of its queue that go first
	AheadAtLeast     bool       `json:"ahead_at_least,omitempty"` // ahead counts the first 100,000 jobs of a longer queue only
	WorkerID         string     `json:"worker_id,omitempty"`
	LeaseID          string     `json:"lease_id,omitempty"` // leased
	StartedAt        *time.Time `json:"started_at,omitempty"`
	LeaseExpiresAt   *time.Time `json:"lease_expires_at,omitempty"`
	LastHeartbeat    *time.Time `json:"last_heartbeat,omitempty"` // of this lease; none before the first
	WorkerConnected  *bool      `json:"worker_connected,omitempty"`
	CancelRequested  bool       `json:"cancel_requested,omitempty"`
	Attempt          int        `json:"attempt,omitempty"`     // leased, retry_backoff
	DeadReason       string     `json:"dead_reason,omitempty"` // finished
	Error            *JobError  `json:"error,omitempty"`
	FinishedAt       *time.Time `json:"finished_at,omitempty"`
}

// Job is the job resource.
type Job struct {
	ID              string            `json:"id"`
	Tenant          string            `json:"tenant"`
	Queue           string            `json:"queue"`
	Type            string            `json:"type"`
	Payload         json.RawMessage   `json:"payload"`
	Priority        int               `json:"priority"`
	Labels          map[string]string `json:"labels"`
	Status          string            `json:"status"`
	Attempt         int               `json:"attempt"`
	MaxAttempts     int               `json:"max_attempts"`
	RunAt           *time.Time        `json:"run_at"`
	Lease           *Lease            `json:"lease"`
	CancelRequested bool              `json:"cancel_requested"`
	Output          json.RawMessage   `json:"output"`
	OutputHash      string            `json:"output_hash,omitempty"`
	Error           *JobError         `json:"error"`
	DeadReason      string            `json:"dead_reason,omitempty"`
	CreatedAt       time.Time         `json:"created_at"`
	UpdatedAt       time.Time         `json:"updated_at"`
	// StartedAt is when the last attempt's lease began, WorkerID the worker that held it; both
	// stay after the lease ends. FinishedAt is when the job became terminal. Null until then.
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	// ExpiresAt is when a finished job leaves every view (GET then answers JOB_EXPIRED); null
	// while it runs, or when the server keeps it until it is deleted.
	ExpiresAt       *time.Time `json:"expires_at"`
	WorkerID        *string    `json:"worker_id"`
	EventsTruncated bool       `json:"events_truncated"`
	// FlowID and FlowStep name the flow step the job runs; ScheduleID the schedule that fired
	// it. Absent when it is neither.
	FlowID     string `json:"flow_id,omitempty"`
	FlowStep   string `json:"flow_step,omitempty"`
	ScheduleID string `json:"schedule_id,omitempty"`
	// ConcurrencyKey is the key whose leases its queue's max_running_per_key caps, if any.
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
	// RateLimits are the tenant's rate limits each lease of the job takes a token from.
	RateLimits    []RateLimitUse `json:"rate_limits,omitempty"`
	Receipt       *Receipt       `json:"receipt,omitempty"`
	IdempotentHit *bool          `json:"idempotent_hit,omitempty"`
}

// SubmitRequest is the body of POST /v1/jobs and one element of a batch.
type SubmitRequest struct {
	Queue           string            `json:"queue"`
	Type            string            `json:"type"`
	Payload         json.RawMessage   `json:"payload,omitempty"`
	Priority        int               `json:"priority,omitempty"`
	DelaySeconds    float64           `json:"delay_seconds,omitempty"`
	RunAt           *time.Time        `json:"run_at,omitempty"`
	MaxAttempts     int               `json:"max_attempts,omitempty"`
	LeaseTTLSeconds float64           `json:"lease_ttl_seconds,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	IdempotencyKey  string            `json:"idempotency_key,omitempty"`
	ReservationID   string            `json:"reservation_id,omitempty"`
	// ResultTTLSeconds, if set, is how long the job stays once it succeeded or was cancelled,
	// instead of the server's --retain.
	ResultTTLSeconds float64 `json:"result_ttl_seconds,omitempty"`
	// ConcurrencyKey, if set, caps the leases of the tenant's jobs with this key at the queue's
	// max_running_per_key.
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
	// RateLimits names the tenant's rate limits each lease takes a token from.
	RateLimits []RateLimitUse `json:"rate_limits,omitempty"`
}

// RateLimitUse names a tenant's rate limit a job takes a token from, in the bucket of Key (one
// bucket per key; none: the limit's own).
type RateLimitUse struct {
	Name string `json:"name"`
	Key  string `json:"key,omitempty"`
}

// RateLimitRequest is the body of PUT /v1/rate-limits/{name}: rate tokens a second, at most
// burst held (default: the rate rounded up, at least 1).
type RateLimitRequest struct {
	Rate  float64 `json:"rate"`
	Burst int     `json:"burst,omitempty"`
}

// RateLimit is a tenant's rate limit as it stands: Tokens in its bucket without a key, and
// how many of its buckets are below full (BucketsBelowFull).
type RateLimit struct {
	Name             string   `json:"name"`
	Rate             float64  `json:"rate"`
	Burst            int      `json:"burst"`
	Tokens           float64  `json:"tokens"`
	BucketsBelowFull int      `json:"buckets_below_full"`
	Receipt          *Receipt `json:"receipt,omitempty"`
}

// RateLimitDeleted answers DELETE /v1/rate-limits/{name}.
type RateLimitDeleted struct {
	Name    string   `json:"name"`
	Deleted bool     `json:"deleted"`
	Receipt *Receipt `json:"receipt,omitempty"`
}

// RateLimitList answers GET /v1/rate-limits.
type RateLimitList struct {
	RateLimits []RateLimit `json:"rate_limits"`
}

// Deleted answers DELETE /v1/jobs/{id}.
type Deleted struct {
	ID      string   `json:"id"`
	Deleted bool     `json:"deleted"`
	Receipt *Receipt `json:"receipt,omitempty"`
}

// PurgeRequest is the body of POST /v1/dead-letters/purge: the dead letters of Queue (every
// queue if empty) that died at least OlderThanSeconds ago. It must give an age (0: any age) or
// All, so that an age left out by mistake does not purge every dead letter.
type PurgeRequest struct {
	Queue            string   `json:"queue,omitempty"`
	OlderThanSeconds *float64 `json:"older_than_seconds,omitempty"`
	All              bool     `json:"all,omitempty"` // with no age: any age
}

// PurgeResponse answers a purge: how many dead letters left the views, and whether more match
// (purge again).
type PurgeResponse struct {
	Purged  int      `json:"purged"`
	More    bool     `json:"more"`
	Receipt *Receipt `json:"receipt,omitempty"`
}

// BatchRequest is the body of POST /v1/jobs/batch.
type BatchRequest struct {
	Jobs []SubmitRequest `json:"jobs"`
}

// BatchResponse answers a batch submit.
type BatchResponse struct {
	Jobs    []Job    `json:"jobs"`
	Receipt *Receipt `json:"receipt,omitempty"`
}

// JobList is one page of GET /v1/jobs; NextCursor is empty on the last page.
type JobList struct {
	Jobs       []Job  `json:"jobs"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// Event is one event of a job's stream: Number counts from 1 within the job.
type Event struct {
	Number int             `json:"number"`
	Seq    uint64          `json:"seq"`
	Time   time.Time       `json:"time"`
	Type   string          `json:"type"`
	Data   json.RawMessage `json:"data"`
}

// EventList answers GET /v1/jobs/{id}/events when SSE is not asked for.
type EventList struct {
	Events []Event `json:"events"`
	Done   bool    `json:"done"`
}

// Done answers a state-changing request that returns no resource (cancel, release, revoke).
type Done struct {
	Receipt Receipt `json:"receipt"`
}

// ReservationRequest is the body of POST /v1/reservations.
type ReservationRequest struct {
	TTLSeconds float64 `json:"ttl_seconds,omitempty"`
}

// Reservation answers POST /v1/reservations.
type Reservation struct {
	ID        string    `json:"id"`
	ExpiresAt time.Time `json:"expires_at"`
	Receipt   Receipt   `json:"receipt"`
}

// Quota is a tenant's limits and usage (GET /v1/quota, and the answer to setting them); zero
// limits are unlimited.
type Quota struct {
	Tenant       string `json:"tenant"`
	MaxActive    int    `json:"max_active"`
	MaxRunning   int    `json:"max_running"`
	Active       int    `json:"active"`
	Running      int    `json:"running"`
	Reservations int    `json:"reservations"`
	// MaxRunningPerKey is how many leases one concurrency key may hold at once in a queue
	// without a limit of its own (0: unlimited).
	MaxRunningPerKey int      `json:"max_running_per_key"`
	Receipt          *Receipt `json:"receipt,omitempty"` // when the limits were just set
}

// QuotaRequest is the body of PUT or PATCH /v1/admin/tenants/{tenant}/quota. A limit left
// out (or null) keeps its current value; 0 is unlimited.
type QuotaRequest struct {
	MaxActive        *int `json:"max_active,omitempty"`
	MaxRunning       *int `json:"max_running,omitempty"`
	MaxRunningPerKey *int `json:"max_running_per_key,omitempty"`
}

// QueueLimitsRequest is the body of PUT /v1/queues/{name}/limits: the queue's own limits. A
// limit left out (or null) is not the queue's own: the tenant's applies.
type QueueLimitsRequest struct {
	MaxRunningPerKey *int `json:"max_running_per_key"`
}

// QueueLimits answers PUT and DELETE /v1/queues/{name}/limits: the limits in force in the
// queue, and whether they are its own or the tenant's.
type QueueLimits struct {
	Queue            string   `json:"queue"`
	MaxRunningPerKey int      `json:"max_running_per_key"` // 0: unlimited
	OwnKeyLimit      bool     `json:"own_key_limit"`
	Receipt          *Receipt `json:"receipt,omitempty"`
}

// Queue is one queue's counts (GET /v1/queues).
type Queue struct {
	Name             string  `json:"name"`
	Depth            int     `json:"depth"`
	Leased           int     `json:"leased"`
	Scheduled        int     `json:"scheduled"`
	Dead             int     `json:"dead"`
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
	// Paused says the queue assigns nothing (it still takes submits), since PausedSince.
	Paused      bool       `json:"paused"`
	PausedSince *time.Time `json:"paused_since,omitempty"`
	// MaxRunningPerKey is how many leases one concurrency key may hold at once in the queue (0:
	// unlimited): its own limit if OwnKeyLimit, else the tenant's.
	MaxRunningPerKey int  `json:"max_running_per_key"`
	OwnKeyLimit      bool `json:"own_key_limit"`
	// SucceededPerMinute and FailedPerMinute count the finished attempts of each of the last
	// 60 minutes, oldest first, the current minute last.
	SucceededPerMinute []int `json:"succeeded_per_minute"`
	FailedPerMinute    []int `json:"failed_per_minute"`
}

// QueueState answers a pause or a resume: the queue's state, and the receipt of the event that
// put it there (none for a queue that was never paused).
type QueueState struct {
	Queue       string     `json:"queue"`
	Paused      bool       `json:"paused"`
	PausedSince *time.Time `json:"paused_since,omitempty"`
	Receipt     *Receipt   `json:"receipt,omitempty"`
}

// BulkRequest is the body of POST /v1/jobs/cancel and /v1/jobs/retry: a filter of the caller's
// jobs, a page size (at most 1,000, the default), and the next_cursor of the previous call. A
// filter that narrows nothing must say All, so that one left out by mistake does not act on
// every job of the tenant.
type BulkRequest struct {
	Queue         string     `json:"queue,omitempty"`
	Type          string     `json:"type,omitempty"`
	Status        string     `json:"status,omitempty"`
	Label         string     `json:"label,omitempty"` // key=value
	CreatedBefore *time.Time `json:"created_before,omitempty"`
	All           bool       `json:"all,omitempty"` // every job the other fields leave in, even if they narrow nothing
	Limit         int        `json:"limit,omitempty"`
	Cursor        string     `json:"cursor,omitempty"`
}

// BulkCancelResponse answers POST /v1/jobs/cancel. Matched jobs were cancelled at once (waiting
// ones) or asked to stop (leased ones), or skipped, by the code of their refusal (a job that
// finished meanwhile). NextCursor, if set, is where the next call goes on.
type BulkCancelResponse struct {
	Matched         int            `json:"matched"`
	Cancelled       int            `json:"cancelled"`
	CancelRequested int            `json:"cancel_requested"`
	Skipped         map[string]int `json:"skipped"`
	NextCursor      string         `json:"next_cursor,omitempty"`
	Receipt         *Receipt       `json:"receipt,omitempty"`
}

// BulkRedriveResponse answers POST /v1/jobs/retry. A re-drive over the tenant's quota is
// skipped as QUOTA_EXCEEDED, and NextCursor then comes back to it.
type BulkRedriveResponse struct {
	Matched    int            `json:"matched"`
	Redriven   int            `json:"redriven"`
	Skipped    map[string]int `json:"skipped"`
	NextCursor string         `json:"next_cursor,omitempty"`
	Receipt    *Receipt       `json:"receipt,omitempty"`
}

// Queues answers GET /v1/queues.
type Queues struct {
	Queues []Queue `json:"queues"`
}

// Worker is a registered worker as GET /v1/workers shows it.
type Worker struct {
	ID           string            `json:"id"`
	Name         string            `json:"name"`
	Queues       []string          `json:"queues"`
	Capacity     int               `json:"capacity"`
	Labels       map[string]string `json:"labels"`
	Status       string            `json:"status"` // online, offline, revoked
	Transport    string            `json:"transport,omitempty"`
	InFlight     []string          `json:"in_flight"`
	LastSeen     time.Time         `json:"last_seen"`
	RegisteredAt time.Time         `json:"registered_at"`
	ExpiresAt    time.Time         `json:"expires_at"`
	HasKey       bool              `json:"has_public_key"`
}

// Workers answers GET /v1/workers.
type Workers struct {
	Workers []Worker `json:"workers"`
}

// RegisterRequest is the body of POST /v1/workers/register.
type RegisterRequest struct {
	Name      string            `json:"name"`
	Queues    []string          `json:"queues"`
	Capacity  int               `json:"capacity"`
	PublicKey string            `json:"public_key,omitempty"` // base64 Ed25519
	Labels    map[string]string `json:"labels,omitempty"`
}

// Registration answers POST /v1/workers/register; WorkerToken is shown only here.
type Registration struct {
	WorkerID    string    `json:"worker_id"`
	WorkerToken string    `json:"worker_token"`
	ExpiresAt   time.Time `json:"expires_at"`
	Receipt     Receipt   `json:"receipt"`
}

// APIKeyRequest is the body of POST /v1/admin/api-keys.
type APIKeyRequest struct {
	Tenant string `json:"tenant"`
}

// APIKey answers POST /v1/admin/api-keys; Key is shown only here.
type APIKey struct {
	ID      string  `json:"id"`
	Tenant  string  `json:"tenant"`
	Key     string  `json:"api_key"`
	Receipt Receipt `json:"receipt"`
}

// EnrollTokenRequest is the body of POST /v1/admin/enroll-tokens; Uses left out is 1.
type EnrollTokenRequest struct {
	Tenant     string  `json:"tenant"`
	Uses       *int    `json:"uses,omitempty"`
	TTLSeconds float64 `json:"ttl_seconds"`
}

// EnrollToken answers POST /v1/admin/enroll-tokens; Token is shown only here.
type EnrollToken struct {
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant"`
	Token     string    `json:"enroll_token"`
	Uses      int       `json:"uses"`
	ExpiresAt time.Time `json:"expires_at"`
	Receipt   Receipt   `json:"receipt"`
}

// Flow is the flow resource (GET /v1/flows/{id}, and what submit and cancel answer). Steps maps
// each step's name to where it stands: a step not started yet is "waiting" with no job, one that
// will never run "skipped", and a started one has its job's id and status.
type Flow struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	Name   string `json:"name"`
	// Status is running, then once succeeded, failed or cancelled; FailedStep names the step
	// whose failure failed it.
	Status     string `json:"status"`
	FailedStep string `json:"failed_step,omitempty"`
	// The file and the times are absent only from an expired flow (FlowExpired), which the
	// server no longer knows.
	YAMLSHA256    string              `json:"yaml_sha256,omitempty"`
	YAMLBytes     int                 `json:"yaml_bytes,omitzero"`
	Steps         map[string]FlowStep `json:"steps"`
	CreatedAt     time.Time           `json:"created_at,omitzero"`
	UpdatedAt     time.Time           `json:"updated_at,omitzero"`
	EndedAt       *time.Time          `json:"ended_at"`
	Receipt       *Receipt            `json:"receipt,omitempty"`
	IdempotentHit *bool               `json:"idempotent_hit,omitempty"`
}

// ScheduleRequest is the body of POST /v1/schedules. Job takes what a submit takes but a delay,
// run_at, an idempotency key or a reservation. Timezone is an IANA name (default UTC); Overlap is
// skip (default) or allow; CatchUp is one (default) or none.
type ScheduleRequest struct {
	Name     string        `json:"name"`
	Cron     string        `json:"cron"`
	Timezone string        `json:"timezone,omitempty"`
	Job      SubmitRequest `json:"job"`
	Overlap  string        `json:"overlap,omitempty"`
	CatchUp  string        `json:"catch_up,omitempty"`
}

// Schedule is the schedule resource (GET /v1/schedules/{id}, and what create, pause and resume
// answer). Status is active or paused; NextFireAt is null while paused. LastTick is the newest
// tick decided, fired or skipped; Skipped counts the ticks skipped, each once, by reason (missed,
// overlap, quota).
type Schedule struct {
	ID            string         `json:"id"`
	Tenant        string         `json:"tenant"`
	Name          string         `json:"name"`
	Cron          string         `json:"cron"`
	Timezone      string         `json:"timezone"`
	Job           ScheduleJob    `json:"job"`
	Overlap       string         `json:"overlap"`
	CatchUp       string         `json:"catch_up"`
	Status        string         `json:"status"`
	NextFireAt    *time.Time     `json:"next_fire_at"`
	LastTick      *time.Time     `json:"last_tick"`
	LastFire      *ScheduleFire  `json:"last_fire"`
	Fired         int            `json:"fired"`
	Skipped       map[string]int `json:"skipped"`
	CreatedAt     time.Time      `json:"created_at"`
	UpdatedAt     time.Time      `json:"updated_at"`
	Receipt       *Receipt       `json:"receipt,omitempty"`
	IdempotentHit *bool          `json:"idempotent_hit,omitempty"`
}

// ScheduleJob is the job a schedule submits each time it fires.
type ScheduleJob struct {
	Queue            string            `json:"queue"`
	Type             string            `json:"type"`
	Payload          json.RawMessage   `json:"payload"`
	Priority         int               `json:"priority"`
	MaxAttempts      int               `json:"max_attempts"`
	LeaseTTLSeconds  float64           `json:"lease_ttl_seconds"`
	Labels           map[string]string `json:"labels"`
	ResultTTLSeconds float64           `json:"result_ttl_seconds,omitempty"`
	ConcurrencyKey   string            `json:"concurrency_key,omitempty"`
	RateLimits       []RateLimitUse    `json:"rate_limits,omitempty"`
}

// ScheduleFire is a schedule's last firing: the job it submitted, and when.
type ScheduleFire struct {
	JobID   string    `json:"job_id"`
	FiredAt time.Time `json:"fired_at"`
}

// ScheduleList is GET /v1/schedules: the tenant's schedules, by name.
type ScheduleList struct {
	Schedules []Schedule `json:"schedules"`
}

// FlowExpired is the status a repeated submit answers for the flow its idempotency key made when
// that flow has ended and left the views since (its steps are then unknown).
const FlowExpired = "expired"

// FlowStep is one step of a flow resource.
type FlowStep struct {
	JobID             string   `json:"job_id,omitempty"`
	Status            string   `json:"status"`
	Queue             string   `json:"queue"`
	Type              string   `json:"type"`
	Needs             []string `json:"needs"`
	ContinueOnFailure bool     `json:"continue_on_failure,omitempty"`
	// WaitingFor, on a waiting step (it has no job yet), names the steps it needs that have
	// not finished: why it is not running, as explain says it of a job (waiting_for_needs).
	WaitingFor []string `json:"waiting_for,omitempty"`
}

// FlowList is one page of GET /v1/flows, newest first; NextCursor is empty on the last page.
type FlowList struct {
	Flows      []Flow `json:"flows"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// Archive is GET /v1/archive: the sealed archive segments, and what the scrubs that read them
// whole against their checksums found (--archive-scrub-every).
type Archive struct {
	Segments     int    `json:"segments"`
	Bytes        uint64 `json:"bytes"`
	OldestHotSeq uint64 `json:"oldest_hot_seq"` // older records are in the segments
	// Damaged are the segments a scrub found damaged that are still there, by name: their
	// records answer HISTORY_GONE until a good copy is put back under the same name.
	Damaged []DamagedSegment `json:"damaged"`
	Scrub   ArchiveScrub     `json:"scrub"`
}

// DamagedSegment is an archive segment a scrub found damaged.
type DamagedSegment struct {
	Segment  string    `json:"segment"`
	FirstSeq uint64    `json:"first_seq"`
	LastSeq  uint64    `json:"last_seq"`
	Reason   string    `json:"reason"`
	FoundAt  time.Time `json:"found_at"`
}

// ArchiveScrub is how often the scrubs run and what they did since the server started.
type ArchiveScrub struct {
	EverySeconds float64    `json:"every_seconds"` // 0: never
	Passes       uint64     `json:"passes"`        // scrubs that read every segment
	Bytes        uint64     `json:"bytes"`
	LastEnd      *time.Time `json:"last_end"` // null before the first ends
}
