package sim

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/signing"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// oracle is the simulator's own fold of the durable log, written apart from the projections so
// that it can judge them. It sees every record once, in seq order, with the server clock at
// which the record was decided, and checks the invariants that a single record can break.
type oracle struct {
	s            *Sim
	jobs         map[string]*ojob
	tenants      map[string]*otenant
	workers      map[string]oworker
	reservations map[string]string // id → "active" or how it ended
	idem         map[string]idemUse
	// paused holds the paused queues (tenant + "/" + queue) and when each pause was decided.
	paused    map[string]decision
	flows     map[string]*oflow
	schedules map[string]*osched
	lastTime  time.Time
	// keys holds the jobs that held a lease of each concurrency key (tenant + "\x00" + key)
	// when last looked at, and when each lease was decided; keyLimits each tenant's limits
	// (queue "" the default) and when the last change of them was decided.
	keys      map[string]map[string]decision
	keyLimits map[string]*okeyLimits
	// rates holds the tenants' rate limits (tenant + "\x00" + name) as the log defines them, and
	// grants the recent leases that took a token from each bucket (the limit's key + "/" + key).
	rates  map[string]*orate
	grants map[string][]decision
}

// orate is a rate limit, and when its last change was decided.
type orate struct {
	burst    int
	interval time.Duration
	changed  decision
}

// rateGrantsKept bounds the grants kept per bucket; the simulator's bursts are at most 3.
const rateGrantsKept = 32

type okeyLimits struct {
	byQueue map[string]int
	changed decision
}

// keyLimit is max_running_per_key in a tenant's queue by the log so far (0: unlimited).
func (o *oracle) keyLimit(tenant, queue string) int {
	l := o.keyLimits[tenant]
	if l == nil {
		return 0
	}
	if n, ok := l.byQueue[queue]; ok {
		return n
	}
	return l.byQueue[""]
}

// decision is when a behaviour decided a record: the server clock and the clock-jump count
// then (-1: unknown, for a record that survived a crash unacknowledged).
type decision struct {
	at    time.Time
	clock int
}

// after reports whether d was certainly decided after e. The simulator runs every runnable
// actor before its clock moves, so a lease decided before a pause is appended at the pause's
// instant at the latest; across a clock jump, the later count is the later decision.
func (d decision) after(e decision) bool {
	if d.clock < 0 || e.clock < 0 {
		return false
	}
	if d.clock != e.clock {
		return d.clock > e.clock
	}
	return d.at.After(e.at)
}

type ojob struct {
	id, tenant      string
	queue           string
	key             string // its concurrency key
	rates           []eventlog.RateLimitUse
	leaseTTL        time.Duration
	status          projections.Status
	lease           *olease
	attempt         int
	maxAttempts     int
	runAt           time.Time
	runAtClock      int // clock-jump count when runAt was decided
	cancelRequested bool
	terminals       int // terminal events since the submit or the last re-drive
	dead            bool
	succeeded       bool
	// resultTTL is the job's own retention; finishedAt and finishedClock are when it last
	// finished (the record's time, and the clock-jump count then); expired is set by its
	// job.expired, after which no event may name it.
	resultTTL     time.Duration
	finishedAt    time.Time
	finishedClock int
	expired       bool
}

type olease struct {
	id, worker, nonce string
	progress          map[int]bool // the worker's event numbers written under this lease
}

type otenant struct {
	maxActive    int
	active       int // non-terminal jobs
	reservations int // active reservations
}

type oworker struct {
	tenant, publicKey string
	expiresAt         time.Time // its token's
	expired           bool
}

type idemUse struct {
	jobID string
	at    time.Time
}

// IdempotencyTTL is how long an idempotency key names one job (docs/design.md §4).
const IdempotencyTTL = 24 * time.Hour

func newOracle(s *Sim) *oracle {
	return &oracle{s: s, jobs: map[string]*ojob{}, tenants: map[string]*otenant{}, workers: map[string]oworker{},
		reservations: map[string]string{}, idem: map[string]idemUse{}, paused: map[string]decision{}, flows: map[string]*oflow{},
		schedules: map[string]*osched{}, keys: map[string]map[string]decision{}, keyLimits: map[string]*okeyLimits{},
		rates: map[string]*orate{}, grants: map[string][]decision{}}
}

