package actors

import (
	"errors"
	"fmt"

	"github.com/tetherhq/tether/projections"
)

// The behaviours' invariants, as CheckInvariants states them. The simulator and actorstest check
// them after every message (cells.Config.CheckInvariants); production does not pay for them.

// CheckInvariants implements Checker.
func (d *Dispatcher) CheckInvariants() error {
	if d.waiting == nil {
		return nil // not recovered yet
	}
	// INVARIANT: every waiting job is in exactly one heap, at the index it records, and the
	// heaps hold nothing else.
	inHeaps := d.scheduled.Len()
	if err := d.scheduled.check(); err != nil {
		return fmt.Errorf("scheduled heap: %w", err)
	}
	ready := 0
	for k, h := range d.ready {
		if err := h.check(); err != nil {
			return fmt.Errorf("ready heap %q: %w", k, err)
		}
		ready += h.Len()
	}
	inHeaps += ready
	if inHeaps != len(d.waiting) {
		return fmt.Errorf("%d jobs waiting but %d in the heaps", len(d.waiting), inHeaps)
	}
	for id, e := range d.waiting {
		if e.heap == nil || e.index >= e.heap.Len() || e.heap.entries[e.index] != e {
			return fmt.Errorf("waiting job %s is not where its entry says", id)
		}
		// INVARIANT: a job is waiting or leased, never both.
		if _, leased := d.leased[id]; leased {
			return fmt.Errorf("job %s is both waiting and leased", id)
		}
	}
	// INVARIANT: a job whose expiry is on its way is finished: neither waiting, leased nor
	// being re-driven.
	for id := range d.expiring {
		_, leased := d.leased[id]
		if d.waiting[id] != nil || leased || d.redriving[id] {
			return fmt.Errorf("job %s is expiring but waiting, leased or being re-driven", id)
		}
	}
	// INVARIANT: readyCount counts the entries of the ready heaps.
	if ready != d.readyCount {
		return fmt.Errorf("readyCount %d, ready heaps hold %d", d.readyCount, ready)
	}
	// INVARIANT: a tenant's running count and a session's held count are its leases whose end
	// has not been decided.
	running, held := map[string]int{}, map[string]int{}
	for _, lr := range d.leased {
		if !lr.ending {
			running[lr.tenant]++
			held[lr.sessionID]++
		}
	}
	for t, n := range d.running {
		if n != running[t] {
			return fmt.Errorf("tenant %s: running %d, leases %d", t, n, running[t])
		}
	}
	for t, n := range running {
		if d.running[t] != n {
			return fmt.Errorf("tenant %s: running %d, leases %d", t, d.running[t], n)
		}
	}
	hungry := 0
	for id, s := range d.sessions {
		// INVARIANT: a session's credit is within 0..capacity and its held count matches its
		// leases; inFlight is never negative.
		switch {
		case s.held != held[id]:
			return fmt.Errorf("session %s: held %d, leases %d", id, s.held, held[id])
		case s.credit < 0 || s.credit > s.capacity:
			return fmt.Errorf("session %s: credit %d outside 0..%d", id, s.credit, s.capacity)
		case s.inFlight < 0:
			return fmt.Errorf("session %s: %d leases in flight", id, s.inFlight)
		}
		if s.hungry {
			hungry++
		}
	}
	// INVARIANT: the turn order holds exactly the sessions marked hungry, once each.
	for _, s := range d.hungry {
		if !s.hungry {
			return fmt.Errorf("session %s in the turn order is not marked hungry", s.id)
		}
		if d.sessions[s.id] != s {
			hungry++ // a session that ended; it leaves the turn order on its next turn
		}
	}
	if hungry != len(d.hungry) {
		return fmt.Errorf("%d sessions marked hungry, %d in the turn order", hungry, len(d.hungry))
	}
	return nil
}

// check verifies that each entry knows its place and that the heap is ordered.
func (h *entryHeap) check() error {
	for i, e := range h.entries {
		if e.heap != h || e.index != i {
			return fmt.Errorf("entry %s at %d says it is at %d", e.ID, i, e.index)
		}
		if i > 0 && h.less(e, h.entries[(i-1)/2]) {
			return fmt.Errorf("entry %s at %d comes before its parent", e.ID, i)
		}
	}
	return nil
}

// CheckInvariants implements Checker.
func (a *Job) CheckInvariants() error {
	// INVARIANT: the pipeline's count of pending persists is never negative, and nothing waits
	// on it once none is pending.
	if a.pipe.pending < 0 || (a.pipe.pending == 0 && len(a.pipe.waiting) > 0) {
		return fmt.Errorf("pipeline: %d pending, %d waiting", a.pipe.pending, len(a.pipe.waiting))
	}
	// INVARIANT: messages are stashed only while a lease's end is on its way to the log.
	if len(a.stash) > 0 && !a.ending {
		return errors.New("messages stashed while no lease is ending")
	}
	if a.job == nil {
		return nil
	}
	// INVARIANT: a job holds a lease exactly when its status is leased, and not once its end
	// has been decided.
	if (a.job.Lease != nil) != (a.job.Status == projections.StatusLeased) {
		return fmt.Errorf("status %s with lease %v", a.job.Status, a.job.Lease != nil)
	}
	if a.ending && a.job.Lease != nil {
		return errors.New("a lease's end is decided, but the job still holds it")
	}
	return nil
}
