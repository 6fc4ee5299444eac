package actors

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/tetherhq/tether/projections"
)

// Explain asks the dispatcher why a job of the tenant is not running, or whom it runs on, or
// how it ended; Explanation answers.
type Explain struct{ Tenant, JobID string }

// What an Explanation's Code says. Every one is the dispatcher's own reason, read from the state
// it leases by, through the same tests its matching makes (explainWaiting), so an answer cannot
// disagree with what the dispatcher does next.
const (
	ExplainScheduled     = "scheduled"           // RunAt: a delay or run_at
	ExplainRetryBackoff  = "retry_backoff"       // RunAt: after a failed attempt
	ExplainQueuePaused   = "queue_paused"        // PausedSince
	ExplainTenantQuota   = "tenant_quota"        // Running of MaxRunning
	ExplainKeyLimit      = "concurrency_key"     // Key, KeyLimit, KeyHolders
	ExplainRateLimited   = "rate_limited"        // RateLimit, RateKey, Rate, Burst, TokenAt, Ahead
	ExplainNoWorker      = "no_worker_for_queue" // LastWorker, LastSeen: no session serves the queue
	ExplainWorkersBusy   = "workers_busy"        // Sessions, Capacity, Held: none has room or credit; Ahead
	ExplainBehind        = "behind_n"            // Ahead: jobs of its queue that go first
	ExplainSettling      = "settling"            // its last change is on its way to the dispatcher
	ExplainLeased        = "leased"              // WorkerID, LeaseID, StartedAt, ExpiresAt
	ExplainFinished      = "finished"            // Status, DeadReason, Error, FinishedAt
	explainAheadLooksMax = 100_000               // ahead looks at most at so many jobs of a queue
)

// Explanation is the dispatcher's answer to Explain: Code, and the fields it names.
type Explanation struct {
	Err    *Rejection
	JobID  string
	Status projections.Status
	Code   string
	Queue  string

	RunAt       time.Time
	PausedSince time.Time
	MaxRunning  int
	Running     int
	Key         string
	KeyLimit    int
	KeyHolders  []string // the jobs that hold the key's leases
	// rate_limited: the limit whose token comes last, its key, and when the job's token is due
	// at the earliest (Ahead jobs of its own go before it).
	RateLimit, RateKey string
	Rate               float64
	Burst              int
	TokenAt            time.Time
	Sessions           int       // sessions serving the queue
	Capacity           int       // their capacity
	Held               int       // the leases they hold
	LastWorker         string    // no_worker_for_queue: the worker of the queue last seen, if any
	LastSeen           time.Time // no_worker_for_queue, leased: when the worker was last heard from
	Ahead              int       // behind_n, workers_busy: jobs of its queue before it
	AheadAtLeast       bool      // Ahead is a lower bound: other keys take turns, or the queue is longer than explainAheadLooksMax

	WorkerID, LeaseID    string
	StartedAt, ExpiresAt time.Time
	LeaseTTL             time.Duration
	// WorkerConnected says the lease's worker has a session open; CancelRequested that a cancel
	// waits for the worker to stop the job.
	WorkerConnected, CancelRequested bool
	// Attempt is the job's last attempt (retry_backoff, leased).
	Attempt int
	// LastHeartbeat is when the worker's last heartbeat extended the lease, and LastSeen (for a
	// lease, too) when the worker was last heard from. Heartbeats are not events: the runtime
	// fills both from what it heard since it started (broker.Liveness), not the dispatcher.
	LastHeartbeat time.Time

	DeadReason string
	Error      *projections.JobError
	FinishedAt time.Time
}