func (o *oracle) tenant(name string) *otenant {
	t := o.tenants[name]
	if t == nil {
		t = &otenant{}
		o.tenants[name] = t
	}
	return t
}

func (o *oracle) fail(invariant, format string, args ...any) { o.s.fail(invariant, format, args...) }

// apply folds one durable record. decidedAt is the server clock when its behaviour decided it,
// clock the number of clock jumps by then (-1: unknown).
func (o *oracle) apply(seq uint64, at time.Time, p eventlog.Payload, decidedAt time.Time, clock int) {
	if at.Before(o.lastTime) {
		o.fail("chain", "seq %d is stamped %s, before the record ahead of it", seq, at)
	}
	o.lastTime = at
	switch e := p.(type) {
	case eventlog.JobSubmitted:
		if o.jobs[e.JobID] != nil {
			o.fail("transitions", "job %s submitted twice (seq %d)", e.JobID, seq)
			return
		}
		o.jobs[e.JobID] = &ojob{id: e.JobID, tenant: e.Tenant, queue: e.Queue, key: e.ConcurrencyKey, rates: e.RateLimits, status: projections.StatusQueued, maxAttempts: e.MaxAttempts,
			leaseTTL: time.Duration(e.LeaseTTLMillis) * time.Millisecond, resultTTL: time.Duration(e.ResultTTLMillis) * time.Millisecond}
		t := o.tenant(e.Tenant)
		t.active++
		if e.IdempotencyKey != "" {
			k := e.Tenant + "\x00" + e.IdempotencyKey
			if u, ok := o.idem[k]; ok && at.Sub(u.at) < IdempotencyTTL {
				o.fail("idempotency", "key %q of tenant %s names job %s and, within its TTL, job %s", e.IdempotencyKey, e.Tenant, u.jobID, e.JobID)
			}
			o.idem[k] = idemUse{jobID: e.JobID, at: at}
		}
		if e.ScheduleID != "" {
			o.scheduleJobSubmitted(seq, e)
		}
		laterStep := false
		if e.FlowID != "" {
			o.stepSubmitted(seq, e)
			if f := o.flows[e.FlowID]; f != nil && len(f.steps[e.FlowStep].Needs) > 0 {
				laterStep = true // a flow's later steps are not held to max_active
				o.s.probe(ProbeFlowAdvanced)
			}
		}
		if e.ReservationID == "" && !laterStep && t.maxActive > 0 && t.active+t.reservations > t.maxActive {
			o.fail("quota", "tenant %s holds %d active jobs and %d reservations, over max_active %d (seq %d)", e.Tenant, t.active, t.reservations, t.maxActive, seq)
		}
	case eventlog.JobScheduled:
		j := o.job(seq, e.JobID)
		if j == nil {
			return
		}
		j.status, j.runAt, j.runAtClock = projections.StatusScheduled, e.RunAt, clock
	case eventlog.JobLeased:
		if j := o.jobs[e.JobID]; j != nil {
			if p, ok := o.paused[j.tenant+"/"+j.queue]; ok && (decision{decidedAt, clock}).after(p) {
				o.fail("pause", "job %s of paused queue %s was leased (seq %d), decided at %s, after the pause decided at %s",
					e.JobID, j.queue, seq, decidedAt.Format(time.RFC3339Nano), p.at.Format(time.RFC3339Nano))
			}
		}
		o.leased(seq, e, decidedAt, clock)
	case eventlog.JobLeaseExtended:
		if o.current(seq, e.JobID, e.LeaseID, p) != nil && e.Reason == eventlog.ExtendedStallGrace {
			o.s.probe(ProbeStallGrace)
		}
	case eventlog.JobProgress:
		j := o.current(seq, e.JobID, e.LeaseID, p)
		if j == nil || e.WorkerSeq == 0 {
			return
		}
		if j.lease.progress[e.WorkerSeq] {
			o.fail("progress_once", "job %s's worker event %d of lease %s was written twice (seq %d)", e.JobID, e.WorkerSeq, e.LeaseID, seq)
		}
		if j.lease.progress == nil {
			j.lease.progress = map[int]bool{}
		}
		j.lease.progress[e.WorkerSeq] = true
	case eventlog.JobSucceeded:
		j := o.current(seq, e.JobID, e.LeaseID, p)
		if j == nil {
			return
		}
		if w := o.workers[j.lease.worker]; w.publicKey != "" &&
			!signing.VerifyCompletion(w.publicKey, e.Signature, e.JobID, e.LeaseID, j.lease.nonce, e.OutputHash) {
			o.fail("completion", "job %s was completed without a valid signature of its worker over the lease's nonce (seq %d)", e.JobID, seq)
		}
		if j.succeeded {
			o.fail("completion", "job %s completed twice (seq %d)", e.JobID, seq)
		}
		if j.cancelRequested {
			o.fail("cancel", "job %s succeeded after its cancel was asked for (seq %d): a cancel asked for wins", e.JobID, seq)
		}
		j.succeeded, j.lease = true, nil
		o.terminal(seq, at, clock, j, projections.StatusSucceeded)
	case eventlog.JobFailed:
		if j := o.current(seq, e.JobID, e.LeaseID, p); j != nil {
			j.lease = nil
		}
	case eventlog.JobLeaseExpired:
		if j := o.current(seq, e.JobID, e.LeaseID, p); j != nil {
			j.lease = nil
			if e.Reason == eventlog.LeaseExpiredRanOut {
				if o.s.workerHolds(e.WorkerID, e.LeaseID) {
					o.s.probe(ProbeLeaseExpiredWorkerAlive)
				}
				o.leaseLost(seq, j, e.WorkerID, e.LeaseID)
				o.s.leaseRanOut(e.JobID, e.LeaseID, e.WorkerID, j.leaseTTL, decidedAt, clock)
			}
			o.attemptSpent(seq, e.JobID, e.LeaseID)
		}
	case eventlog.JobLeaseReleased:
		o.released(seq, e)
	case eventlog.JobRetryScheduled:
		j := o.job(seq, e.JobID)
		if j == nil {
			return
		}
		if j.lease != nil || j.status != projections.StatusLeased {
			o.fail("transitions", "job %s retried while %s with its lease held (seq %d)", e.JobID, j.status, seq)
		}
		j.status, j.runAt, j.runAtClock = projections.StatusScheduled, e.RunAt, clock
	case eventlog.JobDeadLettered:
		j := o.job(seq, e.JobID)
		if j == nil {
			return
		}
		if j.lease != nil || j.status != projections.StatusLeased {
			o.fail("transitions", "job %s dead-lettered while %s with its lease held (seq %d)", e.JobID, j.status, seq)
		}
		j.dead = true
		o.terminal(seq, at, clock, j, projections.StatusFailed)
	case eventlog.JobCancelRequested:
		j := o.job(seq, e.JobID)
		if j == nil {
			return
		}
		if j.lease == nil || j.status != projections.StatusLeased {
			o.fail("transitions", "cancel requested for job %s, which is %s (seq %d)", e.JobID, j.status, seq)
		}
		j.cancelRequested = true
		o.s.probe(ProbeCancelWhileLeased)
	case eventlog.JobCancelled:
		j := o.job(seq, e.JobID)
		if j == nil {
			return
		}
		if j.lease != nil || j.status.Terminal() {
			o.fail("transitions", "job %s cancelled while %s (seq %d)", e.JobID, j.status, seq)
		}
		o.terminal(seq, at, clock, j, projections.StatusCancelled)
	case eventlog.JobRedriven:
		j := o.job(seq, e.JobID)
		if j == nil {
			return
		}
		if !j.dead || j.status != projections.StatusFailed {
			o.fail("transitions", "job %s re-driven while %s (seq %d)", e.JobID, j.status, seq)
		}
		j.status, j.dead, j.terminals, j.maxAttempts, j.runAt = projections.StatusQueued, false, 0, e.MaxAttempts, time.Time{}
		j.cancelRequested = false
		o.tenant(j.tenant).active++
	case eventlog.WorkerRegistered:
		o.workers[e.WorkerID] = oworker{tenant: e.Tenant, publicKey: e.PublicKey, expiresAt: e.ExpiresAt}
	case eventlog.WorkerTokenRotated:
		if w, ok := o.workers[e.WorkerID]; ok {
			w.expiresAt = e.ExpiresAt
			o.workers[e.WorkerID] = w
		}
	case eventlog.WorkerExpired:
		o.workerExpired(seq, e, decidedAt)
	case eventlog.TenantQuotaSet:
		o.tenant(e.Tenant).maxActive = e.MaxActive
	case eventlog.QueuePaused:
		o.paused[e.Tenant+"/"+e.Queue] = decision{decidedAt, clock}
	case eventlog.QueueResumed:
		delete(o.paused, e.Tenant+"/"+e.Queue)
	case eventlog.TenantRateLimitSet:
		k := e.Tenant + "\x00" + e.Name
		o.rates[k] = &orate{burst: e.Burst, interval: projections.RateInterval(e.Rate), changed: decision{decidedAt, clock}}
		o.forgetGrants(k)
	case eventlog.TenantRateLimitDeleted:
		k := e.Tenant + "\x00" + e.Name
		delete(o.rates, k)
		o.forgetGrants(k)
	case eventlog.TenantKeyLimitSet:
		l := o.keyLimits[e.Tenant]
		if l == nil {
			l = &okeyLimits{byQueue: map[string]int{}}
			o.keyLimits[e.Tenant] = l
		}
		switch {
		case e.MaxRunningPerKey != nil:
			l.byQueue[e.Queue] = *e.MaxRunningPerKey
		default:
			delete(l.byQueue, e.Queue)
		}
		l.changed = decision{decidedAt, clock}
	case eventlog.ReservationMade:
		if _, ok := o.reservations[e.ReservationID]; ok {
			o.fail("reservations", "reservation %s made twice (seq %d)", e.ReservationID, seq)
		}
		o.reservations[e.ReservationID] = "active"
		t := o.tenant(e.Tenant)
		t.reservations++
		if t.maxActive > 0 && t.active+t.reservations > t.maxActive {
			o.fail("quota", "tenant %s holds %d active jobs and %d reservations, over max_active %d (seq %d)", e.Tenant, t.active, t.reservations, t.maxActive, seq)
		}
	case eventlog.ReservationConsumed:
		o.endReservation(seq, e.Tenant, e.ReservationID, "consumed")
	case eventlog.ReservationReleased:
		o.endReservation(seq, e.Tenant, e.ReservationID, "released")
	case eventlog.ReservationExpired:
		o.endReservation(seq, e.Tenant, e.ReservationID, "expired")
	case eventlog.JobExpired:
		o.expired(seq, e, decidedAt, clock)
	case eventlog.FlowSubmitted, eventlog.FlowStepSkipped, eventlog.FlowEnded, eventlog.FlowExpired:
		o.flow(seq, at, p, decidedAt, clock)
	case eventlog.ScheduleCreated, eventlog.ScheduleFired, eventlog.ScheduleSkipped, eventlog.SchedulePaused,
		eventlog.ScheduleResumed, eventlog.ScheduleDeleted:
		o.schedule(seq, at, p, decidedAt, clock)
	}
}

