package projections

import (
	"cmp"
	"container/heap"
	"maps"
	"slices"
	"time"

	"github.com/tetherhq/tether/eventlog"
)

// Retention is how long finished jobs stay queryable: the server's policy (--retain,
// --retain-dead, --max-dead). It is not in the log, so a server restarted with another policy
// applies it to the history it has. A zero duration keeps such jobs until they are deleted.
type Retention struct {
	// Done is how long a succeeded or cancelled job stays, unless it has a result TTL of its own.
	Done time.Duration
	// Dead is how long a dead letter stays, and MaxDead how many one tenant keeps (0: no cap);
	// past the cap, its oldest dead letters go first. A result TTL does not apply to a dead
	// letter: dead letters are kept for an operator to look at and re-drive.
	Dead    time.Duration
	MaxDead int
}

// Until reports when a finished job leaves the views, or false if it stays (a live job, or a
// policy that keeps it).
func (r Retention) Until(j *Job) (time.Time, bool) {
	if !j.Status.Terminal() {
		return time.Time{}, false
	}
	d := r.Done
	switch {
	case j.Status == StatusFailed:
		d = r.Dead
	case j.ResultTTL > 0:
		d = j.ResultTTL
	}
	if d <= 0 {
		return time.Time{}, false
	}
	return j.FinishedAt.Add(d), true
}

// Expired reports whether a job's retention has ended at now: the API no longer shows it, even
// before the dispatcher's sweep writes its job.expired.
func (r Retention) Expired(j *Job, now time.Time) bool {
	until, ok := r.Until(j)
	return ok && !now.Before(until)
}

// Expiry is a finished job due to leave the views, why, and since when.
type Expiry struct {
	JobID  string
	Reason string // eventlog.ExpiredRetention or eventlog.ExpiredDeadCap
	At     time.Time
}

// Expirable returns up to limit finished jobs that are due to expire at now under r, soonest
// due first: those whose retention ended, and each tenant's oldest dead letters past r.MaxDead.
// It costs in proportion to what it returns (and the number of tenants with dead letters).
func (s *Set) Expirable(r Retention, now time.Time, limit int) []Expiry {
	var out []Expiry
	take := func(e *retainedEntry, reason string, at time.Time) {
		out = append(out, Expiry{JobID: e.id, Reason: reason, At: at})
	}
	ri := &s.retained
	if r.Done > 0 {
		ri.done.ascend(limit, func(e *retainedEntry) bool {
			due := e.at.Add(r.Done)
			if now.Before(due) {
				return false
			}
			take(e, eventlog.ExpiredRetention, due)
			return true
		})
	}
	ri.ttl.ascend(limit, func(e *retainedEntry) bool {
		if now.Before(e.at) {
			return false
		}
		take(e, eventlog.ExpiredRetention, e.at)
		return true
	})
	for _, tenant := range slices.Sorted(maps.Keys(ri.dead)) {
		h := ri.dead[tenant]
		over := 0
		if r.MaxDead > 0 {
			over = h.Len() - r.MaxDead
		}
		h.ascend(limit, func(e *retainedEntry) bool {
			switch due := e.at.Add(r.Dead); {
			case over > 0:
				over--
				take(e, eventlog.ExpiredDeadCap, e.at)
			case r.Dead > 0 && !now.Before(due):
				take(e, eventlog.ExpiredRetention, due)
			default:
				return false
			}
			return true
		})
	}
	slices.SortFunc(out, func(a, b Expiry) int { return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.JobID, b.JobID)) })
	return out[:min(len(out), limit)]
}

// NextExpiry is when the next finished job is due to expire under r, or false if none is.
func (s *Set) NextExpiry(r Retention) (time.Time, bool) {
	var next time.Time
	found := false
	consider := func(t time.Time) {
		if !found || t.Before(next) {
			next, found = t, true
		}
	}
	ri := &s.retained
	if e := ri.done.top(); e != nil && r.Done > 0 {
		consider(e.at.Add(r.Done))
	}
	if e := ri.ttl.top(); e != nil {
		consider(e.at)
	}
	for _, h := range ri.dead {
		switch e := h.top(); {
		case r.MaxDead > 0 && h.Len() > r.MaxDead:
			consider(e.at)
		case r.Dead > 0:
			consider(e.at.Add(r.Dead))
		}
	}
	return next, found
}

// RetainedCount is the number of finished jobs the views hold.
func (s *Set) RetainedCount() int { return len(s.retained.byJob) }

