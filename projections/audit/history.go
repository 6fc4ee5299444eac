package audit

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tetherhq/tether/eventlog"
)

// Entry is one line of a job's history: one record of its stream.
type Entry struct {
	Seq    uint64          `json:"seq"`
	Number int             `json:"number"` // its place in the job's stream, from 1 (the SSE id); 0 when records before it are not here
	Time   time.Time       `json:"time"`
	Type   string          `json:"type"`
	Text   string          `json:"text"` // what happened, in words
	Data   json.RawMessage `json:"data"`
	Hash   string          `json:"hash"`
}

// History hands visit the records of a job, a flow or a schedule (the first of those streams
// that id has) in order, each with its description, and returns the runs of archived records
// that are not here and may hold records of it: those after its first record here, and those
// before it unless that record is where such a stream begins. An id with no records is
// eventlog.ErrNotFound. It reads the stream through the index; Verify proves the index and the
// chain, VerifyRunThrough the chain up to the stream's last record.
func History(l *eventlog.Log, id string, visit func(Entry) error) ([]Gap, error) {
	var gaps []Gap
	for _, stream := range []string{eventlog.JobStream(id), eventlog.FlowStream(id), eventlog.ScheduleStream(id)} {
		n, g, err := history(l, stream, visit)
		if n > 0 || err != nil {
			return g, err
		}
		gaps = g
	}
	if len(gaps) > 0 {
		return gaps, fmt.Errorf("%w: no job, flow or schedule %q in the records here, and %s", eventlog.ErrNotFound, id, gapsText(gaps))
	}
	return nil, fmt.Errorf("%w: no job, flow or schedule %q in the log", eventlog.ErrNotFound, id)
}

func history(l *eventlog.Log, stream string, visit func(Entry) error) (n int, gaps []Gap, err error) {
	var before []Gap    // the gaps before the first record here
	unnumbered := false // the stream began in a gap: its events' numbers are not known
	for r, err := range l.Stream(stream, 0) {
		var ge *eventlog.GapError
		if errors.As(err, &ge) {
			g := Gap{First: ge.First, Last: ge.Last, Pruned: ge.Pruned, Why: ge.Why}
			if n == 0 {
				before = append(before, g)
			} else {
				gaps = append(gaps, g)
			}
			continue
		}
		if err != nil {
			return n, gaps, err
		}
		if n == 0 && !opensStream(r.Type) && len(before) > 0 {
			gaps = append(gaps, before...) // it began in one of them
			unnumbered = true
		}
		n++
		p, err := eventlog.Decode(r.Type, r.Data)
		if err != nil {
			return n, gaps, &FoldError{Seq: r.Seq, Err: err}
		}
		number := n
		if unnumbered || len(gaps) > 0 {
			number = 0 // records of the stream may be missing before it
		}
		e := Entry{Seq: r.Seq, Number: number, Time: r.Time, Type: r.Type, Text: Describe(p), Data: r.Data, Hash: r.Hash.String()}
		if err := visit(e); err != nil {
			return n, gaps, err
		}
	}
	if n == 0 {
		gaps = before
	}
	return n, gaps, nil
}

// opensStream reports whether an event of this type is the first of its stream.
func opensStream(typ string) bool {
	switch typ {
	case eventlog.JobSubmitted{}.EventType(), eventlog.FlowSubmitted{}.EventType(), eventlog.ScheduleCreated{}.EventType():
		return true
	}
	return false
}

// gapsText says which records are not here, and why.
func gapsText(gaps []Gap) string {
	parts := make([]string, len(gaps))
	for i, g := range gaps {
		parts[i] = fmt.Sprintf("records %d..%d are not here (%s)", g.First, g.Last, g.Why)
	}
	return strings.Join(parts, "; ")
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
	case eventlog.FlowSubmitted:
		return fmt.Sprintf("flow %s submitted by tenant %s%s: %d steps", e.Name, e.Tenant, by(e.APIKeyID), len(e.Steps))
	case eventlog.FlowStepSkipped:
		return fmt.Sprintf("step %s skipped (%s)", e.Step, e.Reason)
	case eventlog.FlowEnded:
		if e.Step != "" {
			return fmt.Sprintf("ended %s at step %s", e.Status, e.Step)
		}
		return fmt.Sprintf("ended %s%s", e.Status, by(e.APIKeyID))
	case eventlog.FlowExpired:
		return fmt.Sprintf("expired (%s); it left every view", e.Reason)
	case eventlog.WorkerExpired:
		return fmt.Sprintf("registration expired (%s); it left every view, and its token finds nothing", e.Reason)
	case eventlog.ScheduleCreated:
		return fmt.Sprintf("schedule %s created by tenant %s%s: %q in %s, job %s/%s, overlap %s, catch_up %s",
			e.Name, e.Tenant, by(e.APIKeyID), e.Cron, e.Timezone, e.Job.Queue, e.Job.Type, e.Overlap, e.CatchUp)
	case eventlog.ScheduleFired:
		late := ""
		if e.Late {
			late = ", late"
		}
		return fmt.Sprintf("fired for tick %s%s: job %s", stamp(e.Tick), late, e.JobID)
	case eventlog.ScheduleSkipped:
		if e.From.Equal(e.To) {
			return fmt.Sprintf("skipped tick %s (%s)", stamp(e.From), e.Reason)
		}
		count := ""
		if e.Ticks > 0 { // events written before the count have none
			count = fmt.Sprintf("%d ", e.Ticks)
		}
		return fmt.Sprintf("skipped %sticks %s to %s (%s)", count, stamp(e.From), stamp(e.To), e.Reason)
	case eventlog.SchedulePaused:
		return "paused" + by(e.APIKeyID)
	case eventlog.ScheduleResumed:
		return "resumed" + by(e.APIKeyID)
	case eventlog.ScheduleDeleted:
		return "deleted" + by(e.APIKeyID)
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
