package sim

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/signing"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/transport/client/policy"
	"github.com/tetherhq/tether/transport/longpoll"
	"github.com/tetherhq/tether/transport/protocol"
	"github.com/tetherhq/tether/transport/wire"
)

// worker is a remote worker speaking the worker protocol: every frame it sends or gets goes
// through the real JSON encoding of wire.Frame, and the server side turns frames into commands
// with the same code as the WebSocket and long-poll handlers (transport/protocol).
type worker struct {
	s            *Sim
	name, tenant string
	id           string
	queues       []string
	capacity     int
	key          ed25519.PrivateKey // nil: the worker signs nothing

	conn       *wconn
	connecting bool
	// dialing is the session the worker's connect in progress asks for: the answer to an
	// earlier one (a connect the worker gave up, or made before it crashed) is not its own.
	dialing    string
	transport  string
	crashed    bool
	pausedTill time.Time
	// stopping is set from a clean stop until the worker starts again: it grants no credit,
	// polls no more, and gives back every job it holds or is handed.
	stopping bool
	leases   map[string]*held // by lease id
	ended    []*held          // leases that ended without its completion, for stale replays
	nonces   []string
	acks     map[string]func(wire.Frame)
	nSession int
	nRef     int
	// polling is set while a long poll of the worker's waits; pollID names it.
	polling bool
	pollID  int
	// hbGen names the heartbeat schedule in force; a lease that needs heartbeats more often
	// starts a new one.
	hbGen  int
	hbNext time.Time
	// token is (the hash of) the worker token it holds; renewing is set while a renewal waits,
	// and renewals counts them, so that only the last one's answer is taken.
	token    string
	renewing bool
	renewals int
}

type wconn struct {
	session   string
	transport string
	epoch     int
	since     time.Time // when the connection was up
	closing   bool      // the worker closed it and waits for the server's end
}

type held struct {
	jobID, leaseID, nonce string
	attempt               int
	heartbeat             time.Duration
	completing            bool
	// cancelHeard is set once the server told the worker the job's cancel was asked for.
	cancelHeard bool
	// leaseTTL and heard say how long the lease may be valid (policy.MayBeValid): heard is when
	// the server last confirmed it. sends is what the worker knows of its result's sends.
	leaseTTL time.Duration
	heard    time.Time
	sends    policy.Sends
	// misbehaviour is the report the server must refuse that a misbehaving worker sends
	// before each send of its honest one (misbehave), if it misbehaves on this lease.
	misbehaviour func()
}

func (w *worker) alive() bool { return !w.crashed && !w.s.now.Before(w.pausedTill) }

// encode and decode are the worker protocol's codec: flat JSON objects of wire.Frame.
func encode(f wire.Frame) []byte {
	b, err := json.Marshal(f)
	if err != nil {
		panic(err)
	}
	return b
}

func decode(b []byte) wire.Frame {
	var f wire.Frame
	if err := json.Unmarshal(b, &f); err != nil {
		panic(fmt.Sprintf("sim: a frame does not decode: %v", err))
	}
	return f
}

func (w *worker) connect() {
	s := w.s
	if w.connecting || w.conn != nil || !w.alive() || w.stopping || s.phase == phaseSetup {
		return
	}
	w.connecting = true
	w.nSession++
	session := fmt.Sprintf("%s-s%d", w.name, w.nSession)
	w.dialing = session
	if w.transport == "" || s.workload.IntN(3) == 0 {
		// A reconnect may come over the other transport (WebSocket blocked, say).
		w.transport = []string{"websocket", "longpoll"}[s.workload.IntN(2)]
	}
	open := actors.OpenSession{WorkerID: w.id, Transport: w.transport, Capacity: w.capacity}
	transport := w.transport
	s.call(w.name, "connect "+session, func(v *server) actors.Ref {
		sink := v.listen("sink/"+session, false, func(msg any) {
			if transport == actors.TransportLongPoll {
				v.pollSink(w, session, msg)
				return
			}
			w.fromServer(v, session, msg)
		})
		v.spawnSession(session, sink)
		return actors.SessionRef(session)
	}, open, func(reply any) {
		if w.dialing != session {
			return
		}
		w.connecting = false
		r := reply.(actors.SessionOpened)
		if r.Err != nil || !w.alive() || w.stopping {
			s.after(time.Second, w.name+" reconnects", w.connect)
			return
		}
		w.conn = &wconn{session: session, transport: transport, epoch: s.srv.epoch, since: s.now}
		w.credit()
		w.beat() // at once, as the Go SDK does on a new connection: the new session adopts what it names
	}, func() {
		if w.dialing != session {
			return
		}
		w.connecting = false
		s.after(time.Second, w.name+" reconnects", w.connect)
	})
}

