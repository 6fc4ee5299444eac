package sim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// client is a program that submits and manages one tenant's jobs over the HTTP API.
type client struct {
	s            *Sim
	name, tenant string
	jobs         []string          // jobs it was told were accepted
	keys         map[string]string // idempotency key → the job it names
	reservations []string
	flows        []string // flows it was told were accepted
	schedules    []string // schedules it was told exist
	n            int
}

func (c *client) tick() {
	s := c.s
	s.after(time.Duration(50+s.workload.IntN(1500))*time.Millisecond, c.name+" acts", func() {
		if s.phase == phaseSafety {
			c.act()
		}
		if s.phase != phaseLiveness {
			c.tick()
		}
	})
}

func (c *client) act() {
	s := c.s
	switch r := s.retentionRand.IntN(100); {
	case r < 2 && len(c.jobs) > 0:
		c.delete(c.jobs[s.retentionRand.IntN(len(c.jobs))])
		return
	case r < 3:
		c.purge()
		return
	}
	if s.queueRand.IntN(100) < 3 {
		c.pauseQueue()
		return
	}
	if s.keyRand.IntN(100) < 2 {
		c.setKeyLimit()
		return
	}
	if s.rateRand.IntN(100) < 1 {
		c.setRateLimit()
		return
	}
	switch r := s.flowRand.IntN(100); {
	case r < 6:
		c.submitFlow()
		return
	case r < 7:
		c.cancelFlow()
		return
	case r < 10:
		c.createSchedule()
		return
	case r < 11:
		c.changeSchedule()
		return
	}
	switch r := s.workload.IntN(100); {
	case r < 45:
		c.submit()
	case r < 55 && len(c.jobs) > 0:
		c.cancel(c.jobs[s.workload.IntN(len(c.jobs))], false)
	case r < 58:
		if other := s.oracle.foreignJobs(c.tenant); len(other) > 0 {
			c.cancel(other[s.workload.IntN(len(other))], true)
		}
	case r < 68:
		c.reserve()
	case r < 74 && len(c.reservations) > 0:
		c.release()
	case r < 82:
		c.redrive()
	case r < 88:
		c.list()
	case r < 90:
		c.setQuota()
	default:
		c.submit()
	}
}

// runAtRound is the grid of the round times some jobs are submitted to run at.
const runAtRound = 30 * time.Second

func (c *client) spec() actors.JobSpec {
	r := c.s.workload
	c.n++
	sp := actors.JobSpec{
		Queue: fmt.Sprintf("q%d", r.IntN(2)), Type: "work", Priority: r.IntN(3) - 1,
		Payload:     json.RawMessage(fmt.Sprintf(`{"client":%q,"n":%d}`, c.name, c.n)),
		MaxAttempts: 1 + r.IntN(4), LeaseTTL: time.Duration(5+r.IntN(35)) * time.Second,
	}
	switch r.IntN(20) {
	case 0:
		sp.Delay = time.Duration(1+r.IntN(30)) * time.Second
	case 1, 2:
		// A round time, as people schedule work: the jobs of several tenants come due at one
		// instant, and the dispatcher hands them out in one go.
		sp.RunAt = c.s.now.Truncate(runAtRound).Add(time.Duration(1+r.IntN(4)) * runAtRound)
	}
	if rr := c.s.retentionRand; rr.IntN(5) == 0 {
		sp.ResultTTL = time.Duration(1+rr.IntN(60)) * time.Second
	}
	if r.IntN(2) == 0 {
		sp.IdempotencyKey = fmt.Sprintf("%s-%d", c.name, c.n)
	}
	if kr := c.s.keyRand; kr.IntN(2) == 0 {
		sp.ConcurrencyKey = fmt.Sprintf("k%d", kr.IntN(3))
	}
	// Half the jobs take tokens: from r0 (with a key or without), some from r1 as well.
	if rr := c.s.rateRand; rr.IntN(2) == 0 {
		sp.RateLimits = []eventlog.RateLimitUse{{Name: "r0", Key: []string{"", "a", "b"}[rr.IntN(3)]}}
		if rr.IntN(4) == 0 {
			sp.RateLimits = append(sp.RateLimits, eventlog.RateLimitUse{Name: "r1"})
		}
	}
	return sp
}

func (c *client) submit() {
	s := c.s
	r := s.workload
	n := 1
	if r.IntN(6) == 0 {
		n = 2 + r.IntN(3)
	}
	specs := make([]actors.JobSpec, n)
	for i := range specs {
		specs[i] = c.spec()
	}
	if len(c.reservations) > 0 && r.IntN(3) == 0 {
		specs[0].ReservationID = c.reservations[0]
		c.reservations = c.reservations[1:]
	}
	keyed := specs[0].IdempotencyKey != ""
	c.send(actors.Submit{Tenant: c.tenant, Jobs: specs}, keyed, 0, s.srv.epoch)
}

