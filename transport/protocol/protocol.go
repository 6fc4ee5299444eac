// Package protocol translates between the worker protocol's frames (transport/wire) and the
// broker's commands and notices (actors), with no sockets: the WebSocket and long-poll handlers
// use it, and so do the simulator's workers, which speak the protocol through the real JSON
// codec without a network.
package protocol

import (
	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/transport/wire"
)

// WorkerOp turns an event, complete, fail or release (a frame, or a long-poll body in frame form) into
// the broker's command, checking what the broker does not. A frame it refuses gets an
// INVALID_ARGUMENT *actors.Rejection.
func WorkerOp(workerID, jobID string, f wire.Frame) (any, error) {
	invalid := func(msg string) (any, error) {
		return nil, &actors.Rejection{Code: actors.CodeInvalidArgument, Message: msg}
	}
	if jobID == "" || f.LeaseID == "" {
		return invalid("job_id and lease_id are required")
	}
	switch f.Type {
	case wire.FrameEvent:
		if f.EventType == "" {
			return invalid("event_type is required")
		}
		return actors.Progress{WorkerID: workerID, JobID: jobID, LeaseID: f.LeaseID, Kind: f.EventType, Data: f.Data, Seq: f.Seq}, nil
	case wire.FrameComplete:
		if f.Nonce == "" {
			return invalid("nonce is required: it came with the assignment")
		}
		return actors.Complete{WorkerID: workerID, JobID: jobID, LeaseID: f.LeaseID, Nonce: f.Nonce, Output: f.Output,
			OutputHash: f.OutputHash, Signature: f.Signature}, nil
	case wire.FrameFail:
		if f.ErrorCode == "" {
			return invalid("error_code is required")
		}
		return actors.Fail{WorkerID: workerID, JobID: jobID, LeaseID: f.LeaseID, Code: f.ErrorCode, Message: f.Message,
			Retryable: f.Retryable == nil || *f.Retryable}, nil
	case wire.FrameRelease:
		if f.Reason == "" {
			return invalid("reason is required, e.g. worker_stopping")
		}
		return actors.ReleaseLease{WorkerID: workerID, JobID: jobID, LeaseID: f.LeaseID, Reason: f.Reason, Message: f.Message}, nil
	}
	return invalid("frame type " + f.Type + " is not an operation on a job")
}

// AssignFrame is an assignment as the worker protocol sends it, over WebSocket or long-poll.
func AssignFrame(a actors.Assignment) wire.Frame {
	at := a.LeaseExpiresAt
	return wire.Frame{Type: wire.FrameAssign, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce, Queue: a.Queue,
		JobType: a.JobType, Payload: a.Payload, Attempt: a.Attempt, LeaseExpiresAt: &at, HeartbeatSeconds: a.HeartbeatInterval.Seconds(),
		Traceparent: a.Traceparent}
}

// CancelFrame tells the worker a client asked to cancel the job it holds.
func CancelFrame(c actors.CancelNotice) wire.Frame {
	return wire.Frame{Type: wire.FrameCancel, JobID: c.JobID, LeaseID: c.LeaseID}
}

// Ack is the frame that answers the frame ref: ok, or the rejection.
func Ack(ref string, r *actors.Rejection) wire.Frame {
	ok := r == nil
	f := wire.Frame{Type: wire.FrameAck, Ref: ref, OK: &ok}
	if r != nil {
		details := r.Details
		if details == nil {
			details = map[string]any{}
		}
		f.Error = &wire.ErrorDetail{Code: string(r.Code), Message: r.Message, Details: details}
	}
	return f
}