// disconnect forgets the connection and dials again soon.
func (w *worker) disconnect(why string) {
	if w.conn == nil {
		return
	}
	w.s.record(w.name + " disconnected: " + why)
	w.conn, w.polling = nil, false
	if w.stopping {
		w.restartLater()
		return
	}
	w.s.after(time.Duration(100+w.s.workload.IntN(900))*time.Millisecond, w.name+" reconnects", w.connect)
}

// serverCrashed: the connection breaks, and the worker hears of it unless it is cut off.
func (w *worker) serverCrashed() {
	if c := w.conn; c != nil {
		w.s.transmit(w.name, "connection reset", func() {
			if w.conn == c {
				w.disconnect("connection reset")
			}
		})
	}
}

// fromServer carries a frame from the worker's session to the worker.
func (w *worker) fromServer(v *server, session string, msg any) {
	s, epoch := w.s, v.epoch
	var f wire.Frame
	switch m := msg.(type) {
	case actors.Assignment:
		if !leaseOK(v.set, m) { // the sender's: a deposed leader's may not be the leader's
			s.fail("durability", "job %s's lease %s was sent to %s before it was durable", m.JobID, m.LeaseID, w.name)
			return
		}
		f = protocol.AssignFrame(m)
	case actors.CancelNotice:
		f = protocol.CancelFrame(m)
	case actors.SessionEnded:
		w.sessionEnded(session, m.Reason)
		return
	default:
		return
	}
	data := encode(f)
	s.transmit(w.name, f.Type, func() {
		if w.conn == nil || w.conn.session != session || w.conn.epoch != epoch || !w.alive() {
			return // the connection it came on is gone
		}
		w.onFrame(decode(data))
	})
}

// sessionEnded carries the end of a session to the worker. A worker that closed it itself
// still reads what the server sent before the end: it lingers a little for frames that the
// network reordered, as a WebSocket's close handshake lets them all arrive.
func (w *worker) sessionEnded(session, reason string) {
	s := w.s
	s.transmit(w.name, "session ended", func() {
		if w.conn == nil || w.conn.session != session {
			return
		}
		if !w.conn.closing {
			w.disconnect("session ended: " + reason)
			return
		}
		c := w.conn
		s.after(closeLinger, w.name+" closed", func() {
			if w.conn == c {
				w.conn = nil
				w.restartLater()
			}
		})
	})
}

// closeLinger is how long a worker that closed its connection still takes frames from it once
// the server has ended it: more than the network's delays without faults.
const closeLinger = 20 * time.Millisecond

func (w *worker) onFrame(f wire.Frame) {
	s := w.s
	switch f.Type {
	case wire.FrameAssign:
		if w.leases[f.LeaseID] != nil || slices.ContainsFunc(w.ended, func(h *held) bool { return h.leaseID == f.LeaseID }) {
			return // a duplicate
		}
		s.received[f.LeaseID] = true
		h := &held{jobID: f.JobID, leaseID: f.LeaseID, nonce: f.Nonce, attempt: f.Attempt, heartbeat: time.Duration(f.HeartbeatSeconds * float64(time.Second)),
			leaseTTL: policy.LeaseTTL(f.LeaseExpiresAt, s.now), heard: s.now}
		w.leases[f.LeaseID] = h
		w.nonces = append(w.nonces, f.Nonce)
		if w.stopping { // handed a job as it stops: give it back untried
			w.release(h)
			return
		}
		if h.heartbeat > 0 && s.now.Add(h.heartbeat).Before(w.hbNext) {
			w.heartbeatIn(h.heartbeat) // it needs heartbeats sooner than the schedule gives them
		}
		w.work(h, time.Duration(50+s.workload.IntN(15_000))*time.Millisecond)
	case wire.FrameCancel:
		if h := w.leases[f.LeaseID]; h != nil {
			w.cancelled(h)
		}
	case wire.FrameAck:
		if h := w.acks[f.Ref]; h != nil {
			delete(w.acks, f.Ref)
			h(f)
		}
	}
}

