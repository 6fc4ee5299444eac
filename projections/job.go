package projections

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/tetherhq/tether/eventlog"
)

// Status is a job's place in its lifecycle (docs/design.md §4).
type Status string

const (
	// StatusQueued: ready to be leased by a worker of its tenant serving its queue.
	StatusQueued Status = "queued"
	// StatusScheduled: waiting for RunAt (a delay, run_at, or a retry backoff). It counts as
	// queued once RunAt has passed; no event marks that moment.
	StatusScheduled Status = "scheduled"
	// StatusLeased: one worker holds the job under Lease.
	StatusLeased Status = "leased"
	// StatusSucceeded: terminal; the lease holder completed it with Output.
	StatusSucceeded Status = "succeeded"
	// StatusFailed: terminal until re-driven; the job is in the dead-letter queue (DeadReason).
	StatusFailed Status = "failed"
	// StatusCancelled: terminal; it will not run again.
	StatusCancelled Status = "cancelled"
	// StatusExpired is never in the views: it is what an idempotent hit on a job that has left
	// them (job.expired) answers with.
	StatusExpired Status = "expired"
)

// Terminal reports whether no event but a re-drive can follow.
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusCancelled
}

// ProgressKept is how many progress events a job snapshot keeps; older ones are in the log.
const ProgressKept = 100

// Lease is the one valid lease on a leased job.
type Lease struct {
	LeaseID   string    `json:"lease_id"`
	WorkerID  string    `json:"worker_id"`
	SessionID string    `json:"session_id,omitempty"`
	Nonce     string    `json:"nonce"`
	Attempt   int       `json:"attempt"`
	ExpiresAt time.Time `json:"expires_at"`
}

// JobError is the last failure of a job.
type JobError struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

// Progress is one event a worker appended to a job. Number is its place in the job's stream
// (lifecycle events included), the id a client resumes an event stream from.
type Progress struct {
	Number    int             `json:"number"`
	Seq       uint64          `json:"seq"`
	Time      time.Time       `json:"time"`
	Kind      string          `json:"event_type"`
	Data      json.RawMessage `json:"data,omitempty"`
	WorkerSeq int             `json:"worker_seq,omitempty"`
}

