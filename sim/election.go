package sim

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/eventlog/election"
)

// The election of the replicated log's writer, as the simulator models it: a KV bucket whose
// key expires a TTL after it was last written, requests to it that the network delays and
// loses (a renewal may land and its answer be lost), windows in which it answers nothing (its
// raft leader lost), and servers that run package election's driver, as the real ones do: each
// node's claim (an election.Driver) watches the key as a standby and, before taking a free one,
// asks the last leader whether it still leads; once it won, it renews on its process's clock.

// simTTL is the leader TTL of the simulated cluster.
const simTTL = time.Second

type kvModel struct {
	value   []byte // nil: no key
	rev     uint64
	revs    uint64 // the bucket's revision counter
	expires time.Time
}

// kvDo applies an action to the bucket as it arrives there, and says how it ended.
func (n *natsModel) kvDo(a election.Action, value []byte) election.Outcome {
	kv := &n.kv
	if kv.value != nil && !n.s.now.Before(kv.expires) {
		kv.value = nil // expired
	}
	switch a.Kind {
	case election.Renew:
		if kv.value == nil || kv.rev != a.Rev {
			return election.Outcome{Kind: election.Refused}
		}
		kv.revs++
		kv.value, kv.rev, kv.expires = value, kv.revs, n.s.now.Add(simTTL)
		return election.Outcome{Kind: election.Updated, Rev: kv.rev}
	case election.Read:
		if kv.value == nil {
			return election.Outcome{Kind: election.Absent}
		}
		return election.Outcome{Kind: election.Found, Value: kv.value, Rev: kv.rev}
	case election.Create:
		if kv.value != nil {
			return election.Outcome{Kind: election.Exists}
		}
		kv.revs++
		kv.value, kv.rev, kv.expires = value, kv.revs, n.s.now.Add(simTTL)
		return election.Outcome{Kind: election.Created, Rev: kv.rev}
	}
	return election.Outcome{Kind: election.Unanswered}
}

// node is a tether server of the cluster: its disk outlives its processes, and it runs one
// process at a time, which leads, or (while it has none) stands by.
type node struct {
	s     *Sim
	name  string
	value []byte // its claim in the key, drawn afresh each time it stands by
	// mem is its data dir; proc its process while one runs (leading, or not yet stopped);
	// claim its part in the election, standing by or leading.
	mem    *vfs.MemFS
	proc   *server
	claim  *claim
	claims int
	// downUntil: the node is away (crashed) until then.
	downUntil time.Time
}

// claim is one claim of a node in the election, from standing by to leading to deposed: the
// production driver (election.Driver), on the simulator's clock (Clock) and its model of the
// bucket and the stream (Bucket), with the takeover and the stop of a simulated process.
type claim struct {
	nd    *node
	value []byte
	d     *election.Driver // nil until it starts
	// proc is the process that took over with this claim, once one did.
	proc   *server
	closed bool
	// contact is when NATS last answered the driver (any outcome but Unanswered), from the
	// moment it won: the oracle's measure of a leader cut off.
	contact time.Time
}

// standBy makes the node a standby with a claim of its own, which starts campaigning once the
// node is up.
func (nd *node) standBy() {
	c := nd.newClaim()
	c.AfterFunc(0, c.start)
}

// newClaim draws the node a claim of its own, and closes the one before it, if any.
func (nd *node) newClaim() *claim {
	if nd.claim != nil {
		nd.claim.close()
	}
	nd.claims++
	nd.value = fmt.Appendf(nil, `{"node":%q,"id":%d}`, nd.name, nd.claims)
	nd.claim = &claim{nd: nd, value: nd.value}
	return nd.claim
}

func (c *claim) start() {
	if c.closed {
		return
	}
	c.d = election.Start(election.Config{TTL: simTTL, Value: c.value, Clock: c, Bucket: c, Check: c.check, Won: c.won, Deposed: c.deposed})
}

func (c *claim) close() {
	c.closed = true
	if c.d != nil {
		c.d.Close()
	}
}

// Now is the true clock: a process measures its TTL with a monotonic clock, which the server
// clock's jumps do not move.
func (c *claim) Now() time.Time { return c.nd.s.now }

