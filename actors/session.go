package actors

import (
	"time"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Liveness of a session.
const (
	// HeartbeatInterval is how often a worker heartbeats while it holds no lease with a
	// lease_ttl shorter than three intervals (HeartbeatIntervalFor).
	HeartbeatInterval = 10 * time.Second
	// HeartbeatMissesMax heartbeats may be missed before the session ends; its leases then run
	// out on their own schedule, so a worker that reconnects in time keeps its jobs.
	HeartbeatMissesMax = 3
)

// HeartbeatIntervalFor is how often a worker must heartbeat a lease of the given lease_ttl: a
// third of it, so that two heartbeats in a row may be late or lost before the lease runs out,
// and never less often than HeartbeatInterval.
func HeartbeatIntervalFor(leaseTTL time.Duration) time.Duration {
	if mutantHeartbeatFixed {
		return HeartbeatInterval
	}
	return min(HeartbeatInterval, max(leaseTTL/3, time.Second))
}

// Session is the behaviour of one connected worker: it delivers assignments and cancel notices
// to the worker's connection (the sink), answers heartbeats and ends the session when they stop
// or the worker is revoked. The worker's credit goes to the dispatcher (SessionCredit), which
// keeps it.
//
// Capacity is an offer that holds only while someone is there to take it. A WebSocket
// session offers from open to end; a long-poll session only while a poll waits: from Offer to
// Withdraw, and then until every lease the dispatcher made on that credit has arrived, so that a
// poll ending just as its jobs are leased still takes them. An assignment that reaches the
// session while it offers nothing went nowhere, so the session hands it back at once
// (Undelivered), and the job is queued again with no attempt spent.
//
// A worker that reconnects keeps its leases: the new session adopts them, and the dispatcher
// counts them against the new session's capacity.
type Session struct {
	id        string
	workerID  string
	sink      Ref
	transport string
	open      bool
	closed    bool
	// offering is set while assignments can reach the worker: a WebSocket session's whole
	// life, a long-poll session's polls. withdrawing is set from a long poll's Withdraw until
	// the dispatcher has seen every lease the offer brought arrive here (offerClosed): those
	// still go to the poll.
	offering, withdrawing bool
	lastSeen              time.Time
	timer                 TimerID
	pipe                  pipeline
}

// NewSession returns the behaviour of session id, whose frames go to sink.
func NewSession(id string, sink Ref) *Session {
	return &Session{id: id, sink: sink}
}

type livenessCheck struct{}

type (
	sessionOpenDone struct {
		reply Ref
		note  sessionStarted
	}
	sessionEndDone struct{ reason string }
)

// Recover implements Behaviour. A session's state is its connection; a session actor that
// restarts cannot know what the worker holds, so it ends the session and the worker reconnects.
func (s *Session) Recover(env Env) {
	s.pipe = pipeline{}
	var seq uint64
	env.Read(func(set *projections.Set) {
		seq = set.Seq()
		for _, w := range set.OpenSessions() {
			if w.Session.ID == s.id {
				s.workerID = w.ID
			}
		}
	})
	if s.workerID != "" {
		s.end(env, eventlog.EndedClosed)
		return
	}
	// Either a new session, or one whose end is durable but whose notice a crash may have lost;
	// for the dispatcher, forgetting a session it does not know is nothing.
	env.Send(DispatcherRef(), sessionEnded{SessionID: s.id, Seq: seq})
}

// Receive implements Behaviour.
func (s *Session) Receive(env Env, msg any) {
	switch m := msg.(type) {
	case OpenSession:
		s.openSession(env, m)
	case Heartbeat:
		s.heartbeat(env, m)
	case Assignment:
		s.assignment(env, msg)
	case CancelNotice:
		s.cancelNotice(env, msg)
	case Offer:
		s.offer(env, m)
	case Withdraw:
		s.withdraw(env)
	case offerClosed:
		s.closeOffer(env)
	case livenessCheck:
		s.checkLiveness(env)
	case CloseSession:
		s.close(env, m.Reason)
	case revokeSession:
		s.close(env, eventlog.EndedRevoked)
	case *Persisted:
		s.persisted(env, *m)
	}
}

// assignment delivers an assignment to the worker if someone is there to take it, else hands it
// back. msg is the Assignment, boxed already.
func (s *Session) assignment(env Env, msg any) {
	if s.open && s.offering {
		env.Send(s.sink, msg)
	} else {
		to, notice, _ := Bounce(msg)
		env.Send(to, notice)
	}
	if a := msg.(Assignment); s.transport == TransportLongPoll {
		env.Send(DispatcherRef(), assignmentArrived{SessionID: s.id, JobID: a.JobID, LeaseID: a.LeaseID})
	}
}

// cancelNotice passes a CancelNotice (msg, boxed already) to the worker.
func (s *Session) cancelNotice(env Env, msg any) {
	if s.open {
		env.Send(s.sink, msg)
	}
}

func (s *Session) withdraw(env Env) {
	if s.open && s.offering && s.transport == TransportLongPoll && !s.withdrawing {
		s.withdrawing = true
		env.Send(DispatcherRef(), withdrawCredit{SessionID: s.id})
		return
	}
	if !s.withdrawing {
		env.Send(s.sink, OfferEnded{}) // nothing was offered
	}
}

func (s *Session) closeOffer(env Env) {
	if s.withdrawing {
		s.withdrawing, s.offering, s.lastSeen = false, mutantCreditOutlivesPoll, env.Now()
		env.Send(s.sink, OfferEnded{})
	}
}

func (s *Session) checkLiveness(env Env) {
	if !s.open {
		return
	}
	if s.transport == TransportLongPoll && (s.offering || s.withdrawing) {
		s.lastSeen = env.Now() // a poll that waits is a worker that is there
	}
	// A server that stalled heard nothing meanwhile, though the worker may have spoken: the
	// misses count from the end of the stall.
	seen := s.lastSeen
	if r := env.Resumed(); r.After(seen) {
		seen = r
	}
	deadline := seen.Add(HeartbeatInterval * HeartbeatMissesMax)
	if now := env.Now(); now.Before(deadline) {
		s.timer = env.After(min(deadline.Sub(now), HeartbeatInterval), livenessCheck{})
		return
	}
	s.end(env, eventlog.EndedHeartbeatTimeout)
}

// close ends an open session for reason.
func (s *Session) close(env Env, reason string) {
	if s.open {
		s.end(env, reason)
	}
}

func (s *Session) openSession(env Env, m OpenSession) {
	if s.open || s.closed {
		env.Send(env.Sender(), SessionOpened{Err: reject(CodeSessionClosed, "session %s was already opened", s.id)})
		return
	}
	var w projections.Worker
	var ok bool
	env.Read(func(set *projections.Set) { w, ok = set.Worker(m.WorkerID) })
	now := env.Now()
	switch {
	case !ok:
		env.Send(env.Sender(), SessionOpened{Err: reject(CodeWorkerNotFound, "no worker %q", clip(m.WorkerID))})
		s.closed = true
		env.Stop(SessionRef(s.id))
		return
	case w.Revoked || !now.Before(w.ExpiresAt):
		env.Send(env.Sender(), SessionOpened{Err: reject(CodeWorkerRevoked, "worker %s is revoked or its token expired", w.ID)})
		s.closed = true
		env.Stop(SessionRef(s.id))
		return
	}
	if w.Session != nil { // an older connection of the same worker; this one replaces it
		env.Send(SessionRef(w.Session.ID), CloseSession{Reason: eventlog.EndedClosed})
	}
	capacity := w.Capacity
	if m.Capacity > 0 {
		capacity = min(m.Capacity, w.Capacity)
	}
	transport := m.Transport
	if transport != TransportLongPoll {
		transport = TransportWebSocket
	}
	s.workerID, s.open, s.lastSeen, s.transport = w.ID, true, now, transport
	s.offering = transport == TransportWebSocket
	s.timer = env.After(HeartbeatInterval, livenessCheck{})
	s.pipe.persist(env, []eventlog.Payload{eventlog.WorkerSessionStarted{WorkerID: w.ID, SessionID: s.id, Transport: transport, Capacity: capacity}},
		sessionOpenDone{reply: env.Sender(), note: sessionStarted{SessionID: s.id, WorkerID: w.ID, Tenant: w.Tenant, Queues: w.Queues, Capacity: capacity,
			Polled: transport == TransportLongPoll}})
}

// offer passes a long poll's credit to the dispatcher; an assignment it brings comes back here
// while the offer lasts, and goes to the poll.
func (s *Session) offer(env Env, m Offer) {
	switch {
	case !s.open:
		env.Send(env.Sender(), OfferAck{Err: reject(CodeSessionClosed, "session %s is closed", s.id)})
		return
	case s.transport != TransportLongPoll:
		env.Send(env.Sender(), OfferAck{Err: reject(CodeInvalidArgument, "a WebSocket session takes credit frames, not offers")})
		return
	case m.N < 1 || m.N > CapacityMax:
		env.Send(env.Sender(), OfferAck{Err: reject(CodeInvalidArgument, "an offer is of 1..%d jobs", CapacityMax)})
		return
	}
	s.offering, s.lastSeen = true, env.Now()
	env.Send(DispatcherRef(), SessionCredit{SessionID: s.id, N: m.N})
	env.Send(env.Sender(), OfferAck{})
}

func (s *Session) heartbeat(env Env, m Heartbeat) {
	if !s.open {
		env.Send(env.Sender(), HeartbeatAck{Err: reject(CodeSessionClosed, "session %s is closed", s.id)})
		return
	}
	s.lastSeen = env.Now()
	var ack HeartbeatAck
	current := heard{WorkerID: s.workerID}
	env.Read(func(set *projections.Set) {
		for _, id := range m.Leases[:min(len(m.Leases), CapacityMax)] {
			// Any current lease of this worker's counts: a new session adopts the leases its
			// worker held on an earlier connection.
			j := set.LeasedJob(id)
			if j == nil || j.Lease.WorkerID != s.workerID {
				ack.Unknown = append(ack.Unknown, id)
				continue
			}
			if j.CancelRequested {
				ack.CancelRequested = append(ack.CancelRequested, id)
			}
			current.Leases = append(current.Leases, extend{WorkerID: s.workerID, JobID: j.ID, LeaseID: id})
		}
	})
	env.Send(DispatcherRef(), current)
	env.Send(env.Sender(), ack)
}

func (s *Session) end(env Env, reason string) {
	s.open, s.closed, s.offering, s.withdrawing = false, true, false, false
	env.Cancel(s.timer)
	s.pipe.persist(env, []eventlog.Payload{eventlog.WorkerSessionEnded{WorkerID: s.workerID, SessionID: s.id, Reason: reason}}, sessionEndDone{reason})
}

func (s *Session) persisted(env Env, m Persisted) {
	defer s.pipe.settled()
	switch t := m.Then.(type) {
	case sessionOpenDone:
		if m.Err != nil {
			env.Send(t.reply, SessionOpened{Err: unavailable(m.Err)})
			return
		}
		t.note.Seq = m.Receipt.Last
		env.Send(DispatcherRef(), t.note)
		env.Send(t.reply, SessionOpened{HeartbeatInterval: HeartbeatInterval, LeaseTTL: DefaultLeaseTTL, Receipt: receiptOf(m.Receipt)})
	case sessionEndDone:
		env.Send(DispatcherRef(), sessionEnded{SessionID: s.id, Seq: m.Receipt.Last})
		env.Send(s.sink, SessionEnded{Reason: t.reason})
		env.Stop(SessionRef(s.id))
	}
}
