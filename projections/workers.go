package projections

import (
	"fmt"
	"slices"
	"time"

	"github.com/tetherhq/tether/eventlog"
)

// A worker's registration is live state while it can be used: memory holds it, and its token
// finds it. Once it cannot (its token expired, the renewed one's grace included, or it was
// revoked), it is history: it stays, listed as it was, for the server's retention of finished
// jobs (Retention.Done) after that and after the worker was last seen, then leaves every view
// through a worker.expired that the dispatcher's retention sweep writes, as a job's
// job.expired. A worker with a session or a lease never leaves. A fleet that churns (each pod a
// new worker) so costs memory for the registrations in use and those retained, not for every
// worker ever seen.

// retainedFrom is when the worker's retention starts once its registration cannot be used:
// the later of its end (its revocation, which ended its session, or its last token's expiry)
// and when it was last seen.
func (w *Worker) retainedFrom() time.Time {
	if w.Revoked {
		return w.LastSeen
	}
	return latest(w.ExpiresAt, w.PreviousValidUntil, w.LastSeen)
}

func latest(ts ...time.Time) time.Time {
	return slices.MaxFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
}

// ExpirableWorkers returns the expiries of up to limit workers whose registration can no longer
// be used and whose retention (r.Done) is over at now, that hold no session and no lease,
// soonest due first. It walks the workers by when their retention starts, so it costs in
// proportion to those due.
func (s *Set) ExpirableWorkers(r Retention, now time.Time, limit int) []eventlog.WorkerExpired {
	var out []eventlog.WorkerExpired
	if r.Done <= 0 {
		return out
	}
	var leased map[string]bool // workers that hold a lease, made once a worker is due
	s.workersEnd.Ascend(func(e timed) bool {
		if now.Before(e.at.Add(r.Done)) {
			return false
		}
		if leased == nil {
			leased = map[string]bool{}
			for _, j := range s.leases {
				leased[j.Lease.WorkerID] = true
			}
		}
		w := s.workers[e.id]
		if w.Session == nil && !leased[w.ID] {
			reason := eventlog.WorkerGoneTokenExpired
			if w.Revoked {
				reason = eventlog.WorkerGoneRevoked
			}
			out = append(out, eventlog.WorkerExpired{WorkerID: w.ID, Reason: reason})
		}
		return len(out) < limit
	})
	return out
}

// workerExpired takes a worker out of every view; its token finds nothing from now on.
func (s *Set) workerExpired(seq uint64, e eventlog.WorkerExpired) error {
	w := s.workers[e.WorkerID]
	switch {
	case w == nil:
		return fmt.Errorf("projections: seq %d: unknown worker %s expired", seq, e.WorkerID)
	case w.Session != nil:
		return fmt.Errorf("projections: seq %d: worker %s expired with session %s open", seq, e.WorkerID, w.Session.ID)
	}
	s.workersEnd.Delete(timed{w.retainedFrom(), w.ID})
	delete(s.workers, w.ID)
	for _, h := range []string{w.TokenHash, w.PreviousTokenHash} {
		if s.tokens[h] == w.ID {
			delete(s.tokens, h)
		}
	}
	return nil
}