// explain answers m from the dispatcher's state and the job's snapshot.
func (d *Dispatcher) explain(env Env, m Explain) Explanation {
	var j *projections.Job
	env.Read(func(s *projections.Set) { j = s.JobRef(m.JobID); j = cloneIf(j, j != nil && j.Tenant == m.Tenant) })
	if j == nil {
		return Explanation{Err: reject(CodeJobNotFound, "no job %q", clip(m.JobID))}
	}
	x := Explanation{JobID: j.ID, Status: j.StatusAt(env.Now()), Queue: j.Queue, Attempt: j.Attempt}
	lr, leased := d.leased[j.ID]
	e := d.waiting[j.ID]
	switch {
	case j.Status.Terminal():
		x.Code, x.DeadReason, x.Error, x.FinishedAt = ExplainFinished, j.DeadReason, j.Error, j.FinishedAt
	case leased && j.Lease != nil && j.Lease.LeaseID == lr.leaseID:
		x.Code, x.WorkerID, x.LeaseID = ExplainLeased, lr.workerID, lr.leaseID
		x.StartedAt, x.ExpiresAt, x.LeaseTTL, x.CancelRequested = j.StartedAt, j.Lease.ExpiresAt, j.LeaseTTL, j.CancelRequested
		if s := d.sessions[lr.sessionID]; s != nil && !s.gone {
			x.WorkerConnected = true
		}
	case e == nil:
		x.Code = ExplainSettling
	case e.heap == d.scheduled:
		x.Code, x.RunAt = ExplainScheduled, e.RunAt
		if e.Retry {
			x.Code, x.Error = ExplainRetryBackoff, j.Error
		}
	default:
		d.explainWaiting(e, &x)
	}
	switch x.Code { // the details the projections hold
	case ExplainQueuePaused:
		env.Read(func(s *projections.Set) {
			if p, ok := s.Paused(j.Tenant, j.Queue); ok {
				x.PausedSince = p.Since
			}
		})
	case ExplainNoWorker:
		env.Read(func(s *projections.Set) {
			for _, w := range s.Workers(j.Tenant) {
				if slices.Contains(w.Queues, j.Queue) && w.Status != "revoked" && (x.LastWorker == "" || w.LastSeen.After(x.LastSeen)) {
					x.LastWorker, x.LastSeen = w.ID, w.LastSeen
				}
			}
		})
	}
	return x
}

// explainWaiting says why a ready job waits (waitingReason), with the details of the reason.
func (d *Dispatcher) explainWaiting(e *entry, x *Explanation) {
	g := e.heap.group
	var served queueSessions
	x.Code = d.waitingReason(g, func(k string) queueSessions {
		served = d.sessionsOf(k)
		return served
	})
	switch x.Code {
	case ExplainTenantQuota:
		x.MaxRunning, x.Running = d.maxRunning[e.Tenant], d.running[e.Tenant]
	case ExplainKeyLimit:
		x.Key, x.KeyLimit = e.Key, d.keyLimit(e.Tenant, e.Queue)
		for _, id := range slices.Sorted(maps.Keys(d.leased)) {
			if lr := d.leased[id]; lr.key == g.key && !lr.ending {
				x.KeyHolders = append(x.KeyHolders, id)
			}
		}
	case ExplainRateLimited:
		// The bucket's next token goes to its group's first job; each job before this one
		// takes one of those that follow, one an interval. Other groups that take from the
		// bucket may take some too: TokenAt is the earliest.
		due, last := d.rateDue(g)
		_, def, _ := d.tokenAt(g, last)
		u := g.rates[last]
		before := 0
		for looked, y := range g.jobs.entries {
			if looked >= explainAheadLooksMax {
				break
			}
			if y != e && dispatchFirst(y, e) {
				before++
			}
		}
		x.RateLimit, x.RateKey, x.Rate, x.Burst = u.Name, u.Key, def.Rate, def.Burst
		x.TokenAt, x.Ahead = due.Add(time.Duration(before)*def.interval), before
	case ExplainWorkersBusy, ExplainBehind:
		x.Sessions, x.Capacity, x.Held = served.sessions, served.capacity, served.held
		x.Ahead, x.AheadAtLeast = d.ahead(e)
		// With other keys at its priority the keys' turns interleave: more may go first.
		x.AheadAtLeast = x.AheadAtLeast || len(g.queue.groups) > 1
	}
}

// waitingReason is why the ready jobs of group g wait, testing what dispatch tests, in its
// order: the queue's pause, the tenant's max_running, the key's limit, the rate limits' tokens
// (due after now, whether or not dispatch has seen it yet), and then the sessions that serve
// the queue (sessions, asked only then): none, none with room and credit, or some, in which
// case the jobs wait their turn.
func (d *Dispatcher) waitingReason(g *group, sessions func(readyKey string) queueSessions) string {
	k := readyKey(g.tenant, g.qname)
	switch {
	case d.paused[k]:
		return ExplainQueuePaused
	case d.tenantFull(g.tenant):
		return ExplainTenantQuota
	case d.heldBack(g) && !mutantExplainIgnoresKeys:
		return ExplainKeyLimit
	}
	if due, _ := d.rateDue(g); due.After(d.now) {
		return ExplainRateLimited
	}
	switch s := sessions(k); {
	case s.sessions == 0:
		return ExplainNoWorker
	case !s.free:
		return ExplainWorkersBusy
	}
	return ExplainBehind
}

