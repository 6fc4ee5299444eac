package actors

import (
	"container/heap"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Rate limits: how often the jobs that name a limit may be leased.
//
// A tenant's rate limit is a token bucket: it holds at most burst tokens and gains rate tokens
// a second on the dispatcher's clock, one bucket for each key the tenant's jobs name it with.
// Each lease of a job takes a token from every bucket the job names, and a job is leased only
// when each of them has one; so over any span of time t a bucket gives at most burst + t*rate
// tokens. A job whose bucket is empty costs nothing while it waits: its group (keys.go; the
// rate limits a job names are part of its group) leaves its queue's heap for rateWait, ordered
// by when its token is due, and a timer puts it back then. No lease is spent and nothing polls.
//
// A bucket is kept as the instant it is full again (the theoretical arrival time of the
// generic cell rate algorithm): each token taken moves it one interval (1/rate) later, from
// now at the earliest, and a token is there while it is at most (burst-1) intervals ahead of
// now. Integer nanoseconds, so the simulator replays it exactly. Each lease's job.leased
// records the instants it moved its buckets to (eventlog.RateGrant) and the projections keep
// them, so a restarted dispatcher takes up every bucket where the log left it: a restart
// neither refills a bucket nor empties one. A full bucket is forgotten (it is the same as
// none, once past its limit's FullFrom: where a limit whose burst grew puts the buckets it has
// not seen); buckets are swept when their number doubles.
//
// A limit the tenant deletes no longer holds anyone back; a job may only be submitted naming
// limits the tenant has (undefinedRateLimit). Changing a limit keeps the tokens its buckets
// hold, up to the new burst, and they refill at the new rate from there.

// rateDef is a tenant's rate limit as the dispatcher uses it: the projections' (whose FullFrom
// says where the buckets it has not seen stand), and the interval between two tokens.
type rateDef struct {
	projections.RateLimit
	interval time.Duration
}

func newRateDef(l projections.RateLimit) rateDef {
	return rateDef{RateLimit: l, interval: projections.RateInterval(l.Rate)}
}

// rateKey names a tenant's rate limit in the dispatcher's maps.
func rateKey(tenant, name string) string { return tenant + "\x00" + name }

// bucketKey names a bucket: a limit's, for one key. Limit names have no "/".
func bucketKey(tenant string, u eventlog.RateLimitUse) string {
	return rateKey(tenant, u.Name) + "/" + u.Key
}

// limitOf is the rateKey of the limit a bucket (bucketKey) belongs to.
func limitOf(bucket string) string { return bucket[:strings.IndexByte(bucket, '/')] }

// groupID files a group in its queue: its key, and, if its jobs name rate limits, those.
func groupID(key string, rates []eventlog.RateLimitUse) string {
	if len(rates) == 0 {
		return key
	}
	var b strings.Builder
	b.WriteString(key)
	for _, u := range rates {
		b.WriteString("\x01" + u.Name + "\x02" + u.Key)
	}
	return b.String()
}

// tokenAt is when the ith bucket of g's rate limits next has a token, and whether its limit
// exists; a time not after now means it has one.
func (d *Dispatcher) tokenAt(g *group, i int) (time.Time, rateDef, bool) {
	def, ok := d.rateDefs[g.rateKeys[i]]
	if !ok {
		return time.Time{}, def, false
	}
	full := def.FullAt(d.buckets[g.bucketKey[i]])
	if full.IsZero() {
		return time.Time{}, def, true
	}
	return full.Add(-time.Duration(def.Burst-1) * def.interval), def, true
}

// rateDue is when every bucket g's jobs take a token from has one (not after now: they all
// have), and which of g.rates is due last (-1: none is due).
func (d *Dispatcher) rateDue(g *group) (due time.Time, last int) {
	last = -1
	for i := range g.rates {
		if at, _, ok := d.tokenAt(g, i); ok && at.After(due) {
			due, last = at, i
		}
	}
	return due, last
}

// takeTokens takes a token from each bucket of the rate limits of g's jobs, at now, and
// returns where it left them, for the job.leased of the one leased.
func (d *Dispatcher) takeTokens(g *group, now time.Time) []eventlog.RateGrant {
	var grants []eventlog.RateGrant
	for i, u := range g.rates {
		def, ok := d.rateDefs[g.rateKeys[i]]
		if !ok {
			continue
		}
		b := g.bucketKey[i]
		cost := def.interval
		if mutantBucketRefillsTwice {
			cost /= 2
		}
		full := later(def.FullAt(d.buckets[b]), now).Add(cost)
		d.buckets[b] = full
		grants = append(grants, eventlog.RateGrant{Name: u.Name, Key: u.Key, FullAt: full.UTC()})
	}
	if len(d.buckets) > d.bucketsSweep {
		d.sweepBuckets(now)
	}
	return grants
}

// sweepBuckets forgets the buckets that are full at now, and sweeps again when twice as many
// are left.
func (d *Dispatcher) sweepBuckets(now time.Time) {
	maps.DeleteFunc(d.buckets, func(b string, full time.Time) bool {
		return !d.rateDefs[limitOf(b)].FullAt(full).After(now)
	})
	d.bucketsSweep = max(2*len(d.buckets), bucketsSweepMin)
}

const bucketsSweepMin = 1024

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// leasable is the session's best ready job that dispatch would lease now, as best finds it but
// without holding back the groups whose tokens are not due: for the invariants, which change
// nothing.
func (d *Dispatcher) leasable(s *slot) *entry { return d.bestOf(s, d.now, false) }

// queueTop is queue k's best job whose rate limits have their tokens at now. With hold, the
// groups on the way whose tokens are not due leave the heap for rateWait (holdForRate), and
// the next group is looked at; without, a queue whose best group waits for a token has none.
func (d *Dispatcher) queueTop(k string, now time.Time, hold bool) *entry {
	top := d.ready[k].top()
	for top != nil && len(top.heap.group.rates) > 0 {
		due, _ := d.rateDue(top.heap.group)
		if !due.After(now) {
			break
		}
		if !hold {
			return nil
		}
		d.holdForRate(top.heap.group, due)
		top = d.ready[k].top()
	}
	return top
}

// holdForRate takes g out of its queue's heap until its tokens are due.
func (d *Dispatcher) holdForRate(g *group, due time.Time) {
	g.due = due
	heap.Push(&d.rateWait, g)
	d.place(g)
}

// wakeRated puts back the groups whose tokens are due at now, and reports whether any came.
func (d *Dispatcher) wakeRated(now time.Time) bool {
	woke := false
	for len(d.rateWait.groups) > 0 && !d.rateWait.groups[0].due.After(now) {
		g := heap.Pop(&d.rateWait).(*group)
		d.place(g)
		woke = true
	}
	return woke
}

// releaseRated puts back every group of the tenant that waits for a token: its limits changed,
// and dispatch will look at their tokens again.
func (d *Dispatcher) releaseRated(tenant string) {
	for _, g := range slices.Clone(d.rateWait.groups) {
		if g.tenant == tenant {
			heap.Remove(&d.rateWait, g.rateIndex)
			d.place(g)
		}
	}
}

// rateHeap is the groups waiting for a token, the soonest due first.
type rateHeap struct{ groups []*group }

func (h *rateHeap) Len() int { return len(h.groups) }
func (h *rateHeap) Less(i, j int) bool {
	a, b := h.groups[i], h.groups[j]
	if !a.due.Equal(b.due) {
		return a.due.Before(b.due)
	}
	return groupFirst(a, b)
}
func (h *rateHeap) Swap(i, j int) {
	g := h.groups
	g[i], g[j] = g[j], g[i]
	g[i].rateIndex, g[j].rateIndex = i, j
}
func (h *rateHeap) Push(x any) {
	g := x.(*group)
	g.rateIndex = len(h.groups)
	h.groups = append(h.groups, g)
}
func (h *rateHeap) Pop() any {
	n := len(h.groups) - 1
	g := h.groups[n]
	h.groups[n] = nil
	h.groups = h.groups[:n]
	g.rateIndex = -1
	return g
}

// SetRateLimit sets one of the tenant's rate limits, new or changed; DeleteRateLimit deletes
// one. Both are decided by the dispatcher, which acts on them at once, and answered with Done
// once durable (eventlog.TenantRateLimitSet, TenantRateLimitDeleted).
type (
	SetRateLimit struct {
		Tenant, Name string
		Rate         float64
		Burst        int
		APIKeyID     string
	}
	DeleteRateLimit struct{ Tenant, Name, APIKeyID string }
)

// CheckRateLimit refuses a rate limit out of range: the name, the rate, the burst, and a burst
// that would take more than a year to refill.
func CheckRateLimit(name string, rate float64, burst int) *Rejection {
	switch {
	case !validName(name, RateLimitNameLenMax, false):
		return reject(CodeInvalidArgument, "rate limit name %q must be 1..%d of [A-Za-z0-9_-]", clip(name), RateLimitNameLenMax)
	case rate == 0:
		return reject(CodeInvalidArgument, "rate is required: tokens a second, from 1/86400 (one a day) to %d", RateMax)
	case math.IsNaN(rate) || rate < RateMin*(1-1e-4) || rate > RateMax: // one a day, rounded to 5 digits, is one a day
		return reject(CodeInvalidArgument, "rate %v is outside 1/86400 (one a day)..%d tokens a second", rate, RateMax)
	case burst < 1 || burst > BurstMax:
		return reject(CodeInvalidArgument, "burst %d is outside 1..%d", burst, BurstMax)
	case time.Duration(burst)*projections.RateInterval(rate) > RateRefillMax:
		return reject(CodeInvalidArgument, "burst %d at rate %v takes more than %s to refill", burst, rate, RateRefillMax)
	}
	return nil
}

// RateRefillMax bounds how long an empty bucket takes to fill.
const RateRefillMax = 366 * 24 * time.Hour

func (d *Dispatcher) setRateLimit(env Env, m SetRateLimit) {
	if r := CheckRateLimit(m.Name, m.Rate, m.Burst); r != nil {
		env.Send(env.Sender(), Done{Err: r})
		return
	}
	k := rateKey(m.Tenant, m.Name)
	if _, ok := d.rateDefs[k]; !ok && d.rateLimitsOf(m.Tenant) >= RateLimitsMax {
		env.Send(env.Sender(), Done{Err: reject(CodeInvalidArgument, "tenant %s has %d rate limits, the most it may have", m.Tenant, RateLimitsMax)})
		return
	}
	def := newRateDef(projections.RateLimit{Rate: m.Rate, Burst: m.Burst})
	if was, ok := d.rateDefs[k]; ok { // its buckets keep their tokens (projections.ConvertBucket)
		def = newRateDef(was.ChangedTo(def.RateLimit, d.now))
		for b, full := range d.buckets {
			if strings.HasPrefix(b, k+"/") {
				if full, ok = projections.ConvertBucket(was.FullAt(full), d.now, was.RateLimit, def.RateLimit); ok {
					d.buckets[b] = full
				} else {
					delete(d.buckets, b)
				}
			}
		}
	}
	d.rateDefs[k] = def
	d.releaseRated(m.Tenant)
	d.pipe.persist(env, []eventlog.Payload{eventlog.TenantRateLimitSet{Tenant: m.Tenant, Name: m.Name, Rate: m.Rate, Burst: m.Burst,
		At: d.now.UTC(), APIKeyID: m.APIKeyID}}, replyDone{env.Sender()})
}

func (d *Dispatcher) deleteRateLimit(env Env, m DeleteRateLimit) {
	k := rateKey(m.Tenant, m.Name)
	if _, ok := d.rateDefs[k]; !ok {
		env.Send(env.Sender(), Done{Err: reject(CodeRateLimitNotFound, "tenant %s has no rate limit %q", m.Tenant, clip(m.Name))})
		return
	}
	delete(d.rateDefs, k)
	maps.DeleteFunc(d.buckets, func(b string, _ time.Time) bool { return strings.HasPrefix(b, k+"/") })
	d.releaseRated(m.Tenant)
	d.pipe.persist(env, []eventlog.Payload{eventlog.TenantRateLimitDeleted{Tenant: m.Tenant, Name: m.Name, APIKeyID: m.APIKeyID}},
		replyDone{env.Sender()})
}

// rateLimitsOf counts the tenant's rate limits.
func (d *Dispatcher) rateLimitsOf(tenant string) int {
	n := 0
	for k := range d.rateDefs {
		if strings.HasPrefix(k, tenant+"\x00") {
			n++
		}
	}
	return n
}

// recoverRates reads the tenant's rate limits and buckets back from the projections.
func (d *Dispatcher) recoverRates(t *projections.Tenant) {
	for name, l := range t.RateLimits {
		d.rateDefs[rateKey(t.Name, name)] = newRateDef(l)
	}
	for b, full := range t.RateBuckets {
		d.buckets[t.Name+"\x00"+b] = full
	}
}

// RateLimits asks the dispatcher for the state of a tenant's rate limits, or with Tenant empty
// of every tenant's; RateLimitStates answers.
type RateLimits struct{ Tenant string }

// RateLimitStates answers RateLimits, by tenant and name.
type RateLimitStates struct{ Limits []RateLimitState }

// RateLimitState is a rate limit as the dispatcher holds it: its definition, the tokens of its
// bucket without a key, and how many of its buckets are below full.
type RateLimitState struct {
	Tenant, Name string
	Rate         float64
	Burst        int
	Tokens       float64
	Buckets      int // buckets not full, the one without a key included
}

// rateStates reports the rate limits' state at now, of one tenant or (tenant empty) all, by
// tenant and name.
func (d *Dispatcher) rateStates(tenant string, now time.Time) []RateLimitState {
	var out []RateLimitState
	byLimit := map[string]int{}
	for b, full := range d.buckets {
		k := limitOf(b)
		if d.rateDefs[k].FullAt(full).After(now) && (tenant == "" || strings.HasPrefix(b, tenant+"\x00")) {
			byLimit[k]++
		}
	}
	for _, k := range slices.Sorted(maps.Keys(d.rateDefs)) {
		def := d.rateDefs[k]
		t, name, _ := strings.Cut(k, "\x00")
		if tenant != "" && t != tenant {
			continue
		}
		st := RateLimitState{Tenant: t, Name: name, Rate: def.Rate, Burst: def.Burst, Tokens: float64(def.Burst), Buckets: byLimit[k]}
		if full := def.FullAt(d.buckets[k+"/"]); full.After(now) {
			st.Tokens = max(0, float64(def.Burst)-float64(full.Sub(now))/float64(def.interval))
		}
		out = append(out, st)
	}
	return out
}
