package broker

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherhq/tether/projections"
)

// Liveness is what the broker knows of a worker beyond the log: when it was last heard from,
// and which leases its last heartbeat extended, and when. Heartbeats and polls are too frequent
// to log (an idle worker sends 8,640 a day), so this lives in memory only: after a restart a
// worker's last_seen is its last logged session start or end until it is heard from again, and
// a lease's expiry is the one logged until its next heartbeat. The decisions do not read it:
// the session and job actors keep their own clocks of the same heartbeats.
type Liveness struct {
	seen atomic.Int64 // unix nanoseconds; 0: not heard from since the start

	mu     sync.Mutex
	beat   time.Time
	leases []string // those the last heartbeat extended

	// leftover is set while the worker has no session and its entry stays for leases its
	// heartbeats extended: its next report may be its last.
	leftover atomic.Bool
}

// Touch records that the worker was heard from at t.
func (l *Liveness) Touch(t time.Time) {
	n := t.UnixNano()
	for {
		old := l.seen.Load()
		if old >= n || l.seen.CompareAndSwap(old, n) {
			return
		}
	}
}

// LastSeen is when the worker was last heard from; zero if not since the start.
func (l *Liveness) LastSeen() time.Time {
	if n := l.seen.Load(); n != 0 {
		return time.Unix(0, n).UTC()
	}
	return time.Time{}
}

func (l *Liveness) heartbeat(at time.Time, leases, unknown []string) {
	kept := make([]string, 0, len(leases))
	for _, id := range leases {
		if !slices.Contains(unknown, id) {
			kept = append(kept, id)
		}
	}
	l.Touch(at)
	l.mu.Lock()
	l.beat, l.leases = at, kept
	l.mu.Unlock()
}

// Heartbeat is when the worker's last heartbeat extended lease, if it did.
func (l *Liveness) Heartbeat(lease string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.beat, slices.Contains(l.leases, lease)
}

// liveness holds the Liveness of the workers with an open session, and of those whose session
// ended while their last heartbeat had extended leases that are still theirs: what LastSeen and
// LeaseExpiresAt know better than the log. A worker's entry goes when its session ends, or, if
// it still holds leases then, at a later sweep once it holds none: a fleet that churns leaves
// nothing behind.
type liveness struct {
	mu      sync.Mutex
	workers map[string]*Liveness
	// swept is how many entries the last sweep left: the next one comes once there are twice
	// as many, so sweeps cost O(1) per entry made.
	swept int
}

// livenessSweepMin is the fewest entries a sweep waits for.
const livenessSweepMin = 1024

// liveness returns worker id's Liveness, made if it has none: a session opened.
func (b *Broker) liveness(workerID string) *Liveness {
	b.live.mu.Lock()
	defer b.live.mu.Unlock()
	l := b.live.workers[workerID]
	if l == nil {
		if b.live.workers == nil {
			b.live.workers = map[string]*Liveness{}
		}
		if len(b.live.workers) >= max(2*b.live.swept, livenessSweepMin) {
			b.sweepLiveness()
		}
		l = &Liveness{}
		b.live.workers[workerID] = l
	}
	l.leftover.Store(false)
	return l
}

// Touch records that worker id was heard from at t, if it has a session (or had one and holds
// leases still); of any other, the log's last session start or end is what is known.
func (b *Broker) Touch(workerID string, t time.Time) {
	if l := b.heard(workerID); l != nil {
		l.Touch(t)
	}
}

// forgetLiveness drops worker id's Liveness unless it is still needed: a session of it ended or
// did not open, or, with no session, it reported on a job.
func (b *Broker) forgetLiveness(workerID string) {
	b.live.mu.Lock()
	defer b.live.mu.Unlock()
	l := b.live.workers[workerID]
	if l == nil {
		return
	}
	b.rt.Read(func(set *projections.Set) {
		switch open, leased := l.needed(set, workerID); {
		case open:
		case leased:
			l.leftover.Store(true)
		default:
			delete(b.live.workers, workerID)
		}
	})
}

// reported is told that worker id reported on a job: a leftover entry may go with it.
func (b *Broker) reported(workerID string) {
	if l := b.heard(workerID); l != nil && l.leftover.Load() {
		b.forgetLiveness(workerID)
	}
}

// sweepLiveness drops every entry no longer needed (a leftover whose leases ran out). The
// caller holds live.mu.
func (b *Broker) sweepLiveness() {
	b.rt.Read(func(set *projections.Set) {
		for id, l := range b.live.workers {
			if open, leased := l.needed(set, id); !open && !leased {
				delete(b.live.workers, id)
			}
		}
	})
	b.live.swept = len(b.live.workers)
}

// needed reports what worker id's Liveness knows better than the projections: of an open
// session, or of leases its last heartbeat extended that are still its own.
func (l *Liveness) needed(set *projections.Set, workerID string) (open, leased bool) {
	if set.HasSession(workerID) {
		return true, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range l.leases {
		if j := set.LeasedJob(id); j != nil && j.Lease.WorkerID == workerID {
			return false, true
		}
	}
	return false, false
}

// heard returns worker id's Liveness if it was heard from since the start, else nil.
func (b *Broker) heard(workerID string) *Liveness {
	b.live.mu.Lock()
	defer b.live.mu.Unlock()
	return b.live.workers[workerID]
}

// LastSeen is when worker id was last heard from since the start; zero if it was not.
func (b *Broker) LastSeen(workerID string) time.Time {
	if l := b.heard(workerID); l != nil {
		return l.LastSeen()
	}
	return time.Time{}
}

// LeaseExpiresAt is when a lease runs out as its last heartbeat left it: the heartbeat's time
// plus the job's lease_ttl, as the job's actor reckons it; or logged, the expiry the log holds,
// if no later heartbeat extended it.
func (b *Broker) LeaseExpiresAt(workerID, leaseID string, ttl time.Duration, logged time.Time) time.Time {
	l := b.heard(workerID)
	if l == nil {
		return logged
	}
	if at, ok := l.Heartbeat(leaseID); ok && at.Add(ttl).After(logged) {
		return at.Add(ttl).UTC()
	}
	return logged
}
