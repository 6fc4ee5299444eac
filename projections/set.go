package projections

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/btree"

	"github.com/tetherhq/tether/eventlog"
)

// IdempotencyTTL is how long an idempotency key maps to the job it first created.
const IdempotencyTTL = 24 * time.Hour

// Set is every projection of the log, folded together because they move together: a lease is
// a job's state, a tenant's running count and a worker's in-flight job at once. The zero value is
// not usable; call New.
//
// A Set is not safe for concurrent use; the runtime guards it, the simulator runs on one
// goroutine.
type Set struct {
	seq uint64
	// jobs holds every live job, and the finished jobs that changed since the last flush; the
	// other finished jobs are in store (table.go).
	jobs    map[string]*Job
	workers map[string]*Worker
	tenants map[string]*Tenant
	idem    map[idemKey]Idempotency
	// idemOrder lists idempotency entries by expiry, so expired ones are forgotten in order.
	idemOrder []idemKey
	counters  map[string]*Counters // by queue
	// throughput is each queue's recent finished attempts, by tenant/queue key (waitKey).
	throughput map[string]*Throughput
	creds      credentials
	flows      map[string]*Flow     // every flow, by id
	schedules  map[string]*Schedule // every schedule not deleted, by id
	deadBy     map[string]int       // dead letters by tenant/queue key (waitKey)
	finished   map[Status]int       // finished jobs by status, in memory and stored alike
	store      Store                // the finished jobs' table; nil: all of them are in jobs
	dirty      map[string]dirtyMark // jobs whose stored copy is stale since the last flush
	// gone holds the tombstones of the jobs that expired since the last flush, which the flush
	// moves to the table (table.go, key g); without a store, every tombstone.
	gone map[string]tombstone
	// goneFrom is the first seq whose expiries leave a tombstone (0: every one): a Set restored
	// from the checkpoint of a build that kept none keeps them from there on.
	goneFrom uint64

	// Derived from the above and rebuilt on restore, never checkpointed.
	leases map[string]*Job // leased jobs by lease id
	// flowsEnded orders the ended flows by their end, for ExpirableFlows; workersEnd the
	// workers by when their retention starts (workerEnd), for ExpirableWorkers.
	flowsEnded *btree.BTreeG[timed]
	workersEnd *btree.BTreeG[timed]
	tokens     map[string]string          // worker token hash → worker id
	waiting    map[string]map[string]*Job // queued or scheduled jobs by tenant/queue key, then id
	index      memIndex                   // the index entries of the jobs in memory (table.go); nil if unindexed
	// unindexed: neither memory nor the Store holds index entries (NewUnindexedOn).
	unindexed bool
}

// idemKey names an idempotency key: a tenant's, for its jobs or (Flow) its flows, which are
// two separate spaces of keys.
type idemKey struct {
	Tenant string `json:"tenant"`
	Key    string `json:"key"`
	Flow   bool   `json:"flow,omitempty"`
}

// Idempotency maps an idempotency key to the job (or flow) it created.
type Idempotency struct {
	JobID       string    `json:"job_id"`
	RequestHash string    `json:"request_hash"`
	ExpiresAt   time.Time `json:"expires_at"`
	// Seq is the job's job.submitted, the receipt of a repeat even once the job has expired.
	Seq uint64 `json:"seq,omitempty"`
}

// Tenant is one tenant's quota and usage.
type Tenant struct {
	Name       string `json:"name"`
	MaxActive  int    `json:"max_active"`  // 0: unlimited
	MaxRunning int    `json:"max_running"` // 0: unlimited
	// Active counts non-terminal jobs; Running counts leased ones.
	Active       int                  `json:"active"`
	Running      int                  `json:"running"`
	Reservations map[string]time.Time `json:"reservations"` // id → expiry, active ones only
	// Paused holds the tenant's paused queues: each assigns nothing until it is resumed.
	Paused map[string]PausedQueue `json:"paused,omitempty"`
	// MaxRunningPerKey is how many leases one concurrency key may hold at once in a queue
	// without a limit of its own (0: unlimited); QueueKeyLimits holds the queues' own limits
	// (0 there: unlimited in that queue).
	MaxRunningPerKey int            `json:"max_running_per_key,omitempty"`
	QueueKeyLimits   map[string]int `json:"queue_key_limits,omitempty"`
	// RateLimits holds the tenant's rate limits by name. RateBuckets holds their buckets that
	// were not full when last used, by name + "/" + key: when each is full again (the last
	// eventlog.RateGrant); they are swept when their number passes RateBucketsSweep.
	RateLimits       map[string]RateLimit `json:"rate_limits,omitempty"`
	RateBuckets      map[string]time.Time `json:"rate_buckets,omitempty"`
	RateBucketsSweep int                  `json:"rate_buckets_sweep,omitempty"`
}