// AfterFunc runs f on the process's behalf once the claim has one (it dies with the process,
// and waits while the process is paused); before, on the node's, which waits while the node is
// down (crashed) or the run is being set up.
func (c *claim) AfterFunc(d time.Duration, f func()) {
	s, nd := c.nd.s, c.nd
	if p := c.proc; p != nil {
		p.after(d, "election: tick", f)
		return
	}
	s.after(d, "election: "+nd.name+" ticks", func() {
		if s.now.Before(nd.downUntil) || s.phase == phaseSetup {
			c.AfterFunc(max(d, election.Every), f)
			return
		}
		f()
	})
}

// Do sends an action to the bucket (a Probe, to the NATS server) over the simulated network,
// from the claim's process if it has one: cut off from NATS, that process hears nothing.
func (c *claim) Do(a election.Action, done func(election.Outcome)) {
	s, p := c.nd.s, c.proc
	if a.Kind == election.Probe {
		o := election.Outcome{Kind: election.Unanswered}
		if p != nil && !p.cut() {
			o = election.Outcome{Kind: election.Answered, At: p.lastAck} // as jetstream.Election does
		}
		c.deliver(time.Duration(1+s.network.IntN(3))*time.Millisecond, "election: probe answered", a, o, done)
		return
	}
	s.kvRequest(c.nd.name, a, c.value, p != nil && p.cut(), func(o election.Outcome) {
		c.deliver(0, "election: answer", a, o, done)
	})
}

// deliver hands an outcome to the driver d from now, through the claim's process if it has one.
func (c *claim) deliver(d time.Duration, label string, a election.Action, o election.Outcome, done func(election.Outcome)) {
	s := c.nd.s
	run := func() {
		if o.Kind != election.Unanswered {
			c.contact = s.now
		}
		if o.Kind == election.Found && bytes.Equal(o.Value, c.value) && a.Kind == election.Read {
			s.probe(ProbeLeadReadBack)
		}
		done(o)
	}
	if p := c.proc; p != nil {
		p.after(d, label, run)
		return
	}
	s.after(d, label, run)
}

// check is the last leader's /readyz, if its process is there to answer.
func (c *claim) check(value []byte, done func(election.Outcome)) {
	s := c.nd.s
	o := election.Outcome{Kind: election.NotLeading}
	for _, other := range s.nodes {
		if p, oc := other.proc, other.claim; p != nil && oc != nil && oc.proc == p && bytes.Equal(oc.value, value) && p.up && !p.frozen && oc.d.Healthy() {
			o = election.Outcome{Kind: election.Leads}
		}
	}
	s.after(time.Duration(1+s.network.IntN(5))*time.Millisecond, "election: "+c.nd.name+" asked the last leader", func() { done(o) })
}

func (c *claim) won(rev uint64) {
	s := c.nd.s
	c.contact = s.now
	s.record(fmt.Sprintf("election: %s won the key (revision %d)", c.nd.name, rev))
	s.takeOver(c)
}

// deposed stops the claim's process, once the oracle agrees that the driver had reason to.
func (c *claim) deposed(reason string, last election.Outcome) {
	s, nd := c.nd.s, c.nd
	switch reason {
	case election.ReasonTaken:
		if last.Kind != election.Found || bytes.Equal(last.Value, c.value) {
			s.fail("lead_kept", "%s gave up the lead (%s) though the bucket did not say another server holds it (it answered %d)", nd.name, reason, last.Kind)
			return
		}
	case election.ReasonCutOff:
		if s.now.Sub(c.contact) <= simTTL {
			s.fail("lead_kept", "%s gave up the lead (%s) though NATS answered it %s ago (it answered %d)", nd.name, reason, s.now.Sub(c.contact), last.Kind)
			return
		}
	case election.ReasonFenced:
		return // its log failed: drainDone stops the process
	}
	if p := c.proc; p != nil {
		p.stop("it no longer leads: " + reason)
		return
	}
	if nd.claim == c { // deposed while catching up: it stands by again
		s.record(fmt.Sprintf("%s no longer leads (%s) before it took over", nd.name, reason))
		nd.standBy()
	}
}