// expired checks a job.expired: only a finished job expires, once; by retention only once its
// retention has ended (on the clock it finished by), by the cap only while its tenant holds
// more dead letters than the cap, by a purge only as a dead letter.
func (o *oracle) expired(seq uint64, e eventlog.JobExpired, decidedAt time.Time, clock int) {
	j := o.job(seq, e.JobID)
	if j == nil {
		return
	}
	if !j.status.Terminal() {
		o.fail("retention", "job %s expired (%s) while %s (seq %d)", e.JobID, e.Reason, j.status, seq)
	}
	r := o.s.retention
	switch e.Reason {
	case eventlog.ExpiredRetention:
		keep := r.Done
		switch {
		case j.dead:
			keep = r.Dead
		case j.resultTTL > 0:
			keep = j.resultTTL
		}
		if due := j.finishedAt.Add(keep); keep <= 0 || (clock >= 0 && clock == j.finishedClock && decidedAt.Before(due)) {
			o.fail("retention", "job %s expired at %s, before its retention ended at %s (seq %d)", e.JobID, decidedAt, due, seq)
		}
		o.s.probe(ProbeExpired)
	case eventlog.ExpiredDeadCap:
		if n := o.deadOf(j.tenant); !j.dead || n <= r.MaxDead {
			o.fail("retention", "job %s expired over the dead-letter cap %d, but its tenant holds %d (seq %d)", e.JobID, r.MaxDead, n, seq)
		}
		o.s.probe(ProbeExpired)
	case eventlog.ExpiredPurged:
		if !j.dead {
			o.fail("retention", "job %s purged as a dead letter while %s (seq %d)", e.JobID, j.status, seq)
		}
		o.s.probe(ProbeDeleted)
	case eventlog.ExpiredDeleted:
		o.s.probe(ProbeDeleted)
	}
	j.expired = true
}