// takeTokens folds the tokens a lease took, at at, and forgets the buckets full by then once
// their number has doubled since the last sweep.
func (t *Tenant) takeTokens(at time.Time, grants []eventlog.RateGrant) {
	if t.RateBuckets == nil {
		t.RateBuckets = map[string]time.Time{}
	}
	for _, g := range grants {
		// The latest instant: leases taken in one order may reach the log in another.
		if b := g.Name + "/" + g.Key; g.FullAt.After(t.RateBuckets[b]) {
			t.RateBuckets[b] = g.FullAt
		}
	}
	if len(t.RateBuckets) > max(t.RateBucketsSweep, rateBucketsSweepMin) {
		maps.DeleteFunc(t.RateBuckets, func(b string, full time.Time) bool {
			return !t.RateLimits[b[:strings.IndexByte(b, '/')]].FullAt(full).After(at) // limit names have no "/"
		})
		t.RateBucketsSweep = 2 * len(t.RateBuckets)
	}
}

const rateBucketsSweepMin = 1024

// RateLimit is a token bucket of a tenant's (eventlog.TenantRateLimitSet): Rate tokens a
// second, at most Burst held; Seq is the event that set it. FullFrom, after a change that
// raised the burst, is when its buckets not in RateBuckets are full (RateLimit.FullAt).
type RateLimit struct {
	Rate     float64   `json:"rate"`
	Burst    int       `json:"burst"`
	Seq      uint64    `json:"seq"`
	FullFrom time.Time `json:"full_from,omitzero"`
}

// KeyLimit is how many leases one concurrency key may hold at once in the tenant's queue
// (0: unlimited).
func (t *Tenant) KeyLimit(queue string) int {
	if n, ok := t.QueueKeyLimits[queue]; ok {
		return n
	}
	return t.MaxRunningPerKey
}

// PausedQueue is a paused queue: since when, and the seq of the pause.
type PausedQueue struct {
	Since time.Time `json:"since"`
	Seq   uint64    `json:"seq"`
}

// Usage is what counts against max_active: non-terminal jobs plus active reservations.
func (t *Tenant) Usage() int { return t.Active + len(t.Reservations) }

