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
	x, err := r.b.Explain(r.Context(), r.by.tenant, id)
	var refused *actors.Rejection
	if errors.As(err, &refused) && refused.Code == actors.CodeJobNotFound {
		return notFound(r.b, r.by.tenant, id)
	}
	if err != nil {
		return err
	}
	return r.reply(http.StatusOK, explanationOf(x, s.clock()))
}

// aheadText is how many jobs go first: a count, or "at least" one.
func aheadText(x actors.Explanation) string {
	if x.AheadAtLeast {
		return "at least " + plural(x.Ahead, "job")
	}
	return plural(x.Ahead, "job")
}

// agree is the form of a word that goes with a count of n: one for 1, many otherwise (0 too).
func agree(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// plural is "1 job", "2 jobs".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// when says t against now in words: "at T (in 3s)", "at T (2m0s ago)", days past two days.
func when(t, now time.Time) string {
	d := t.Sub(now)
	rel := "in "
	if d < 0 {
		d, rel = -d, ""
	}
	var span string
	if d > 48*time.Hour {
		span = strconv.FormatFloat(d.Hours()/24, 'f', 1, 64) + " days"
	} else {
		span = d.Round(time.Millisecond).String()
	}
	if rel == "" {
		span += " ago"
	} else {
		span = rel + span
	}
	return fmt.Sprintf("at %s (%s)", t.UTC().Format(time.RFC3339), span)
}

func explanationOf(x actors.Explanation, now time.Time) wire.Explanation {
	out := wire.Explanation{JobID: x.JobID, Status: string(x.Status), Code: x.Code}
	d := &out.Details
	d.Queue = x.Queue
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return new(t.UTC())
	}
	switch x.Code {
	case actors.ExplainScheduled:
		d.RunAt = at(x.RunAt)
		out.Message = "it is scheduled to run " + when(x.RunAt, now)
	case actors.ExplainRetryBackoff:
		d.RunAt, d.Attempt = at(x.RunAt), x.Attempt
		out.Message = fmt.Sprintf("attempt %d failed; it waits out its backoff until it runs again %s", x.Attempt, when(x.RunAt, now))
		if x.Error != nil {
			d.Error = &wire.JobError{Code: x.Error.Code, Message: x.Error.Message}
			out.Message += " (last error " + x.Error.Code + ")"
		}
	case actors.ExplainQueuePaused:
		d.PausedSince = at(x.PausedSince)
		out.Message = fmt.Sprintf("queue %s is paused: it takes submits and assigns nothing until it is resumed", x.Queue)
	case actors.ExplainTenantQuota:
		d.MaxRunning, d.Running = x.MaxRunning, x.Running
		out.Message = fmt.Sprintf("the tenant runs %s, and its max_running is %d: it goes once %s", plural(x.Running, "job"), x.MaxRunning,
			ending(x.Running-x.MaxRunning+1, x.Running, "job"))
	case actors.ExplainKeyLimit:
		d.ConcurrencyKey, d.MaxRunningPerKey, d.HeldBy = x.Key, x.KeyLimit, x.KeyHolders
		held := len(x.KeyHolders)
		out.Message = fmt.Sprintf("its concurrency key %q holds %s (%s %s), and its max_running_per_key in queue %s is %d: it goes once %s",
			x.Key, plural(held, "lease"), agree(held, "job", "jobs"), strings.Join(x.KeyHolders, ", "), x.Queue, x.KeyLimit,
			ending(held-x.KeyLimit+1, held, "lease"))
	case actors.ExplainRateLimited:
		d.RateLimit, d.RateLimitKey, d.Rate, d.Burst, d.TokenAt, d.Ahead = x.RateLimit, x.RateKey, x.Rate, x.Burst, at(x.TokenAt), new(x.Ahead)
		bucket := "its bucket"
		if x.RateKey != "" {
			bucket = fmt.Sprintf("its bucket for key %q", x.RateKey)
		}
		out.Message = fmt.Sprintf("rate limit %s (%v a second, burst %d) has no token in %s", x.RateLimit, x.Rate, x.Burst, bucket)
		if x.Ahead > 0 {
			out.Message += fmt.Sprintf(", and %s of the same limits %s first", plural(x.Ahead, "job"), agree(x.Ahead, "goes", "go"))
		}
		out.Message += fmt.Sprintf(": its token is due %s at the earliest", when(x.TokenAt, now))
	case actors.ExplainNoWorker:
		d.LastWorker, d.LastSeen = x.LastWorker, at(x.LastSeen)
		out.Message = fmt.Sprintf("no connected worker serves queue %s", x.Queue)
		if x.LastWorker != "" {
			out.Message += fmt.Sprintf("; worker %s, which does, was last heard from %s", x.LastWorker, when(x.LastSeen, now))
		}
	case actors.ExplainWorkersBusy:
		d.Sessions, d.Capacity, d.Leased, d.Ahead, d.AheadAtLeast = new(x.Sessions), new(x.Capacity), new(x.Held), new(x.Ahead), x.AheadAtLeast
		out.Message = fmt.Sprintf("the %s serving queue %s %s no room or no credit (%s held of a capacity of %d); %s of the queue %s before it",
			plural(x.Sessions, "worker connection"), x.Queue, agree(x.Sessions, "has", "have"), plural(x.Held, "lease"), x.Capacity,
			aheadText(x), agree(x.Ahead, "goes", "go"))
	case actors.ExplainBehind:
		d.Ahead, d.AheadAtLeast = new(x.Ahead), x.AheadAtLeast
		out.Message = fmt.Sprintf("%s of queue %s %s before it (priority, then keys in turn, then age); a worker has room",
			aheadText(x), x.Queue, agree(x.Ahead, "goes", "go"))
	case actors.ExplainSettling:
		out.Message = "its last change is on its way to the dispatcher; ask again in a moment"
	case actors.ExplainLeased:
		d.WorkerID, d.LeaseID, d.StartedAt, d.LeaseExpiresAt = x.WorkerID, x.LeaseID, at(x.StartedAt), at(x.ExpiresAt)
		d.LastHeartbeat, d.LastSeen, d.Attempt = at(x.LastHeartbeat), at(x.LastSeen), x.Attempt
		d.WorkerConnected, d.CancelRequested = new(x.WorkerConnected), x.CancelRequested
		if x.WorkerConnected {
			out.Message = fmt.Sprintf("it runs on worker %s since %s; its lease expires %s", x.WorkerID, x.StartedAt.UTC().Format(time.RFC3339), when(x.ExpiresAt, now))
		} else {
			out.Message = fmt.Sprintf("its worker %s is not connected; unless it comes back, the job goes back to its queue when its lease expires %s",
				x.WorkerID, when(x.ExpiresAt, now))
		}
		if x.CancelRequested {
			out.Message += "; a cancel waits for the worker to stop it"
		}
	case actors.ExplainFinished:
		d.DeadReason, d.FinishedAt = x.DeadReason, at(x.FinishedAt)
		out.Message = fmt.Sprintf("it %s at %s", map[string]string{"succeeded": "succeeded", "failed": "failed", "cancelled": "was cancelled"}[string(x.Status)],
			x.FinishedAt.UTC().Format(time.RFC3339))
		if x.DeadReason != "" {
			out.Message += " (" + x.DeadReason + ")"
		}
		if x.Error != nil {
			d.Error = &wire.JobError{Code: x.Error.Code, Message: x.Error.Message}
			out.Message += ": " + x.Error.Code
		}
	}
	return out
}

// ending says how many of the held things (of them, each a noun) must end: "that lease ends"
// when there is one, "one of them ends", "3 of them end".
func ending(n, of int, noun string) string {
	switch {
	case n <= 1 && of == 1:
		return "that " + noun + " ends"
	case n <= 1:
		return "one of them ends"
	}
	return strconv.Itoa(n) + " of them end"
}