// takeOver starts the process of a node whose claim won the key: its open catches the node's
// copy up with the stream and fences it. The process before it, if it still runs (paused, cut
// off), goes on until it notices.
func (s *Sim) takeOver(c *claim) {
	nd := c.nd
	if nd.claim != c || c.closed {
		return // deposed meanwhile
	}
	if s.nats.proposed > 0 {
		// Publishes the stream took are being stored: catching up takes a moment.
		s.after(time.Millisecond, "election: "+nd.name+" catches up", func() { s.takeOver(c) })
		return
	}
	p := &server{s: s, node: nd, mem: nd.mem, epoch: s.newEpoch()}
	nd.proc = p
	p.start()
	if !p.up {
		nd.proc = nil // it did not open; its key expires, and a node tries again
		nd.standBy()
		return
	}
	c.proc = p
	old := s.srv
	s.srv = p
	if old != nil && old != p {
		s.probe(ProbeTakeover)
		if old.up {
			s.record(fmt.Sprintf("%s leads; %s still runs, not knowing", nd.name, old.node.name))
		}
	}
	for _, w := range s.workers {
		w.serverCrashed() // their connections were to the old leader; they find the new one
	}
}

// cut reports whether the process is cut off from NATS now.
func (v *server) cut() bool { return v.s.now.Before(v.cutUntil) }

// sendPublish sends a publish over the network to the stream: held while the process is cut
// off from NATS (and sent when the cut heals: a late delivery), lost now and then, and taken
// by the stream's rule as it arrives. The answer comes back unless it is lost, or the process
// is cut off when it would arrive; then the publisher hears nothing until its timeout.
func (v *server) sendPublish(l *link, c linkCall) {
	s := v.s
	h := c.h
	// The publisher's timeout: no answer, and the log reads the message back.
	v.after(publishTimeout, "publish timeout", func() {
		l.resolve(h, 0, errUnanswered)
		l.pump()
	})
	send := func() {
		if s.strikes(FaultLeader, 0.02) {
			s.record("a publish was lost on the way")
			return
		}
		d := time.Duration(200+s.network.IntN(2800)) * time.Microsecond
		if s.strikes(FaultDelay, 0.03) {
			d += time.Duration(s.faultRand[FaultDelay].IntN(2000)) * time.Millisecond
		}
		s.after(d, "publish arrives", func() { s.nats.arrive(v, l, c) })
	}
	// The client writes it out a moment later (nats.go flushes its buffer from a goroutine of
	// its own): a process paused meanwhile sends it only when it goes on, late.
	v.after(time.Duration(s.network.IntN(2000))*time.Microsecond, "publish flushed", func() {
		if v.cut() {
			v.cutQueue = append(v.cutQueue, send)
			return
		}
		send()
	})
}

// arrive is a publish reaching the stream's leader.
func (n *natsModel) arrive(from *server, l *link, c linkCall) {
	s := n.s
	if s.now.Before(n.streamDown) {
		return // no raft leader: no answer
	}
	if !from.isLeader() {
		s.probe(ProbeDeposedPublishArrived)
	}
	answer := func(seq uint64, err error) {
		if s.strikes(FaultLeader, 0.03) {
			s.probe(ProbeLostAnswer)
			s.record("a publish's answer was lost")
			return
		}
		d := time.Duration(200+s.network.IntN(1800)) * time.Microsecond
		from.after(d, "publish answer", func() {
			if from.cut() {
				return
			}
			if err != nil && errors.Is(err, eventlog.ErrFenced) && !from.isLeader() {
				s.probe(ProbeDeposedAppendRefused)
			}
			l.resolve(c.h, seq, err)
			l.pump()
		})
	}
	if err := n.propose(c.after); err != nil {
		answer(0, err)
		return
	}
	s.after(time.Duration(100+s.network.IntN(900))*time.Microsecond, "stream stores", func() {
		n.proposed--
		answer(n.store(c.payload, from), nil)
	})
}

// isLeader reports whether the process is the one the simulator's clients talk to.
func (v *server) isLeader() bool { return v.s.srv == v }

// kvRequest sends an action to the bucket over the network: it may be lost on the way or its
// answer on the way back (the requester then hears nothing: Unanswered after its timeout), and
// while the bucket elects a leader it answers nothing. cut says the requester is cut off from
// NATS.
func (s *Sim) kvRequest(who string, a election.Action, value []byte, cut bool, done func(election.Outcome)) {
	n := s.nats
	timeout := max(simTTL/4, 100*time.Millisecond)
	answered := false
	answer := func(o election.Outcome) {
		if !answered {
			answered = true
			done(o)
		}
	}
	s.after(timeout, "election: "+who+" timeout", func() { answer(election.Outcome{Kind: election.Unanswered}) })
	if cut || s.strikes(FaultLeader, 0.05) {
		s.record("election: " + who + "'s request lost")
		return
	}
	s.after(time.Duration(200+s.network.IntN(1800))*time.Microsecond, "election: "+who+" request arrives", func() {
		if s.now.Before(n.kvDown) {
			return // no raft leader: no answer
		}
		o := n.kvDo(a, value)
		if s.strikes(FaultLeader, 0.1) {
			s.probe(ProbeLostAnswer)
			s.record(fmt.Sprintf("election: the answer to %s's %d was lost", who, a.Kind))
			return
		}
		s.after(time.Duration(200+s.network.IntN(1800))*time.Microsecond, "election: "+who+" answer", func() { answer(o) })
	})
}

