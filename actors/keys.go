package actors

import (
	"container/heap"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/eventlog"
)

// Concurrency keys: how many leases the jobs of one key may hold at once.
//
// A job may carry a concurrency key (a customer, an API token, a GPU model). The leases of a
// tenant's jobs with one key are counted together, across queues, and a job is leased only
// while that count is below its queue's limit (max_running_per_key: the queue's own, or the
// tenant's default; 0 is unlimited). The other jobs of its queue go on being leased: a key
// at its limit holds back its own jobs and nobody else's.
//
// Each ready heap (a tenant's queue) holds groups: one for the queue's jobs without a key,
// never held back, and one for each key with ready jobs in the queue. A group orders its jobs
// as the dispatcher does (priority, then age) and stands in its queue's heap at the place of
// its best job. A key at its limit has its groups taken out of their queues' heaps, so the
// dispatcher passes over its jobs without looking at them; a lease of the key that ends puts
// them back. Both cost a heap operation per queue the key has jobs in, however many jobs wait
// behind the key.
//
// Keys take turns: among groups whose best jobs have the same priority, the one served least
// recently goes first, and age decides only between groups never served. A key with a million
// jobs waiting then delays another key's one job by at most a round of the keys, not by its
// million; priorities still come first, and jobs without a key are one group among the keys.

// group is the ready jobs of one queue that share a concurrency key and rate limits.
type group struct {
	jobs          entryHeap
	queue         *groupHeap
	tenant, qname string
	id            string // its name in queue.byKey: key, and its rate limits' (groupID)
	key           string // keyOf(tenant, concurrency key); "" for the jobs without one
	index         int    // in queue.groups; -1 while it is out of it (held back, or empty)
	served        uint64 // the dispatcher's lease count when it last gave one of its jobs
	// rates are the rate limits its jobs take tokens from (rates.go); while one has no token,
	// the group waits in the dispatcher's rateWait (rateIndex >= 0) until due.
	rates     []eventlog.RateLimitUse
	rateKeys  []string // rateKey and bucketKey of each of rates, made once
	bucketKey []string
	rateIndex int
	due       time.Time
}

// groupHeap is one queue's ready jobs: its groups, best job first.
type groupHeap struct {
	groups []*group
	byKey  map[string]*group
}

func (q *groupHeap) Len() int           { return len(q.groups) }
func (q *groupHeap) Less(i, j int) bool { return groupFirst(q.groups[i], q.groups[j]) }

// groupFirst orders a queue's groups by their best jobs: higher priority first, then the key
// served least recently, then the older job.
func groupFirst(g, h *group) bool {
	a, b := g.jobs.top(), h.jobs.top()
	if a.Priority != b.Priority || g.served == h.served {
		return dispatchFirst(a, b)
	}
	return g.served < h.served
}
func (q *groupHeap) Swap(i, j int) {
	g := q.groups
	g[i], g[j] = g[j], g[i]
	g[i].index, g[j].index = i, j
}
func (q *groupHeap) Push(x any) {
	g := x.(*group)
	g.index = len(q.groups)
	q.groups = append(q.groups, g)
}
func (q *groupHeap) Pop() any {
	n := len(q.groups) - 1
	g := q.groups[n]
	q.groups[n] = nil
	q.groups = q.groups[:n]
	g.index = -1
	return g
}

// top is the queue's best ready job that may be leased now, or nil; a nil heap is empty.
func (q *groupHeap) top() *entry {
	if q == nil || len(q.groups) == 0 {
		return nil
	}
	return q.groups[0].jobs.top()
}

// keyOf names a tenant's concurrency key in the dispatcher's maps.
func keyOf(tenant, key string) string {
	if key == "" {
		return ""
	}
	return tenant + "\x00" + key
}

// keyLimit is max_running_per_key in the tenant's queue: the queue's own, or the tenant's.
func (d *Dispatcher) keyLimit(tenant, queue string) int {
	if n, ok := d.keyOwn[readyKey(tenant, queue)]; ok {
		return n
	}
	return d.keyDefault[tenant]
}

// heldBack reports whether g's key holds as many leases as g's queue allows.
func (d *Dispatcher) heldBack(g *group) bool {
	if g.key == "" {
		return false
	}
	n := d.keyLimit(g.tenant, g.qname)
	if mutantKeyLimitOffByOne {
		return n > 0 && d.keyRunning[g.key] > n
	}
	return n > 0 && d.keyRunning[g.key] >= n
}