// toServer sends a frame on the current connection; onAck gets the ack, if one comes.
func (w *worker) toServer(f wire.Frame, onAck func(wire.Frame)) {
	s := w.s
	c := w.conn
	if c == nil || !w.alive() {
		return
	}
	if onAck != nil {
		w.nRef++
		f.Ref = strconv.Itoa(w.nRef)
		w.acks[f.Ref] = onAck
	}
	data := encode(f)
	sent := s.now
	s.transmit(w.name, f.Type, func() {
		v := s.srv
		if !v.up || v.epoch != c.epoch {
			return // the connection died with the server
		}
		a := arrival{sent: sent, arrived: s.now}
		v.reach(func() {
			if v.up && v.epoch == c.epoch {
				v.onFrame(w, c.session, decode(data), a)
			}
		})
	})
}

// onFrame is the server's side of a worker's connection, as transport's handlers do it; a is
// when the frame was sent and reached the server.
func (v *server) onFrame(w *worker, session string, f wire.Frame, a arrival) {
	s := v.s
	send := func(a wire.Frame) {
		data := encode(a)
		epoch := v.epoch
		s.transmit(w.name, "ack", func() {
			if w.conn != nil && w.conn.session == session && w.conn.epoch == epoch && w.alive() {
				w.onFrame(decode(data))
			}
		})
	}
	switch f.Type {
	case wire.FrameCredit:
		v.send(actors.DispatcherRef(), actors.SessionCredit{SessionID: session, N: f.N}, actors.Ref{})
	case frameClose:
		// The worker closed its connection: a poll of it that waits has nobody to answer, and
		// the session ends.
		if p := v.polls[session]; p != nil {
			v.step(session, p, longpoll.ClientGone{})
		}
		v.send(actors.SessionRef(session), actors.CloseSession{Reason: eventlog.EndedClosed}, actors.Ref{})
	case wire.FrameHeartbeat:
		v.request(w.name, actors.SessionRef(session), actors.Heartbeat{Leases: f.Leases}, func(reply any) {
			r := reply.(actors.HeartbeatAck)
			if r.Err == nil {
				s.heartbeatTaken(v, w, f.Leases, a)
			}
			a := protocol.Ack(f.Ref, r.Err)
			a.Cancel, a.Unknown = r.CancelRequested, r.Unknown
			if rec, ok := v.set.Worker(w.id); ok && r.Err == nil {
				renewIn := max(rec.TokenRenewAt().Sub(s.serverNow()).Seconds(), 0)
				a.TokenRenewSeconds = &renewIn
			}
			send(a)
		})
	case wire.FrameRenew:
		// As transport's renew: the shell makes the new token, the tenant's actor decides.
		s.tokens++
		token := fmt.Sprintf("sim-%s-%d", w.name, s.tokens)
		v.request(w.name, actors.TenantRef(w.tenant), actors.RenewWorkerToken{Tenant: w.tenant, WorkerID: w.id, PresentedHash: f.WorkerToken,
			TokenHash: token, ExpiresAt: s.serverNow().Add(tokenTTL)}, func(reply any) {
			r := reply.(actors.Done)
			a := protocol.Ack(f.Ref, r.Err)
			if r.Err == nil {
				a.WorkerToken = token
			}
			send(a)
		})
	case wire.FrameEvent, wire.FrameComplete, wire.FrameFail, wire.FrameRelease:
		v.workerOp(w, f, send)
	}
}

// onFrameDirect is the server's side of a worker's operation on a job sent as a plain HTTP
// request (the long-poll endpoints): it needs no session.
func (v *server) onFrameDirect(w *worker, f wire.Frame, reply func(wire.Frame)) {
	switch f.Type {
	case wire.FrameEvent, wire.FrameComplete, wire.FrameFail, wire.FrameRelease:
		v.workerOp(w, f, reply)
	}
}

// workerOp turns an operation on a job into the broker's command, as the transport does, and
// gives reply the ack for its answer.
func (v *server) workerOp(w *worker, f wire.Frame, reply func(wire.Frame)) {
	s := v.s
	op, err := protocol.WorkerOp(w.id, f.JobID, f)
	if err != nil {
		reply(protocol.Ack(f.Ref, err.(*actors.Rejection)))
		return
	}
	v.request(w.name, toJob(f.JobID)(v), op, func(r any) {
		s.checkReply(v, w.name, op, r)
		switch r := r.(type) {
		case actors.ProgressAck:
			a := protocol.Ack(f.Ref, r.Err)
			a.Number = r.Number
			reply(a)
		case actors.Done:
			reply(protocol.Ack(f.Ref, r.Err))
		}
	})
}

// frameClose is the simulator's stand-in for a worker closing its WebSocket, or abandoning its
// long poll: the server ends the session.
const frameClose = "close"

