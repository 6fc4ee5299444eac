package projections

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// The queries below return copies: nothing a caller holds changes under it, and nothing it does
// changes the Set.

// Job returns the snapshot of one job, or false if no such job was submitted or it expired.
func (s *Set) Job(id string) (*Job, bool) {
	if j, ok := s.jobs[id]; ok {
		return j.Clone(), true
	}
	j := s.stored(id)
	return j, j != nil
}

// JobRef returns the Set's own job without copying it, or a finished job read from the table.
// Callers must not modify it or keep it past the lock that guards the Set; it exists for hot
// paths that read a field or two.
func (s *Set) JobRef(id string) *Job { return s.lookup(id) }

// JobFilter selects jobs for List. Tenant is required; other empty fields match everything.
type JobFilter struct {
	Tenant string
	Status Status // compared with StatusAt(now)
	Queue  string
	Type   string
	// Label is key=value: only jobs with that label.
	Label string
	// CreatedBefore, if set, keeps only the jobs created before it.
	CreatedBefore time.Time
	// Live keeps only the jobs that are not finished (queued, scheduled, leased), when Status is
	// empty: the jobs a bulk cancel acts on, walked in the live statuses' indexes only.
	Live bool
	// After is the id of the last job of the previous page; ids are ULIDs, so pages run in
	// submission order, or its reverse with Newest.
	After  string
	Limit  int
	Newest bool // newest first
	// Retention, if set, leaves out the jobs whose retention ended by now: they are gone for
	// the API before the dispatcher's sweep writes their expiry.
	Retention Retention
}

// CursorFirst is a cursor (JobFilter.After) before every job: ids are ULIDs, and this is the
// smallest.
const CursorFirst = "00000000000000000000000000"

// ListLimitMax caps one page of List.
const ListLimitMax = 1000

// List returns one page of a tenant's jobs in id order (reversed with f.Newest) and whether more
// follow. It walks the index of the most selective filter it has (status, then label, then
// queue, then type), in memory and in the table merged, and checks the others on the way, so a page costs
// its length plus the jobs that index holds but the other filters leave out. ListOutside gives
// the same answer with the table read outside the lock that guards the Set.
func (s *Set) List(f JobFilter, now time.Time) ([]*Job, bool) {
	q := newListQuery(f, now)
	found := map[string]*Job{}
	keep := func(id string, _ int) verdict {
		j := s.lookup(id)
		if j == nil || !q.matches(j) {
			return skip
		}
		found[id] = j
		return take
	}
	var ids []string
	for _, x := range q.indexes {
		ids = append(ids, s.scanMerged(x, f.After, f.Newest, q.limit+1, keep)...)
	}
	return s.page(&q, ids, found)
}

// listQuery is what a List asks: the indexes it walks, and which of their jobs it takes.
type listQuery struct {
	f                    JobFilter
	now                  time.Time
	limit                int
	indexes              []index
	labelKey, labelValue string
}

func newListQuery(f JobFilter, now time.Time) listQuery {
	q := listQuery{f: f, now: now, limit: f.Limit}
	if q.limit <= 0 || q.limit > ListLimitMax {
		q.limit = ListLimitMax
	}
	q.labelKey, q.labelValue, _ = strings.Cut(f.Label, "=")
	switch {
	case f.Status == StatusQueued: // a scheduled job whose run_at has passed reads as queued
		q.indexes = []index{listIndex(f.Tenant, byStatus, string(StatusQueued)), listIndex(f.Tenant, byStatus, string(StatusScheduled))}
	case f.Status != "":
		q.indexes = []index{listIndex(f.Tenant, byStatus, string(f.Status))}
	case f.Live:
		for _, st := range []Status{StatusQueued, StatusScheduled, StatusLeased} {
			q.indexes = append(q.indexes, listIndex(f.Tenant, byStatus, string(st)))
		}
	case f.Label != "":
		q.indexes = []index{listIndex(f.Tenant, byLabel, f.Label)}
	case f.Queue != "":
		q.indexes = []index{listIndex(f.Tenant, byQueue, f.Queue)}
	case f.Type != "":
		q.indexes = []index{listIndex(f.Tenant, byType, f.Type)}
	default:
		q.indexes = []index{listIndex(f.Tenant, byNothing, "")}
	}
	return q
}

