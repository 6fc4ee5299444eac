package sim

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/transport/wire"
)

// setup starts the server on an empty disk and builds the seed's population: two or three
// tenants with quotas, clients, and workers (some with Ed25519 keys) registered before the
// faults begin.
func (s *Sim) setup() error {
	if s.replicated {
		s.setupCluster()
	} else {
		s.srv = newServer(s)
		s.srv.start()
	}
	if s.violation != nil {
		return s.violation
	}
	r := s.workload
	tenants := 2 + r.IntN(2)
	for t := range tenants {
		tenant := fmt.Sprintf("t%d", t)
		for c := range 1 + r.IntN(2) {
			s.clients = append(s.clients, &client{s: s, name: fmt.Sprintf("%s-c%d", tenant, c), tenant: tenant, keys: map[string]string{}})
		}
		if r.IntN(2) == 0 {
			s.srv.request("admin", actors.TenantRef(tenant), actors.SetQuota{Tenant: tenant, MaxActive: new(5 + r.IntN(20)), MaxRunning: new(r.IntN(3))}, func(any) {})
		}
		for name := range 2 { // both rate limits, so that jobs naming them are accepted
			m := rateLimit(s.rateRand, tenant)
			m.Name = fmt.Sprintf("r%d", name)
			s.srv.request("admin", actors.DispatcherRef(), m, func(any) {})
		}
		if s.keyRand.IntN(2) == 0 { // most keys run under a limit: one or two leases each
			s.srv.request("admin", actors.DispatcherRef(), actors.SetKeyLimit{Tenant: tenant, MaxRunningPerKey: new(1 + s.keyRand.IntN(2))}, func(any) {})
		}
		for n := range 1 + r.IntN(3) {
			queues := []string{"q0", "q1"}[:1+r.IntN(2)]
			if n == 0 {
				queues = []string{"q0", "q1"} // so that every queue has a worker
			}
			w := &worker{s: s, name: fmt.Sprintf("%s-w%d", tenant, n), tenant: tenant, queues: queues,
				capacity: 1 + r.IntN(3), leases: map[string]*held{}, acks: map[string]func(wire.Frame){}}
			reg := actors.RegisterWorker{Tenant: tenant, Name: w.name, Queues: w.queues, Capacity: w.capacity,
				TokenHash: "sim-" + w.name, ExpiresAt: s.start.Add(tokenTTL)}
			w.token = reg.TokenHash
			if r.IntN(2) == 0 {
				var seed [ed25519.SeedSize]byte
				for i := range seed {
					seed[i] = byte(r.Uint32())
				}
				w.key = ed25519.NewKeyFromSeed(seed[:])
				reg.PublicKey = base64.StdEncoding.EncodeToString(w.key.Public().(ed25519.PublicKey))
			}
			s.srv.request("admin", actors.TenantRef(tenant), reg, func(reply any) {
				if r := reply.(actors.Registered); r.Err == nil {
					w.id = r.WorkerID
				}
			})
			s.workers = append(s.workers, w)
		}
		// A pod that registered and died: its token runs out, and the retention after it, and
		// it leaves the views.
		s.srv.request("admin", actors.TenantRef(tenant), actors.RegisterWorker{Tenant: tenant, Name: tenant + "-gone", Queues: []string{"q0"},
			Capacity: 1, TokenHash: "sim-" + tenant + "-gone", ExpiresAt: s.start.Add(goneTokenTTL)}, func(any) {})
	}
	for s.srv.runnableCount() > 0 || s.srv.committer || len(s.srv.inflight) > 0 {
		if !s.step() {
			return s.violation
		}
	}
	for _, w := range s.workers {
		if w.id == "" {
			return fmt.Errorf("sim: worker %s did not register", w.name)
		}
	}
	s.phase = phaseSafety
	for _, c := range s.clients {
		c.tick()
	}
	for _, w := range s.workers {
		w.connect()
		w.heartbeat()
	}
	s.faultTicks()
	s.stopTicks()
	return nil
}

// stopTicks stops a worker cleanly now and then, as an operator restarting workers does: not a
// fault (it strikes in fault-free runs too), but the path that gives jobs back untried.
func (s *Sim) stopTicks() {
	r := stream(s.cfg.Seed, "stops")
	var next func()
	next = func() {
		s.after(time.Duration(r.Int64N(int64(30*time.Second))), "stop tick", func() {
			if s.phase != phaseSafety {
				return
			}
			if w := s.workers[r.IntN(len(s.workers))]; w.alive() && !w.stopping && w.conn != nil && r.IntN(2) == 0 {
				w.stop()
			}
			next()
		})
	}
	next()
}