// credit offers the worker's free slots: a credit frame over WebSocket, a poll over long-poll.
// A stopping worker offers nothing.
func (w *worker) credit() {
	if w.stopping || w.conn == nil || w.conn.closing {
		return
	}
	if w.conn.transport == actors.TransportLongPoll {
		w.poll()
		return
	}
	if free := w.capacity - len(w.leases); free > 0 {
		w.toServer(wire.Frame{Type: wire.FrameCredit, N: free}, nil)
	}
}

// poll asks for up to the worker's free slots and waits up to 25 s, as the long-poll
// transport does; the next poll follows the answer.
func (w *worker) poll() {
	s := w.s
	c := w.conn
	free := w.capacity - len(w.leases)
	if w.polling || free <= 0 || !w.alive() {
		return
	}
	w.polling = true
	w.pollID++
	id := w.pollID
	wait := time.Duration(s.workload.IntN(26)) * time.Second
	s.transmit(w.name, "poll", func() {
		v := s.srv
		v.reach(func() {
			if v.up && !v.recovering && v.epoch == c.epoch {
				v.onPoll(w, c, id, free, wait)
			}
		})
	})
	s.after(wait+requestTimeout, w.name+" poll timeout", func() {
		if w.polling && w.pollID == id && w.conn == c {
			w.polling = false
			w.poll()
		}
	})
}

// pollAnswered takes a poll's answer.
func (w *worker) pollAnswered(c *wconn, id int, assignments []wire.Frame) {
	if w.conn != c || w.pollID != id || !w.alive() {
		return // the poll it answers was given up; whatever it carried is lost
	}
	w.polling = false
	for _, f := range assignments {
		w.onFrame(f)
	}
	w.credit()
}

// heartbeatIn starts a heartbeat schedule whose first beat is d from now.
func (w *worker) heartbeatIn(d time.Duration) {
	w.hbGen++
	gen := w.hbGen
	w.hbNext = w.s.now.Add(d)
	w.s.after(d, w.name+" heartbeat", func() {
		if w.hbGen == gen {
			w.beat()
		}
	})
}

// heartbeatEvery is how often the worker's leases need heartbeats, by the Go SDK's rule: the
// shortest interval an assignment asked for (a third of its lease_ttl), and every
// HeartbeatInterval otherwise.
func (w *worker) heartbeatEvery() time.Duration {
	return policy.HeartbeatEvery(actors.HeartbeatInterval, func(yield func(time.Duration) bool) {
		for _, h := range w.leases {
			if !yield(h.heartbeat) {
				return
			}
		}
	})
}

// heartbeat starts the worker's heartbeats.
func (w *worker) heartbeat() { w.heartbeatIn(w.heartbeatEvery()) }

// beat lists the worker's leases, learns which to cancel or forget, and re-grants credit for
// free slots (credit lost on the way is not lost for good); then it schedules the next beat.
func (w *worker) beat() {
	s := w.s
	every := w.heartbeatEvery()
	w.heartbeatIn(every)
	func() {
		if w.conn == nil {
			w.connect()
			return
		}
		if !w.alive() || w.conn.closing {
			return
		}
		c := w.conn
		answered := false
		sent, leases := s.now, slices.Sorted(maps.Keys(w.leases))
		w.toServer(wire.Frame{Type: wire.FrameHeartbeat, Leases: leases}, func(a wire.Frame) {
			answered = true
			if a.Error != nil {
				w.disconnect("heartbeat refused: " + a.Error.Code)
				return
			}
			for _, id := range leases { // confirmed when it was sent, as the Go SDK reckons
				if h := w.leases[id]; h != nil && !slices.Contains(a.Unknown, id) {
					h.heard = sent
				}
			}
			for _, id := range a.Unknown {
				w.drop(id)
			}
			for _, id := range a.Cancel {
				if h := w.leases[id]; h != nil {
					w.cancelled(h)
				}
			}
			w.credit()
			w.checkToken()
			if a.TokenRenewSeconds != nil && (*a.TokenRenewSeconds <= 0 || s.renewals.IntN(8) == 0) {
				w.renew() // when told, and now and then too early, which is refused
			}
		})
		s.after(max(every, 2*time.Second), w.name+" heartbeat deadline", func() {
			if !answered && w.conn == c {
				w.disconnect("no heartbeat ack")
			}
		})
	}()
}

// tokenTTL is the life of the simulated workers' tokens. It outlives any run, since a session
// with an expired token is refused and the simulated worker does not register again; runs
// renew tokens early instead, which the server takes once a token is a minute old.
const tokenTTL = 365 * 24 * time.Hour