// Worker is a registered worker and its current session.
type Worker struct {
	ID        string            `json:"id"`
	Tenant    string            `json:"tenant"`
	Name      string            `json:"name"`
	Queues    []string          `json:"queues"`
	Capacity  int               `json:"capacity"`
	PublicKey string            `json:"public_key,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	TokenHash string            `json:"token_hash"`
	ExpiresAt time.Time         `json:"expires_at"`
	// TokenIssuedAt is when the current token was issued: at registration or the last renewal.
	TokenIssuedAt time.Time `json:"token_issued_at"`
	// PreviousTokenHash is the token the last renewal was asked with, which works until
	// PreviousValidUntil (eventlog.WorkerTokenRotated).
	PreviousTokenHash  string    `json:"previous_token_hash,omitempty"`
	PreviousValidUntil time.Time `json:"previous_valid_until"`
	Revoked            bool      `json:"revoked"`
	RegisteredAt       time.Time `json:"registered_at"`
	Session            *Session  `json:"session"`
	// LastSeen is the last logged sign of life: a session start or end. Heartbeats are not
	// logged; the runtime knows fresher times for connected workers.
	LastSeen time.Time `json:"last_seen"`
}

// TokenValidUntil is when the token that hashes to h stops working for this worker: the
// current token's expiry, the previous one's grace, or the zero time for any other.
func (w *Worker) TokenValidUntil(h string) time.Time {
	switch {
	case h == w.TokenHash:
		return w.ExpiresAt
	case h == w.PreviousTokenHash && h != "":
		return w.PreviousValidUntil
	}
	return time.Time{}
}

// TokenRenewDue reports whether the worker should renew its token at now: once half its
// lifetime has passed, which leaves the other half to reach the server.
func (w *Worker) TokenRenewDue(now time.Time) bool {
	return !now.Before(w.TokenRenewAt())
}

// TokenRenewAt is when the current token is half spent.
func (w *Worker) TokenRenewAt() time.Time {
	return w.TokenIssuedAt.Add(w.ExpiresAt.Sub(w.TokenIssuedAt) / 2)
}

// Session is a worker's open connection.
type Session struct {
	ID        string    `json:"id"`
	Transport string    `json:"transport"`
	Capacity  int       `json:"capacity"`
	Since     time.Time `json:"since"`
}

// Counters are monotonic totals for metrics.
type Counters struct {
	Submitted    uint64 `json:"submitted"`
	Succeeded    uint64 `json:"succeeded"`
	Failed       uint64 `json:"failed"` // failed attempts, lease expiries included
	Retried      uint64 `json:"retried"`
	LeaseExpired uint64 `json:"lease_expired"`
	Released     uint64 `json:"released,omitempty"` // leases given back, mostly without spending an attempt
	DeadLettered uint64 `json:"dead_lettered"`
	Cancelled    uint64 `json:"cancelled"`
	Expired      uint64 `json:"expired,omitempty"` // finished jobs that left the views (job.expired)
	// AssignLatency: first attempts' wait from ready to leased.
	AssignLatency LatencyHistogram `json:"assign_latency"`
}

// New returns an empty Set, the fold of the empty log.
func New() *Set {
	s := &Set{
		jobs:       map[string]*Job{},
		workers:    map[string]*Worker{},
		tenants:    map[string]*Tenant{},
		idem:       map[idemKey]Idempotency{},
		counters:   map[string]*Counters{},
		throughput: map[string]*Throughput{},
		creds:      newCredentials(),
		flows:      map[string]*Flow{},
		schedules:  map[string]*Schedule{},
		deadBy:     map[string]int{},
		finished:   map[Status]int{},
		dirty:      map[string]dirtyMark{},
		gone:       map[string]tombstone{},
	}
	s.derive()
	return s
}

// NewOn returns an empty Set whose finished jobs go to store at each flush: the fold of the
// empty log, for a log whose table is empty.
func NewOn(store Store) *Set {
	s := New()
	s.store = store
	return s
}

// WrapStore replaces the reader of the Set's table with wrap of it: for tests that slow the
// disk down or watch it. It must be called before the Set is shared.
func (s *Set) WrapStore(wrap func(Store) Store) {
	if s.store != nil {
		s.store = wrap(s.store)
	}
}

// NewUnindexedOn is NewOn for a Set that keeps no index of its jobs, in memory or in store: it
// folds, looks jobs up, counts them and writes its fold (WriteFold) as any Set does, but it
// cannot list jobs or find those that expire, which panic. `tether replay verify` folds with
// it: an index is for a server to answer queries with, and half the work of keeping one.
func NewUnindexedOn(store Store) *Set {
	s := NewOn(store)
	s.unindexed, s.index = true, nil
	return s
}

// Seq is the seq of the last record applied.
func (s *Set) Seq() uint64 { return s.seq }

// ApplyRecord decodes a record and applies it. Records must come in seq order without gaps.
func (s *Set) ApplyRecord(r eventlog.Record) error {
	p, err := eventlog.Decode(r.Type, r.Data)
	if err != nil {
		return fmt.Errorf("projections: seq %d: %w", r.Seq, err)
	}
	return s.Apply(r.Seq, r.Time, p)
}

// Apply folds one event, the record at seq stamped at, into the projections. The live runtime
// calls it with the payloads it appended, replay with decoded records; both must agree.
func (s *Set) Apply(seq uint64, at time.Time, p eventlog.Payload) error {
	if seq != s.seq+1 {
		return fmt.Errorf("projections: seq %d applied after %d", seq, s.seq)
	}
	s.seq = seq
	s.forgetIdempotency(at)
	switch e := p.(type) {
	case eventlog.JobSubmitted:
		if f := e.FlowID; f != "" && s.flows[f] == nil {
			return fmt.Errorf("projections: seq %d: job %s submitted for unknown flow %s", seq, e.JobID, f)
		}
		if c := e.ScheduleID; c != "" && s.schedules[c] == nil {
			return fmt.Errorf("projections: seq %d: job %s fired by unknown schedule %s", seq, e.JobID, c)
		}
		s.submitted(seq, at, e)
		return nil
	case eventlog.WorkerRegistered:
		w := &Worker{
			ID: e.WorkerID, Tenant: e.Tenant, Name: e.Name, Queues: e.Queues, Capacity: e.Capacity,
			PublicKey: e.PublicKey, Labels: e.Labels, TokenHash: e.TokenHash, ExpiresAt: e.ExpiresAt, TokenIssuedAt: at,
			RegisteredAt: at, LastSeen: at,
		}
		s.workers[w.ID] = w
		s.tokens[w.TokenHash] = w.ID
		s.workersEnd.ReplaceOrInsert(timed{w.retainedFrom(), w.ID})
		return nil
	case eventlog.WorkerExpired:
		return s.workerExpired(seq, e)
	case eventlog.TenantQuotaSet:
		t := s.tenant(e.Tenant)
		t.MaxActive, t.MaxRunning = e.MaxActive, e.MaxRunning
		return nil
	case eventlog.ReservationMade:
		s.tenant(e.Tenant).Reservations[e.ReservationID] = e.ExpiresAt
		return nil
	case eventlog.ReservationConsumed:
		delete(s.tenant(e.Tenant).Reservations, e.ReservationID)
		return nil
	case eventlog.ReservationReleased:
		delete(s.tenant(e.Tenant).Reservations, e.ReservationID)
		return nil
	case eventlog.ReservationExpired:
		delete(s.tenant(e.Tenant).Reservations, e.ReservationID)
		return nil
	case eventlog.QueuePaused:
		t := s.tenant(e.Tenant)
		if t.Paused == nil {
			t.Paused = map[string]PausedQueue{}
		}
		t.Paused[e.Queue] = PausedQueue{Since: at, Seq: seq}
		return nil
	case eventlog.TenantKeyLimitSet:
		t := s.tenant(e.Tenant)
		switch {
		case e.Queue == "":
			t.MaxRunningPerKey = 0
			if e.MaxRunningPerKey != nil {
				t.MaxRunningPerKey = *e.MaxRunningPerKey
			}
		case e.MaxRunningPerKey == nil:
			if delete(t.QueueKeyLimits, e.Queue); len(t.QueueKeyLimits) == 0 {
				t.QueueKeyLimits = nil
			}
		default:
			if t.QueueKeyLimits == nil {
				t.QueueKeyLimits = map[string]int{}
			}
			t.QueueKeyLimits[e.Queue] = *e.MaxRunningPerKey
		}
		return nil
	case eventlog.TenantRateLimitSet:
		t := s.tenant(e.Tenant)
		if t.RateLimits == nil {
			t.RateLimits = map[string]RateLimit{}
		}
		l := RateLimit{Rate: e.Rate, Burst: e.Burst, Seq: seq}
		if was, ok := t.RateLimits[e.Name]; ok {
			l = was.ChangedTo(l, e.At)
			l.Seq = seq
			for b, full := range t.RateBuckets {
				if strings.HasPrefix(b, e.Name+"/") {
					if full, ok = ConvertBucket(was.FullAt(full), e.At, was, l); ok {
						t.RateBuckets[b] = full
					} else {
						delete(t.RateBuckets, b)
					}
				}
			}
		}
		t.RateLimits[e.Name] = l
		return nil
	case eventlog.TenantRateLimitDeleted:
		t := s.tenant(e.Tenant)
		if delete(t.RateLimits, e.Name); len(t.RateLimits) == 0 {
			t.RateLimits = nil
		}
		maps.DeleteFunc(t.RateBuckets, func(b string, _ time.Time) bool { return strings.HasPrefix(b, e.Name+"/") })
		return nil
	case eventlog.QueueResumed:
		t := s.tenant(e.Tenant)
		if delete(t.Paused, e.Queue); len(t.Paused) == 0 {
			t.Paused = nil
		}
		return nil
	case eventlog.JobExpired:
		return s.expired(seq, e)
	case eventlog.APIKeyCreated, eventlog.APIKeyRevoked, eventlog.EnrollTokenCreated, eventlog.EnrollTokenUsed:
		s.creds.apply(at, p)
		return nil
	case eventlog.FlowSubmitted, eventlog.FlowStepSkipped, eventlog.FlowEnded, eventlog.FlowExpired:
		return s.applyFlow(seq, at, p)
	case eventlog.ScheduleCreated, eventlog.ScheduleFired, eventlog.ScheduleSkipped, eventlog.SchedulePaused,
		eventlog.ScheduleResumed, eventlog.ScheduleDeleted:
		return s.applySchedule(seq, at, p)
	}
	id, ok := eventlog.JobOf(p)
	if !ok {
		if strings.HasPrefix(p.Stream(), "worker/") {
			s.applyWorker(at, p)
			return nil
		}
		return fmt.Errorf("projections: seq %d: no fold for %T", seq, p)
	}
	j := s.load(id)
	if j == nil {
		return fmt.Errorf("projections: seq %d: %s for unknown job %s", seq, p.EventType(), id)
	}
	if j.Status.Terminal() {
		// INVARIANT: a finished job in memory is never changed in place: a flush in progress
		// may be encoding it on another goroutine (BeginFlush keeps it without a copy).
		j = j.Clone()
		s.jobs[id] = j
	}
	s.applyJob(seq, at, j, p)
	return nil
}

// expired drops a finished job from every view; job.expired is its last event.
func (s *Set) expired(seq uint64, e eventlog.JobExpired) error {
	j, inMemory := s.jobs[e.JobID], true
	if j == nil {
		// Most jobs expire from the Store: read, not loaded, since loading would put it in
		// memory's indexes only for the lines below to take it out again.
		j, inMemory = s.stored(e.JobID), false
	}
	if j == nil || !j.Status.Terminal() {
		state := "unknown"
		if j != nil {
			state = string(j.Status)
		}
		return fmt.Errorf("projections: seq %d: job %s expired while %s", seq, e.JobID, state)
	}
	s.counter(j.Queue).Expired++
	if inMemory {
		s.index.drop(j)
		delete(s.jobs, j.ID)
		s.markDirty(j.ID)
	} else {
		s.dirty[j.ID] = dirtyMark{seq: s.seq, stored: j}
	}
	s.unfinish(j.Status, j)
	s.gone[j.ID] = tombstone{seq: seq, tenant: j.Tenant}
	return nil
}

// unfinish counts a job that was finished with status no more: expired, or live again.
func (s *Set) unfinish(status Status, j *Job) {
	if s.finished[status]--; s.finished[status] == 0 {
		delete(s.finished, status)
	}
	if status == StatusFailed {
		s.undead(j)
	}
}

func (s *Set) tenant(name string) *Tenant {
	t := s.tenants[name]
	if t == nil {
		t = &Tenant{Name: name, Reservations: map[string]time.Time{}}
		s.tenants[name] = t
	}
	return t
}

func (s *Set) counter(queue string) *Counters {
	c := s.counters[queue]
	if c == nil {
		c = &Counters{}
		s.counters[queue] = c
	}
	return c
}

func (s *Set) submitted(seq uint64, at time.Time, e eventlog.JobSubmitted) {
	j := NewJob(seq, at, e)
	s.jobs[j.ID] = j
	s.index.add(j)
	s.wait(j)
	s.tenant(j.Tenant).Active++
	s.counter(j.Queue).Submitted++
	if e.IdempotencyKey != "" {
		s.remember(idemKey{Tenant: e.Tenant, Key: e.IdempotencyKey}, Idempotency{JobID: j.ID, RequestHash: e.RequestHash, ExpiresAt: at.Add(IdempotencyTTL), Seq: seq})
	}
	if j.FlowID != "" {
		s.stepChanged(at, j)
	}
}

// remember maps an idempotency key until e.ExpiresAt.
func (s *Set) remember(k idemKey, e Idempotency) {
	s.idem[k] = e
	s.idemOrder = append(s.idemOrder, k)
}

// forgetIdempotency drops keys that expired by the time of the record being applied. Record
// times never decrease, so the order list is sorted by expiry.
func (s *Set) forgetIdempotency(at time.Time) {
	n := 0
	for _, k := range s.idemOrder {
		e, ok := s.idem[k]
		if ok && e.ExpiresAt.After(at) {
			break
		}
		if ok {
			delete(s.idem, k)
		}
		n++
	}
	if n > 0 {
		s.idemOrder = s.idemOrder[n:]
	}
}

func (s *Set) applyJob(seq uint64, at time.Time, j *Job, p eventlog.Payload) {
	wasLeased, wasStatus, wasWaiting := j.Lease != nil, j.Status, j.Waiting()
	wasTerminal := wasStatus.Terminal()
	var endedLease, wasEntry string
	var wasClass index
	if wasLeased {
		endedLease = j.Lease.LeaseID // if this event ends it
	}
	if wasTerminal && !s.unindexed {
		wasClass, wasEntry = retention(j)
	}
	s.countStats(at, j, p)
	j.Fold(seq, at, p)
	t := s.tenant(j.Tenant)
	terminal := j.Status.Terminal()
	if j.Status != wasStatus && !s.unindexed {
		s.index.remove(listIndex(j.Tenant, byStatus, string(wasStatus)), j.ID)
		s.index.insert(listIndex(j.Tenant, byStatus, string(j.Status)), j.ID)
		if wasTerminal {
			s.index.remove(wasClass, wasEntry)
		}
		if terminal {
			s.index.insert(retention(j))
		}
	}
	if wasTerminal || terminal {
		s.markDirty(j.ID)
	}
	if e, ok := p.(eventlog.JobLeased); ok && len(e.RateGrants) > 0 {
		t.takeTokens(at, e.RateGrants)
	}
	if leased := j.Lease != nil; leased != wasLeased {
		if leased {
			t.Running++
			s.leases[j.Lease.LeaseID] = j
		} else {
			t.Running--
			delete(s.leases, endedLease)
		}
	}
	if terminal != wasTerminal {
		if terminal {
			t.Active--
		} else {
			t.Active++
		}
	}
	if j.Status != wasStatus {
		if wasTerminal {
			s.unfinish(wasStatus, j)
		}
		if terminal {
			s.finished[j.Status]++
		}
		if j.Status == StatusFailed {
			s.deadBy[waitKey(j)]++
		}
	}
	if waiting := j.Waiting(); waiting != wasWaiting {
		if waiting {
			s.wait(j)
		} else {
			delete(s.waiting[waitKey(j)], j.ID)
		}
	}
	if j.FlowID != "" && j.Status != wasStatus {
		s.stepChanged(at, j)
	}
}

// undead counts a dead letter no more: re-driven, or expired.
func (s *Set) undead(j *Job) {
	k := waitKey(j)
	if s.deadBy[k]--; s.deadBy[k] == 0 {
		delete(s.deadBy, k)
	}
}

// waitKey is a job's tenant/queue key. A lookup by it costs nothing when the key is short (the
// concatenation, which does not escape, is made on the stack); storing it allocates, so the
// folds look up first and make the key to keep only for a queue they have not seen.
func waitKey(j *Job) string { return j.Tenant + "\x00" + j.Queue }

func (s *Set) wait(j *Job) {
	queue := s.waiting[waitKey(j)]
	if queue == nil {
		queue = map[string]*Job{}
		s.waiting[waitKey(j)] = queue
	}
	queue[j.ID] = j
}

func (s *Set) applyWorker(at time.Time, p eventlog.Payload) {
	// The event may move when the worker's retention starts: its place in workersEnd too.
	if w := s.workers[strings.TrimPrefix(p.Stream(), "worker/")]; w != nil {
		s.workersEnd.Delete(timed{w.retainedFrom(), w.ID})
		defer func() { s.workersEnd.ReplaceOrInsert(timed{w.retainedFrom(), w.ID}) }()
	}
	switch e := p.(type) {
	case eventlog.WorkerTokenRotated:
		if w := s.workers[e.WorkerID]; w != nil {
			delete(s.tokens, w.TokenHash)
			delete(s.tokens, w.PreviousTokenHash)
			w.TokenHash, w.ExpiresAt, w.TokenIssuedAt = e.TokenHash, e.ExpiresAt, at
			w.PreviousTokenHash, w.PreviousValidUntil = e.PreviousTokenHash, e.PreviousValidUntil
			s.tokens[w.TokenHash] = w.ID
			if w.PreviousTokenHash != "" {
				s.tokens[w.PreviousTokenHash] = w.ID
			}
		}
	case eventlog.WorkerRevoked:
		if w := s.workers[e.WorkerID]; w != nil {
			w.Revoked = true
		}
	case eventlog.WorkerSessionStarted:
		if w := s.workers[e.WorkerID]; w != nil {
			w.Session = &Session{ID: e.SessionID, Transport: e.Transport, Capacity: e.Capacity, Since: at}
			w.LastSeen = at
		}
	case eventlog.WorkerSessionEnded:
		if w := s.workers[e.WorkerID]; w != nil && w.Session != nil && w.Session.ID == e.SessionID {
			w.Session = nil
			w.LastSeen = at
		}
	}
}

// derive rebuilds the indexes that follow from jobs and workers.
func (s *Set) derive() {
	s.leases, s.tokens, s.waiting = map[string]*Job{}, map[string]string{}, map[string]map[string]*Job{}
	if !s.unindexed {
		s.index = memIndex{}
	}
	for _, j := range s.jobs {
		s.index.add(j)
		if j.Lease != nil {
			s.leases[j.Lease.LeaseID] = j
		}
		if j.Waiting() {
			s.wait(j)
		}
	}
	s.flowsEnded = btree.NewG(indexDegree, lessTimed)
	for id, f := range s.flows {
		if f.Status != FlowRunning {
			s.flowsEnded.ReplaceOrInsert(timed{f.EndedAt, id})
		}
	}
	s.workersEnd = btree.NewG(indexDegree, lessTimed)
	for _, w := range s.workers {
		s.workersEnd.ReplaceOrInsert(timed{w.retainedFrom(), w.ID})
		s.tokens[w.TokenHash] = w.ID
		if w.PreviousTokenHash != "" {
			s.tokens[w.PreviousTokenHash] = w.ID
		}
	}
	s.creds.derive()
}

// checkpoint is the stored form of a Set: everything that is not derived, in a canonical order
// so that equal Sets encode to equal bytes.
type checkpoint struct {
	Seq        uint64               `json:"seq"`
	Jobs       []*Job               `json:"jobs"`
	Workers    []*Worker            `json:"workers"`
	Tenants    []*Tenant            `json:"tenants"`
	Idem       []idemEntry          `json:"idempotency"`
	IdemOrder  []idemKey            `json:"idempotency_order"`
	Counters   map[string]*Counters `json:"counters"`
	Throughput []*Throughput        `json:"throughput"`
	APIKeys    []*APIKey            `json:"api_keys"`
	Enroll     []*EnrollToken       `json:"enroll_tokens"`
	DeadBy     map[string]int       `json:"dead_by"`
	Finished   map[Status]int       `json:"finished"`
	Flows      []*Flow              `json:"flows,omitempty"`
	Schedules  []*Schedule          `json:"schedules,omitempty"`
	// GoneFrom is the Set's goneFrom; absent from the checkpoints of builds that kept no
	// tombstones.
	GoneFrom *uint64 `json:"gone_from,omitempty"`
	Version  string  `json:"version"`
}

type idemEntry struct {
	idemKey
	Idempotency
}

// checkpointVersion changes with the checkpoint's shape; a checkpoint of another version is
// unusable, and the server replays the whole log instead (Rebuild). v2 added the assign latency
// and the throughput; v3 the workers' token renewals and the jobs' run times; v4 holds the live
// jobs only, the finished ones being in the table saved with it, and their counts.
const checkpointVersion = "tether.projections.v4"

// CheckpointName is the name under which the server stores the Set's checkpoint in the log,
// and where `tether replay verify` looks for it.
const CheckpointName = "projections"

// MarshalCheckpoint encodes the Set. Two Sets that fold the same records encode to the same
// bytes, which is how tests and `tether replay` compare them.
func (s *Set) MarshalCheckpoint() ([]byte, error) {
	var buf bytes.Buffer
	if err := s.WriteCheckpoint(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteCheckpoint writes what MarshalCheckpoint returns, the JSON of the checkpoint struct,
// one job at a time: a large Set is written or compared without holding its whole encoding.
func (s *Set) WriteCheckpoint(w io.Writer) error {
	c := s.checkpointHead()
	bw := bufio.NewWriterSize(w, 64<<10)
	// The struct's encoding, field by field in declaration order; the jobs are streamed.
	// omit marks an empty omitempty field, which encoding/json leaves out.
	fields := []struct {
		name  string
		value any
		omit  bool
	}{
		{"workers", c.Workers, false}, {"tenants", c.Tenants, false}, {"idempotency", c.Idem, false},
		{"idempotency_order", c.IdemOrder, false}, {"counters", c.Counters, false}, {"throughput", c.Throughput, false},
		{"api_keys", c.APIKeys, false}, {"enroll_tokens", c.Enroll, false}, {"dead_by", c.DeadBy, false},
		{"finished", c.Finished, false}, {"flows", c.Flows, len(c.Flows) == 0}, {"schedules", c.Schedules, len(c.Schedules) == 0},
		{"gone_from", c.GoneFrom, false}, {"version", c.Version, false},
	}
	fmt.Fprintf(bw, `{"seq":%d,"jobs":`, c.Seq)
	jobs := s.liveJobs()
	if len(jobs) == 0 {
		bw.WriteString("null") // as encoding/json writes a nil slice
	}
	var b []byte
	for i, j := range jobs {
		// json.Marshal's bytes (encodeJob's), without its reflection for the jobs that fastjson
		// writes, which are all but a few: a checkpoint writes every live job.
		var ok bool
		if b, ok = appendJob(b[:0], j); !ok {
			var err error
			if b, err = json.Marshal(j); err != nil {
				return err
			}
		}
		bw.WriteByte("[,"[min(i, 1)])
		bw.Write(b)
	}
	if len(jobs) > 0 {
		bw.WriteByte(']')
	}
	for _, f := range fields {
		if f.omit {
			continue
		}
		b, err := json.Marshal(f.value)
		if err != nil {
			return err
		}
		fmt.Fprintf(bw, `,"%s":`, f.name)
		bw.Write(b)
	}
	bw.WriteByte('}')
	return bw.Flush()
}

// checkpointHead is the checkpoint struct without its jobs.
func (s *Set) checkpointHead() checkpoint {
	c := checkpoint{Seq: s.seq, Counters: s.counters, Throughput: s.throughputList(), IdemOrder: s.idemOrder, Version: checkpointVersion,
		DeadBy: s.deadBy, Finished: s.finished, GoneFrom: &s.goneFrom}
	c.Workers = sortedValues(s.workers, func(w *Worker) string { return w.ID })
	c.Tenants = sortedValues(s.tenants, func(t *Tenant) string { return t.Name })
	c.APIKeys = sortedValues(s.creds.apiKeys, func(k *APIKey) string { return k.ID })
	c.Enroll = sortedValues(s.creds.enroll, func(t *EnrollToken) string { return t.ID })
	c.Flows = s.flowList()
	c.Schedules = s.scheduleList()
	for k, v := range s.idem {
		c.Idem = append(c.Idem, idemEntry{k, v})
	}
	slices.SortFunc(c.Idem, func(a, b idemEntry) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Key, b.Key), boolCompare(a.Flow, b.Flow))
	})
	return c
}

// liveJobs returns the jobs that are not finished, by id: the jobs of a checkpoint.
func (s *Set) liveJobs() []*Job {
	var out []*Job
	for _, j := range s.jobs {
		if !j.Status.Terminal() {
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b *Job) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// olderCheckpointVersions are the formats earlier builds wrote.
var olderCheckpointVersions = []string{"tether.projections.v1", "tether.projections.v2", "tether.projections.v3"}

// CheckpointOutdated reports whether data is a checkpoint in a format an earlier build wrote
// (WriteCheckpoint ends with the version). That is no fault in the log: the server replays the
// log instead of loading it, and an audit does not compare it. Anything else that is not this
// build's checkpoint is compared, and fails.
func CheckpointOutdated(data []byte) bool {
	for _, v := range olderCheckpointVersions {
		if bytes.HasSuffix(data, []byte(`"version":"`+v+`"}`)) {
			return true
		}
	}
	return false
}

// UnmarshalCheckpoint restores a Set from MarshalCheckpoint's bytes and the table saved with
// them (nil if the Set had no finished jobs).
func UnmarshalCheckpoint(data []byte, store Store) (*Set, error) {
	if !bytes.HasSuffix(data, []byte(`"version":"`+checkpointVersion+`"}`)) {
		// Refused before it is decoded: an older build's checkpoint holds every job ever run.
		return nil, fmt.Errorf("projections: checkpoint is not of version %q", checkpointVersion)
	}
	var c checkpoint
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("projections: checkpoint: %w", err)
	}
	if c.Version != checkpointVersion {
		return nil, fmt.Errorf("projections: checkpoint version %q, want %q", c.Version, checkpointVersion)
	}
	s := NewOn(store)
	s.seq = c.Seq
	if s.goneFrom = c.Seq + 1; c.GoneFrom != nil {
		s.goneFrom = *c.GoneFrom
	}
	for _, j := range c.Jobs {
		s.jobs[j.ID] = j
	}
	for _, w := range c.Workers {
		s.workers[w.ID] = w
	}
	for _, t := range c.Tenants {
		if t.Reservations == nil {
			t.Reservations = map[string]time.Time{}
		}
		s.tenants[t.Name] = t
	}
	for _, e := range c.Idem {
		s.idem[e.idemKey] = e.Idempotency
	}
	s.idemOrder = c.IdemOrder
	for _, k := range c.APIKeys {
		s.creds.apiKeys[k.ID] = k
	}
	for _, t := range c.Enroll {
		s.creds.enroll[t.ID] = t
	}
	if c.Counters != nil {
		s.counters = c.Counters
	}
	for _, t := range c.Throughput {
		s.throughput[t.Tenant+"\x00"+t.Queue] = t
	}
	if c.DeadBy != nil {
		s.deadBy = c.DeadBy
	}
	if c.Finished != nil {
		s.finished = c.Finished
	}
	for _, f := range c.Flows {
		s.flows[f.ID] = f
	}
	for _, sc := range c.Schedules {
		s.schedules[sc.ID] = sc
	}
	s.derive()
	return s, nil
}

func boolCompare(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func sortedValues[V any](m map[string]V, key func(V) string) []V {
	out := slices.Collect(maps.Values(m))
	slices.SortFunc(out, func(a, b V) int { return cmp.Compare(key(a), key(b)) })
	return out
}

// cloneLive returns a deep copy of the Set's live state, for a checkpoint written while the
// original moves on: everything but the finished jobs, which go to the table.
func (s *Set) cloneLive() *Set {
	c := &Set{
		seq:        s.seq,
		jobs:       make(map[string]*Job, len(s.jobs)),
		workers:    make(map[string]*Worker, len(s.workers)),
		tenants:    make(map[string]*Tenant, len(s.tenants)),
		idem:       maps.Clone(s.idem),
		idemOrder:  slices.Clone(s.idemOrder),
		counters:   make(map[string]*Counters, len(s.counters)),
		throughput: make(map[string]*Throughput, len(s.throughput)),
		creds:      s.creds.clone(),
		flows:      make(map[string]*Flow, len(s.flows)),
		schedules:  make(map[string]*Schedule, len(s.schedules)),
		deadBy:     maps.Clone(s.deadBy),
		finished:   maps.Clone(s.finished),
		dirty:      map[string]dirtyMark{},
		goneFrom:   s.goneFrom,
	}
	for id, j := range s.jobs {
		if !j.Status.Terminal() {
			c.jobs[id] = j.Clone()
		}
	}
	for id, w := range s.workers {
		cw := *w
		cw.Queues = slices.Clone(w.Queues)
		cw.Labels = maps.Clone(w.Labels)
		if w.Session != nil {
			sess := *w.Session
			cw.Session = &sess
		}
		c.workers[id] = &cw
	}
	for name, t := range s.tenants {
		ct := *t
		ct.Reservations = maps.Clone(t.Reservations)
		ct.Paused = maps.Clone(t.Paused)
		ct.QueueKeyLimits = maps.Clone(t.QueueKeyLimits)
		ct.RateLimits = maps.Clone(t.RateLimits)
		ct.RateBuckets = maps.Clone(t.RateBuckets)
		c.tenants[name] = &ct
	}
	for q, n := range s.counters {
		cn := *n
		cn.AssignLatency.Buckets = slices.Clone(n.AssignLatency.Buckets)
		c.counters[q] = &cn
	}
	for k, t := range s.throughput {
		ct := *t
		ct.Slots = slices.Clone(t.Slots)
		c.throughput[k] = &ct
	}
	for id, f := range s.flows {
		c.flows[id] = f.Clone()
	}
	for id, sc := range s.schedules {
		c.schedules[id] = sc.clone()
	}
	return c
}
