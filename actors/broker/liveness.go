package broker

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
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

// liveness holds the Liveness of every worker heard from since the start.
type liveness struct {
	mu      sync.Mutex
	workers map[string]*Liveness
}

// Liveness returns worker id's Liveness, which a connection may keep and Touch as it reads.
func (b *Broker) Liveness(workerID string) *Liveness {
	b.live.mu.Lock()
	defer b.live.mu.Unlock()
	l := b.live.workers[workerID]
	if l == nil {
		if b.live.workers == nil {
			b.live.workers = map[string]*Liveness{}
		}
		l = &Liveness{}
		b.live.workers[workerID] = l
	}
	return l
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