// goneTokenTTL is the token of each tenant's worker that registers and never connects.
const goneTokenTTL = 20 * time.Second

// renew renews the worker's token over its connection, as the Go client does when a heartbeat's
// answer says it is due.
func (w *worker) renew() {
	s := w.s
	if w.renewing {
		return
	}
	w.renewing = true
	w.renewals++
	c, n := w.conn, w.renewals
	w.toServer(wire.Frame{Type: wire.FrameRenew, WorkerToken: w.token}, func(a wire.Frame) {
		if n != w.renewals {
			return // a later renewal was asked with the token this one renewed: that one's answer counts
		}
		w.renewing = false
		switch {
		case a.Error == nil:
			w.token = a.WorkerToken
			s.probe(ProbeTokenRenewed)
		case a.Error.Code == string(actors.CodeTokenRenewedRecently), a.Error.Code == string(actors.CodeUnavailable):
		default:
			s.fail("token_renewal", "%s's renewal of its token was refused: %s %s", w.name, a.Error.Code, a.Error.Message)
		}
	})
	s.after(2*time.Second, w.name+" renewal deadline", func() {
		if w.conn == c {
			w.renewing = false // the answer was lost: ask again when next told
		}
	})
}

// checkToken checks that the server knows the token the worker holds, as its current or its
// previous one: a renewal the worker was answered is durable, crashes or not.
func (w *worker) checkToken() {
	rec, ok := w.s.srv.set.Worker(w.id)
	if ok && w.token != rec.TokenHash && w.token != rec.PreviousTokenHash {
		w.s.fail("token_kept", "%s holds token %s, which the server does not know (current %s, previous %s)", w.name, w.token, rec.TokenHash, rec.PreviousTokenHash)
	}
}

func (w *worker) drop(leaseID string) {
	if h := w.leases[leaseID]; h != nil {
		delete(w.leases, leaseID)
		if !h.completing {
			w.ended = append(w.ended, h)
		}
	}
}

// work runs the job for d, then reports: mostly a success, sometimes a failure.
func (w *worker) work(h *held, d time.Duration) {
	s := w.s
	if s.workload.IntN(3) == 0 {
		// Progress events numbered within the lease, as the Go client numbers them; some are
		// sent again later, as a worker that did not hear the answer does. The server must keep
		// each number once (the oracle's progress_once).
		n := 1 + s.workload.IntN(3)
		for i := 1; i <= n; i++ {
			at := d * time.Duration(i) / time.Duration(n+1)
			resend := s.workload.IntN(3) == 0
			f := wire.Frame{Type: wire.FrameEvent, JobID: h.jobID, LeaseID: h.leaseID, EventType: "progress",
				Data: json.RawMessage(fmt.Sprintf(`{"pct":%d}`, 100*i/(n+1))), Seq: i}
			send := func() {
				if w.leases[h.leaseID] == h && w.alive() {
					w.toServer(f, func(wire.Frame) {})
				}
			}
			s.after(at, w.name+" progress", send)
			if resend {
				s.after(at+d/time.Duration(2*(n+1)), w.name+" resends progress", send)
			}
		}
	}
	s.after(d, w.name+" finishes "+h.jobID, func() {
		if w.leases[h.leaseID] != h || w.crashed || w.stopping {
			return
		}
		if !w.alive() { // paused: it finishes when it wakes, its lease perhaps long gone
			w.work(h, w.pausedTill.Sub(s.now)+time.Millisecond)
			return
		}
		if s.strikes(FaultMisbehave, 0.8) {
			w.misbehave(h)
		}
		switch r := s.workload.IntN(20); {
		case r < 15:
			w.complete(h)
		case r < 19:
			w.fail(h, "boom", true)
		default:
			w.fail(h, "bad_input", false)
		}
	})
}

func (w *worker) output(h *held) (json.RawMessage, string) {
	out := json.RawMessage(fmt.Sprintf(`{"job":%q,"attempt":%d}`, h.jobID, h.attempt))
	hash, err := signing.OutputHash(out)
	if err != nil {
		panic(err)
	}
	return out, hash
}

func (w *worker) sign(jobID, leaseID, nonce, hash string) string {
	if w.key == nil {
		return ""
	}
	return signing.SignCompletion(w.key, jobID, leaseID, nonce, hash)
}

// complete reports success.
func (w *worker) complete(h *held) {
	out, hash := w.output(h)
	h.completing = true
	w.report(h, wire.Frame{Type: wire.FrameComplete, JobID: h.jobID, LeaseID: h.leaseID, Nonce: h.nonce, Output: out,
		OutputHash: hash, Signature: w.sign(h.jobID, h.leaseID, h.nonce, hash)})
}

