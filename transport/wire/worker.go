package wire

import (
	"encoding/json"
	"time"
)

// Frame types of the worker protocol. Worker → server: hello, credit, heartbeat, event,
// complete, fail, release, renew. Server → worker: welcome, assign, ack, cancel.
const (
	FrameHello     = "hello"
	FrameCredit    = "credit"
	FrameHeartbeat = "heartbeat"
	FrameEvent     = "event"
	FrameComplete  = "complete"
	FrameFail      = "fail"
	FrameRelease   = "release"
	FrameRenew     = "renew"
	FrameWelcome   = "welcome"
	FrameAssign    = "assign"
	FrameAck       = "ack"
	FrameCancel    = "cancel"
)

// Frame is one WebSocket text frame: a flat JSON object whose Type names it. Each frame type
// uses the fields its comment names; Ref is a worker-chosen tag that the server's ack echoes.
type Frame struct {
	Type string `json:"type"`
	Ref  string `json:"ref,omitempty"`

	// hello, credit
	Capacity int `json:"capacity,omitempty"`
	N        int `json:"n,omitempty"`
	// heartbeat
	Leases []string `json:"leases,omitempty"`
	// event, complete, fail, assign, cancel
	JobID   string `json:"job_id,omitempty"`
	LeaseID string `json:"lease_id,omitempty"`
	// event. Seq numbers the worker's events within one attempt, from 1: the server writes the
	// first event of each number and answers a repeat with that first write's Number, writing
	// nothing. 0: not numbered, every event is written.
	EventType string          `json:"event_type,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	Seq       int             `json:"seq,omitempty"`
	// complete (and assign: Nonce)
	Nonce      string          `json:"nonce,omitempty"`
	Output     json.RawMessage `json:"output,omitempty"`
	OutputHash string          `json:"output_hash,omitempty"`
	Signature  string          `json:"signature,omitempty"`
	// fail (and release: Message)
	ErrorCode string `json:"error_code,omitempty"`
	Message   string `json:"message,omitempty"`
	Retryable *bool  `json:"retryable,omitempty"`
	// release: why the worker gives the job back untried or unfinished ("worker_stopping",
	// "start_failed", "worker_restarted", "released"); no attempt is spent
	Reason string `json:"reason,omitempty"`

	// welcome (and assign: HeartbeatSeconds, how often to heartbeat while holding that lease)
	WorkerID         string  `json:"worker_id,omitempty"`
	HeartbeatSeconds float64 `json:"heartbeat_seconds,omitempty"`
	LeaseTTLSeconds  float64 `json:"lease_ttl_seconds,omitempty"`
	// PublicKey is the Ed25519 key (base64) the worker registered, which every completion
	// must be signed with; empty: results are not signed.
	PublicKey string `json:"public_key,omitempty"`
	// assign
	Queue          string          `json:"queue,omitempty"`
	JobType        string          `json:"job_type,omitempty"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	Attempt        int             `json:"attempt,omitempty"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at,omitempty"`
	// Traceparent, on an assign, is the W3C trace context the job continues (its submitter's,
	// or its attempt's span when the server traces), for the worker's own spans of the job; on
	// a complete, fail or release, the worker's (its run's span, or the assign's), which the
	// server's span of the report continues. Over HTTP it is the traceparent header.
	Traceparent string `json:"traceparent,omitempty"`
	// ack: OK, or Error; for a heartbeat Cancel and Unknown list the leases to stop and to
	// forget; for an event Number is its place in the job's stream; Receipt for what changed state.
	OK      *bool        `json:"ok,omitempty"`
	Error   *ErrorDetail `json:"error,omitempty"`
	Cancel  []string     `json:"cancel,omitempty"`
	Unknown []string     `json:"unknown,omitempty"`
	Number  int          `json:"number,omitempty"`
	Receipt *Receipt     `json:"receipt,omitempty"`

	// welcome, and the ack of a heartbeat: when the worker token expires, and in how many
	// seconds to renew it (0: now). The ack of a renew: the new token and its expiry.
	WorkerToken       string     `json:"worker_token,omitempty"`
	TokenExpiresAt    *time.Time `json:"token_expires_at,omitempty"`
	TokenRenewSeconds *float64   `json:"token_renew_seconds,omitempty"`
}

// LeaseRequest is the body of POST /v1/worker/lease (long-poll).
type LeaseRequest struct {
	Max         int     `json:"max"`
	WaitSeconds float64 `json:"wait_seconds"`
}

// Assignments answers POST /v1/worker/lease with the jobs leased to the worker.
type Assignments struct {
	Assignments []Frame `json:"assignments"`
}

// HeartbeatRequest is the body of POST /v1/worker/heartbeat.
type HeartbeatRequest struct {
	Leases []string `json:"leases"`
}

// HeartbeatResponse lists the leases to cancel and the ones the server no longer knows.
// HeartbeatSeconds is the interval for a worker that holds no lease with a shorter one (each
// assignment says its own); PublicKey is as in the welcome frame.
type HeartbeatResponse struct {
	Cancel           []string `json:"cancel"`
	Unknown          []string `json:"unknown"`
	HeartbeatSeconds float64  `json:"heartbeat_seconds"`
	LeaseTTLSeconds  float64  `json:"lease_ttl_seconds"`
	PublicKey        string   `json:"public_key,omitempty"`
	// TokenExpiresAt is when the worker token expires; TokenRenewSeconds is in how many
	// seconds the worker should renew it (POST /v1/worker/token), 0 meaning now.
	TokenExpiresAt    time.Time `json:"token_expires_at"`
	TokenRenewSeconds float64   `json:"token_renew_seconds"`
}

// TokenRenewal answers POST /v1/worker/token (and a renew frame's ack carries the same): the
// worker's new token. The token the request was made with keeps working for a short grace.
type TokenRenewal struct {
	WorkerID    string    `json:"worker_id"`
	WorkerToken string    `json:"worker_token"`
	ExpiresAt   time.Time `json:"expires_at"`
	Receipt     Receipt   `json:"receipt"`
}

// EventRequest is the body of POST /v1/worker/jobs/{id}/events.
type EventRequest struct {
	LeaseID   string          `json:"lease_id"`
	EventType string          `json:"event_type"`
	Data      json.RawMessage `json:"data,omitempty"`
	Seq       int             `json:"seq,omitempty"` // as in the event frame
}

// EventAck answers an appended event with its number in the job's stream.
type EventAck struct {
	Number  int     `json:"number"`
	Receipt Receipt `json:"receipt"`
}

// CompleteRequest is the body of POST /v1/worker/jobs/{id}/complete.
type CompleteRequest struct {
	LeaseID    string          `json:"lease_id"`
	Nonce      string          `json:"nonce"`
	Output     json.RawMessage `json:"output"`
	OutputHash string          `json:"output_hash,omitempty"`
	Signature  string          `json:"signature,omitempty"`
}

// ReleaseRequest is the body of POST /v1/worker/jobs/{id}/release: the worker gives the job
// back untried or unfinished, and no attempt is spent.
type ReleaseRequest struct {
	LeaseID string `json:"lease_id"`
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

// OutputBytesMax caps a job's output: its JSON, as the complete frame or body carries it.
// A worker checks it before it sends a result; the server refuses more with 413.
const OutputBytesMax = 1 << 20

// FailRequest is the body of POST /v1/worker/jobs/{id}/fail; Retryable defaults to true.
type FailRequest struct {
	LeaseID   string `json:"lease_id"`
	ErrorCode string `json:"error_code"`
	Message   string `json:"message,omitempty"`
	Retryable *bool  `json:"retryable,omitempty"`
}