// otherIndexes are the indexes of the query's filters other than x's: a job on the list is in
// each of them.
func (q *listQuery) otherIndexes(x index) []index {
	var out []index
	for _, o := range []struct {
		field byte
		value string
	}{{byStatus, string(q.f.Status)}, {byLabel, q.f.Label}, {byQueue, q.f.Queue}, {byType, q.f.Type}} {
		// A label with NUL in its value is in no index (entries): the job is read instead.
		if o.value != "" && o.field != x.field && (o.field != byLabel || !strings.Contains(o.value, "\x00")) {
			out = append(out, listIndex(q.f.Tenant, o.field, o.value))
		}
	}
	return out
}

// matches reports whether a job of one of the query's indexes is on the list: past the cursor,
// and every filter holds.
func (q *listQuery) matches(j *Job) bool {
	f := &q.f
	return j.ID != f.After && (f.Queue == "" || j.Queue == f.Queue) && (f.Type == "" || j.Type == f.Type) &&
		(f.Label == "" || hasLabel(j, q.labelKey, q.labelValue)) &&
		(f.Status == "" || j.StatusAt(q.now) == f.Status) && (!f.Live || !j.Status.Terminal()) &&
		(f.CreatedBefore.IsZero() || j.CreatedAt.Before(f.CreatedBefore)) && !f.Retention.Expired(j, q.now)
}

// page turns the first limit+1 entries of each of the query's indexes into the page and
// whether more follow: the first limit+1 of their union are among them. found holds their
// jobs: memory's own, which the page copies, or private copies read from the table.
func (s *Set) page(q *listQuery, ids []string, found map[string]*Job) ([]*Job, bool) {
	if len(q.indexes) > 1 {
		slices.Sort(ids)
		if q.f.Newest {
			slices.Reverse(ids)
		}
	}
	more := len(ids) > q.limit
	ids = ids[:min(q.limit, len(ids))]
	out := make([]*Job, len(ids))
	for i, id := range ids {
		j := found[id]
		if s.jobs[id] == j {
			j = j.Clone() // memory's own; a stored one was decoded for this call
		}
		out[i] = j
	}
	return out, more
}

func hasLabel(j *Job, key, value string) bool {
	v, ok := j.Labels[key]
	return ok && v == value
}

// AllWaiting returns every queued or scheduled job of every tenant, unordered.
func (s *Set) AllWaiting() []*Job {
	var out []*Job
	for _, m := range s.waiting {
		for _, j := range m {
			out = append(out, j.Clone())
		}
	}
	return out
}

func hasTenant(key, tenant string) bool {
	return len(key) > len(tenant) && key[:len(tenant)] == tenant && key[len(tenant)] == 0
}

// CompareDispatch orders two waiting jobs for the dispatcher: higher priority first, then the
// one submitted first.
func CompareDispatch(prioA int, seqA uint64, prioB int, seqB uint64) int {
	return cmp.Or(cmp.Compare(prioB, prioA), cmp.Compare(seqA, seqB))
}

// QueueStats describes one queue of one tenant at a moment.
type QueueStats struct {
	Queue     string `json:"queue"`
	Depth     int    `json:"depth"` // ready (queued, or scheduled and due) jobs
	Scheduled int    `json:"scheduled"`
	Leased    int    `json:"leased"`
	Dead      int    `json:"dead"`
	// OldestAge is how long the oldest ready job has waited since it was created.
	OldestAge time.Duration `json:"oldest_age"`
	// PausedSince is when the queue was paused; zero while it assigns jobs.
	PausedSince time.Time `json:"paused_since,omitzero"`
	// MaxRunningPerKey is the leases one concurrency key may hold at once in the queue, its own
	// limit or the tenant's default (0: unlimited); OwnKeyLimit says it is the queue's own.
	MaxRunningPerKey int  `json:"max_running_per_key"`
	OwnKeyLimit      bool `json:"own_key_limit,omitempty"`
}