// Job is the snapshot of one job: the fold of its stream.
type Job struct {
	ID          string            `json:"id"`
	Tenant      string            `json:"tenant"`
	Queue       string            `json:"queue"`
	Type        string            `json:"type"`
	Payload     json.RawMessage   `json:"payload"`
	Priority    int               `json:"priority"`
	Labels      map[string]string `json:"labels,omitempty"`
	Status      Status            `json:"status"`
	Attempt     int               `json:"attempt"`
	MaxAttempts int               `json:"max_attempts"`
	// AttemptBase is the attempt count when the job was last re-driven; backoff counts from it.
	AttemptBase int           `json:"attempt_base,omitempty"`
	LeaseTTL    time.Duration `json:"lease_ttl"`
	// LastLeaseID is the most recent lease, current or ended.
	LastLeaseID string `json:"last_lease_id,omitempty"`
	// Releases counts the leases released in a row without spending an attempt; an attempt
	// spent (or re-drive) resets it.
	Releases        int       `json:"releases,omitempty"`
	RunAt           time.Time `json:"run_at,omitzero"`
	Lease           *Lease    `json:"lease"`
	CancelRequested bool      `json:"cancel_requested"`
	// SucceededLease, SucceededSeq, SucceededNonce and Signature identify the accepted
	// completion, so a repeat of it, and only an exact repeat, is recognised after the job's
	// actor is gone.
	Output         json.RawMessage `json:"output,omitempty"`
	OutputHash     string          `json:"output_hash,omitempty"`
	SucceededLease string          `json:"succeeded_lease,omitempty"`
	SucceededSeq   uint64          `json:"succeeded_seq,omitempty"`
	SucceededNonce string          `json:"succeeded_nonce,omitempty"`
	Signature      string          `json:"signature,omitempty"`
	Error          *JobError       `json:"error"`
	DeadReason     string          `json:"dead_reason,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
	// StartedAt is when the last lease began and WorkerID whose it was; both stay after the
	// lease ends. FinishedAt is when the job became terminal (zero while it is not).
	StartedAt      time.Time `json:"started_at,omitzero"`
	WorkerID       string    `json:"worker_id,omitempty"`
	FinishedAt     time.Time `json:"finished_at,omitzero"`
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	RequestHash    string    `json:"request_hash,omitempty"`
	// ResultTTL, if set, is how long the job stays once it succeeded or was cancelled
	// (Retention).
	ResultTTL time.Duration `json:"result_ttl,omitempty"`
	// FlowID and FlowStep name the flow step the job runs, if it is one.
	FlowID   string `json:"flow_id,omitempty"`
	FlowStep string `json:"flow_step,omitempty"`
	// ScheduleID names the schedule that fired the job, if one did.
	ScheduleID string `json:"schedule_id,omitempty"`
	// ConcurrencyKey is the key whose leases the dispatcher caps (eventlog.TenantKeyLimitSet).
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
	// RateLimits are the tenant's rate limits each lease of the job takes a token from
	// (eventlog.TenantRateLimitSet). Never changed once set: clones share it.
	RateLimits []eventlog.RateLimitUse `json:"rate_limits,omitempty"`
	// Traceparent is the W3C trace context the job's work continues (eventlog.JobSubmitted).
	Traceparent string `json:"traceparent,omitempty"`
	// SubmitSeq orders jobs of equal priority by age; LastSeq is the seq of the job's last event.
	SubmitSeq uint64 `json:"submit_seq"`
	LastSeq   uint64 `json:"last_seq"`
	// WorkerSeq is the highest number the current lease's worker gave an event it wrote, and
	// WorkerSeqEvent that event's number in the stream (eventlog.JobProgress.WorkerSeq).
	WorkerSeq      int `json:"worker_seq,omitempty"`
	WorkerSeqEvent int `json:"worker_seq_event,omitempty"`
	// Events counts every event in the job's stream; Progress keeps the last ProgressKept
	// progress events, and EventsTruncated says older ones were dropped from the snapshot.
	Events          int        `json:"events"`
	Progress        []Progress `json:"progress,omitempty"`
	EventsTruncated bool       `json:"events_truncated"`
}

// StatusAt is the status a client sees at now: a scheduled job whose RunAt has passed is queued.
func (j *Job) StatusAt(now time.Time) Status {
	if j.Status == StatusScheduled && !now.Before(j.RunAt) {
		return StatusQueued
	}
	return j.Status
}

// Waiting reports whether the job is queued or scheduled: owned by the queue, not by a lease.
func (j *Job) Waiting() bool { return j.Status == StatusQueued || j.Status == StatusScheduled }

// LeaseWrittenUnder reports whether the current lease's worker wrote an event under it, so the
// assignment reached it: an event it numbered, or the newest event kept, if it came after the
// lease (in a later commit: the worker wrote it once the lease was durable).
func (j *Job) LeaseWrittenUnder() bool {
	if j.Lease == nil {
		return false
	}
	return j.WorkerSeq > 0 || (len(j.Progress) > 0 && j.Progress[len(j.Progress)-1].Time.After(j.StartedAt))
}

// Clone returns a deep copy that shares nothing mutable with j.
func (j *Job) Clone() *Job {
	c := new(Job)
	j.CloneInto(c)
	return c
}

// CloneInto makes *dst what Clone returns, in memory the caller already has (a job's actor
// keeps its copy in itself).
func (j *Job) CloneInto(dst *Job) {
	c := *j
	if j.Lease != nil {
		l := *j.Lease
		c.Lease = &l
	}
	if j.Error != nil {
		e := *j.Error
		c.Error = &e
	}
	c.Progress = append([]Progress(nil), j.Progress...)
	if j.Labels != nil {
		c.Labels = make(map[string]string, len(j.Labels))
		for k, v := range j.Labels {
			c.Labels[k] = v
		}
	}
	*dst = c
}

// NewJob is the job that a job.submitted at seq, written at at, creates; Fold applies the
// events of its stream after it. The projections make their job with it, and the tenant the
// snapshot a submit answers with, so the two cannot disagree.
func NewJob(seq uint64, at time.Time, e eventlog.JobSubmitted) *Job {
	return &Job{
		ID: e.JobID, Tenant: e.Tenant, Queue: e.Queue, Type: e.Type, Payload: e.Payload,
		Priority: e.Priority, Labels: e.Labels, Status: StatusQueued, MaxAttempts: e.MaxAttempts,
		LeaseTTL: time.Duration(e.LeaseTTLMillis) * time.Millisecond, CreatedAt: at, UpdatedAt: at,
		IdempotencyKey: e.IdempotencyKey, RequestHash: e.RequestHash, SubmitSeq: seq, LastSeq: seq,
		Events: 1, ResultTTL: time.Duration(e.ResultTTLMillis) * time.Millisecond, FlowID: e.FlowID, FlowStep: e.FlowStep,
		ScheduleID: e.ScheduleID, ConcurrencyKey: e.ConcurrencyKey, RateLimits: e.RateLimits, Traceparent: e.Traceparent,
	}
}

// Fold applies one event of the job's stream (other than job.submitted, which creates the job)
// to the snapshot. The job behaviour folds the events it decides into its own copy with it, so
// the actor and the projection cannot disagree on what an event means.
func (j *Job) Fold(seq uint64, at time.Time, p eventlog.Payload) {
	j.Events++
	j.LastSeq, j.UpdatedAt = seq, at
	switch e := p.(type) {
	case eventlog.JobScheduled:
		j.Status, j.RunAt = StatusScheduled, e.RunAt
	case eventlog.JobLeased:
		j.Status, j.Attempt, j.RunAt, j.LastLeaseID = StatusLeased, e.Attempt, time.Time{}, e.LeaseID
		j.StartedAt, j.WorkerID, j.WorkerSeq, j.WorkerSeqEvent = at, e.WorkerID, 0, 0
		j.Lease = &Lease{LeaseID: e.LeaseID, WorkerID: e.WorkerID, SessionID: e.SessionID, Nonce: e.Nonce, Attempt: e.Attempt, ExpiresAt: e.ExpiresAt}
	case eventlog.JobLeaseExtended:
		if j.Lease != nil && j.Lease.LeaseID == e.LeaseID {
			j.Lease.ExpiresAt = e.ExpiresAt
		}
	case eventlog.JobProgress:
		j.Progress = append(j.Progress, Progress{Number: j.Events, Seq: seq, Time: at, Kind: e.Kind, Data: e.Data, WorkerSeq: e.WorkerSeq})
		if e.WorkerSeq > j.WorkerSeq {
			j.WorkerSeq, j.WorkerSeqEvent = e.WorkerSeq, j.Events
		}
		if len(j.Progress) > ProgressKept {
			j.Progress = slices.Delete(j.Progress, 0, len(j.Progress)-ProgressKept)
			j.EventsTruncated = true
		}
	case eventlog.JobSucceeded:
		if j.Lease != nil {
			j.SucceededNonce = j.Lease.Nonce
		}
		j.Signature = e.Signature
		j.Status, j.Lease, j.Error, j.FinishedAt = StatusSucceeded, nil, nil, at
		j.Output, j.OutputHash, j.SucceededLease, j.SucceededSeq = e.Output, e.OutputHash, e.LeaseID, seq
	case eventlog.JobFailed:
		j.Lease, j.Releases = nil, 0
		j.Error = &JobError{Code: e.ErrorCode, Message: e.Message}
	case eventlog.JobLeaseReleased:
		j.Lease = nil
		if e.AttemptSpent {
			j.Error = &JobError{Code: "released_too_often", Message: fmt.Sprintf("released %d times in a row without being run (last: %s)", j.Releases+1, e.Reason)}
			j.Releases = 0
			break
		}
		// Not attempted: the job is as it was before the lease, queued.
		j.Status, j.Attempt, j.Releases = StatusQueued, e.Attempt-1, j.Releases+1
	case eventlog.JobLeaseExpired:
		j.Lease, j.Releases = nil, 0
		j.Error = &JobError{Code: "lease_expired", Message: "the lease ran out before the worker finished"}
		if e.Reason == eventlog.LeaseExpiredWorkerRevoked {
			j.Error = &JobError{Code: "worker_revoked", Message: "the worker was revoked while it held the lease"}
		}
	case eventlog.JobRetryScheduled:
		j.Status, j.RunAt = StatusScheduled, e.RunAt
	case eventlog.JobDeadLettered:
		j.Status, j.DeadReason, j.FinishedAt = StatusFailed, e.Reason, at
	case eventlog.JobCancelRequested:
		j.CancelRequested = true
	case eventlog.JobCancelled:
		j.Status, j.Lease, j.FinishedAt = StatusCancelled, nil, at
	case eventlog.JobRedriven:
		j.Status, j.DeadReason, j.Error, j.RunAt, j.Releases, j.FinishedAt = StatusQueued, "", nil, time.Time{}, 0, time.Time{}
		j.MaxAttempts, j.AttemptBase, j.CancelRequested = e.MaxAttempts, j.Attempt, false
	}
}
