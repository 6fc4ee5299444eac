package actors

import (
	"encoding/json"
	"time"

	"github.com/tetherhq/tether/projections"
)

// Commands from the facade and the replies they get. Every reply carries Err (a *Rejection) or
// the receipt of the last event the command caused; a command that caused no event (an
// idempotent hit, a repeated completion) carries the receipt of the event that did.

// Submit asks a tenant to accept jobs, all or none.
type Submit struct {
	Tenant   string
	Jobs     []JobSpec
	APIKeyID string
	// Traceparent is the submit's W3C trace context, which every job of it continues. It is
	// not part of a job's request for idempotency: a retry in a new trace is the same submit.
	Traceparent string
}

// Submitted answers Submit.
type Submitted struct {
	Jobs    []SubmittedJob
	Receipt Receipt
	Err     *Rejection
}

// SubmittedJob is one accepted job. IdempotentHit says an earlier submit with the same key and
// body created it.
type SubmittedJob struct {
	ID            string
	IdempotentHit bool
	// Job is the job as its submit made it, durable at the reply's receipt, for the caller to
	// answer with (no read of the projections); nil for an idempotent hit, which is read from
	// them (the facade's Submit fills it in).
	Job *projections.Job
}

// Reserve asks a tenant to hold one max_active slot for TTL (0: ReservationTTLDefault).
type Reserve struct {
	Tenant string
	TTL    time.Duration
}

// Reserved answers Reserve.
type Reserved struct {
	ID        string
	ExpiresAt time.Time
	Receipt   Receipt
	Err       *Rejection
}

// Release gives a reservation back.
type Release struct {
	Tenant string
	ID     string
}

// SetQuota sets a tenant's limits; zero means unlimited. A nil limit keeps its current value,
// so a partial update changes only what it names (read and written in the tenant's one actor).
type SetQuota struct {
	Tenant     string
	MaxActive  *int
	MaxRunning *int
}

// RegisterWorker enrolls a worker. The shell makes the token; only its hash reaches the log.
type RegisterWorker struct {
	Tenant    string
	Name      string
	Queues    []string
	Capacity  int
	PublicKey string // base64 Ed25519, optional
	Labels    map[string]string
	TokenHash string
	ExpiresAt time.Time
	// EnrollTokenID, when set, names the enroll token the worker registered with; one of its
	// uses is spent in the same append.
	EnrollTokenID string
}

// Registered answers RegisterWorker.
type Registered struct {
	WorkerID string
	Receipt  Receipt
	Err      *Rejection
}

// RenewWorkerToken replaces a worker's token with a new one the shell made, of which only the
// hash reaches the log. PresentedHash is the hash of the token the worker asked with: it keeps
// working for TokenRenewGrace, in case the answer is lost on the way.
type RenewWorkerToken struct {
	Tenant        string
	WorkerID      string
	PresentedHash string
	TokenHash     string
	ExpiresAt     time.Time
}

// RevokeWorker stops a worker for good: its session ends and its leases go back at once.
type RevokeWorker struct {
	Tenant   string
	WorkerID string
	By       string
}

// CreateAPIKey records a tenant's new API key. The shell makes the key; only its hash reaches
// the log.
type CreateAPIKey struct {
	Tenant  string
	KeyHash string
}

// RevokeAPIKey stops an API key for good.
type RevokeAPIKey struct {
	Tenant string
	KeyID  string
}

// CreateEnrollToken records a token that lets Uses workers register until ExpiresAt. The shell
// makes the token; only its hash reaches the log.
type CreateEnrollToken struct {
	Tenant    string
	TokenHash string
	Uses      int
	ExpiresAt time.Time
}

// Created answers CreateAPIKey and CreateEnrollToken with the new credential's id.
type Created struct {
	ID      string
	Receipt Receipt
	Err     *Rejection
}

// Cancel asks for a job to be cancelled. Reason is the job.cancelled reason of a waiting job
// (eventlog.CancelledRequested if empty).
type Cancel struct {
	Tenant   string
	JobID    string
	APIKeyID string
	Reason   string
}

// Redrive puts a dead-lettered job back in its queue with a fresh attempt budget.
type Redrive struct {
	Tenant   string
	JobID    string
	APIKeyID string
}

// Delete takes a finished job out of every view now (DELETE /v1/jobs/{id}); Done answers.
type Delete struct {
	Tenant   string
	JobID    string
	APIKeyID string
}

// PurgeDead takes a tenant's dead letters that died before Before out of every view, those of
// Queue only if it is set, oldest first and at most PurgeLimit a call; PurgeDone answers.
type PurgeDead struct {
	Tenant   string
	Queue    string
	Before   time.Time
	APIKeyID string
}

// PurgeLimit caps the dead letters one PurgeDead takes; More says to call again.
const PurgeLimit = 1000

// PurgeDone answers PurgeDead.
type PurgeDone struct {
	Purged  int
	More    bool
	Receipt Receipt
	Err     *Rejection
}

// PauseQueue pauses a tenant's queue (Paused) or resumes it; Done answers. A paused queue takes
// submits and assigns nothing. Asking for the state the queue is in changes nothing and answers
// the receipt of the event that put it there (none for a queue never paused).
type PauseQueue struct {
	Tenant   string
	Queue    string
	Paused   bool
	APIKeyID string
}