// Queues returns the stats of every queue a tenant has used, by name: every queue that holds a
// job, finished one within the throughput window, is paused or has a key limit of its own.
func (s *Set) Queues(tenant string, now time.Time) []QueueStats {
	byName := map[string]*QueueStats{}
	stats := func(q string) *QueueStats {
		if byName[q] == nil {
			byName[q] = &QueueStats{Queue: q}
		}
		return byName[q]
	}
	for k, m := range s.waiting {
		if !hasTenant(k, tenant) {
			continue
		}
		for _, j := range m {
			q := stats(j.Queue)
			if j.StatusAt(now) == StatusScheduled {
				q.Scheduled++
				continue
			}
			q.Depth++
			q.OldestAge = max(q.OldestAge, now.Sub(j.CreatedAt))
		}
	}
	for _, j := range s.leases {
		if j.Tenant == tenant {
			stats(j.Queue).Leased++
		}
	}
	for k, n := range s.deadBy {
		if hasTenant(k, tenant) {
			stats(k[len(tenant)+1:]).Dead = n
		}
	}
	for _, t := range s.throughput {
		if t.Tenant == tenant && t.activeSince(now.Add(-ThroughputWindow*time.Minute)) {
			stats(t.Queue)
		}
	}
	if t := s.tenants[tenant]; t != nil {
		for q, p := range t.Paused {
			stats(q).PausedSince = p.Since
		}
		for q := range t.QueueKeyLimits {
			stats(q).OwnKeyLimit = true
		}
		for _, q := range byName {
			q.MaxRunningPerKey = t.KeyLimit(q.Queue)
		}
	}
	out := make([]QueueStats, 0, len(byName))
	for _, q := range byName {
		out = append(out, *q)
	}
	slices.SortFunc(out, func(a, b QueueStats) int { return cmp.Compare(a.Queue, b.Queue) })
	return out
}