// workerExpired checks a worker.expired: a registered worker leaves once, holding no lease, and
// not before its token ran out and the retention after it passed (the sim revokes none).
func (o *oracle) workerExpired(seq uint64, e eventlog.WorkerExpired, decidedAt time.Time) {
	w, ok := o.workers[e.WorkerID]
	switch {
	case !ok || w.expired:
		o.fail("retention", "seq %d expires worker %s, which is not registered", seq, e.WorkerID)
		return
	case decidedAt.Before(w.expiresAt.Add(o.s.retention.Done)):
		o.fail("retention", "worker %s expired at %s, before its token ran out at %s and the retention after (seq %d)", e.WorkerID, decidedAt, w.expiresAt, seq)
	}
	for _, j := range o.jobs {
		if j.lease != nil && j.lease.worker == e.WorkerID {
			o.fail("retention", "worker %s expired while it holds job %s's lease %s (seq %d)", e.WorkerID, j.id, j.lease.id, seq)
		}
	}
	w.expired = true
	o.workers[e.WorkerID] = w
	o.s.probe(ProbeWorkerExpired)
}

// hasExpired reports whether the job's job.expired is durable.
func (o *oracle) hasExpired(id string) bool {
	j := o.jobs[id]
	return j != nil && j.expired
}

// deadOf counts a tenant's dead letters that have not expired.
func (o *oracle) deadOf(tenant string) int {
	n := 0
	for _, j := range o.jobs {
		if j.tenant == tenant && j.dead && !j.expired {
			n++
		}
	}
	return n
}

