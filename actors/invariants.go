package actors

import (
	"errors"
	"fmt"
	"maps"
	"slices"

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
	for k, q := range d.ready {
		n, err := d.checkQueue(q)
		if err != nil {
			return fmt.Errorf("ready heap %q: %w", k, err)
		}
		ready += n
		for _, g := range q.byKey {
			inHeaps += g.jobs.Len()
		}
	}
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
	// INVARIANT: readyCount counts the jobs of the groups in the ready heaps.
	if ready != d.readyCount {
		return fmt.Errorf("readyCount %d, ready heaps hold %d", d.readyCount, ready)
	}
	// INVARIANT: explain agrees with matching: a ready job explained as next in line, with a
	// session that has room for it, would have been leased by the dispatch that just ran.
	// And the counts /metrics shows are the jobs' explanations summed.
	explained := map[WaitingCount]int{}
	for id, e := range d.waiting {
		w := WaitingCount{Tenant: e.Tenant, Queue: e.Queue, Reason: ExplainScheduled}
		if e.heap == d.scheduled {
			if e.Retry {
				w.Reason = ExplainRetryBackoff
			}
			explained[w]++
			continue
		}
		var x Explanation
		if d.explainWaiting(e, &x); x.Code == ExplainBehind && x.Ahead == 0 {
			return fmt.Errorf("job %s is explained as next in line of queue %s with a session free to take it, but was not leased", id, e.Queue)
		}
		w.Reason = x.Code
		explained[w]++
	}
	counted := map[WaitingCount]int{}
	for _, c := range d.waitingCounts().Jobs {
		counted[WaitingCount{Tenant: c.Tenant, Queue: c.Queue, Reason: c.Reason}] = c.Jobs
	}
	if !maps.Equal(explained, counted) {
		return fmt.Errorf("waiting jobs by reason %v, explained one by one %v", counted, explained)
	}
	// INVARIANT: a dispatch leaves no tenant behind: once it ends, no session in the turn
	// order with credit and room has a job its tenant may lease, whichever tenants took the
	// turns before it.
	for _, s := range d.hungry {
		if s.canTake() && !d.tenantFull(s.tenant) {
			if e := d.leasable(s); e != nil {
				return fmt.Errorf("session %s of tenant %s has credit and room, and job %s could go, but the dispatch ended", s.id, s.tenant, e.ID)
			}
		}
	}
	// INVARIANT: a key's lease count is its leases whose end has not been decided.
	keyed := map[string]int{}
	for _, lr := range d.leased {
		if !lr.ending && lr.key != "" {
			keyed[lr.key]++
		}
	}
	if !maps.Equal(keyed, d.keyRunning) {
		return fmt.Errorf("key lease counts %v, leases %v", d.keyRunning, keyed)
	}
	// INVARIANT: a tenant's running count and a session's held count are its leases whose end
	// has not been decided.
	running, held, inFlight := map[string]int{}, map[string]int{}, map[string]int{}
	for _, lr := range d.leased {
		if !lr.ending {
			running[lr.tenant]++
			held[lr.sessionID]++
		}
		if lr.polledBy != "" {
			inFlight[lr.polledBy]++
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
		// INVARIANT: a session's credit is within 0..capacity, its held count matches its
		// leases, and its in-flight count its leases whose assignment has not arrived: an
		// offer that waits for one that never comes never closes.
		switch {
		case s.held != held[id]:
			return fmt.Errorf("session %s: held %d, leases %d", id, s.held, held[id])
		case s.credit < 0 || s.credit > s.capacity:
			return fmt.Errorf("session %s: credit %d outside 0..%d", id, s.credit, s.capacity)
		case s.inFlight != inFlight[id]:
			return fmt.Errorf("session %s: %d leases in flight, %d leases whose assignment has not arrived", id, s.inFlight, inFlight[id])
		}
		if s.hungry {
			hungry++
		}
	}
	// INVARIANT: the turn order holds exactly the open sessions marked hungry, once each: one
	// that ended leaves it at once (an idle fleet that churns would grow it for ever).
	for _, s := range d.hungry {
		if !s.hungry {
			return fmt.Errorf("session %s in the turn order is not marked hungry", s.id)
		}
		if d.sessions[s.id] != s {
			return fmt.Errorf("session %s in the turn order has ended", s.id)
		}
	}
	if hungry != len(d.hungry) {
		return fmt.Errorf("%d sessions marked hungry, %d in the turn order", hungry, len(d.hungry))
	}
	return nil
}

// checkQueue verifies a queue's groups: each is in its key's list, in the queue's heap where it
// says, exactly when it has jobs and its key is under its limit, and the heap is ordered. It
// returns how many jobs the groups in the heap hold.
func (d *Dispatcher) checkQueue(q *groupHeap) (int, error) {
	ready := 0
	for k, g := range q.byKey {
		if err := g.jobs.check(); err != nil {
			return 0, fmt.Errorf("group %q: %w", k, err)
		}
		switch {
		case g.id != k || g.queue != q || g.jobs.group != g:
			return 0, fmt.Errorf("group %q is filed as %q", g.id, k)
		case g.jobs.Len() == 0:
			return 0, fmt.Errorf("group %q is empty", k)
		case g.key != "" && !slices.Contains(d.keyGroups[g.key], g):
			return 0, fmt.Errorf("group %q is not among its key's", k)
		case (g.index >= 0) == (d.heldBack(g) || g.rateIndex >= 0):
			return 0, fmt.Errorf("group %q: in the heap %v, held back %v, waiting for a token %v", k, g.index >= 0, d.heldBack(g), g.rateIndex >= 0)
		case g.rateIndex >= 0 && (g.rateIndex >= len(d.rateWait.groups) || d.rateWait.groups[g.rateIndex] != g):
			return 0, fmt.Errorf("group %q is not where it says in the groups waiting for a token", k)
		case g.rateIndex >= 0 && !g.due.After(d.now):
			return 0, fmt.Errorf("group %q waits for a token due at %s, at %s", k, g.due, d.now)
		case g.index >= 0 && (g.index >= len(q.groups) || q.groups[g.index] != g):
			return 0, fmt.Errorf("group %q is not where it says", k)
		}
		if g.index >= 0 {
			ready += g.jobs.Len()
		}
	}
	for i, g := range q.groups {
		if q.byKey[g.id] != g {
			return 0, fmt.Errorf("group %q at %d is not filed", g.id, i)
		}
		if p := (i - 1) / 2; i > 0 && q.Less(i, p) {
			return 0, fmt.Errorf("group %q at %d comes before its parent", g.key, i)
		}
	}
	return ready, nil
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
	if err := a.pipe.check(); err != nil {
		return err
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

// check verifies the pipeline's count.
func (p *pipeline) check() error {
	// INVARIANT: the pipeline's count of pending persists is never negative, and nothing waits
	// on it once none is pending.
	if p.pending < 0 || (p.pending == 0 && len(p.waiting) > 0) {
		return fmt.Errorf("pipeline: %d pending, %d waiting", p.pending, len(p.waiting))
	}
	return nil
}

// CheckInvariants implements Checker: the pipeline the parts share, then each part's own.
func (t *Tenant) CheckInvariants() error {
	if err := t.pipe.check(); err != nil {
		return err
	}
	if err := t.intake.check(); err != nil {
		return fmt.Errorf("intake: %w", err)
	}
	if err := t.creds.check(); err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	if err := t.flows.check(); err != nil {
		return fmt.Errorf("flows: %w", err)
	}
	if err := t.schedules.check(); err != nil {
		return fmt.Errorf("schedules: %w", err)
	}
	return nil
}

func (in *intake) check() error {
	if in.maxActive < 0 || in.maxRunning < 0 {
		return fmt.Errorf("max_active %d, max_running %d", in.maxActive, in.maxRunning)
	}
	// INVARIANT: a submit admits at least one job per idempotency key it holds pending, and
	// each pending key names a job of its own.
	if in.pendingJobs < len(in.pendingIdem) {
		return fmt.Errorf("%d jobs pending, %d idempotency keys pending", in.pendingJobs, len(in.pendingIdem))
	}
	jobs := make(map[string]bool, len(in.pendingIdem))
	for key, p := range in.pendingIdem {
		if jobs[p.jobID] {
			return fmt.Errorf("idempotency key %q names job %s, which another pending key names", key, p.jobID)
		}
		jobs[p.jobID] = true
	}
	// INVARIANT: what counts against max_active for reservations is the reservations held,
	// each until its end is decided: one whose end is on its way to the log is held no more
	// (else it could end again, and count twice meanwhile).
	if len(in.reservations) > ReservationsMax {
		return fmt.Errorf("%d reservations held, more than %d", len(in.reservations), ReservationsMax)
	}
	for id, r := range in.reservations {
		if in.ending[id] {
			return fmt.Errorf("reservation %s is held, but its end is decided", id)
		}
		if r.expiresAt.IsZero() {
			return fmt.Errorf("reservation %s is held with no expiry", id)
		}
	}
	return nil
}

func (c *credentials) check() error {
	// INVARIANT: pendingEnroll counts, per enroll token, the registrations in flight that
	// spend it, and holds no token that none spends.
	spending := map[string]int{}
	for _, tok := range c.registering {
		if tok != "" {
			spending[tok]++
		}
	}
	if len(spending) != len(c.pendingEnroll) {
		return fmt.Errorf("%d enroll tokens spent by registrations in flight, %d counted", len(spending), len(c.pendingEnroll))
	}
	for tok, n := range c.pendingEnroll {
		if n != spending[tok] {
			return fmt.Errorf("enroll token %s: %d uses pending, %d registrations in flight spend it", tok, n, spending[tok])
		}
	}
	return nil
}

func (fl *flows) check() error {
	// INVARIANT: the jobs pending are those the decisions in flight start.
	sum := 0
	for id, n := range fl.busy {
		if n < 0 || n > FlowStepsMax {
			return fmt.Errorf("flow %s: its decision in flight starts %d jobs", id, n)
		}
		sum += n
	}
	if sum != fl.pendingJobs {
		return fmt.Errorf("%d jobs pending, the decisions in flight start %d", fl.pendingJobs, sum)
	}
	for id := range fl.again {
		if _, busy := fl.busy[id]; !busy {
			return fmt.Errorf("flow %s is to be read again, but no decision of it is in flight", id)
		}
	}
	for key, p := range fl.pendingIdem {
		if _, busy := fl.busy[p.jobID]; !busy {
			return fmt.Errorf("idempotency key %q names flow %s, whose submit is not in flight", key, p.jobID)
		}
	}
	return nil
}

func (sc *schedules) check() error {
	// INVARIANT: the jobs pending are those the decisions in flight fire, one at most each.
	sum := 0
	for id, n := range sc.busy {
		if n < 0 || n > 1 {
			return fmt.Errorf("schedule %s: its decision in flight fires %d jobs", id, n)
		}
		sum += n
	}
	if sum != sc.pendingJobs {
		return fmt.Errorf("%d jobs pending, the decisions in flight fire %d", sc.pendingJobs, sum)
	}
	for name, id := range sc.names {
		if _, busy := sc.busy[id]; !busy {
			return fmt.Errorf("schedule %s (%s) is being created, but its create is not in flight", name, id)
		}
	}
	return nil
}
