package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/tetherhq/tether/actors/cells"
)

// Stalls of a server process: stopped for a while (a SIGSTOP, a frozen VM, a long pause; the
// stall fault, and the replicated leader's pause), it runs nothing, not even the ticks of its
// stall watch; its timers wait; what is sent to it waits in its sockets, unread; the world's
// clock moves on. When it goes on, the timers that came due fire in any order, and race the
// reads of its sockets: all of them first, the reads first, or mixed (resume), so that a
// decision that holds only when the heartbeats are read first is caught.
//
// The invariants (checked as the oracle folds an expiry, and as a heartbeat is taken):
//
//   - "stall": no lease runs out under its worker while a heartbeat of the worker naming it,
//     sent within lease_ttl of the expiry, had reached the process that decided the expiry,
//     on a session open, cells.StallMin or more before. (A heartbeat that arrived a moment
//     before the expiry may lose the race in any server; one that waited longer than that is
//     unread only because the server stalled.)
//   - "unacknowledged": a lease made before a restart is released as unacknowledged only if
//     its worker does not hold it; and no attempt is spent on such a lease that never reached
//     its worker when the worker's heartbeat reached the process that inherited the lease
//     cells.StallMin or more before the expiry: that heartbeat said the worker did not hold it.

// arrival is when a worker's frame was sent and reached the server.
type arrival struct{ sent, arrived time.Time }

// beat is a heartbeat a server process took (its session was open): when it was sent and
// arrived, which process took it, on which clock-jump count, and from which worker. A jump
// between a heartbeat's reading and an expiry moves the server's reckoning of the lease; one
// before its reading, while it waited in a socket, does not, since a stall's grace counts from
// the end of the stall.
type beat struct {
	arrival
	epoch  int
	clock  int
	worker string
}

// ranOut is a lease that ran out, as the oracle folded it: when it was decided (true time),
// on which clock-jump count, by which process, and the lease_ttl the worker heartbeated for.
type ranOut struct {
	at     time.Time
	clock  int
	epoch  int
	worker string
	jobID  string
	ttl    time.Duration
}

type heardKey struct {
	epoch  int
	worker string
}

// beatsKept bounds the heartbeats kept per lease: the last few are the ones an expiry races.
const beatsKept = 8

// name names the process in the trace.
func (v *server) name() string {
	if v.node != nil {
		return v.node.name
	}
	return "the server"
}

// stall stops the server process for a while (FaultStall): mostly for one to 4/3 of
// the lease_ttl of a lease it holds, so that the lease's timer comes due in the stall while a
// heartbeat its worker sent in it (every third of the lease_ttl, until it gives up on the
// server) is younger than a lease_ttl when it ends; else (or when it holds no lease) around
// cells.StallMin, or for up to two minutes.
func (s *Sim) stall() {
	v, r := s.srv, s.faultRand[FaultStall]
	if !v.up || v.frozen {
		return
	}
	var d time.Duration
	leases := v.set.Leases()
	switch k := r.IntN(8); {
	case k < 6 && len(leases) > 0:
		ttl := leases[r.IntN(len(leases))].LeaseTTL
		d = ttl + time.Duration(r.Int64N(int64(ttl/3)))
	case k < 7:
		d = time.Duration(200+r.IntN(4800)) * time.Millisecond
	default:
		d = time.Duration(5+r.IntN(115)) * time.Second
	}
	if v.freeze(d, r, "stalls") {
		s.probe(ProbeServerStalled)
	}
}

// freeze stops the process for d (what: how, for the trace); it goes on then (resume), in an
// order r draws. It reports whether it stopped a process that ran.
func (v *server) freeze(d time.Duration, r *rand.Rand, what string) bool {
	if !v.up || v.frozen {
		return false
	}
	v.frozen, v.thaw = true, r
	v.s.record(fmt.Sprintf("%s %s for %s", v.name(), what, d))
	v.s.after(d, v.name()+" goes on", v.resume)
	return true
}

// reach runs a message's arrival at the process: at once, or, while it is stalled, when it
// reads its sockets again (resume).
func (v *server) reach(fn func()) {
	if v.frozen {
		v.inbox = append(v.inbox, fn)
		return
	}
	fn()
}