func (o *oracle) job(seq uint64, id string) *ojob {
	j := o.jobs[id]
	switch {
	case j == nil:
		o.fail("transitions", "seq %d names job %s, which was never submitted", seq, id)
	case j.expired:
		o.fail("retention", "seq %d names job %s, which had expired: it came back", seq, id)
		return nil
	}
	return j
}

// current returns the job if leaseID is its current lease; an event of any other lease is a
// stale message that changed something.
func (o *oracle) current(seq uint64, jobID, leaseID string, p eventlog.Payload) *ojob {
	j := o.job(seq, jobID)
	if j == nil {
		return nil
	}
	if j.lease == nil || j.lease.id != leaseID {
		o.fail("lease", "%s for job %s under lease %s, which is not its current lease (seq %d)", p.EventType(), jobID, leaseID, seq)
		return nil
	}
	return j
}

// released folds a lease given back. Unless it spent the attempt, the job is queued again
// with the attempt it had before the lease.
func (o *oracle) released(seq uint64, e eventlog.JobLeaseReleased) {
	j := o.current(seq, e.JobID, e.LeaseID, e)
	if j == nil {
		return
	}
	j.lease = nil
	switch e.Reason {
	case eventlog.LeaseUndelivered:
		o.s.probe(ProbeUndeliveredReturned)
		if o.s.received[e.LeaseID] {
			o.fail("delivery", "lease %s of job %s was put back as undelivered, but its worker got it (seq %d)", e.LeaseID, e.JobID, seq)
		}
	case eventlog.LeaseUnacknowledged:
		o.s.probe(ProbeUnacknowledgedReleased)
		if o.s.workerHolds(e.WorkerID, e.LeaseID) {
			o.fail("unacknowledged", "lease %s of job %s was put back as one no worker holds, but its worker holds it (seq %d)", e.LeaseID, e.JobID, seq)
		}
	case eventlog.ReleasedWorkerStopping:
		o.s.probe(ProbeCleanStopReleased)
	}
	if e.AttemptSpent {
		o.attemptSpent(seq, e.JobID, e.LeaseID)
		return
	}
	if e.Attempt != j.attempt {
		o.fail("attempts", "job %s's lease for attempt %d was released as attempt %d (seq %d)", e.JobID, j.attempt, e.Attempt, seq)
	}
	j.attempt, j.status, j.runAt = e.Attempt-1, projections.StatusQueued, time.Time{}
}