// send submits, and on a timeout submits the same request again: with idempotency keys that
// is safe, without them it may make a second job, which a client that retries accepts.
func (c *client) send(m actors.Submit, keyed bool, attempt, epoch int) {
	s := c.s
	s.call(c.name, "submit", toRef(actors.TenantRef(c.tenant)), m, func(reply any) {
		r := reply.(actors.Submitted)
		if r.Err != nil {
			if r.Err.Code == actors.CodeQuotaExceeded {
				s.probe(ProbeQuotaFull)
			}
			return
		}
		for i, j := range r.Jobs {
			key := m.Jobs[i].IdempotencyKey
			if key != "" {
				if was, ok := c.keys[key]; ok && was != j.ID {
					s.fail("idempotency", "%s's key %q named job %s, and now job %s", c.name, key, was, j.ID)
				}
				c.keys[key] = j.ID
			}
			if j.IdempotentHit && s.srv.epoch != epoch {
				s.probe(ProbeIdempotentAfterCrash)
			}
			c.jobs = append(c.jobs, j.ID)
		}
	}, func() {
		if attempt < 3 && (keyed || s.workload.IntN(3) == 0) {
			c.send(m, keyed, attempt+1, epoch)
		}
	})
}

func (c *client) cancel(jobID string, foreign bool) {
	s := c.s
	s.call(c.name, "cancel", toJob(jobID), actors.Cancel{Tenant: c.tenant, JobID: jobID}, func(reply any) {
		r := reply.(actors.Done)
		switch {
		case foreign && (r.Err == nil || r.Err.Code != actors.CodeJobNotFound):
			s.fail("isolation", "%s of tenant %s cancelled another tenant's job %s: %v", c.name, c.tenant, jobID, r.Err)
		case foreign:
			s.probe(ProbeForeignJobRejected)
		case r.Err != nil && r.Err.Code == actors.CodeJobNotFound && !s.oracle.hasExpired(jobID):
			s.fail("durability", "%s's accepted job %s is not found", c.name, jobID)
		}
	}, nil)
}

// delete deletes one of its jobs, as DELETE /v1/jobs/{id} does: a finished one goes, a live one
// is refused, and one that is not found must have expired.
func (c *client) delete(jobID string) {
	s := c.s
	s.call(c.name, "delete", toRef(actors.DispatcherRef()), actors.Delete{Tenant: c.tenant, JobID: jobID}, func(reply any) {
		r := reply.(actors.Done)
		if r.Err != nil && r.Err.Code == actors.CodeJobNotFound && !s.oracle.hasExpired(jobID) {
			s.fail("durability", "%s's accepted job %s is not found", c.name, jobID)
		}
	}, nil)
}

// purge purges its dead letters older than a random age, of one queue or all; half the time it
// re-drives the oldest of them at once, as a second browser tab might, which the server must
// serialise with the purge.
func (c *client) purge() {
	s := c.s
	if !s.srv.up {
		return
	}
	r := s.retentionRand
	queue := ""
	if r.IntN(2) == 0 {
		queue = fmt.Sprintf("q%d", r.IntN(2))
	}
	before := s.serverNow().Add(-time.Duration(r.IntN(120)) * time.Second)
	s.call(c.name, "purge", toRef(actors.DispatcherRef()), actors.PurgeDead{Tenant: c.tenant, Queue: queue, Before: before}, func(any) {}, nil)
	if ids, _ := s.srv.set.DeadBefore(c.tenant, queue, before, 1); len(ids) > 0 && r.IntN(2) == 0 {
		c.redriveJob(ids[0])
	}
}

// pauseQueue pauses or resumes one of its queues, as `tether queue pause` does; heal resumes
// whatever is paused then.
func (c *client) pauseQueue() {
	s := c.s
	r := s.queueRand
	m := actors.PauseQueue{Tenant: c.tenant, Queue: fmt.Sprintf("q%d", r.IntN(2)), Paused: r.IntN(2) == 0}
	s.call(c.name, "pause queue", toRef(actors.DispatcherRef()), m, func(reply any) {
		if reply.(actors.Done).Err == nil && m.Paused {
			s.probe(ProbeQueuePaused)
		}
	}, nil)
}