// cancelled answers a cancel the server asked for: mostly with the acknowledgement (a failure
// with code cancelled); sometimes with the completion a handler returns when told to stop
// (what it had so far), which the server must take as the acknowledgement all the same: the
// job ends cancelled, never succeeded (the oracle's cancel).
func (w *worker) cancelled(h *held) {
	if h.completing {
		return // its result is on its way
	}
	h.cancelHeard = true
	if w.s.workload.IntN(4) == 0 {
		w.complete(h)
		return
	}
	w.fail(h, "cancelled", false)
}

func (w *worker) fail(h *held, code string, retryable bool) {
	w.report(h, wire.Frame{Type: wire.FrameFail, JobID: h.jobID, LeaseID: h.leaseID, ErrorCode: code, Retryable: &retryable})
}

// report sends a completion or failure, and after the server's answer, or none in
// requestTimeout, does what the Go SDK's rules for kept results say (policy.Sends): the very
// same frame again, with backoff, while the answer may pass and the lease may be valid (the
// server answers an exact repeat of an accepted completion with success), and once more after
// that; the failure that names the reason for a completion refused for what it is; else the
// lease is done.
func (w *worker) report(h *held, f wire.Frame) {
	answered, late := false, false
	if h.misbehaviour != nil {
		h.misbehaviour()
	}
	w.toServer(f, func(a wire.Frame) {
		if late {
			return // given up for lost, as a request whose time ran out is: the resend's answer counts
		}
		answered = true
		w.settle(h, f, a)
	})
	w.s.after(requestTimeout, w.name+" report timeout", func() {
		if !answered && w.leases[h.leaseID] == h {
			late = true
			w.sent(h, &h.sends, f, policy.Answer{NoAnswer: true}, "", func() { w.report(h, f) }, w.reported)
		}
	})
}

// reported ends a lease whose result the server has (or refused for good).
func (w *worker) reported(h *held) {
	delete(w.leases, h.leaseID)
	w.credit()
}

// settle takes the server's answer to a report. A worker that did nothing wrong is never told
// its valid signature is invalid, nor that its own repeated completion conflicts.
func (w *worker) settle(h *held, f, a wire.Frame) {
	again := func() { w.report(h, f) }
	if a.Error == nil {
		if h.cancelHeard && f.Type == wire.FrameComplete {
			w.s.probe(ProbeCompletedAfterCancel)
		}
		w.sent(h, &h.sends, f, policy.Answer{}, "", again, w.reported)
		return
	}
	switch a.Error.Code {
	case string(actors.CodeSignatureInvalid), string(actors.CodeCompletionConflict), string(actors.CodeInvalidArgument):
		w.s.fail("completion", "%s's honest report on job %s was refused: %s %s", w.name, h.jobID, a.Error.Code, a.Error.Message)
	case string(actors.CodeLeaseMismatch):
		w.s.probe(ProbeStaleLeaseRejected)
	}
	w.sent(h, &h.sends, f, answerOf(a), a.Error.Message, again, w.reported)
}

// answerOf is what a send whose ack is a came to, in policy's terms.
func answerOf(a wire.Frame) policy.Answer {
	if a.Error == nil {
		return policy.Answer{}
	}
	return policy.Answer{Code: a.Error.Code, Status: wire.StatusOf(a.Error.Code)}
}

// sent does what the SDK's rules say after a send of f, tracked in sends, came to answer
// (message: the refusal's): send it again (again), the failure that replaces it, or end the
// lease (done).
func (w *worker) sent(h *held, sends *policy.Sends, f wire.Frame, answer policy.Answer, message string, again func(), done func(*held)) {
	s := w.s
	if w.leases[h.leaseID] != h {
		return // dropped meanwhile (the server no longer knows the lease)
	}
	d := sends.After(answer, f.Type, s.now, policy.MayBeValid(h.heard, h.leaseTTL))
	switch d.Step {
	case policy.SendAgain:
		wait := policy.Backoff(d.Tries, policy.ResendMin, policy.ResendMax, func(m time.Duration) time.Duration {
			return time.Duration(s.resends.Int64N(int64(m) + 1))
		})
		s.after(wait, w.name+" resends "+f.Type, func() {
			if w.leases[h.leaseID] == h {
				again()
			}
		})
		return
	case policy.SendFailure:
		retryable := d.Failure.Retryable
		w.report(h, wire.Frame{Type: wire.FrameFail, JobID: h.jobID, LeaseID: h.leaseID, ErrorCode: d.Failure.Code, Message: message, Retryable: &retryable})
		return
	case policy.GiveUp:
		s.record(fmt.Sprintf("%s gives up job %s's result: its lease surely expired", w.name, h.jobID))
	}
	done(h)
}

