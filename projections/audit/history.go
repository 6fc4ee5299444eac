package audit

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tetherhq/tether/eventlog"
)

// Entry is one line of a job's history: one record of its stream.
type Entry struct {
	Seq    uint64          `json:"seq"`
	Number int             `json:"number"` // its place in the job's stream, from 1 (the SSE id)
	Time   time.Time       `json:"time"`
	Type   string          `json:"type"`
	Text   string          `json:"text"` // what happened, in words
	Data   json.RawMessage `json:"data"`
	Hash   string          `json:"hash"`
}

// History hands visit the job's records in order, each with its description. A job with no
// records is eventlog.ErrNotFound. It reads the job's stream through the index; Verify proves
// the index and the chain, VerifyThrough the chain up to the job's last record.
func History(l *eventlog.Log, jobID string, visit func(Entry) error) error {
	n := 0
	for r, err := range l.Stream(eventlog.JobStream(jobID), 0) {
		if err != nil {
			return err
		}
		n++
		p, err := eventlog.Decode(r.Type, r.Data)
		if err != nil {
			return &FoldError{Seq: r.Seq, Err: err}
		}
		e := Entry{Seq: r.Seq, Number: n, Time: r.Time, Type: r.Type, Text: Describe(p), Data: r.Data, Hash: r.Hash.String()}
		if err := visit(e); err != nil {
			return err
		}
	}
	if n == 0 {
		return fmt.Errorf("%w: no job %q in the log", eventlog.ErrNotFound, jobID)
	}
	return nil
}

// Describe says in words what an event records, with the ids an auditor follows.
func Describe(p eventlog.Payload) string {
	switch e := p.(type) {
	case eventlog.JobSubmitted:
		s := fmt.Sprintf("submitted by tenant %s%s to queue %s: type %s, priority %d, max_attempts %d",
			e.Tenant, by(e.APIKeyID), e.Queue, e.Type, e.Priority, e.MaxAttempts)
		if e.IdempotencyKey != "" {
			s += fmt.Sprintf(", idempotency key %q", e.IdempotencyKey)
		}
		if e.ReservationID != "" {
			s += ", reservation " + e.ReservationID
		}
		return s
	case eventlog.JobScheduled:
		return fmt.Sprintf("scheduled to run at %s (%s)", stamp(e.RunAt), e.Reason)
	case eventlog.JobLeased:
		return fmt.Sprintf("leased to worker %s, attempt %d, lease %s, expires %s", e.WorkerID, e.Attempt, e.LeaseID, stamp(e.ExpiresAt))
	case eventlog.JobLeaseExtended:
		return fmt.Sprintf("lease %s extended to %s (%s)", e.LeaseID, stamp(e.ExpiresAt), e.Reason)
	case eventlog.JobProgress:
		return fmt.Sprintf("%s under lease %s: %s", e.Kind, e.LeaseID, clip(string(e.Data), 200))
	case eventlog.JobSucceeded:
		signed := "unsigned"
		if e.Signature != "" {
			signed = "signed"
		}
		return fmt.Sprintf("succeeded on attempt %d under lease %s, output hash %s, %s", e.Attempt, e.LeaseID, e.OutputHash, signed)
	case eventlog.JobFailed:
		s := fmt.Sprintf("attempt %d failed under lease %s: %s", e.Attempt, e.LeaseID, e.ErrorCode)
		if e.Message != "" {
			s += ": " + clip(e.Message, 200)
		}
		if !e.Retryable {
			s += " (not retryable)"
		}
		return s
	case eventlog.JobRetryScheduled:
		return fmt.Sprintf("retry after attempt %d: backoff %s, runs at %s", e.Attempt, time.Duration(e.BackoffMillis)*time.Millisecond, stamp(e.RunAt))
	case eventlog.JobLeaseExpired:
		reason := cmp.Or(e.Reason, "expired")
		return fmt.Sprintf("lease %s of worker %s ended on attempt %d: %s", e.LeaseID, e.WorkerID, e.Attempt, reason)
	case eventlog.JobLeaseReleased:
		s := fmt.Sprintf("lease %s of worker %s released (%s)", e.LeaseID, e.WorkerID, e.Reason)
		if e.Message != "" {
			s += ": " + clip(e.Message, 200)
		}
		if e.AttemptSpent {
			return s + fmt.Sprintf("; released too often in a row, so attempt %d counts as failed", e.Attempt)
		}
		return s + fmt.Sprintf("; attempt %d not spent, queued again", e.Attempt)
	case eventlog.JobDeadLettered:
		return fmt.Sprintf("dead-lettered after attempt %d: %s", e.Attempt, e.Reason)
	case eventlog.JobCancelRequested:
		return "cancel requested" + by(e.APIKeyID)
	case eventlog.JobCancelled:
		return fmt.Sprintf("cancelled (%s)%s", e.Reason, by(e.APIKeyID))
	case eventlog.JobRedriven:
		return fmt.Sprintf("re-driven with max_attempts %d%s", e.MaxAttempts, by(e.APIKeyID))
	case eventlog.JobExpired:
		return fmt.Sprintf("expired (%s)%s; it left every view", e.Reason, by(e.APIKeyID))
	}
	return p.EventType()
}

func by(apiKeyID string) string {
	if apiKeyID == "" {
		return ""
	}
	return " (API key " + apiKeyID + ")"
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// clip shortens s to at most n bytes on a rune boundary and puts it on one line.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