// attemptSpent checks an attempt spent without the worker's word (an expiry, a release too
// many): in a run no fault has touched, every assignment reaches its worker, so none may be
// spent on a lease whose assignment did not.
func (o *oracle) attemptSpent(seq uint64, jobID, leaseID string) {
	if !o.s.received[leaseID] && o.s.faultFree() {
		o.fail("undelivered", "job %s spent an attempt on lease %s, which never reached its worker, in a run without faults (seq %d)", jobID, leaseID, seq)
	}
}

// leaseLost checks an expiry against the workers: a worker that is alive, connected and
// heartbeating keeps every lease it holds. That holds throughout a run without faults, and in
// the liveness phase for a worker connected since before the lease's last lease_ttl began.
func (o *oracle) leaseLost(seq uint64, j *ojob, workerID, leaseID string) {
	s := o.s
	if s.faultFree() {
		o.fail("lease_lost", "job %s's lease %s expired under its worker in a run without faults (seq %d)", j.id, leaseID, seq)
		return
	}
	since := s.now.Add(-j.leaseTTL - time.Second) // a second's slack for the last heartbeat's way
	for _, w := range s.workers {
		if w.id != workerID || s.phase != phaseLiveness || s.healedAt.After(since) {
			continue
		}
		if w.alive() && !w.stopping && w.leases[leaseID] != nil && w.conn != nil && !w.conn.closing && !w.conn.since.After(since) {
			o.fail("lease_lost", "job %s's lease %s expired under %s, alive and connected since %s and heartbeating (seq %d)",
				j.id, leaseID, w.name, w.conn.since.Sub(s.start), seq)
		}
	}
}

func (o *oracle) leased(seq uint64, e eventlog.JobLeased, decidedAt time.Time, clock int) {
	j := o.job(seq, e.JobID)
	if j == nil {
		return
	}
	switch {
	case j.lease != nil:
		o.fail("lease", "job %s leased as %s while lease %s is valid (seq %d)", e.JobID, e.LeaseID, j.lease.id, seq)
	case j.status != projections.StatusQueued && j.status != projections.StatusScheduled:
		o.fail("transitions", "job %s leased while %s (seq %d)", e.JobID, j.status, seq)
	case e.Attempt != j.attempt+1 || e.Attempt > j.maxAttempts:
		o.fail("attempts", "job %s leased for attempt %d after %d, max_attempts %d (seq %d)", e.JobID, e.Attempt, j.attempt, j.maxAttempts, seq)
	case o.workers[e.WorkerID].expired:
		o.fail("retention", "job %s leased to worker %s, which had expired (seq %d)", e.JobID, e.WorkerID, seq)
	case o.workers[e.WorkerID].tenant != j.tenant:
		o.fail("isolation", "job %s of tenant %s leased to worker %s of tenant %q (seq %d)", e.JobID, j.tenant, e.WorkerID, o.workers[e.WorkerID].tenant, seq)
	case !j.runAt.IsZero() && clock >= 0 && clock == j.runAtClock && decidedAt.Before(j.runAt):
		o.fail("backoff", "job %s leased at %s, before its run_at %s (seq %d)", e.JobID, decidedAt, j.runAt, seq)
	}
	o.keyLeased(seq, j, decision{decidedAt, clock})
	o.rateLeased(seq, j, decision{decidedAt, clock})
	j.lease = &olease{id: e.LeaseID, worker: e.WorkerID, nonce: e.Nonce}
	j.attempt, j.status = e.Attempt, projections.StatusLeased
}