// queueSessions sums up the sessions that serve a queue: how many, their capacity and leases,
// and whether any is free: in the turn order with room and credit, as dispatch takes them. (A
// session whose leases its worker's newer connection adopted may have room and credit and yet
// not be in the turn order: it is on its way out, and dispatch offers it nothing.)
type queueSessions struct {
	sessions, capacity, held int
	free                     bool
}

func (s *queueSessions) add(sl *slot) {
	s.sessions++
	s.capacity += sl.capacity
	s.held += sl.held
	s.free = s.free || sl.hungry && sl.canTake()
}

// sessionsOf sums up the sessions that serve the ready heap k.
func (d *Dispatcher) sessionsOf(k string) queueSessions {
	var out queueSessions
	for _, sl := range d.sessions {
		if slices.Contains(sl.readyKeys, k) {
			out.add(sl)
		}
	}
	return out
}

// WaitingReasons asks the dispatcher how many jobs wait for each reason explain would give
// (WaitingCounts answers): what /metrics shows as tether_jobs_waiting.
type WaitingReasons struct{}

// WaitingCounts answers WaitingReasons: the waiting jobs by tenant, queue and reason (in that
// order), and each tenant's concurrency keys held back at their limit in some queue.
type WaitingCounts struct {
	Jobs        []WaitingCount
	KeysAtLimit map[string]int
}

// WaitingCount is how many jobs of a tenant's queue wait for one reason.
type WaitingCount struct {
	Tenant, Queue, Reason string
	Jobs                  int
}

// waitingCounts counts the waiting jobs by reason: the scheduled ones as scheduledBy keeps them
// (a delay or a retry), the ready ones a group at a time, with the reason waitingReason gives
// its jobs, so the cost is in the groups, not in the jobs.
func (d *Dispatcher) waitingCounts() WaitingCounts {
	counts := maps.Clone(d.scheduledBy)
	served := map[string]queueSessions{}
	for _, sl := range d.sessions {
		for _, k := range sl.readyKeys {
			s := served[k]
			s.add(sl)
			served[k] = s
		}
	}
	out := WaitingCounts{KeysAtLimit: map[string]int{}}
	held := map[string]bool{}
	for _, q := range d.ready {
		for _, g := range q.byKey {
			reason := d.waitingReason(g, func(k string) queueSessions { return served[k] })
			counts[WaitingCount{Tenant: g.tenant, Queue: g.qname, Reason: reason}] += g.jobs.Len()
			if d.heldBack(g) && !held[g.key] { // at its limit, whatever else holds its jobs
				held[g.key] = true
				out.KeysAtLimit[g.tenant]++
			}
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(counts), func(a, b WaitingCount) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Reason, b.Reason))
	}) {
		k.Jobs = counts[k]
		out.Jobs = append(out.Jobs, k)
	}
	return out
}

// tenantFull reports whether the tenant holds as many leases as its max_running allows.
func (d *Dispatcher) tenantFull(tenant string) bool {
	limit := d.maxRunning[tenant]
	return limit > 0 && d.running[tenant] >= limit
}

// ahead counts the ready jobs of e's queue that may be leased now and go before it: in its own
// key's group those before it; in the others those of a higher priority, and, for each key
// whose turn comes before its own at its priority, one. It is 0 exactly when e is the queue's
// next job. A heap is not sorted, so this reads the queue: it stops after explainAheadLooksMax
// jobs, so that an explain of a job in a queue of millions holds the dispatcher up for a few
// milliseconds at most, and then reports a lower bound (atLeast).
func (d *Dispatcher) ahead(e *entry) (n int, atLeast bool) {
	g := e.heap.group
	looked := 0
	// Its own key's group first: the count that grows with the queue is exact before the others.
	groups := append([]*group{g}, slices.DeleteFunc(slices.Clone(g.queue.groups), func(h *group) bool { return h == g })...)
	for _, h := range groups {
		if h != g && h.jobs.top().Priority == e.Priority && groupFirst(h, g) {
			n++
		}
		for _, x := range h.jobs.entries {
			if looked++; looked > explainAheadLooksMax {
				return n, true
			}
			if h == g && x != e && dispatchFirst(x, e) || h != g && x.Priority > e.Priority {
				n++
			}
		}
	}
	return n, false
}