// Leases returns every active lease's job, soonest expiry first.
func (s *Set) Leases() []*Job {
	out := make([]*Job, 0, len(s.leases))
	for _, j := range s.leases {
		out = append(out, j.Clone())
	}
	slices.SortFunc(out, func(a, b *Job) int {
		return cmp.Or(a.Lease.ExpiresAt.Compare(b.Lease.ExpiresAt), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// LeasedJob returns the job whose current lease is leaseID, or nil, without copying it; the
// caller must not keep or change it.
func (s *Set) LeasedJob(leaseID string) *Job { return s.leases[leaseID] }

// LiveCount is the number of jobs not finished: what a checkpoint holds.
func (s *Set) LiveCount() int {
	n := 0
	for _, t := range s.tenants {
		n += t.Active
	}
	return n
}

// InMemory is the number of jobs the Set holds in memory: the live ones, and the finished ones
// that changed since the last flush.
func (s *Set) InMemory() int { return len(s.jobs) }

// DeadLetters returns a tenant's dead-lettered jobs, most recent first. It reads every one: for
// tests and the simulator, not for a request.
func (s *Set) DeadLetters(tenant string) []*Job {
	var out []*Job
	for _, id := range s.scanMerged(listIndex(tenant, byStatus, string(StatusFailed)), "", false, math.MaxInt, takeAll) {
		out = append(out, s.lookup(id).Clone())
	}
	slices.SortFunc(out, func(a, b *Job) int { return cmp.Compare(b.LastSeq, a.LastSeq) })
	return out
}

// Tenant returns a tenant's quota and usage; a tenant never seen has no limits and no usage.
func (s *Set) Tenant(name string) Tenant {
	t, ok := s.tenants[name]
	if !ok {
		return Tenant{Name: name, Reservations: map[string]time.Time{}}
	}
	c := *t
	c.Reservations = maps.Clone(t.Reservations)
	c.Paused = maps.Clone(t.Paused)
	c.QueueKeyLimits = maps.Clone(t.QueueKeyLimits)
	c.RateLimits = maps.Clone(t.RateLimits)
	c.RateBuckets = maps.Clone(t.RateBuckets)
	return c
}

// RateLimit returns one of a tenant's rate limits, without copying the tenant (a submit that
// names limits asks for each).
func (s *Set) RateLimit(tenant, name string) (RateLimit, bool) {
	t, ok := s.tenants[tenant]
	if !ok {
		return RateLimit{}, false
	}
	l, ok := t.RateLimits[name]
	return l, ok
}

// Paused reports whether a tenant's queue is paused, and since when.
func (s *Set) Paused(tenant, queue string) (PausedQueue, bool) {
	if t := s.tenants[tenant]; t != nil {
		p, ok := t.Paused[queue]
		return p, ok
	}
	return PausedQueue{}, false
}

// TenantNames returns every tenant that has an event, sorted.
func (s *Set) TenantNames() []string {
	out := make([]string, 0, len(s.tenants))
	for n := range s.tenants {
		out = append(out, n)
	}
	for _, w := range s.workers { // a worker's registration is its tenant's event too
		if s.tenants[w.Tenant] == nil {
			out = append(out, w.Tenant)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Idempotency returns the live entry for a tenant's key at now.
func (s *Set) Idempotency(tenant, key string, now time.Time) (Idempotency, bool) {
	e, ok := s.idem[idemKey{Tenant: tenant, Key: key}]
	if !ok || !now.Before(e.ExpiresAt) {
		return Idempotency{}, false
	}
	return e, true
}

// Worker returns a worker's registration and session.
func (s *Set) Worker(id string) (Worker, bool) {
	w, ok := s.workers[id]
	if !ok {
		return Worker{}, false
	}
	c := *w
	if w.Session != nil {
		sess := *w.Session
		c.Session = &sess
	}
	c.Queues = slices.Clone(w.Queues)
	return c, true
}

// HasSession reports whether a worker has an open session.
func (s *Set) HasSession(workerID string) bool {
	w := s.workers[workerID]
	return w != nil && w.Session != nil
}

// PublicKey returns a worker's registered Ed25519 key (base64), or "" if it has none.
func (s *Set) PublicKey(workerID string) string {
	if w := s.workers[workerID]; w != nil {
		return w.PublicKey
	}
	return ""
}

// WorkerByTokenHash finds the worker whose current token hashes to h.
func (s *Set) WorkerByTokenHash(h string) (Worker, bool) {
	id, ok := s.tokens[h]
	if !ok {
		return Worker{}, false
	}
	return s.Worker(id)
}

// WorkerView is a worker as the API shows it.
type WorkerView struct {
	Worker
	Status   string   `json:"status"` // "online", "offline" or "revoked"
	InFlight []string `json:"in_flight"`
}

// Workers returns a tenant's workers by id, with their in-flight jobs.
func (s *Set) Workers(tenant string) []WorkerView {
	inFlight := map[string][]string{}
	for _, j := range s.leases {
		inFlight[j.Lease.WorkerID] = append(inFlight[j.Lease.WorkerID], j.ID)
	}
	var out []WorkerView
	for _, w := range s.workers {
		if w.Tenant != tenant {
			continue
		}
		c, _ := s.Worker(w.ID)
		v := WorkerView{Worker: c, Status: "offline", InFlight: inFlight[w.ID]}
		slices.Sort(v.InFlight)
		switch {
		case w.Revoked:
			v.Status = "revoked"
		case w.Session != nil:
			v.Status = "online"
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b WorkerView) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// OpenSessions returns every worker that has a session, by worker id.
func (s *Set) OpenSessions() []Worker {
	var out []Worker
	for _, w := range s.workers {
		if w.Session != nil {
			c, _ := s.Worker(w.ID)
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b Worker) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Counters returns the totals of every queue that has any, by queue name.
func (s *Set) Counters() map[string]Counters {
	out := make(map[string]Counters, len(s.counters))
	for q, c := range s.counters {
		cc := *c
		cc.AssignLatency.Buckets = slices.Clone(c.AssignLatency.Buckets)
		out[q] = cc
	}
	return out
}

// StatusCounts returns how many jobs are in each status at now, every status included. It
// costs the live jobs.
func (s *Set) StatusCounts(now time.Time) map[Status]int {
	out := map[Status]int{StatusQueued: 0, StatusScheduled: 0, StatusLeased: 0, StatusSucceeded: 0, StatusFailed: 0, StatusCancelled: 0}
	for _, j := range s.jobs {
		if !j.Status.Terminal() {
			out[j.StatusAt(now)]++
		}
	}
	for st, n := range s.finished {
		out[st] += n
	}
	return out
}