// keyLeased checks a lease of a job with a concurrency key against its queue's limit: the
// key's other leases must be fewer, unless the limit changed at the instant the lease was
// decided or after (a lease on its way when the dispatcher lowered the limit still arrives).
// Leases the dispatcher decided at one instant may reach the log in any order (each job's
// actor appends its own): they pass if some order of them passes, which is the order of their
// queues' limits, the lowest first.
func (o *oracle) keyLeased(seq uint64, j *ojob, d decision) {
	if j.key == "" {
		return
	}
	k := j.tenant + "\x00" + j.key
	holders := o.keys[k]
	if holders == nil {
		holders = map[string]decision{}
		o.keys[k] = holders
	}
	for id := range holders {
		if h := o.jobs[id]; h == nil || h.lease == nil {
			delete(holders, id)
		}
	}
	limit := o.keyLimit(j.tenant, j.queue)
	if l := o.keyLimits[j.tenant]; limit > 0 && d.after(l.changed) {
		before, same := 0, []int{limit}
		for id, h := range holders {
			if h.clock >= 0 && h == d {
				n := o.keyLimit(j.tenant, o.jobs[id].queue)
				if n == 0 {
					n = math.MaxInt // unlimited: last
				}
				same = append(same, n)
			} else {
				before++
			}
		}
		slices.Sort(same)
		for i, n := range same {
			if before+i >= n {
				o.fail("key_limit", "job %s of key %q was leased in queue %s while the key held %d leases, its limit %d (seq %d)",
					j.id, j.key, j.queue, len(holders), limit, seq)
				break
			}
		}
	}
	if limit > 0 && len(holders)+1 == limit {
		o.s.probe(ProbeKeyLimitReached)
	}
	holders[j.id] = d
}

// rateLeased checks a lease of a job against each rate limit the job names: over any span of
// time t (on one clock: across a jump the buckets follow the clock), a bucket gives at most
// burst + t/interval tokens. Leases decided before the limit last changed are not counted:
// the bucket started over then.
func (o *oracle) rateLeased(seq uint64, j *ojob, d decision) {
	for _, u := range j.rates {
		k := j.tenant + "\x00" + u.Name
		l := o.rates[k]
		if l == nil || d.clock < 0 || !d.after(l.changed) {
			continue
		}
		b := k + "/" + u.Key
		gs := append(o.grants[b], d)
		for _, g := range gs { // each span that ends with this lease
			if g.clock != d.clock || d.at.Before(g.at) {
				continue
			}
			n := 0
			for _, h := range gs {
				if h.clock == d.clock && !h.at.Before(g.at) && !h.at.After(d.at) {
					n++
				}
			}
			span := d.at.Sub(g.at)
			if allowed := l.burst + int(span/l.interval); n > allowed {
				o.fail("rate_limit", "job %s of tenant %s took a token of rate limit %s (key %q) at %s: %d tokens in %s, more than burst %d plus one per %s allows (seq %d)",
					j.id, j.tenant, u.Name, u.Key, d.at, n, span, l.burst, l.interval, seq)
				return
			}
		}
		if len(gs) >= l.burst {
			if last := gs[len(gs)-l.burst]; last.clock == d.clock && d.at.Sub(last.at) < l.interval {
				o.s.probe(ProbeRateLimitFull) // the bucket was emptied
			}
		}
		if len(gs) > rateGrantsKept {
			gs = gs[len(gs)-rateGrantsKept:]
		}
		o.grants[b] = gs
	}
}

// forgetGrants forgets the grants of a rate limit's buckets: it changed or went.
func (o *oracle) forgetGrants(limit string) {
	for b := range o.grants {
		if strings.HasPrefix(b, limit+"/") {
			delete(o.grants, b)
		}
	}
}