// release gives a job back untried, as a stopping worker does; the frame goes over plain HTTP
// (sendDirect), which needs no connection of the worker's. It is a result like any other, kept
// by the SDK's rules (sent).
func (w *worker) release(h *held) {
	f := wire.Frame{Type: wire.FrameRelease, JobID: h.jobID, LeaseID: h.leaseID, Reason: eventlog.ReleasedWorkerStopping}
	var sends policy.Sends // its own: a failure the worker reported may still be on its way
	released := func(h *held) {
		delete(w.leases, h.leaseID)
		w.ended = append(w.ended, h) // a lease given back is stale from now on
	}
	var send func()
	send = func() {
		answered, late := false, false
		w.sendDirect(f, func(a wire.Frame) {
			if late {
				return // given up for lost: the resend's answer counts
			}
			answered = true
			// UNAVAILABLE: the log failed under the release and the server stops; it is sent
			// again after its recovery, by the rules.
			if a.Error != nil && a.Error.Code != string(actors.CodeLeaseMismatch) && a.Error.Code != string(actors.CodeJobNotFound) &&
				a.Error.Code != string(actors.CodeUnavailable) {
				w.s.fail("release", "%s's release of job %s was refused: %s %s", w.name, h.jobID, a.Error.Code, a.Error.Message)
			}
			if w.leases[h.leaseID] == h {
				w.sent(h, &sends, f, answerOf(a), "", send, released)
			}
		})
		w.s.after(requestTimeout, w.name+" release timeout", func() {
			if !answered && w.leases[h.leaseID] == h && !w.crashed {
				late = true
				w.sent(h, &sends, f, policy.Answer{NoAnswer: true}, "", send, released)
			}
		})
	}
	send()
}

// sendDirect sends an operation on a job as a plain HTTP request: it needs the server up, not
// a connection of the worker's.
func (w *worker) sendDirect(f wire.Frame, onAck func(wire.Frame)) {
	s := w.s
	if !w.alive() {
		return
	}
	w.nRef++
	f.Ref = "d" + strconv.Itoa(w.nRef)
	data := encode(f)
	s.transmit(w.name, f.Type, func() {
		v := s.srv
		v.reach(func() {
			if !v.up || v.recovering {
				return
			}
			epoch := v.epoch
			v.onFrameDirect(w, decode(data), func(a wire.Frame) {
				ack := encode(a)
				s.transmit(w.name, "ack", func() {
					if v.epoch == epoch && w.alive() {
						onAck(decode(ack))
					}
				})
			})
		})
	})
}

// stop stops the worker cleanly, as tether worker does on SIGTERM: it closes its connection,
// which ends its credit, and gives back every job it holds; a job handed to it meanwhile goes
// back too. It starts again a while later.
func (w *worker) stop() {
	s := w.s
	s.record(w.name + " stops cleanly")
	w.stopping = true
	if c := w.conn; c != nil && !c.closing {
		w.toServer(wire.Frame{Type: frameClose}, nil)
		c.closing = true
		w.polling = false
	}
	for _, id := range slices.Sorted(maps.Keys(w.leases)) {
		if h := w.leases[id]; !h.completing {
			w.release(h)
		}
	}
	c := w.conn
	if c == nil {
		w.restartLater()
		return
	}
	// The server's end of the session may be lost on the way: the worker does not wait forever.
	s.after(requestTimeout, w.name+" close timeout", func() {
		if w.conn == c {
			w.conn = nil
			w.restartLater()
		}
	})
}

// restartLater starts a stopped worker again after a while.
func (w *worker) restartLater() {
	if !w.stopping {
		w.connect()
		return
	}
	w.s.after(time.Duration(1+w.s.workload.IntN(20))*time.Second, w.name+" starts again", func() {
		if w.stopping && w.conn == nil {
			w.stopping = false
			w.connect()
		}
	})
}