// setKeyLimit sets or clears the key limit of one of its queues or its tenant's default, as
// `tether queue limits` and `tether admin quota --max-running-per-key` do.
func (c *client) setKeyLimit() {
	s := c.s
	m := keyLimit(s.keyRand, c.tenant)
	s.call(c.name, "key limit", toRef(actors.DispatcherRef()), m, func(any) {}, nil)
}

// setRateLimit changes one of its tenant's rate limits, or deletes it, as `tether ratelimit`
// does. Jobs that name a deleted limit are refused until it is set again.
func (c *client) setRateLimit() {
	s := c.s
	var m any = rateLimit(s.rateRand, c.tenant)
	if s.rateRand.IntN(4) == 0 {
		m = actors.DeleteRateLimit{Tenant: c.tenant, Name: fmt.Sprintf("r%d", s.rateRand.IntN(2))}
	}
	s.call(c.name, "rate limit", toRef(actors.DispatcherRef()), m, func(any) {}, nil)
}

// rateLimit draws a rate limit of the tenant: r0 or r1, from one token every 5 s to 5 a
// second, with a burst of 1 to 3.
func rateLimit(r *rand.Rand, tenant string) actors.SetRateLimit {
	return actors.SetRateLimit{Tenant: tenant, Name: fmt.Sprintf("r%d", r.IntN(2)), Rate: []float64{0.2, 1, 2.5, 5}[r.IntN(4)], Burst: 1 + r.IntN(3)}
}

// keyLimit draws a key limit for the tenant: its default or a queue's, 0 to 2 or cleared.
func keyLimit(r *rand.Rand, tenant string) actors.SetKeyLimit {
	m := actors.SetKeyLimit{Tenant: tenant}
	if q := r.IntN(3); q > 0 {
		m.Queue = fmt.Sprintf("q%d", q-1)
	}
	if n := r.IntN(4); n < 3 {
		m.MaxRunningPerKey = new(n)
	}
	return m
}

func (c *client) reserve() {
	s := c.s
	ttl := time.Duration(5+s.workload.IntN(115)) * time.Second
	s.call(c.name, "reserve", toRef(actors.TenantRef(c.tenant)), actors.Reserve{Tenant: c.tenant, TTL: ttl}, func(reply any) {
		r := reply.(actors.Reserved)
		if r.Err != nil {
			if r.Err.Code == actors.CodeQuotaExceeded {
				s.probe(ProbeQuotaFull)
			}
			return
		}
		c.reservations = append(c.reservations, r.ID)
	}, nil)
}

func (c *client) release() {
	id := c.reservations[0]
	c.reservations = c.reservations[1:]
	c.s.call(c.name, "release", toRef(actors.TenantRef(c.tenant)), actors.Release{Tenant: c.tenant, ID: id}, func(any) {}, nil)
}

// redrive re-drives one of its dead-lettered jobs, found as GET /v1/jobs?status=failed would.
func (c *client) redrive() {
	s := c.s
	if !s.srv.up {
		return
	}
	dead, _ := s.srv.set.List(projections.JobFilter{Tenant: c.tenant, Status: projections.StatusFailed, Limit: 20}, s.serverNow())
	if len(dead) == 0 {
		return
	}
	c.redriveJob(dead[s.workload.IntN(len(dead))].ID)
}

func (c *client) redriveJob(id string) {
	s := c.s
	s.call(c.name, "redrive", toRef(actors.TenantRef(c.tenant)), actors.Redrive{Tenant: c.tenant, JobID: id}, func(reply any) {
		if reply.(actors.Done).Err == nil {
			s.probe(ProbeRedrive)
		}
	}, nil)
}

// list reads a page of its jobs, as GET /v1/jobs does; none may be another tenant's.
func (c *client) list() {
	s := c.s
	if !s.srv.up {
		return
	}
	jobs, _ := s.srv.set.List(projections.JobFilter{Tenant: c.tenant, Limit: 50}, s.serverNow())
	for _, j := range jobs {
		if j.Tenant != c.tenant {
			s.fail("isolation", "%s of tenant %s listed job %s of tenant %s", c.name, c.tenant, j.ID, j.Tenant)
			return
		}
	}
}

func (c *client) setQuota() {
	s := c.s
	// Each limit is unlimited, set, or left as it is (a partial update).
	limit := func(n int) *int {
		switch s.workload.IntN(3) {
		case 0:
			return new(0)
		case 1:
			return new(n)
		}
		return nil
	}
	q := actors.SetQuota{Tenant: c.tenant, MaxActive: limit(3 + s.workload.IntN(20)), MaxRunning: limit(1 + s.workload.IntN(4))}
	s.call("admin", "set quota", toRef(actors.TenantRef(c.tenant)), q, func(any) {}, nil)
}