// terminal folds the end of a job, in the record stamped at on the clock-jump count clock.
func (o *oracle) terminal(seq uint64, at time.Time, clock int, j *ojob, status projections.Status) {
	j.finishedAt, j.finishedClock = at, clock
	j.terminals++
	if j.terminals > 1 {
		o.fail("terminal", "job %s has a second terminal event (seq %d)", j.id, seq)
	}
	j.status = status
	o.tenant(j.tenant).active--
}

func (o *oracle) endReservation(seq uint64, tenant, id, how string) {
	state, ok := o.reservations[id]
	if !ok || state != "active" {
		o.fail("reservations", "reservation %s %s, but it was %q (seq %d)", id, how, state, seq)
		return
	}
	o.reservations[id] = how
	o.tenant(tenant).reservations--
}

// checkFinal checks what must hold once every job is settled.
func (o *oracle) checkFinal(set *projections.Set) {
	for _, id := range slices.Sorted(maps.Keys(o.jobs)) {
		j := o.jobs[id]
		if j.terminals != 1 {
			o.fail("liveness", "job %s ended the run %s with %d terminal events", id, j.status, j.terminals)
			return
		}
		got := set.JobRef(id)
		if j.expired {
			if got != nil {
				o.fail("retention", "job %s expired in the log but is still in the projections", id)
				return
			}
			continue
		}
		if got == nil || got.Status != j.status {
			o.fail("projections", "job %s is %s in the log and %v in the projections", id, j.status, got)
			return
		}
	}
	o.checkDLQ(set)
}

// checkDLQ checks that the dead-letter queue holds exactly the dead-lettered jobs, and the queue
// stats count them by queue.
func (o *oracle) checkDLQ(set *projections.Set) {
	want, wantBy := map[string]bool{}, map[string]int{}
	for id, j := range o.jobs {
		if j.dead && !j.expired {
			want[id] = true
			wantBy[j.tenant+"/"+j.queue]++
		}
	}
	got, gotBy := map[string]bool{}, map[string]int{}
	for _, name := range set.TenantNames() {
		for _, j := range set.DeadLetters(name) {
			got[j.ID] = true
		}
		for _, q := range set.Queues(name, time.Time{}) {
			if q.Dead > 0 {
				gotBy[name+"/"+q.Queue] = q.Dead
			}
		}
	}
	switch {
	case !maps.Equal(want, got):
		o.fail("dlq", "the dead-letter queue holds %d jobs; the log dead-lettered %d", len(got), len(want))
	case !maps.Equal(wantBy, gotBy):
		o.fail("dlq", "the queue stats count dead letters %v; the log has %v", gotBy, wantBy)
	}
}

// unsettled names a job that is not terminal or a reservation that has not ended, the first in
// id order, or returns "" when everything is settled.
func (o *oracle) unsettled() string {
	for _, id := range slices.Sorted(maps.Keys(o.jobs)) {
		if j := o.jobs[id]; !j.status.Terminal() {
			return fmt.Sprintf("job %s is still %s", id, j.status)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(o.reservations)) {
		if o.reservations[id] == "active" {
			return fmt.Sprintf("reservation %s never ended", id)
		}
	}
	if f := o.unsettledFlow(); f != "" {
		return f
	}
	return o.unsettledSchedule()
}

func (o *oracle) outcomes() map[string]int {
	out := map[string]int{}
	for _, j := range o.jobs {
		k := string(j.status)
		if j.dead {
			k = "dead"
		}
		out[k]++
	}
	return out
}

// foreignJobs returns the ids of every other tenant's jobs, in id order.
func (o *oracle) foreignJobs(tenant string) []string {
	var out []string
	for id, j := range o.jobs {
		if j.tenant != tenant {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// leaseOK reports whether an assignment names a durable, current lease.
func leaseOK(set *projections.Set, a actors.Assignment) bool {
	j := set.LeasedJob(a.LeaseID)
	return j != nil && j.ID == a.JobID && j.Lease.Nonce == a.Nonce
}