// misbehave makes the report, one that the server must refuse and that must change nothing, a
// misbehaving worker sends before each send of its honest report on h (report): a lease that
// ended, another lease's nonce, a bad signature, or another tenant's job. Sent only once, it
// would mostly be lost with the connection of a worker that finished while the server was
// stalled or down, and the honest report would land alone when the worker sends it again.
func (w *worker) misbehave(h *held) {
	s := w.s
	out, hash := w.output(h)
	f := wire.Frame{Type: wire.FrameComplete, JobID: h.jobID, LeaseID: h.leaseID, Nonce: h.nonce, Output: out, OutputHash: hash}
	var probe Probe
	var want []actors.Code
	switch kind := s.faultRand[FaultMisbehave].IntN(4); {
	case kind == 0 && len(w.otherLeases(h)) > 0:
		// A lease that ended (or another job's), named for the job it holds now or for the
		// lease's own job.
		others := w.otherLeases(h)
		old := others[s.faultRand[FaultMisbehave].IntN(len(others))]
		f.LeaseID = old.leaseID
		// Named for its own job only if it ended: a lease still held is valid for its job.
		if s.faultRand[FaultMisbehave].IntN(2) == 0 && w.leases[old.leaseID] != old {
			f.JobID, f.Nonce = old.jobID, old.nonce
		}
		probe, want = ProbeStaleLeaseRejected, []actors.Code{actors.CodeLeaseMismatch}
	case kind == 1 && slices.ContainsFunc(w.nonces, func(n string) bool { return n != h.nonce }):
		i := slices.IndexFunc(w.nonces, func(n string) bool { return n != h.nonce })
		f.Nonce = w.nonces[i]
		// COMPLETION_CONFLICT when the honest completion overtook it.
		probe, want = ProbeNonceReplayRejected, []actors.Code{actors.CodeLeaseMismatch, actors.CodeCompletionConflict}
	case kind == 2 && w.key != nil:
		f.Signature = base64.StdEncoding.EncodeToString(append([]byte{1}, ed25519.Sign(w.key, []byte("not the completion"))[1:]...))
		probe, want = ProbeBadSignatureRejected, []actors.Code{actors.CodeSignatureInvalid, actors.CodeCompletionConflict}
	default:
		others := s.oracle.foreignJobs(w.tenant)
		if len(others) == 0 {
			return
		}
		f.JobID = others[s.faultRand[FaultMisbehave].IntN(len(others))]
		probe, want = ProbeForeignJobRejected, []actors.Code{actors.CodeJobNotFound}
	}
	if f.Signature == "" {
		f.Signature = w.sign(f.JobID, f.LeaseID, f.Nonce, hash)
	}
	h.misbehaviour = func() {
		s.record(fmt.Sprintf("%s misbehaves: %s", w.name, probe))
		w.toServer(f, func(a wire.Frame) {
			switch {
			case a.Error == nil:
				s.fail("stale", "%s's %s on job %s was accepted", w.name, probe, f.JobID)
			case slices.Contains(want, actors.Code(a.Error.Code)):
				s.probe(probe)
			case probe == ProbeForeignJobRejected:
				s.fail("isolation", "%s's completion of another tenant's job %s was answered %s, not JOB_NOT_FOUND", w.name, f.JobID, a.Error.Code)
			}
			// Any other refusal is right too: the lease may have ended while the message travelled.
		})
	}
}

// otherLeases lists the leases the worker knows of other than h, ended or held: none of them
// covers h's job.
func (w *worker) otherLeases(h *held) []*held {
	out := slices.Clone(w.ended)
	for _, id := range slices.Sorted(maps.Keys(w.leases)) {
		if o := w.leases[id]; o != h && o.jobID != h.jobID {
			out = append(out, o)
		}
	}
	return out
}

// crash kills the worker: it forgets its jobs and comes back after a while.
func (w *worker) crash() {
	s := w.s
	s.record(w.name + " crashes")
	w.crashed, w.conn, w.connecting, w.polling, w.stopping, w.dialing = true, nil, false, false, false, ""
	w.leases, w.acks = map[string]*held{}, map[string]func(wire.Frame){}
	s.after(time.Duration(1+s.faultRand[FaultWorkerCrash].IntN(30))*time.Second, w.name+" restarts", func() {
		w.crashed = false
		w.connect()
	})
}

// pause freezes the worker past its leases; it then goes on as if no time had passed.
func (w *worker) pause() {
	s := w.s
	d := time.Duration(45+s.faultRand[FaultPause].IntN(40)) * time.Second
	s.record(fmt.Sprintf("%s pauses for %s", w.name, d))
	w.pausedTill = s.now.Add(d)
}

// holds reports whether a worker that is not crashed believes it holds a lease.
func (s *Sim) workerHolds(workerID, leaseID string) bool {
	for _, w := range s.workers {
		if w.id == workerID {
			return !w.crashed && w.leases[leaseID] != nil
		}
	}
	return false
}