// pushReady puts a ready job in its queue's heap, in its key's group.
func (d *Dispatcher) pushReady(e *entry) {
	q := d.ready[readyKey(e.Tenant, e.Queue)] // a lookup's key is made on the stack
	if q == nil {
		q = &groupHeap{byKey: map[string]*group{}}
		d.ready[readyKey(e.Tenant, e.Queue)] = q
	}
	k := keyOf(e.Tenant, e.Key)
	id := groupID(k, e.RateLimits)
	g := q.byKey[id]
	if g == nil {
		g = &group{queue: q, tenant: e.Tenant, qname: e.Queue, id: id, key: k, index: -1, rates: e.RateLimits, rateIndex: -1}
		for _, u := range e.RateLimits {
			g.rateKeys, g.bucketKey = append(g.rateKeys, rateKey(e.Tenant, u.Name)), append(g.bucketKey, bucketKey(e.Tenant, u))
		}
		g.jobs = entryHeap{less: dispatchFirst, group: g}
		q.byKey[id] = g
		if k != "" {
			d.keyGroups[k] = append(d.keyGroups[k], g)
		}
	}
	if g.index >= 0 {
		d.readyCount++
	}
	g.jobs.push(e)
	d.place(g)
}

// removeReady takes a ready job out of its group.
func (d *Dispatcher) removeReady(e *entry) {
	g := e.heap.group
	if g.index >= 0 {
		d.readyCount--
	}
	heap.Remove(&g.jobs, e.index)
	d.place(g)
}

// place puts g in its queue's heap, or takes it out, as its jobs, its key's leases and its
// rate limits' tokens say, and forgets it once it is empty.
func (d *Dispatcher) place(g *group) {
	in, want := g.index >= 0, g.jobs.Len() > 0 && !d.heldBack(g) && g.rateIndex < 0
	switch {
	case want && in:
		heap.Fix(g.queue, g.index)
	case want:
		heap.Push(g.queue, g)
		d.readyCount += g.jobs.Len()
	case in:
		heap.Remove(g.queue, g.index)
		d.readyCount -= g.jobs.Len()
	}
	if g.jobs.Len() > 0 {
		return
	}
	if g.rateIndex >= 0 {
		heap.Remove(&d.rateWait, g.rateIndex)
	}
	delete(g.queue.byKey, g.id)
	if g.key != "" {
		gs := d.keyGroups[g.key]
		if i := slices.Index(gs, g); i >= 0 {
			gs = slices.Delete(gs, i, i+1)
		}
		if len(gs) == 0 {
			delete(d.keyGroups, g.key)
		} else {
			d.keyGroups[g.key] = gs
		}
	}
}

// keyLeases counts a lease of key k in (delta +1) or out (-1), and places k's groups anew.
func (d *Dispatcher) keyLeases(k string, delta int) {
	if k == "" {
		return
	}
	if d.keyRunning[k] += delta; d.keyRunning[k] <= 0 {
		delete(d.keyRunning, k)
	}
	for _, g := range slices.Clone(d.keyGroups[k]) {
		d.place(g)
	}
}

// setKeyLimit sets max_running_per_key in a tenant's queue, or its default, at once, and
// answers once that is durable. Leases made under the old limit may still arrive after it
// (their job.leased follows the change in the log); none is made under it after.
func (d *Dispatcher) setKeyLimit(env Env, m SetKeyLimit) {
	switch {
	case m.Queue != "" && !validName(m.Queue, QueueLenMax, false):
		env.Send(env.Sender(), Done{Err: reject(CodeInvalidArgument, "queue %q must be 1..%d of [A-Za-z0-9_-]", clip(m.Queue), QueueLenMax)})
		return
	case CheckKeyLimit(m.MaxRunningPerKey) != nil:
		env.Send(env.Sender(), Done{Err: CheckKeyLimit(m.MaxRunningPerKey)})
		return
	}
	d.applyKeyLimit(m.Tenant, m.Queue, m.MaxRunningPerKey)
	var n *int
	if m.MaxRunningPerKey != nil {
		n = new(*m.MaxRunningPerKey)
	}
	d.pipe.persist(env, []eventlog.Payload{eventlog.TenantKeyLimitSet{Tenant: m.Tenant, Queue: m.Queue, MaxRunningPerKey: n, APIKeyID: m.APIKeyID}},
		replyDone{env.Sender()})
}

// CheckKeyLimit refuses a max_running_per_key out of range; nil (clear it) is in range.
func CheckKeyLimit(n *int) *Rejection {
	if n != nil && (*n < 0 || *n > MaxRunningPerKeyMax) {
		return reject(CodeInvalidArgument, "max_running_per_key %d is outside 0..%d (0: unlimited)", *n, MaxRunningPerKeyMax)
	}
	return nil
}

// applyKeyLimit sets a limit (nil clears it) and places every group of the tenant's keys anew.
func (d *Dispatcher) applyKeyLimit(tenant, queue string, n *int) {
	switch {
	case queue == "" && n == nil:
		delete(d.keyDefault, tenant)
	case queue == "":
		d.keyDefault[tenant] = *n
	case n == nil:
		delete(d.keyOwn, readyKey(tenant, queue))
	default:
		d.keyOwn[readyKey(tenant, queue)] = *n
	}
	prefix := tenant + "\x00"
	for _, k := range slices.Sorted(maps.Keys(d.keyGroups)) {
		if strings.HasPrefix(k, prefix) {
			for _, g := range slices.Clone(d.keyGroups[k]) {
				d.place(g)
			}
		}
	}
}