// setupCluster makes the three nodes of a replicated log; the first campaigns at once and leads
// before the others stand by.
func (s *Sim) setupCluster() {
	s.nats = newNATS(s)
	for _, name := range []string{"a", "b", "c"} {
		s.nodes = append(s.nodes, &node{s: s, name: name, mem: vfs.NewCrashableMem()})
	}
	s.nodes[0].newClaim().start()
	for s.srv == nil && s.violation == nil && s.step() {
	}
	for _, nd := range s.nodes[1:] {
		nd.standBy()
	}
}

// leaderFault strikes the replicated log's leader or NATS (FaultLeader).
func (s *Sim) leaderFault() {
	r := s.faultRand[FaultLeader]
	n, v := s.nats, s.srv
	switch k := r.IntN(10); {
	case k < 4:
		d := simTTL/2 + time.Duration(r.Int64N(int64(3*simTTL-simTTL/2)))
		if v.freeze(d, r, "paused") {
			s.probe(ProbeLeaderPaused)
		}
	case k < 8:
		if !v.up {
			return
		}
		d := time.Duration(200+r.IntN(4800)) * time.Millisecond
		v.cutUntil = s.now.Add(d)
		s.record(fmt.Sprintf("%s cut off from NATS for %s", v.node.name, d))
		s.after(d, "cut heals", v.healCut)
	case k < 9:
		d := time.Duration(1000+r.IntN(7000)) * time.Millisecond
		n.kvDown = s.now.Add(d)
		s.record(fmt.Sprintf("the election's bucket elects a raft leader for %s", d))
	default:
		d := time.Duration(1000+r.IntN(7000)) * time.Millisecond
		n.streamDown = s.now.Add(d)
		s.record(fmt.Sprintf("the stream elects a raft leader for %s", d))
	}
}

// healCut sends what a process cut off from NATS held, once the cut has healed.
func (v *server) healCut() {
	if v.cut() {
		return // cut again meanwhile
	}
	q := v.cutQueue
	v.cutQueue = nil
	for _, send := range q {
		send()
	}
}

// readyNow reports whether the process answers /readyz that it leads: it runs, and its
// claim's driver says it may (election.Driver.Healthy), as the server's /readyz asks.
func (v *server) readyNow() bool {
	c := v.node.claim
	return v.up && !v.frozen && c != nil && c.proc == v && c.d != nil && c.d.Healthy()
}

// checkReadyAlone: a process that another took over from while it was paused never says it
// leads, once it goes on, while the one that took over says so ("ready_alone"): clients and
// standbys asking both would be told two leaders. (One cut off from NATS for less than a TTL
// may, until its next renewal: see election.Holder's unsure.)
func (s *Sim) checkReadyAlone() {
	if s.srv == nil || !s.srv.readyNow() {
		return
	}
	for _, nd := range s.nodes {
		if p := nd.proc; p != nil && p != s.srv && p.overtaken && p.readyNow() {
			s.fail("ready_alone", "%s says it leads beside %s, which took over while it was paused", nd.name, s.srv.node.name)
			return
		}
	}
}

// healCluster ends the leader faults: paused processes go on, cuts heal, NATS answers.
func (s *Sim) healCluster() {
	s.nats.kvDown, s.nats.streamDown = s.now, s.now
	for _, nd := range s.nodes {
		nd.downUntil = s.now
		if p := nd.proc; p != nil && p.up {
			p.cutUntil = s.now
			p.healCut()
			p.resume()
		}
	}
}

// restartLeader stops the leader and starts its node again at once, as the final check's
// restart: its key resigned, the node takes it back. The other nodes stand by no more.
func (s *Sim) restartLeader() {
	v := s.srv
	for _, nd := range s.nodes {
		if nd != v.node {
			nd.claim.close()
		}
	}
	v.stop("final check")
	s.nats.kv.value = nil // resigned
	for s.srv == v && s.violation == nil && s.step() {
	}
}