// retainedIndex orders the finished jobs by when they are due to leave the views: succeeded
// and cancelled jobs by when they finished (one retention applies to them all), those with a
// result TTL by when it ends, and dead letters by tenant (the cap counts per tenant) and when
// they died. Every finished job is in exactly one heap, and leaves it when it expires or is
// re-driven.
type retainedIndex struct {
	byJob map[string]*retainedEntry
	done  retainedHeap
	ttl   retainedHeap
	dead  map[string]*retainedHeap // by tenant
}

type retainedEntry struct {
	at     time.Time // when the job finished; for the ttl heap, when its TTL ends
	id     string
	tenant string
	heap   *retainedHeap
	index  int
}

func newRetainedIndex() retainedIndex {
	return retainedIndex{byJob: map[string]*retainedEntry{}, dead: map[string]*retainedHeap{}}
}

// add indexes a job that just finished.
func (ri *retainedIndex) add(j *Job) {
	e := &retainedEntry{at: j.FinishedAt, id: j.ID, tenant: j.Tenant}
	switch {
	case j.Status == StatusFailed:
		h := ri.dead[j.Tenant]
		if h == nil {
			h = &retainedHeap{}
			ri.dead[j.Tenant] = h
		}
		e.heap = h
	case j.ResultTTL > 0:
		e.at, e.heap = j.FinishedAt.Add(j.ResultTTL), &ri.ttl
	default:
		e.heap = &ri.done
	}
	ri.byJob[j.ID] = e
	heap.Push(e.heap, e)
}

// remove drops a job that expired or is live again.
func (ri *retainedIndex) remove(id string) {
	e := ri.byJob[id]
	if e == nil {
		return
	}
	delete(ri.byJob, id)
	heap.Remove(e.heap, e.index)
	if e.heap.Len() == 0 && ri.dead[e.tenant] == e.heap {
		delete(ri.dead, e.tenant)
	}
}

// retainedHeap is a min-heap of entries by (at, id).
type retainedHeap struct{ items []*retainedEntry }

func (h *retainedHeap) Len() int { return len(h.items) }
func (h *retainedHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.id, b.id)) < 0
}
func (h *retainedHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].index, h.items[j].index = i, j
}
func (h *retainedHeap) Push(x any) {
	e := x.(*retainedEntry)
	e.index = len(h.items)
	h.items = append(h.items, e)
}
func (h *retainedHeap) Pop() any {
	e := h.items[len(h.items)-1]
	h.items[len(h.items)-1] = nil
	h.items = h.items[:len(h.items)-1]
	return e
}

func (h *retainedHeap) top() *retainedEntry {
	if len(h.items) == 0 {
		return nil
	}
	return h.items[0]
}

// ascend calls f with up to limit entries in order, until f returns false, without changing
// the heap: a best-first walk of the heap's tree, which costs O(k log k) for k entries.
func (h *retainedHeap) ascend(limit int, f func(*retainedEntry) bool) {
	if len(h.items) == 0 || limit <= 0 {
		return
	}
	frontier := &indexHeap{of: h, idx: []int{0}}
	for n := 0; n < limit && frontier.Len() > 0; n++ {
		i := heap.Pop(frontier).(int)
		if !f(h.items[i]) {
			return
		}
		for _, c := range [2]int{2*i + 1, 2*i + 2} {
			if c < len(h.items) {
				heap.Push(frontier, c)
			}
		}
	}
}

// indexHeap is a min-heap of positions in a retainedHeap, by the entries there.
type indexHeap struct {
	of  *retainedHeap
	idx []int
}

func (f *indexHeap) Len() int           { return len(f.idx) }
func (f *indexHeap) Less(i, j int) bool { return f.of.Less(f.idx[i], f.idx[j]) }
func (f *indexHeap) Swap(i, j int)      { f.idx[i], f.idx[j] = f.idx[j], f.idx[i] }
func (f *indexHeap) Push(x any)         { f.idx = append(f.idx, x.(int)) }
func (f *indexHeap) Pop() any {
	i := f.idx[len(f.idx)-1]
	f.idx = f.idx[:len(f.idx)-1]
	return i
}

// DeadBefore returns up to limit of a tenant's dead letters that died before before, oldest
// first, those of queue only if it is set, and whether more match.
func (s *Set) DeadBefore(tenant, queue string, before time.Time, limit int) (ids []string, more bool) {
	h := s.retained.dead[tenant]
	if h == nil {
		return nil, false
	}
	h.ascend(h.Len(), func(e *retainedEntry) bool {
		if !e.at.Before(before) {
			return false
		}
		if queue != "" && s.jobs[e.id].Queue != queue {
			return true
		}
		if len(ids) == limit {
			more = true
			return false
		}
		ids = append(ids, e.id)
		return true
	})
	return ids, more
}