// faultTicks puts on the clock the faults that strike at a time rather than on a message.
// Each class ticks on its own stream.
func (s *Sim) faultTicks() {
	tick := func(f Fault, mean time.Duration, scale float64, fn func()) {
		var next func()
		next = func() {
			d := time.Duration(s.faultRand[f].Int64N(int64(2 * mean)))
			s.after(d, "fault tick "+f.String(), func() {
				if s.phase != phaseSafety {
					return
				}
				if s.strikes(f, scale) {
					fn()
				}
				next()
			})
		}
		next()
	}
	pick := func(f Fault) *worker { return s.workers[s.faultRand[f].IntN(len(s.workers))] }
	tick(FaultServerCrash, 4*time.Second, 0.3, func() {
		if s.srv.up {
			s.srv.crash("at a random step")
		}
	})
	tick(FaultPartition, 3*time.Second, 0.3, func() {
		parties := len(s.workers) + len(s.clients)
		i := s.faultRand[FaultPartition].IntN(parties)
		name := ""
		if i < len(s.workers) {
			name = s.workers[i].name
		} else {
			name = s.clients[i-len(s.workers)].name
		}
		d := time.Duration(1+s.faultRand[FaultPartition].IntN(60)) * time.Second
		s.partitioned[name] = s.now.Add(d)
		s.record(fmt.Sprintf("partition: %s cut off for %s", name, d))
	})
	tick(FaultWorkerCrash, 5*time.Second, 0.3, func() {
		if w := pick(FaultWorkerCrash); !w.crashed {
			w.crash()
		}
	})
	tick(FaultPause, 8*time.Second, 0.3, func() {
		if w := pick(FaultPause); w.alive() {
			w.pause()
		}
	})
	// Every second, not every four: a replicated seed's safety phase lasts some 13-17 s of
	// virtual time, in which four-second ticks paused or cut off the leader in fewer than half
	// the seeds that have the class.
	tick(FaultLeader, time.Second, 0.3, func() {
		if s.replicated {
			s.leaderFault()
		}
	})
	tick(FaultStall, time.Second, 0.7, s.stall)
	tick(FaultClock, 6*time.Second, 0.3, func() {
		d := time.Duration(1+s.faultRand[FaultClock].IntN(120)) * time.Second
		if s.faultRand[FaultClock].IntN(2) == 0 {
			d = -d
		}
		s.clockOffset += d
		s.clockJumps++
		s.offsets = append(s.offsets, s.clockOffset)
		s.record(fmt.Sprintf("clock jumps %s", d))
	})
}

// heal ends the safety phase: no more faults or submits; the server is up, partitions are
// healed, every worker is alive and connecting.
func (s *Sim) heal() {
	s.phase, s.healedAt = phaseLiveness, s.now
	s.record("heal")
	clear(s.partitioned)
	switch {
	case s.replicated:
		s.healCluster() // the election brings a leader up, if none runs
	case !s.srv.up:
		s.srv.start()
	default:
		s.srv.resume()
	}
	for _, w := range s.workers {
		w.pausedTill = time.Time{}
		if w.crashed {
			w.crashed = false
		}
		w.connect()
	}
	// The admin resumes every paused queue, and again every 10 s while one is paused or no
	// server takes the request (a pause still on the network lands, a leader stops before its
	// resumes are durable).
	s.resumeQueues()
}

// resumeQueues resumes every queue the projections hold paused, and looks again in 10 s until
// none is.
func (s *Sim) resumeQueues() {
	v, paused := s.srv, false
	if v.up {
		for _, tenant := range v.set.TenantNames() {
			for _, q := range slices.Sorted(maps.Keys(v.set.Tenant(tenant).Paused)) {
				paused = true
				v.request("admin", actors.DispatcherRef(), actors.PauseQueue{Tenant: tenant, Queue: q}, func(any) {})
			}
		}
	}
	if !v.up || paused || s.now.Sub(s.healedAt) < 10*time.Second {
		s.after(10*time.Second, "resume queues", s.resumeQueues)
	}
}

// settled reports whether the liveness phase is done: every job terminal, every reservation
// ended, and nothing left to make durable.
func (s *Sim) settled() bool {
	v := s.srv
	return v.up && !v.recovering && len(v.pending) == 0 && !v.committer && len(v.inflight) == 0 && v.runnableCount() == 0 &&
		len(s.procs()) == 1 && s.oracle.unsettled() == ""
}

// final runs the end-of-run checks: liveness, the whole log's chain, index and checkpoint, the
// live projections against a replay, the dead-letter queue, and what the oracle saw.
func (s *Sim) final() {
	if !s.settled() {
		what := s.oracle.unsettled()
		if what == "" {
			what = "the server still has work in hand"
		}
		s.fail("liveness", "%s %s after the faults stopped", what, LivenessBound)
		return
	}
	v := s.srv
	if !v.sameAsReplay("the live projections") {
		return
	}
	// The live views, folded one event at a time, and (below) the views recovered from the
	// checkpoint, rebuilt in one go, must both agree with the log.
	if s.oracle.checkFinal(v.set); s.violation != nil {
		return
	}
	// A last crash and recovery: the checkpoint plus the tail must equal the full replay too.
	v.saveCheckpoint()
	if s.replicated {
		s.restartLeader()
		v = s.srv
	} else {
		v.crash("final check")
		if v.damageArchive(true); s.violation != nil {
			return
		}
		v.start()
	}
	if s.violation != nil {
		return
	}
	s.oracle.checkFinal(v.set)
}