// SetKeyLimit sets how many leases one concurrency key of the tenant may hold at once in Queue,
// or with Queue empty in every queue without a limit of its own; 0 is unlimited, and nil clears
// the limit (a queue follows the tenant's again). Done answers, once it is durable
// (eventlog.TenantKeyLimitSet).
type SetKeyLimit struct {
	Tenant           string
	Queue            string
	MaxRunningPerKey *int
	APIKeyID         string
}

// Done answers a command that returns nothing but its receipt.
type Done struct {
	Receipt Receipt
	Err     *Rejection
}

// Worker operations on a leased job. WorkerID is the authenticated worker.

// Progress appends a worker event to a job.
type Progress struct {
	WorkerID string
	JobID    string
	LeaseID  string
	Kind     string
	Data     json.RawMessage
	// Seq is the worker's number for the event within its lease (0: not numbered). The first
	// write of a number is kept: a number at or below the highest written is a repeat.
	Seq int
}

// ProgressAck answers Progress with the event's number in the job's stream.
type ProgressAck struct {
	Number  int
	Receipt Receipt
	Err     *Rejection
}

// Complete reports a job's output.
type Complete struct {
	WorkerID   string
	JobID      string
	LeaseID    string
	Nonce      string
	Output     json.RawMessage
	OutputHash string // optional; checked against Output when given
	Signature  string // base64 Ed25519; required when the worker registered a key
}

// Fail reports a failed attempt.
type Fail struct {
	WorkerID  string
	JobID     string
	LeaseID   string
	Code      string
	Message   string
	Retryable bool
}

// ReleaseLease gives a leased job back without spending an attempt: the worker is stopping
// cleanly, or could not start the job. Reason is a short code (eventlog.ReleasedWorkerStopping,
// eventlog.ReleasedStartFailed); the job is queued again at once. Answered with Done.
type ReleaseLease struct {
	WorkerID string
	JobID    string
	LeaseID  string
	Reason   string
	Message  string
}

// Undelivered says the assignment of a lease never reached its worker (a long poll ended
// first, the connection died before the frame was written): the job's actor releases the lease
// with no attempt spent. No reply.
type Undelivered struct{ JobID, LeaseID string }

// Session commands. The facade sends them to SessionRef(id).

// The transports a session is opened over.
const (
	TransportWebSocket = "websocket"
	TransportLongPoll  = "longpoll"
)

// OpenSession starts a worker's session. The session's frames go to the sink its actor was
// made with.
type OpenSession struct {
	WorkerID  string
	Transport string // TransportWebSocket or TransportLongPoll
	Capacity  int    // 0: the registered capacity
}

// SessionOpened answers OpenSession.
type SessionOpened struct {
	HeartbeatInterval time.Duration
	LeaseTTL          time.Duration
	Receipt           Receipt
	Err               *Rejection
}

// Heartbeat says the worker is alive and still works on Leases.
type Heartbeat struct{ Leases []string }

// HeartbeatAck lists the leases the worker should stop (cancel requested) or forget (unknown:
// ended, expired or never its own).
type HeartbeatAck struct {
	CancelRequested []string
	Unknown         []string
	Err             *Rejection
}

// CloseSession ends a session from the worker's side.
type CloseSession struct{ Reason string }

// Offer lets a long-poll session be assigned up to N jobs while one of its polls waits: the
// session passes it to the dispatcher as credit. Answered by OfferAck. A WebSocket session's
// credit comes straight from its frames (SessionCredit) and lasts as long as the socket.
type Offer struct{ N int }

// OfferAck answers Offer; SESSION_CLOSED means the session ended and a new one is needed.
type OfferAck struct{ Err *Rejection }

// Withdraw ends a long-poll session's offer: the dispatcher forgets its credit, and the session
// sends its sink OfferEnded after every assignment the offer brought. An assignment that
// reaches the session later goes back to the queue (Undelivered).
type Withdraw struct{}

// Frames a session sends to its Sink.

// Assignment hands a leased job to the worker. HeartbeatInterval is how often the worker must
// heartbeat while it holds this lease: a third of the job's lease_ttl, at most
// HeartbeatInterval.
type Assignment struct {
	JobID             string
	LeaseID           string
	Nonce             string
	Queue             string
	JobType           string
	Payload           json.RawMessage
	Attempt           int
	LeaseExpiresAt    time.Time
	HeartbeatInterval time.Duration
	Traceparent       string // the W3C trace context the job continues
}

// CancelNotice tells the worker a client asked to cancel the job it holds.
type CancelNotice struct {
	JobID   string
	LeaseID string
}

// Bounce says what becomes of a message that could not reach its worker: an assignment goes
// back to its job (Undelivered, by way of the dispatcher), anything else is dropped. Every
// path that fails to hand an assignment over calls it: a session offering nothing, a runtime
// that finds a session gone or its connection stalled, a transport that could not write it.
func Bounce(msg any) (to Ref, notice any, ok bool) {
	if a, isAssignment := msg.(Assignment); isAssignment {
		return DispatcherRef(), Undelivered{JobID: a.JobID, LeaseID: a.LeaseID}, true
	}
	return Ref{}, nil, false
}

// OfferEnded tells the sink that an offer was withdrawn: every assignment it brought came
// before.
type OfferEnded struct{}

// SessionEnded tells the sink the session is over (Reason as in worker.session_ended).
type SessionEnded struct{ Reason string }
