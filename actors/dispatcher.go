package actors

import (
	"container/heap"
	"maps"
	"slices"
	"time"

	"github.com/tetherhq/tether/actors/signing"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Dispatcher owns every job that is not leased: it holds the queued and scheduled jobs in
// priority heaps, matches them to worker credit, and decides what happens to a waiting or
// terminal job (cancel, re-drive). Leased jobs belong to their job actors; the dispatcher routes
// the job commands it gets to the job's actor while it holds a lease, and answers the rest
// itself.
//
// Matching: sessions with credit take turns, one job per turn; each takes the best ready job of
// its tenant across its queues (higher priority, then older, with concurrency keys taking
// turns: keys.go); a tenant at max_running gets nothing until a lease ends, nor a key at its
// max_running_per_key. The dispatcher picks the lease id, so it knows which lease a
// job's actor reports on.
type Dispatcher struct {
	// rebuiltAt is the seq the dispatcher's state was rebuilt at; notices of events at or
	// before it are already part of that state.
	rebuiltAt  uint64
	waiting    map[string]*entry
	ready      map[string]*groupHeap // by tenant + "\x00" + queue
	scheduled  *entryHeap
	leased     map[string]leaseRef // by job id
	sessions   map[string]*slot
	hungry     []*slot // sessions that can take a job (credit, and room), in turn order
	readyCount int     // jobs in the ready heaps that may be leased: none, no matching to do
	running    map[string]int
	maxRunning map[string]int
	// Concurrency keys (keys.go), by keyOf: their leases whose end is not decided, and their
	// groups in the ready heaps. keyDefault is a tenant's max_running_per_key, keyOwn a
	// queue's own (by readyKey).
	keyRunning map[string]int
	keyGroups  map[string][]*group
	keyDefault map[string]int
	keyOwn     map[string]int
	leases     uint64 // leases made since the dispatcher started: the keys' turns
	// Rate limits (rates.go): by rateKey, and their buckets by bucketKey (when each is full
	// again); rateWait holds the groups waiting for a token, the soonest due first.
	rateDefs     map[string]rateDef
	buckets      map[string]time.Time
	bucketsSweep int
	rateWait     rateHeap
	// inherited holds the leases the rebuild found (made before a restart, whose worker may
	// never have got them), by worker, then job id, until a heartbeat of the worker says
	// whether it holds them (heard) or they end.
	inherited map[string]map[string]string

	// now is the dispatcher's clock when it took the message it is handling.
	now time.Time
	// scheduledBy counts the scheduled heap's jobs by tenant, queue and explain's reason, kept
	// as they come and go, so that /metrics does not read every scheduled job.
	scheduledBy map[WaitingCount]int
	redriving   map[string]bool
	// paused holds the ready heaps (readyKey) of paused queues, which lease nothing. A pause
	// counts from when the dispatcher decides it, before it is durable.
	paused map[string]bool
	tick   TimerID
	tickAt time.Time
	pipe   pipeline
	// retention is the policy for finished jobs; expiring holds those whose job.expired is not
	// durable yet, and sweeping is set while a sweep's batch is.
	retention projections.Retention
	expiring  map[string]bool
	sweep     TimerID
	sweeping  bool
}

// Waiting is a job the dispatcher should hold: newly submitted, re-queued after a failure, or
// re-driven. RunAt after now means scheduled.
type Waiting struct {
	ID        string
	Tenant    string
	Queue     string
	Priority  int
	SubmitSeq uint64
	RunAt     time.Time
	Key       string // its concurrency key, if any
	// RateLimits are the tenant's rate limits its lease takes a token from (rates.go).
	RateLimits []eventlog.RateLimitUse
	Retry      bool // it waits after a failed attempt (explain's retry_backoff)
}

// waitingOf describes a job the projections hold for the dispatcher, waiting until runAt.
func waitingOf(j *projections.Job, runAt time.Time) Waiting {
	return Waiting{ID: j.ID, Tenant: j.Tenant, Queue: j.Queue, Priority: j.Priority, SubmitSeq: j.SubmitSeq, RunAt: runAt, Key: j.ConcurrencyKey,
		RateLimits: j.RateLimits, Retry: j.Attempt > 0}
}

// Notices to the dispatcher. Seq is the seq of the event a notice announces.
type (
	// Enqueue hands newly waiting jobs to the dispatcher. It is sent as a pointer (*Enqueue).
	Enqueue struct {
		Jobs []Waiting
		Seq  uint64
	}
	// SessionCredit lets the dispatcher assign a session N more jobs. The worker's credit goes
	// straight here: the dispatcher is where credit is kept. Credit is banked up to the
	// session's capacity whatever the session holds, and a job is offered only while the session
	// holds fewer leases than its capacity; so a worker may grant credit for a slot as soon as
	// the slot's job has finished, in the same write as the result, and the next job leaves
	// with the fsync that makes the result durable (leaseEnding).
	SessionCredit struct {
		SessionID string
		N         int
	}
	// QuotaChanged carries a tenant's new max_running.
	QuotaChanged struct {
		Tenant     string
		MaxRunning int
	}
	// WorkerRevokedNotice says a worker was revoked.
	WorkerRevokedNotice struct {
		WorkerID string
		Seq      uint64
	}
	sessionStarted struct {
		SessionID, WorkerID, Tenant string
		Queues                      []string
		Capacity                    int
		Polled                      bool // a long-poll session: it reports assignments' arrival
		Seq                         uint64
	}
	sessionEnded struct {
		SessionID string
		Seq       uint64
	}
	// leaseEnded: the job's lease ended durably; Requeue is set when the job waits again.
	// FlowID and Tenant name the flow the job is a step of, if it is one.
	leaseEnded struct {
		JobID, LeaseID string
		Requeue        *Waiting
		Seq            uint64
		FlowID, Tenant string
	}
	// leaseEnding: the job's actor has decided the lease's end and handed it to the log, not
	// yet durably. The worker's slot and the tenant's running count are free at once: whatever
	// the dispatcher leases with them is appended after that end, so no durable prefix of the
	// log holds both leases, and the new assignment leaves only once its own lease, and so the
	// end before it, is durable. Waiting for the end's fsync instead would put an fsync between
	// a worker's result and its next job for nothing.
	leaseEnding struct{ JobID, LeaseID string }
	// leaseRefused: the job's actor found the job not waiting. Idle: it holds no lease either.
	leaseRefused struct {
		JobID, LeaseID string
		Idle           bool
	}
	// extend: a heartbeat listed the lease.
	extend struct{ WorkerID, JobID, LeaseID string }
	// heard: a heartbeat of the worker, which listed Leases (those of its own that are
	// current; it holds no other).
	heard struct {
		WorkerID string
		Leases   []extend
	}
	// redriveJob: a re-drive the tenant admitted against its quota.
	redriveJob struct{ Redrive }
	// startLease asks a job's actor to lease the job, with the tokens the lease took.
	startLease struct {
		JobID, LeaseID, SessionID, WorkerID string
		RateGrants                          []eventlog.RateGrant
	}
	// revokeLease asks a job's actor to give up a revoked worker's lease at once.
	revokeLease struct{ WorkerID string }
	// withdrawCredit: a long poll ended; its session's credit is gone. The dispatcher answers
	// offerClosed once every lease it made for the session has arrived there (or was refused).
	withdrawCredit struct{ SessionID string }
	// assignmentArrived: a long-poll session got an assignment (to deliver or hand back).
	assignmentArrived struct{ SessionID, JobID, LeaseID string }
	offerClosed       struct{}
	// revokeSession ends a revoked worker's session.
	revokeSession struct{}
	dispatchTick  struct{}
)

// entry is a waiting job in one of the dispatcher's heaps: a ready heap or the scheduled one.
type entry struct {
	Waiting
	heap  *entryHeap
	index int // its position in heap
	// start is the message that leases it, sent as a pointer into the entry so that it is not
	// boxed apart. An entry is leased once (lease removes it; a job that waits again gets a
	// new one), so nothing writes start once it is sent.
	start startLease
}

// leaseRef is a lease the dispatcher gave. ending is set once the job's actor has decided the
// lease's end: its slot is free from then on, though the lease is tracked until the end is
// durable (leaseEnded). polledBy is the long-poll session whose inFlight counts the lease
// until its assignment arrives there, or the lease is forgotten first (unlease).
type leaseRef struct {
	leaseID, sessionID, tenant, workerID string
	key                                  string // keyOf the job's concurrency key
	polledBy                             string
	ending                               bool
}

type slot struct {
	id, workerID, tenant string
	readyKeys            []string // the ready heaps of the session's tenant and queues
	capacity             int
	credit               int
	held                 int
	hungry, gone         bool // in Dispatcher.hungry; ended
	// polled marks a long-poll session; inFlight counts its leases whose assignment has not
	// reached it yet, and withdrawing is set while its offer waits for them to.
	polled, withdrawing bool
	inFlight            int
}

func newSlot(id, workerID, tenant string, queues []string, capacity int) *slot {
	s := &slot{id: id, workerID: workerID, tenant: tenant, capacity: capacity}
	for _, q := range queues {
		s.readyKeys = append(s.readyKeys, readyKey(tenant, q))
	}
	return s
}

func readyKey(tenant, queue string) string { return tenant + "\x00" + queue }

// canTake reports whether the session has credit and room for a job.
func (s *slot) canTake() bool { return !s.gone && s.credit > 0 && s.held < s.capacity }

// wake puts a session in the turn order if it can take a job.
func (d *Dispatcher) wake(s *slot) {
	if s != nil && !s.hungry && s.canTake() {
		s.hungry = true
		d.hungry = append(d.hungry, s)
	}
}

// NewDispatcher returns the dispatcher's behaviour, which expires finished jobs under r.
func NewDispatcher(r projections.Retention) *Dispatcher { return &Dispatcher{retention: r} }

// Recover implements Behaviour: the waiting jobs, leases, sessions and limits are read back from
// the projections. A session that was open gets credit for its free capacity.
func (d *Dispatcher) Recover(env Env) {
	*d = Dispatcher{
		retention: d.retention, expiring: map[string]bool{},
		waiting: map[string]*entry{}, ready: map[string]*groupHeap{}, scheduled: &entryHeap{less: dueFirst}, leased: map[string]leaseRef{},
		sessions: map[string]*slot{}, running: map[string]int{}, maxRunning: map[string]int{},
		redriving: map[string]bool{}, paused: map[string]bool{}, inherited: map[string]map[string]string{},
		keyRunning: map[string]int{}, keyGroups: map[string][]*group{}, keyDefault: map[string]int{}, keyOwn: map[string]int{},
		scheduledBy: map[WaitingCount]int{}, rateDefs: map[string]rateDef{}, buckets: map[string]time.Time{}, bucketsSweep: bucketsSweepMin,
	}
	now := env.Now()
	d.now = now
	env.Read(func(s *projections.Set) {
		d.rebuiltAt = s.Seq()
		for _, name := range s.TenantNames() {
			t := s.Tenant(name)
			d.maxRunning[name] = t.MaxRunning
			for q := range t.Paused {
				d.paused[readyKey(name, q)] = true
			}
			if t.MaxRunningPerKey > 0 {
				d.keyDefault[name] = t.MaxRunningPerKey
			}
			for q, n := range t.QueueKeyLimits {
				d.keyOwn[readyKey(name, q)] = n
			}
			d.recoverRates(&t)
		}
		byWorker := map[string]*slot{}
		for _, w := range s.OpenSessions() {
			sl := newSlot(w.Session.ID, w.ID, w.Tenant, w.Queues, w.Session.Capacity)
			sl.polled = w.Session.Transport == TransportLongPoll
			d.sessions[sl.id], byWorker[w.ID] = sl, sl
		}
		for _, j := range s.Leases() {
			lr := leaseRef{leaseID: j.Lease.LeaseID, sessionID: j.Lease.SessionID, tenant: j.Tenant, workerID: j.Lease.WorkerID,
				key: keyOf(j.Tenant, j.ConcurrencyKey)}
			if sl := byWorker[lr.workerID]; sl != nil { // a lease adopted by the worker's newer session
				lr.sessionID = sl.id
				sl.held++
			}
			d.leased[j.ID] = lr
			if d.inherited[lr.workerID] == nil {
				d.inherited[lr.workerID] = map[string]string{}
			}
			d.inherited[lr.workerID][j.ID] = lr.leaseID
			d.running[j.Tenant]++
			d.keyLeases(lr.key, 1)
		}
		// After the limits and the leases: a job's key group is placed as they say.
		for _, j := range s.AllWaiting() {
			d.add(waitingOf(j, j.RunAt), now)
		}
		for _, w := range s.OpenSessions() {
			sl := byWorker[w.ID]
			if !sl.polled { // a long poll's credit lasts as long as its offer, which the restart lost
				sl.credit = max(sl.capacity-sl.held, 0)
			}
			d.wake(sl)
		}
	})
	d.armSweep(env)
	d.dispatch(env)
}

// Receive implements Behaviour: handle takes the message, and dispatch looks for leases to make
// only if it may have brought a ready job and a session's credit together.
func (d *Dispatcher) Receive(env Env, msg any) {
	d.now = env.Now()
	woke := d.wakeRated(d.now) // before anything reads the groups: none waits for a token due
	if d.handle(env, msg) || woke {
		d.dispatch(env)
	}
}

// handle takes one message and reports whether it may have made a lease possible: a job that
// became ready, credit given or freed, a limit raised, a queue resumed. Every case says which.
func (d *Dispatcher) handle(env Env, msg any) (mayLease bool) {
	switch m := msg.(type) {
	case *Enqueue:
		if m.Seq > d.rebuiltAt {
			now := env.Now()
			for _, w := range m.Jobs {
				d.add(w, now)
			}
		}
		return true
	case sessionStarted:
		if _, ok := d.sessions[m.SessionID]; !ok && m.Seq > d.rebuiltAt {
			s := newSlot(m.SessionID, m.WorkerID, m.Tenant, m.Queues, m.Capacity)
			s.polled = m.Polled
			// The worker's leases from an earlier connection count against this one.
			for id, lr := range d.leased {
				if lr.workerID == m.WorkerID && !lr.ending { // an ending lease has freed its slot
					if old := d.sessions[lr.sessionID]; old != nil && old != s {
						old.held--
					}
					lr.sessionID = s.id
					d.leased[id] = lr
					s.held++
				}
			}
			d.sessions[m.SessionID] = s
		}
		return false // it has no credit until the worker gives some
	case sessionEnded:
		if s := d.sessions[m.SessionID]; s != nil && m.Seq > d.rebuiltAt { // else the rebuild knew whether it was open
			s.gone = true
			delete(d.sessions, m.SessionID)
			if s.hungry { // it leaves the turn order now: its next turn may never come (no job is ready)
				s.hungry = false
				d.hungry = slices.DeleteFunc(d.hungry, func(h *slot) bool { return h == s })
			}
		}
		return false
	case SessionCredit:
		s := d.sessions[m.SessionID]
		if s == nil {
			return false
		}
		s.credit = min(s.credit+min(max(m.N, 0), CapacityMax), s.capacity)
		d.wake(s)
		return true
	case withdrawCredit:
		s := d.sessions[m.SessionID]
		if s == nil || s.inFlight == 0 {
			env.Send(SessionRef(m.SessionID), offerClosed{})
		}
		if s != nil && !mutantCreditOutlivesPoll {
			s.credit, s.withdrawing = 0, s.inFlight > 0
		}
		return false
	case assignmentArrived:
		// Counted here, or when the lease ends first (unlease), never both.
		if lr, ok := d.leased[m.JobID]; ok && lr.leaseID == m.LeaseID && lr.polledBy == m.SessionID {
			lr.polledBy = ""
			d.leased[m.JobID] = lr
			d.arrived(env, d.sessions[m.SessionID])
		}
		return false
	case *leaseEnding:
		if lr, ok := d.leased[m.JobID]; ok && lr.leaseID == m.LeaseID && !lr.ending {
			lr.ending = true
			d.leased[m.JobID] = lr
			d.free(lr)
		}
		return true
	case *leaseEnded:
		d.leaseEnded(env, m)
		return true
	case leaseRefused:
		if lr, ok := d.leased[m.JobID]; ok && lr.leaseID == m.LeaseID {
			d.unlease(env, m.JobID, lr, true)
		}
		if m.Idle {
			env.Stop(JobRef(m.JobID))
		}
		return true
	case QuotaChanged:
		d.maxRunning[m.Tenant] = m.MaxRunning
		return true
	case WorkerRevokedNotice:
		// In key order: what a behaviour sends must not depend on map iteration, or the
		// simulator could not replay a seed.
		for _, id := range slices.Sorted(maps.Keys(d.sessions)) {
			if d.sessions[id].workerID == m.WorkerID {
				env.Send(SessionRef(id), revokeSession{})
			}
		}
		for _, id := range slices.Sorted(maps.Keys(d.leased)) {
			if d.leased[id].workerID == m.WorkerID {
				env.Send(JobRef(id), revokeLease{WorkerID: m.WorkerID})
			}
		}
		return false
	case dispatchTick:
		d.tick, d.tickAt = 0, time.Time{}
		return true
	case Cancel:
		if !d.route(env, m.JobID, "", "", m) {
			d.cancel(env, m)
		}
		return false
	case redriveJob:
		d.redrive(env, m)
		return false
	case Delete:
		d.deleteJob(env, m)
		return false
	case PurgeDead:
		d.purgeDead(env, m)
		return false
	case Explain:
		env.Send(env.Sender(), d.explain(env, m))
		return false
	case WaitingReasons:
		env.Send(env.Sender(), d.waitingCounts())
		return false
	case RateLimits:
		env.Send(env.Sender(), RateLimitStates{Limits: d.rateStates(m.Tenant, d.now)})
		return false
	case PauseQueue:
		d.pauseQueue(env, m)
		return !m.Paused // a resume may free the queue's jobs
	case SetKeyLimit:
		d.setKeyLimit(env, m)
		return true // a raised limit frees its keys' jobs
	case SetRateLimit:
		d.setRateLimit(env, m)
		return true // a faster limit frees its jobs sooner
	case DeleteRateLimit:
		d.deleteRateLimit(env, m)
		return true
	case retentionSweep:
		d.sweepRetention(env)
		return false
	case Progress:
		if !d.route(env, m.JobID, m.LeaseID, m.WorkerID, m) {
			env.Send(env.Sender(), ProgressAck{Err: notCovered(env, m.WorkerID, m.JobID)})
		}
		return false
	case Fail:
		if !d.route(env, m.JobID, m.LeaseID, m.WorkerID, m) {
			env.Send(env.Sender(), Done{Err: notCovered(env, m.WorkerID, m.JobID)})
		}
		return false
	case ReleaseLease:
		if !d.route(env, m.JobID, m.LeaseID, m.WorkerID, m) {
			env.Send(env.Sender(), Done{Err: notCovered(env, m.WorkerID, m.JobID)})
		}
		return false
	case Undelivered:
		// By the dispatcher, not straight to the job: a lease that ended meanwhile needs no
		// actor started for it.
		if lr, ok := d.leased[m.JobID]; ok && lr.leaseID == m.LeaseID {
			env.Send(JobRef(m.JobID), m)
		}
		return false
	case Complete:
		if !d.route(env, m.JobID, m.LeaseID, m.WorkerID, m) {
			d.repeatedCompletion(env, m)
		}
		return false
	case heard:
		d.heard(env, m)
		return false
	case *Persisted:
		d.persisted(env, *m)
		return true
	default:
		return false // the dispatcher takes no other message
	}
}

// route forwards a job command to the job's actor if the job is leased and reports whether it
// did. A worker's command naming another lease is answered here.
func (d *Dispatcher) route(env Env, jobID, leaseID, workerID string, msg any) bool {
	lr, ok := d.leased[jobID]
	if !ok {
		return false
	}
	if leaseID != "" && !sameLease(leaseID, lr.leaseID) {
		switch msg.(type) {
		case Progress:
			env.Send(env.Sender(), ProgressAck{Err: notCovered(env, workerID, jobID)})
		case Complete, Fail, ReleaseLease:
			env.Send(env.Sender(), Done{Err: notCovered(env, workerID, jobID)})
		}
		return true
	}
	env.Forward(JobRef(jobID), msg, env.Sender())
	return true
}

// heard passes a worker's heartbeat to the actors of the leases it listed, and tells those of
// the leases the rebuild found that the worker holds but did not list that it disowns them.
func (d *Dispatcher) heard(env Env, m heard) {
	for _, e := range m.Leases {
		d.route(env, e.JobID, e.LeaseID, e.WorkerID, e)
	}
	held := d.inherited[m.WorkerID]
	if len(held) == 0 {
		return
	}
	delete(d.inherited, m.WorkerID) // one heartbeat says what the worker holds
	for _, e := range m.Leases {
		delete(held, e.JobID)
	}
	for _, id := range slices.Sorted(maps.Keys(held)) {
		if lr, ok := d.leased[id]; ok && lr.leaseID == held[id] && !lr.ending {
			env.Send(JobRef(id), disowned{WorkerID: m.WorkerID, LeaseID: lr.leaseID})
		}
	}
}

// forgetInherited stops tracking a lease the rebuild found: it ended.
func (d *Dispatcher) forgetInherited(workerID, jobID string) {
	if held := d.inherited[workerID]; held != nil {
		delete(held, jobID)
		if len(held) == 0 {
			delete(d.inherited, workerID)
		}
	}
}

// sameLease is the lease_id check every worker operation passes.
func sameLease(given, current string) bool { return given == current || mutantSkipLeaseCheck }

func leaseMismatch(jobID string) *Rejection {
	return reject(CodeLeaseMismatch, "the lease is not the current lease of job %s", jobID)
}

// notCovered answers a worker's command on a job that no lease of the worker's covers:
// JOB_NOT_FOUND when the job is not the worker's tenant's (another tenant must not learn that
// the job exists), else LEASE_MISMATCH.
func notCovered(env Env, workerID, jobID string) *Rejection {
	found := false
	env.Read(func(s *projections.Set) {
		w, wok := s.Worker(workerID)
		j := s.JobRef(jobID)
		found = wok && j != nil && j.Tenant == w.Tenant
	})
	if !found {
		return reject(CodeJobNotFound, "no job %q", clip(jobID))
	}
	return leaseMismatch(jobID)
}

// repeatedCompletion answers a completion for a job no lease covers: the completion that was
// accepted, sent again, is accepted again; anything else is refused.
func (d *Dispatcher) repeatedCompletion(env Env, m Complete) {
	var j *projections.Job
	env.Read(func(s *projections.Set) {
		if x := s.JobRef(m.JobID); x != nil && x.Status == projections.StatusSucceeded && x.SucceededLease == m.LeaseID {
			j = x.Clone()
		}
	})
	if j == nil {
		env.Send(env.Sender(), Done{Err: notCovered(env, m.WorkerID, m.JobID)})
		return
	}
	if m.Nonce != j.SucceededNonce || m.Signature != j.Signature {
		env.Send(env.Sender(), Done{Err: reject(CodeCompletionConflict, "job %s was completed with a different nonce or signature", j.ID)})
		return
	}
	if hash, err := signing.OutputHash(orNull(m.Output)); err != nil || hash != j.OutputHash {
		env.Send(env.Sender(), Done{Err: reject(CodeCompletionConflict, "job %s was completed with a different output", j.ID)})
		return
	}
	env.Send(env.Sender(), Done{Receipt: Receipt{Seq: j.SucceededSeq}})
}

func (d *Dispatcher) cancel(env Env, m Cancel) {
	var j *projections.Job
	env.Read(func(s *projections.Set) { j = s.JobRef(m.JobID); j = cloneIf(j, j != nil && j.Tenant == m.Tenant) })
	switch {
	case j == nil:
		env.Send(env.Sender(), Done{Err: reject(CodeJobNotFound, "no job %q", clip(m.JobID))})
	case d.waiting[m.JobID] != nil:
		d.remove(m.JobID)
		reason := m.Reason
		if reason == "" {
			reason = eventlog.CancelledRequested
		}
		d.pipe.persist(env, []eventlog.Payload{eventlog.JobCancelled{JobID: m.JobID, Reason: reason, APIKeyID: m.APIKeyID}},
			cancelDone{reply: env.Sender(), tenant: j.Tenant, flowID: j.FlowID})
	case j.Status.Terminal() || d.redriving[m.JobID]:
		env.Send(env.Sender(), Done{Err: reject(CodeAlreadyTerminal, "job %s is %s", j.ID, j.Status)})
	default: // cancelled or re-queued a moment ago; answer once that is durable
		d.pipe.whenSettled(func() {
			env.Send(env.Sender(), Done{Err: reject(CodeAlreadyTerminal, "job %s is no longer cancellable", j.ID)})
		})
	}
}

func cloneIf(j *projections.Job, ok bool) *projections.Job {
	if !ok {
		return nil
	}
	return j.Clone()
}

// cancelDone: a waiting job's cancel, of a flow's step if flowID is set.
type cancelDone struct {
	reply          Ref
	tenant, flowID string
}

type redriveDone struct {
	reply   Ref
	tenant  string
	waiting Waiting
}

func (d *Dispatcher) redrive(env Env, m redriveJob) {
	var j *projections.Job
	env.Read(func(s *projections.Set) { j = s.JobRef(m.JobID); j = cloneIf(j, j != nil && j.Tenant == m.Tenant) })
	if j == nil || j.Status != projections.StatusFailed || d.redriving[m.JobID] || d.expiring[m.JobID] {
		r := reject(CodeNotDeadLettered, "job %q is not in the dead-letter queue", clip(m.JobID))
		switch {
		case j == nil:
			r = reject(CodeJobNotFound, "no job %q", clip(m.JobID))
		case d.expiring[m.JobID]:
			r = reject(CodeJobExpired, "job %s has expired", j.ID)
		}
		env.Send(TenantRef(m.Tenant), redriveSettled{jobID: m.JobID})
		env.Send(env.Sender(), Done{Err: r})
		return
	}
	d.redriving[j.ID] = true
	budget := j.MaxAttempts - j.AttemptBase
	d.pipe.persist(env, []eventlog.Payload{eventlog.JobRedriven{JobID: j.ID, MaxAttempts: j.Attempt + budget, APIKeyID: m.APIKeyID}},
		redriveDone{reply: env.Sender(), tenant: j.Tenant, waiting: waitingOf(j, time.Time{})})
}

func (d *Dispatcher) persisted(env Env, m Persisted) {
	defer d.pipe.settled()
	err := unavailable(m.Err)
	switch t := m.Then.(type) {
	case replyDone:
		env.Send(t.reply, Done{Receipt: receiptOf(m.Receipt), Err: err})
	case cancelDone:
		env.Send(t.reply, Done{Receipt: receiptOf(m.Receipt), Err: err})
		if err == nil {
			stepEnded(env, t.tenant, t.flowID)
		}
	case redriveDone:
		delete(d.redriving, t.waiting.ID)
		if err == nil && m.Receipt.Last > d.rebuiltAt {
			d.add(t.waiting, env.Now())
		}
		env.Send(TenantRef(t.tenant), redriveSettled{jobID: t.waiting.ID})
		env.Send(t.reply, Done{Receipt: receiptOf(m.Receipt), Err: err})
	case expireDone:
		d.expired(env, t, m)
	}
}

// pauseQueue pauses or resumes a queue at once, and answers once that is durable. Leases the
// dispatcher made before a pause may still arrive after it (their job.leased follows the pause
// in the log); none is made after.
func (d *Dispatcher) pauseQueue(env Env, m PauseQueue) {
	if !validName(m.Queue, QueueLenMax, false) {
		env.Send(env.Sender(), Done{Err: reject(CodeInvalidArgument, "queue %q must be 1..%d of [A-Za-z0-9_-]", clip(m.Queue), QueueLenMax)})
		return
	}
	k := readyKey(m.Tenant, m.Queue)
	if d.paused[k] == m.Paused {
		reply := env.Sender()
		d.pipe.whenSettled(func() { // the event that put it there may be on its way
			var rc Receipt
			env.Read(func(s *projections.Set) {
				if p, ok := s.Paused(m.Tenant, m.Queue); ok {
					rc.Seq = p.Seq
				}
			})
			env.Send(reply, Done{Receipt: rc})
		})
		return
	}
	var ev eventlog.Payload = eventlog.QueueResumed{Tenant: m.Tenant, Queue: m.Queue, APIKeyID: m.APIKeyID}
	if m.Paused {
		d.paused[k] = true
		ev = eventlog.QueuePaused{Tenant: m.Tenant, Queue: m.Queue, APIKeyID: m.APIKeyID}
	} else {
		delete(d.paused, k)
	}
	d.pipe.persist(env, []eventlog.Payload{ev}, replyDone{env.Sender()})
}

func (d *Dispatcher) leaseEnded(env Env, m *leaseEnded) {
	if m.Requeue == nil { // whether or not the lease is still tracked: telling twice is harmless
		defer stepEnded(env, m.Tenant, m.FlowID)
	}
	lr, ok := d.leased[m.JobID]
	switch {
	case ok && lr.leaseID == m.LeaseID:
		d.unlease(env, m.JobID, lr, false)
		env.Stop(JobRef(m.JobID))
	case !ok && m.Seq <= d.rebuiltAt:
		env.Stop(JobRef(m.JobID)) // ended before the rebuild, which already counted it
		return
	default:
		return // a lease the dispatcher no longer tracks
	}
	if m.Requeue != nil && m.Seq > d.rebuiltAt {
		d.add(*m.Requeue, env.Now())
	}
}

// stepEnded tells a flow's tenant that a job that is a step of flowID (if set) finished
// durably. The tenant reads the rest from the projections.
func stepEnded(env Env, tenant, flowID string) {
	if flowID != "" {
		env.Send(TenantRef(tenant), flowStepEnded{FlowID: flowID})
	}
}

// unlease forgets a lease, freeing its slot unless its end did already. A refused lease gives
// its credit back; an ended one does not: the worker grants credit again when it is ready for
// more. A long-poll session's offer no longer waits for the lease's assignment if it has not
// arrived: a refused lease has none, and one that ended before it was durable is never
// assigned (Job.end drops it).
func (d *Dispatcher) unlease(env Env, jobID string, lr leaseRef, refund bool) {
	delete(d.leased, jobID)
	d.forgetInherited(lr.workerID, jobID)
	if lr.polledBy != "" {
		d.arrived(env, d.sessions[lr.polledBy])
	}
	if lr.ending {
		return
	}
	if s := d.sessions[lr.sessionID]; s != nil && refund {
		s.credit = min(s.credit+1, s.capacity)
	}
	d.free(lr)
}

// free gives a lease's slot back to its session and its tenant's running count.
func (d *Dispatcher) free(lr leaseRef) {
	d.running[lr.tenant]--
	d.keyLeases(lr.key, -1)
	if s := d.sessions[lr.sessionID]; s != nil {
		s.held--
		d.wake(s)
	}
}

func (d *Dispatcher) add(w Waiting, now time.Time) {
	if _, ok := d.waiting[w.ID]; ok {
		return
	}
	if _, ok := d.leased[w.ID]; ok {
		return
	}
	e := &entry{Waiting: w}
	d.waiting[w.ID] = e
	if w.RunAt.After(now) {
		d.scheduled.push(e)
		d.countScheduled(e, 1)
		return
	}
	d.pushReady(e)
}

// countScheduled counts a scheduled job in (delta 1) or out (-1) of scheduledBy.
func (d *Dispatcher) countScheduled(e *entry, delta int) {
	k := WaitingCount{Tenant: e.Tenant, Queue: e.Queue, Reason: ExplainScheduled}
	if e.Retry {
		k.Reason = ExplainRetryBackoff
	}
	if d.scheduledBy[k] += delta; d.scheduledBy[k] == 0 {
		delete(d.scheduledBy, k)
	}
}

func (d *Dispatcher) remove(id string) {
	e := d.waiting[id]
	if e == nil {
		return
	}
	delete(d.waiting, id)
	if e.heap == d.scheduled {
		heap.Remove(e.heap, e.index)
		d.countScheduled(e, -1)
		return
	}
	d.removeReady(e)
}

// dispatch moves due jobs to their ready heaps, hands out jobs while any session with credit
// can take one, and sets the timer for the next scheduled job.
func (d *Dispatcher) dispatch(env Env) {
	now := d.now
	for e := d.scheduled.top(); e != nil && !e.RunAt.After(now); e = d.scheduled.top() {
		heap.Pop(d.scheduled)
		d.countScheduled(e, -1)
		d.pushReady(e)
	}
	served := "" // mutantStarveTenants: the one tenant this dispatch serves
	for progressed := true; progressed && d.readyCount > 0; {
		progressed = false
		for i := 0; i < len(d.hungry) && d.readyCount > 0; {
			s := d.hungry[i]
			if !s.canTake() {
				// Out of turn until credit comes or a lease ends (wake).
				s.hungry = false
				d.hungry = slices.Delete(d.hungry, i, i+1)
				continue
			}
			if d.tenantFull(s.tenant) || mutantStarveTenants && served != "" && s.tenant != served {
				i++
				continue
			}
			e := d.best(s, now)
			if e == nil {
				i++
				continue
			}
			d.lease(env, s, e)
			progressed, served = true, s.tenant
			i++
		}
	}
	next := time.Time{}
	if e := d.scheduled.top(); e != nil {
		next = e.RunAt
	}
	if len(d.rateWait.groups) > 0 && (next.IsZero() || d.rateWait.groups[0].due.Before(next)) {
		next = d.rateWait.groups[0].due
	}
	if !next.IsZero() {
		if d.tickAt.IsZero() || next.Before(d.tickAt) {
			if d.tick != 0 {
				env.Cancel(d.tick)
			}
			d.tick, d.tickAt = env.After(next.Sub(now), dispatchTick{}), next
		}
	}
}

// best returns the session's tenant's best ready job over the session's queues. A queue's best
// group whose rate limits have no token at now is held back until they do, and the next looked at.
func (d *Dispatcher) best(s *slot, now time.Time) *entry {
	if mutantMapOrder {
		for _, e := range d.waiting {
			if k := readyKey(e.Tenant, e.Queue); e.heap != d.scheduled && e.heap.group.index >= 0 && slices.Contains(s.readyKeys, k) && !d.paused[k] {
				return e
			}
		}
		return nil
	}
	return d.bestOf(s, now, true)
}

// bestOf is the best of the tops of the session's queues (queueTop, which holds back the
// groups whose tokens are not due when hold says so).
func (d *Dispatcher) bestOf(s *slot, now time.Time, hold bool) *entry {
	var best *entry
	for _, k := range s.readyKeys {
		if d.paused[k] && !(hold && mutantIgnorePause) {
			continue
		}
		if top := d.queueTop(k, now, hold); top != nil && (best == nil || dispatchFirst(top, best)) {
			best = top
		}
	}
	return best
}

// arrived counts a lease of a long-poll session as arrived there, and closes the session's
// withdrawn offer once none is left on the way.
func (d *Dispatcher) arrived(env Env, s *slot) {
	if s == nil || s.inFlight == 0 {
		return
	}
	s.inFlight--
	if s.inFlight == 0 && s.withdrawing {
		s.withdrawing = false
		env.Send(SessionRef(s.id), offerClosed{})
	}
}

func (d *Dispatcher) lease(env Env, s *slot, e *entry) {
	d.leases++
	g := e.heap.group
	if g != nil {
		g.served = d.leases // its key's turn is over (keys.go)
	}
	d.remove(e.ID)
	lr := leaseRef{leaseID: NewID(env), sessionID: s.id, tenant: s.tenant, workerID: s.workerID, key: keyOf(e.Tenant, e.Key)}
	if s.polled {
		lr.polledBy = s.id
		s.inFlight++
	}
	d.leased[e.ID] = lr
	s.credit--
	s.held++
	d.running[s.tenant]++
	d.keyLeases(lr.key, 1)
	var grants []eventlog.RateGrant
	if g != nil && len(g.rates) > 0 {
		grants = d.takeTokens(g, d.now)
	}
	e.start = startLease{JobID: e.ID, LeaseID: lr.leaseID, SessionID: s.id, WorkerID: s.workerID, RateGrants: grants}
	env.Send(JobRef(e.ID), &e.start)
}

// dispatchFirst orders ready jobs: higher priority first, then older.
func dispatchFirst(a, b *entry) bool {
	return projections.CompareDispatch(a.Priority, a.SubmitSeq, b.Priority, b.SubmitSeq) < 0
}

// dueFirst orders scheduled jobs by when they fall due.
func dueFirst(a, b *entry) bool {
	if c := a.RunAt.Compare(b.RunAt); c != 0 {
		return c < 0
	}
	return a.SubmitSeq < b.SubmitSeq
}

// entryHeap is a heap of entries that keeps each entry's place in it, so a cancelled job can be
// taken out of the middle. group is the key group it is the jobs of; nil for the scheduled heap.
type entryHeap struct {
	entries []*entry
	less    func(a, b *entry) bool
	group   *group
}

func (h *entryHeap) Len() int           { return len(h.entries) }
func (h *entryHeap) Less(i, j int) bool { return h.less(h.entries[i], h.entries[j]) }
func (h *entryHeap) Swap(i, j int) {
	e := h.entries
	e[i], e[j] = e[j], e[i]
	e[i].index, e[j].index = i, j
}
func (h *entryHeap) Push(x any) {
	e := x.(*entry)
	e.heap, e.index = h, len(h.entries)
	h.entries = append(h.entries, e)
}
func (h *entryHeap) Pop() any {
	n := len(h.entries) - 1
	e := h.entries[n]
	h.entries[n] = nil
	h.entries = h.entries[:n]
	e.heap = nil
	return e
}
func (h *entryHeap) push(e *entry) { heap.Push(h, e) }

// top is the first entry, or nil; a nil heap is empty.
func (h *entryHeap) top() *entry {
	if h == nil || len(h.entries) == 0 {
		return nil
	}
	return h.entries[0]
}
