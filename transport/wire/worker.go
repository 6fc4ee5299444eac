package wire

import (
	"encoding/json"
	"time"
)

// Frame types of the worker protocol. Worker → server: hello, credit, heartbeat, event,
// complete, fail. Server → worker: welcome, assign, ack, cancel.
const (
	FrameHello     = "hello"
	FrameCredit    = "credit"
	FrameHeartbeat = "heartbeat"
	FrameEvent     = "event"
	FrameComplete  = "complete"
	FrameFail      = "fail"
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
	// event
	EventType string          `json:"event_type,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	// complete (and assign: Nonce)
	Nonce      string          `json:"nonce,omitempty"`
	Output     json.RawMessage `json:"output,omitempty"`
	OutputHash string          `json:"output_hash,omitempty"`
	Signature  string          `json:"signature,omitempty"`
	// fail
	ErrorCode string `json:"error_code,omitempty"`
	Message   string `json:"message,omitempty"`
	Retryable *bool  `json:"retryable,omitempty"`

	// welcome
	WorkerID         string  `json:"worker_id,omitempty"`
	HeartbeatSeconds float64 `json:"heartbeat_seconds,omitempty"`
	LeaseTTLSeconds  float64 `json:"lease_ttl_seconds,omitempty"`
	// assign
	Queue          string          `json:"queue,omitempty"`
	JobType        string          `json:"job_type,omitempty"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	Attempt        int             `json:"attempt,omitempty"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at,omitempty"`
	// ack: OK, or Error; for a heartbeat Cancel and Unknown list the leases to stop and to
	// forget; for an event Number is its place in the job's stream; Receipt for what changed state.
	OK      *bool        `json:"ok,omitempty"`
	Error   *ErrorDetail `json:"error,omitempty"`
	Cancel  []string     `json:"cancel,omitempty"`
	Unknown []string     `json:"unknown,omitempty"`
	Number  int          `json:"number,omitempty"`
	Receipt *Receipt     `json:"receipt,omitempty"`
}

// WebSocket close codes the server uses, beyond the standard ones (1000 normal, 1001 going
// away at shutdown, 1007 a frame that is not JSON, 1008 a protocol violation, 1009 too big).
const (
	CloseSessionReplaced = 4000 // another connection of the same worker took over
	CloseWorkerRevoked   = 4003 // the worker was revoked or its token expired: do not reconnect
	CloseHeartbeatMissed = 4008 // no heartbeat for three intervals
)

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
type HeartbeatResponse struct {
	Cancel           []string `json:"cancel"`
	Unknown          []string `json:"unknown"`
	HeartbeatSeconds float64  `json:"heartbeat_seconds"`
	LeaseTTLSeconds  float64  `json:"lease_ttl_seconds"`
}

// EventRequest is the body of POST /v1/worker/jobs/{id}/events.
type EventRequest struct {
	LeaseID   string          `json:"lease_id"`
	EventType string          `json:"event_type"`
	Data      json.RawMessage `json:"data,omitempty"`
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

// FailRequest is the body of POST /v1/worker/jobs/{id}/fail; Retryable defaults to true.
type FailRequest struct {
	LeaseID   string `json:"lease_id"`
	ErrorCode string `json:"error_code"`
	Message   string `json:"message,omitempty"`
	Retryable *bool  `json:"retryable,omitempty"`
}