// resume lets a stalled process go on: the timers that came due meanwhile fire, in any order,
// and what waited in its sockets is read, after them, before them, or among them.
func (v *server) resume() {
	if !v.up || !v.frozen {
		return
	}
	s, r := v.s, v.thaw
	v.frozen = false
	v.overtaken = v.overtaken || s.srv != v // another process took over meanwhile
	timers, reads := v.deferred, v.inbox
	v.deferred, v.inbox = nil, nil
	r.Shuffle(len(timers), func(i, j int) { timers[i], timers[j] = timers[j], timers[i] })
	// Half the time the order that tests the most: every timer before any read.
	order := []string{"its timers first", "its timers first", "its sockets first", "timers and reads mixed"}[r.IntN(4)]
	s.record(fmt.Sprintf("%s goes on: %d timers came due, %d messages wait to be read; %s", v.name(), len(timers), len(reads), order))
	read := func(at time.Duration, fn func()) { s.after(at, "read after a stall", func() { v.reach(fn) }) }
	switch order {
	case "its timers first": // every timer runs, and its actors, before a byte is read
		for _, it := range timers {
			s.agenda.Again(it, s.now)
		}
		for _, fn := range reads {
			read(time.Millisecond, fn)
		}
	case "its sockets first":
		for _, fn := range reads {
			read(0, fn)
		}
		for _, it := range timers {
			s.agenda.Again(it, s.now)
		}
	default:
		for len(timers) > 0 || len(reads) > 0 {
			if len(reads) == 0 || (len(timers) > 0 && r.IntN(2) == 0) {
				s.agenda.Again(timers[0], s.now)
				timers = timers[1:]
			} else {
				read(0, reads[0])
				reads = reads[1:]
			}
		}
	}
}

// tick is the runtime's stall watch ticking (cells.TickEvery), as the broker's watchStalls:
// a stalled process does not tick, so its first tick after sees the gap.
func (v *server) tick() {
	v.rt.Tick()
	v.after(cells.TickEvery, "clock tick", v.tick)
}

// trueTime is when, in true time, the server clock read at, on clock-jump count clock (-1:
// unknown, and so is the answer).
func (s *Sim) trueTime(at time.Time, clock int) (time.Time, bool) {
	if clock < 0 || clock >= len(s.offsets) {
		return time.Time{}, false
	}
	return at.Add(-s.offsets[clock]), true
}

// heartbeatTaken notes a heartbeat process v took from worker w, naming leases, and checks it
// against the leases that ran out before it was read.
func (s *Sim) heartbeatTaken(v *server, w *worker, leases []string, a arrival) {
	k := heardKey{v.epoch, w.id}
	if _, ok := s.heard[k]; !ok {
		s.heard[k] = a.arrived
	}
	for _, id := range leases {
		b := beat{arrival: a, epoch: v.epoch, clock: s.clockJumps, worker: w.id}
		bs := append(s.beats[id], b)
		if len(bs) > beatsKept {
			bs = bs[len(bs)-beatsKept:]
		}
		s.beats[id] = bs
		if x, ok := s.ranOut[id]; ok {
			s.checkRanOut(id, x, b)
		}
	}
}

// leaseRanOut checks a lease that ran out, decided by the process s.deciding at decidedAt on
// clock-jump count clock, against the heartbeats taken so far, and keeps it for those taken
// later.
func (s *Sim) leaseRanOut(jobID, leaseID, workerID string, ttl time.Duration, decidedAt time.Time, clock int) {
	at, ok := s.trueTime(decidedAt, clock)
	if !ok || s.deciding < 0 {
		return
	}
	x := ranOut{at: at, clock: clock, epoch: s.deciding, worker: workerID, jobID: jobID, ttl: ttl}
	for _, b := range s.beats[leaseID] {
		s.checkRanOut(leaseID, x, b)
	}
	s.ranOut[leaseID] = x
	if s.received[leaseID] || s.inherited[leaseID] != x.epoch {
		return
	}
	if heard, ok := s.heard[heardKey{x.epoch, workerID}]; ok && !heard.After(at.Add(-cells.StallMin)) {
		s.fail("unacknowledged", "job %s spent an attempt on lease %s, made before a restart, which never reached its worker %s, though the worker's heartbeat reached the server %s before",
			jobID, leaseID, workerID, at.Sub(heard))
	}
}

// checkRanOut fails the run if heartbeat b should have kept lease x from running out.
func (s *Sim) checkRanOut(leaseID string, x ranOut, b beat) {
	if b.epoch != x.epoch || b.clock != x.clock || b.worker != x.worker || b.arrived.After(x.at.Add(-cells.StallMin)) || x.at.Sub(b.sent) >= x.ttl {
		return
	}
	s.fail("stall", "job %s's lease %s ran out under %s, though the worker's heartbeat sent %s before (lease_ttl %s) had reached the server %s before",
		x.jobID, leaseID, x.worker, x.at.Sub(b.sent), x.ttl, x.at.Sub(b.arrived))
}

// inherit notes the leases a process found as it started: made before its restart, or by the
// leader before it.
func (v *server) inherit() {
	for _, j := range v.set.Leases() {
		v.s.inherited[j.Lease.LeaseID] = v.epoch
	}
}
