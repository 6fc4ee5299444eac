package actors

import (
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
	ExplainNoWorker      = "no_worker_for_queue" // LastWorker, LastSeen: no session serves the queue
	ExplainWorkersBusy   = "workers_busy"        // Sessions, Capacity, Held: none has room or credit; Ahead
	ExplainBehind        = "behind_n"            // Ahead: jobs of its queue that go first
	ExplainSettling      = "settling"            // its last change is on its way to the dispatcher
	ExplainLeased        = "leased"              // WorkerID, LeaseID, StartedAt, ExpiresAt
	ExplainFinished      = "finished"            // Status, DeadReason, Error, FinishedAt
	explainAheadCountMax = 100_000               // Ahead stops counting here
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
	Sessions    int      // sessions serving the queue
	Capacity    int      // their capacity
	Held        int      // the leases they hold
	LastWorker  string   // no_worker_for_queue: the worker of the queue last seen, if any
	LastSeen    time.Time
	Ahead       int // behind_n, workers_busy: jobs of its queue before it, at most explainAheadCountMax

	WorkerID, LeaseID    string
	StartedAt, ExpiresAt time.Time
	LeaseTTL             time.Duration

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
	x := Explanation{JobID: j.ID, Status: j.Status, Queue: j.Queue}
	lr, leased := d.leased[j.ID]
	e := d.waiting[j.ID]
	switch {
	case j.Status.Terminal():
		x.Code, x.DeadReason, x.Error, x.FinishedAt = ExplainFinished, j.DeadReason, j.Error, j.FinishedAt
	case leased && j.Lease != nil && j.Lease.LeaseID == lr.leaseID:
		x.Code, x.WorkerID, x.LeaseID = ExplainLeased, lr.workerID, lr.leaseID
		x.StartedAt, x.ExpiresAt, x.LeaseTTL = j.StartedAt, j.Lease.ExpiresAt, j.LeaseTTL
	case e == nil:
		x.Code = ExplainSettling
	case e.heap == d.scheduled:
		x.Code, x.RunAt = ExplainScheduled, e.RunAt
		if j.Attempt > 0 {
			x.Code = ExplainRetryBackoff
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

// explainWaiting says why a ready job waits, testing what dispatch tests in its order: the
// queue's pause, the tenant's max_running, the key's limit, the sessions that could take it,
// and then its place in line.
func (d *Dispatcher) explainWaiting(e *entry, x *Explanation) {
	k := readyKey(e.Tenant, e.Queue)
	g := e.heap.group
	switch {
	case d.paused[k]:
		x.Code = ExplainQueuePaused
		return
	case d.tenantFull(e.Tenant):
		x.Code, x.MaxRunning, x.Running = ExplainTenantQuota, d.maxRunning[e.Tenant], d.running[e.Tenant]
		return
	case g.index < 0 && !mutantExplainIgnoresKeys:
		x.Code, x.Key, x.KeyLimit = ExplainKeyLimit, e.Key, d.keyLimit(e.Tenant, e.Queue)
		for _, id := range slices.Sorted(maps.Keys(d.leased)) {
			if lr := d.leased[id]; lr.key == g.key && !lr.ending {
				x.KeyHolders = append(x.KeyHolders, id)
			}
		}
		return
	}
	for _, s := range d.sessions {
		if slices.Contains(s.readyKeys, k) {
			x.Sessions++
			x.Capacity += s.capacity
			x.Held += s.held
			if s.credit > 0 && s.held < s.capacity {
				x.Code = ExplainBehind
			}
		}
	}
	switch {
	case x.Sessions == 0:
		x.Code = ExplainNoWorker
	case x.Code != ExplainBehind:
		x.Code, x.Ahead = ExplainWorkersBusy, d.ahead(e)
	default:
		x.Ahead = d.ahead(e)
	}
}

// tenantFull reports whether the tenant holds as many leases as its max_running allows.
func (d *Dispatcher) tenantFull(tenant string) bool {
	limit := d.maxRunning[tenant]
	return limit > 0 && d.running[tenant] >= limit
}

// ahead counts the ready jobs of e's queue that may be leased now and go before it: in its own
// key's group those before it; in the others those of a higher priority, and, for each key
// whose turn comes before its own at its priority, one. It is 0 exactly when e is the queue's
// next job.
func (d *Dispatcher) ahead(e *entry) int {
	g := e.heap.group
	n := 0
	for _, h := range g.queue.groups {
		if h != g && h.jobs.top().Priority == e.Priority && groupFirst(h, g) {
			n++
		}
		for _, x := range h.jobs.entries {
			switch {
			case n >= explainAheadCountMax:
				return n
			case h == g && x != e && dispatchFirst(x, e), h != g && x.Priority > e.Priority:
				n++
			}
		}
	}
	return n
}
