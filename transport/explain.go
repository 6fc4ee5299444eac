package transport

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/transport/wire"
)

// explainJob serves GET /v1/jobs/{id}/explain: the dispatcher's own answer to "why is this job
// not running?" (actors.Explanation), with its details and a sentence that says them.
func (s *Server) explainJob(r *request) error {
	id := r.PathValue("id")
	x, lastSeen, err := r.b.Explain(r.Context(), r.by.tenant, id)
	var refused *actors.Rejection
	if errors.As(err, &refused) && refused.Code == actors.CodeJobNotFound {
		return notFound(r.b, r.by.tenant, id)
	}
	if err != nil {
		return err
	}
	return r.reply(http.StatusOK, explanationOf(x, lastSeen, s.clock()))
}

// aheadText is how many jobs go first: a count, or "at least" one.
func aheadText(x actors.Explanation) string {
	if x.AheadAtLeast {
		return "at least " + strconv.Itoa(x.Ahead)
	}
	return strconv.Itoa(x.Ahead)
}

func explanationOf(x actors.Explanation, lastSeen, now time.Time) wire.Explanation {
	out := wire.Explanation{JobID: x.JobID, Status: string(x.Status), Code: x.Code}
	d := &out.Details
	d.Queue = x.Queue
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return new(t.UTC())
	}
	in := func(t time.Time) string { // "in 3s", "3s ago", for the message
		if t.After(now) {
			return "in " + t.Sub(now).Round(time.Millisecond).String()
		}
		return now.Sub(t).Round(time.Millisecond).String() + " ago"
	}
	switch x.Code {
	case actors.ExplainScheduled:
		d.RunAt = at(x.RunAt)
		out.Message = fmt.Sprintf("it is scheduled to run at %s (%s)", x.RunAt.UTC().Format(time.RFC3339Nano), in(x.RunAt))
	case actors.ExplainRetryBackoff:
		d.RunAt = at(x.RunAt)
		out.Message = fmt.Sprintf("its last attempt failed; it waits out its backoff until %s (%s)", x.RunAt.UTC().Format(time.RFC3339Nano), in(x.RunAt))
	case actors.ExplainQueuePaused:
		d.PausedSince = at(x.PausedSince)
		out.Message = fmt.Sprintf("queue %s is paused (since %s): it takes submits and assigns nothing until it is resumed", x.Queue, x.PausedSince.UTC().Format(time.RFC3339))
	case actors.ExplainTenantQuota:
		d.MaxRunning, d.Running = x.MaxRunning, x.Running
		out.Message = fmt.Sprintf("the tenant runs %d jobs, its max_running; the next lease that ends makes room", x.Running)
	case actors.ExplainKeyLimit:
		d.ConcurrencyKey, d.MaxRunningPerKey, d.HeldBy = x.Key, x.KeyLimit, x.KeyHolders
		out.Message = fmt.Sprintf("its concurrency key %q holds %d leases, the limit of queue %s (jobs %s); it goes when one of them ends",
			x.Key, len(x.KeyHolders), x.Queue, strings.Join(x.KeyHolders, ", "))
	case actors.ExplainNoWorker:
		d.LastWorker, d.LastSeen = x.LastWorker, at(x.LastSeen)
		out.Message = fmt.Sprintf("no connected worker serves queue %s", x.Queue)
		if x.LastWorker != "" {
			out.Message += fmt.Sprintf("; worker %s, which does, was last seen %s", x.LastWorker, in(x.LastSeen))
		}
	case actors.ExplainWorkersBusy:
		d.Sessions, d.Capacity, d.Leased, d.Ahead, d.AheadAtLeast = new(x.Sessions), new(x.Capacity), new(x.Held), new(x.Ahead), x.AheadAtLeast
		out.Message = fmt.Sprintf("the %d connected workers of queue %s have no room or credit (%d leases held of capacity %d); %s jobs of the queue go before it",
			x.Sessions, x.Queue, x.Held, x.Capacity, aheadText(x))
	case actors.ExplainBehind:
		d.Ahead, d.AheadAtLeast = new(x.Ahead), x.AheadAtLeast
		out.Message = fmt.Sprintf("%s jobs of queue %s go before it (priority, then keys in turn, then age); a worker has room", aheadText(x), x.Queue)
	case actors.ExplainSettling:
		out.Message = "its last change is on its way to the dispatcher; ask again in a moment"
	case actors.ExplainLeased:
		d.WorkerID, d.LeaseID, d.StartedAt, d.LeaseExpiresAt, d.LastHeartbeat = x.WorkerID, x.LeaseID, at(x.StartedAt), at(x.ExpiresAt), at(lastSeen)
		out.Message = fmt.Sprintf("it runs on worker %s since %s; its lease expires %s", x.WorkerID, x.StartedAt.UTC().Format(time.RFC3339), in(x.ExpiresAt))
	case actors.ExplainFinished:
		d.DeadReason, d.FinishedAt = x.DeadReason, at(x.FinishedAt)
		if x.Error != nil {
			d.Error = &wire.JobError{Code: x.Error.Code, Message: x.Error.Message}
		}
		out.Message = fmt.Sprintf("it %s at %s", x.Status, x.FinishedAt.UTC().Format(time.RFC3339))
		if x.DeadReason != "" {
			out.Message += " (" + x.DeadReason + ")"
		}
	}
	return out
}
