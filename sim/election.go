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
// raft leader lost), and servers that run package election's decisions, as the real ones do:
// the leader's Holder renews, each standby's Candidate watches the key and, before taking a
// free one, asks the last leader whether it still leads.

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
	// candidate its part while it stands by.
	mem       *vfs.MemFS
	proc      *server
	candidate *election.Candidate
	claims    int
	// downUntil: the node is away (crashed) until then.
	downUntil time.Time
	busy      bool // a candidate's round is in flight
}

// standBy makes the node a standby with a claim of its own.
func (nd *node) standBy() {
	nd.claims++
	nd.value = fmt.Appendf(nil, `{"node":%q,"id":%d}`, nd.name, nd.claims)
	nd.candidate = election.NewCandidate(nd.value)
}

// takeOver starts the process of a node that won the key at revision rev: its open catches the
// node's copy up with the stream and fences it. The process before it, if it still runs (paused,
// cut off), goes on until it notices.
func (s *Sim) takeOver(nd *node, rev uint64) {
	if s.nats.proposed > 0 {
		// Publishes the stream took are being stored: catching up takes a moment.
		s.after(time.Millisecond, "election: "+nd.name+" catches up", func() { s.takeOver(nd, rev) })
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
	p.holder = election.NewHolder(s.now, simTTL, nd.value, rev)
	p.renewals()
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

// renewals runs the leader's part in the election every Every, on the true clock (a process
// measures its TTL with a monotonic clock, which the server clock's jumps do not move).
func (v *server) renewals() {
	v.after(v.holder.Every(), "election: renew", func() {
		if !v.electing {
			v.electing = true
			v.electionStep(v.holder.Tick(v.s.now), election.Outcome{})
		}
		v.renewals()
	})
}

// electionStep carries out the Holder's action; last is the outcome that led to it.
func (v *server) electionStep(a election.Action, last election.Outcome) {
	s := v.s
	switch a.Kind {
	case election.None:
		v.electing = false
	case election.Stop:
		v.electing = false
		if a.Reason == election.ReasonTaken && (last.Kind != election.Found || bytes.Equal(last.Value, v.node.value)) {
			s.fail("lead_kept", "%s gave up the lead (%s) though the bucket did not say another server holds it (it answered %d)", v.node.name, a.Reason, last.Kind)
			return
		}
		v.stop("it no longer leads: " + a.Reason)
	case election.Probe:
		o := election.Outcome{Kind: election.Unanswered}
		if !v.cut() {
			o = election.Outcome{Kind: election.Answered, At: v.lastAck} // as jetstream.Election does
		}
		v.after(time.Duration(1+s.network.IntN(3))*time.Millisecond, "election: probe answered", func() {
			v.electionStep(v.holder.Done(s.now, o), o)
		})
	default:
		s.kvRequest(v.node.name, a, v.node.value, v.cut(), func(o election.Outcome) {
			v.after(0, "election: answer", func() {
				if o.Kind == election.Found && bytes.Equal(o.Value, v.node.value) && a.Kind == election.Read {
					s.probe(ProbeLeadReadBack)
				}
				v.electionStep(v.holder.Done(s.now, o), o)
			})
		})
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

// campaign runs one round of a standby's part, on the virtual clock: each action's request and
// answer cross the network, and the bucket applies it as it arrives.
func (nd *node) campaign() {
	s := nd.s
	if nd.busy || nd.proc != nil || s.now.Before(nd.downUntil) || s.phase == phaseSetup {
		return
	}
	nd.busy = true
	nd.step(nd.candidate.Tick())
}

func (nd *node) step(a election.Action) {
	s := nd.s
	switch a.Kind {
	case election.None:
		nd.busy = false
		return
	case election.Lead:
		nd.busy = false
		s.record(fmt.Sprintf("election: %s won the key (revision %d)", nd.name, a.Rev))
		s.takeOver(nd, a.Rev)
		return
	case election.Check:
		// The last leader's /readyz, if its process is there to answer.
		o := election.Outcome{Kind: election.NotLeading}
		for _, other := range s.nodes {
			if p := other.proc; p != nil && bytes.Equal(other.value, a.Value) && p.up && !p.frozen && p.holder != nil && p.holder.Healthy(s.serverNow()) {
				o = election.Outcome{Kind: election.Leads}
			}
		}
		s.after(time.Duration(1+s.network.IntN(5))*time.Millisecond, "election: "+nd.name+" asked the last leader", func() {
			nd.step(nd.candidate.Done(o))
		})
		return
	}
	s.kvRequest(nd.name, a, nd.value, false, func(o election.Outcome) { nd.step(nd.candidate.Done(o)) })
}

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

// setupCluster makes the three nodes of a replicated log, and the first leads.
func (s *Sim) setupCluster() {
	s.nats = newNATS(s)
	for _, name := range []string{"a", "b", "c"} {
		nd := &node{s: s, name: name, mem: vfs.NewCrashableMem()}
		nd.standBy()
		s.nodes = append(s.nodes, nd)
	}
	first := s.nodes[0]
	s.takeOver(first, s.nats.kvDo(election.Action{Kind: election.Create}, first.value).Rev)
	var tick func()
	tick = func() {
		s.after(election.Every, "election: standbys look at the key", func() {
			for _, nd := range s.nodes {
				nd.campaign()
			}
			tick()
		})
	}
	tick()
}

// leaderFault strikes the replicated log's leader or NATS (FaultLeader).
func (s *Sim) leaderFault() {
	r := s.faultRand[FaultLeader]
	n, v := s.nats, s.srv
	switch k := r.IntN(10); {
	case k < 4:
		if !v.up || v.frozen {
			return
		}
		d := simTTL/2 + time.Duration(r.Int64N(int64(3*simTTL-simTTL/2)))
		v.frozen = true
		s.probe(ProbeLeaderPaused)
		s.record(fmt.Sprintf("%s paused for %s", v.node.name, d))
		s.after(d, "pause ends", v.resume)
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

// resume lets a paused process go on with everything that came due while it was paused.
func (v *server) resume() {
	if !v.up || !v.frozen {
		return
	}
	v.frozen = false
	v.s.record(fmt.Sprintf("%s goes on after its pause", v.node.name))
	for _, it := range v.deferred {
		v.s.agenda.Again(it, v.s.now)
	}
	v.deferred = nil
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
// restart: its key resigned, the node takes it back.
func (s *Sim) restartLeader() {
	v := s.srv
	nd := v.node
	v.stop("final check")
	s.nats.kv.value = nil // resigned
	s.takeOver(nd, s.nats.kvDo(election.Action{Kind: election.Create}, nd.value).Rev)
}
