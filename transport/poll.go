package transport

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/transport/longpoll"
	"github.com/tetherhq/tether/transport/protocol"
	"github.com/tetherhq/tether/transport/wire"
)

// Long-poll limits.
const (
	// WaitSecondsMax caps how long one long poll waits for work.
	WaitSecondsMax = 30
	// offerEndWait bounds how long a poll that has withdrawn its offer waits for the
	// assignments already on their way to it (about one fsync); past it the session is closed,
	// and whatever still comes goes back to the queue.
	offerEndWait = 10 * time.Second
)

// pollSessions keeps the session of each worker that long-polls. A session lives across polls;
// it ends as any session does (no heartbeat and no poll for three intervals, revocation), and
// the next request opens a new one, which adopts the worker's leases. A worker's entry lasts
// while its session is open or a request uses it, and no longer: a fleet that churns (each pod a
// new worker) leaves nothing behind.
//
// Capacity is offered only while a poll waits (actors.Offer, actors.Withdraw): a worker that
// stops polling holds no credit, and an assignment that arrives after its poll ended goes back
// to the queue with no attempt spent. Heartbeats and results never wait for a poll: they use the
// session (or no session at all) without taking the poll's turn.
type pollSessions struct {
	mu       sync.Mutex
	sessions map[string]*pollSession // by worker id
}

type pollSession struct {
	worker string
	all    *pollSessions
	users  int // requests that hold it (all.mu)

	// mu guards sess, inbox and opening. It is never held across a call to the broker: a
	// session opens in an fsync, which the worker's other requests must not wait for with no
	// way to give up.
	mu    sync.Mutex
	sess  *broker.Conn
	inbox chan any // sess's assignments and offer ends, for the poll that waits
	// opening is closed once the session a request is opening is open, or failed to open.
	opening chan struct{}

	// turn lets one poll of the worker wait at a time; a newer poll ends the one waiting
	// (preempt), which is how a client that gave up on a poll and sent another is served at once.
	turn    chan struct{}
	pmu     sync.Mutex
	gen     uint64 // polls that came, counted
	preempt chan struct{}
}

// acquire returns the worker's poll session, made if it has none; release it when done.
func (p *pollSessions) acquire(worker string) *pollSession {
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := p.sessions[worker]
	if ps == nil {
		ps = &pollSession{worker: worker, all: p, turn: make(chan struct{}, 1)}
		p.sessions[worker] = ps
	}
	ps.users++
	return ps
}

// release says a request is done with ps, and forgets it if it is idle.
func (p *pollSessions) release(ps *pollSession) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ps.users--
	p.forgetIdle(ps)
}

// forgetIdle forgets ps once no request uses it and it has no session, open or opening. The
// caller holds p.mu (the order is p.mu, then ps.mu).
func (p *pollSessions) forgetIdle(ps *pollSession) {
	ps.mu.Lock()
	idle := ps.sess == nil && ps.opening == nil
	ps.mu.Unlock()
	if idle && ps.users == 0 && p.sessions[ps.worker] == ps {
		delete(p.sessions, ps.worker)
	}
}

// len is the number of workers it holds an entry for.
func (p *pollSessions) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sessions)
}

// takeTurn takes the worker's poll turn, ending the poll that holds it, and returns a channel
// that is closed when a newer poll wants the turn in turn (at once, if one already waits).
func (ps *pollSession) takeTurn(ctx context.Context) (preempted <-chan struct{}, release func(), err error) {
	ps.pmu.Lock()
	ps.gen++
	gen := ps.gen
	if ps.preempt != nil {
		close(ps.preempt)
		ps.preempt = nil
	}
	ps.pmu.Unlock()
	select {
	case ps.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	ch := make(chan struct{})
	ps.pmu.Lock()
	if gen != ps.gen {
		close(ch) // a newer poll came while this one waited for the turn: it gets the work
	} else {
		ps.preempt = ch
	}
	ps.pmu.Unlock()
	return ch, func() {
		ps.pmu.Lock()
		if ps.preempt == ch {
			ps.preempt = nil
		}
		ps.pmu.Unlock()
		<-ps.turn
	}, nil
}

// session returns the worker's open session and its inbox, opening one if there is none or the
// last one ended. Requests that come while one opens it wait for that one, as long as they may.
func (ps *pollSession) session(ctx context.Context, b Core) (*broker.Conn, <-chan any, error) {
	for {
		ps.mu.Lock()
		if sess, inbox := ps.sess, ps.inbox; sess != nil {
			ps.mu.Unlock()
			return sess, inbox, nil
		}
		if opening := ps.opening; opening != nil {
			ps.mu.Unlock()
			select {
			case <-opening: // open, or failed: then this request tries in turn
				continue
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		}
		opening := make(chan struct{})
		ps.opening = opening
		ps.mu.Unlock()
		sess, err := b.Connect(ctx, ps.worker, actors.TransportLongPoll, 0)
		var inbox chan any
		ps.mu.Lock()
		ps.opening = nil
		if err == nil {
			// What the session buffers for it, the inbox does for the polls: assignments never
			// exceed one offer's credit, and each offer ends with one OfferEnded.
			inbox = make(chan any, cap(sess.Frames))
			ps.sess, ps.inbox = sess, inbox
			go ps.pump(sess, inbox)
		}
		ps.mu.Unlock()
		close(opening)
		return sess, inbox, err
	}
}

// pump moves a session's assignments and offer ends to its inbox; cancel notices are dropped
// (heartbeats report them). When the session ends, its inbox is closed and it is forgotten.
func (ps *pollSession) pump(sess *broker.Conn, inbox chan<- any) {
	for f := range sess.Frames {
		switch f.(type) {
		case actors.Assignment, actors.OfferEnded:
			inbox <- f
		}
	}
	ps.forget(sess)
	close(inbox)
}

// forget drops sess if it is still the worker's session, so the next request opens another,
// and the worker's entry if no request uses it.
func (ps *pollSession) forget(sess *broker.Conn) {
	ps.mu.Lock()
	if ps.sess == sess {
		ps.sess, ps.inbox = nil, nil
	}
	ps.mu.Unlock()
	ps.all.mu.Lock()
	ps.all.forgetIdle(ps)
	ps.all.mu.Unlock()
}

// withSession runs fn with the worker's session, and once more with a new one if the first had
// ended (actors.CodeSessionClosed).
func (ps *pollSession) withSession(ctx context.Context, b Core, fn func(*broker.Conn, <-chan any) error) error {
	for try := 0; ; try++ {
		sess, inbox, err := ps.session(ctx, b)
		if err != nil {
			return err
		}
		err = fn(sess, inbox)
		var rej *actors.Rejection
		if try == 0 && errors.As(err, &rej) && rej.Code == actors.CodeSessionClosed {
			ps.forget(sess)
			continue
		}
		return err
	}
}

func (s *Server) pollLease(r *request) error {
	req := wire.LeaseRequest{Max: 1}
	if err := r.decode(SmallBodyBytesMax, &req); err != nil {
		return err
	}
	if req.Max < 1 || req.Max > actors.CapacityMax {
		return invalid("max must be 1..%d", actors.CapacityMax)
	}
	if req.WaitSeconds < 0 || req.WaitSeconds > WaitSecondsMax {
		return invalid("wait_seconds must be 0..%d", WaitSecondsMax)
	}
	ps := s.polls.acquire(r.by.worker.ID)
	defer s.polls.release(ps)
	preempted, release, err := ps.takeTurn(r.Context())
	if err != nil {
		return err
	}
	defer release()
	select {
	case <-preempted:
		r.w.WriteHeader(http.StatusNoContent)
		return nil
	default:
	}
	var sess *broker.Conn
	var inbox <-chan any
	err = ps.withSession(r.Context(), r.b, func(se *broker.Conn, in <-chan any) error {
		sess, inbox = se, in
		return se.Offer(r.Context(), req.Max) // also a sign of life
	})
	if err != nil {
		return err
	}
	poll := longpoll.New(req.Max)
	poll.Step(longpoll.OfferAcked{})
	act := s.awaitOffer(r.Context(), r.b, ps, sess, inbox, poll, seconds(req.WaitSeconds), preempted)
	if err := r.Context().Err(); err != nil { // the worker went away: nobody takes them
		r.b.ReturnUndelivered(poll.Step(longpoll.ClientGone{}).HandBack...)
		return err
	}
	if len(act.Answer) == 0 {
		r.w.WriteHeader(http.StatusNoContent)
		return nil
	}
	out := wire.Assignments{Assignments: make([]wire.Frame, len(act.Answer))}
	for i, a := range act.Answer {
		out.Assignments[i] = s.assignFrame(a)
	}
	if err := writeJSONFlushed(r.w, http.StatusOK, out); err != nil {
		r.b.ReturnUndelivered(poll.Step(longpoll.ClientGone{}).HandBack...)
		s.log.Debug("a poll's answer could not be written; its assignments go back to the queue",
			requestFields(r.Request, r.by, zap.Int("assignments", len(act.Answer)), zap.Error(err))...)
	}
	return nil
}

// awaitOffer feeds poll, whose offer stands, what happens until it is over, and does what it
// says (longpoll's rules): its wait ends when the offer brings an assignment, wait passes, or
// the poll must end (the worker went away, a newer poll came, the server is shutting down);
// then the offer is withdrawn, and every assignment it brought is collected, up to the
// session's OfferEnded. It returns the poll's last actions, whose Answer is the shell's to
// write; what the poll handed back is back already.
func (s *Server) awaitOffer(ctx context.Context, b Core, ps *pollSession, sess *broker.Conn, inbox <-chan any, poll *longpoll.Poll,
	wait time.Duration, preempted <-chan struct{}) longpoll.Actions {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	// Each of these says once that the wait is over; a channel that said so is not read again.
	done, shutdown := ctx.Done(), s.shutdown
	for {
		var in longpoll.Input
		select {
		case f, ok := <-inbox:
			switch m := f.(type) {
			case actors.Assignment:
				in = longpoll.Assigned{Assignment: m}
			case actors.OfferEnded:
				in = longpoll.OfferEnded{}
			}
			if !ok {
				in = longpoll.SessionEnded{}
			}
		case <-timer.C:
			in = longpoll.WaitOver{}
			if poll.State() == longpoll.Withdrawing {
				in = longpoll.OfferEndOverdue{} // something went wrong on the way
			}
		case <-done:
			in, done = longpoll.ClientGone{}, nil
		case <-preempted:
			in, preempted = longpoll.WaitOver{}, nil
		case <-shutdown:
			in, shutdown = longpoll.WaitOver{}, nil
		}
		act := poll.Step(in)
		if act.CloseSession { // a closed session takes nothing more
			sess.Close()
			ps.forget(sess)
		}
		if act.Withdraw {
			sess.Withdraw()
			timer.Reset(offerEndWait)
		}
		b.ReturnUndelivered(act.HandBack...)
		if poll.Over() {
			return act
		}
	}
}

// pollHeartbeat extends a long-poll worker's leases. It never waits for the worker's poll.
func (s *Server) pollHeartbeat(r *request) error {
	var req wire.HeartbeatRequest
	if err := r.decode(SmallBodyBytesMax, &req); err != nil {
		return err
	}
	if len(req.Leases) > actors.CapacityMax {
		return invalid("a heartbeat lists at most %d leases", actors.CapacityMax)
	}
	var ack actors.HeartbeatAck
	var sess *broker.Conn
	ps := s.polls.acquire(r.by.worker.ID)
	defer s.polls.release(ps)
	err := ps.withSession(r.Context(), r.b, func(se *broker.Conn, _ <-chan any) error {
		var err error
		sess = se
		ack, err = se.Heartbeat(r.Context(), req.Leases)
		return err
	})
	if err != nil {
		return err
	}
	expires, renewIn := tokenHint(r.by.worker, s.clock())
	out := wire.HeartbeatResponse{Cancel: ack.CancelRequested, Unknown: ack.Unknown,
		HeartbeatSeconds: sess.HeartbeatInterval.Seconds(), LeaseTTLSeconds: sess.LeaseTTL.Seconds(), PublicKey: r.by.worker.PublicKey,
		TokenExpiresAt: expires, TokenRenewSeconds: renewIn}
	if out.Cancel == nil {
		out.Cancel = []string{}
	}
	if out.Unknown == nil {
		out.Unknown = []string{}
	}
	return r.reply(http.StatusOK, out)
}

// renewToken serves POST /v1/worker/token: the worker's new token. It keeps its id, its
// session and its leases; the token it asked with works on for actors.TokenRenewGrace.
func (s *Server) renewToken(r *request) error {
	rt, err := r.b.RenewWorkerToken(r.Context(), r.by.worker, bearer(r.Request))
	if err != nil {
		return err
	}
	return r.reply(http.StatusOK, wire.TokenRenewal{WorkerID: r.by.worker.ID, WorkerToken: rt.Token, ExpiresAt: rt.ExpiresAt, Receipt: receipt(rt.Receipt)})
}

// tokenHint is what a welcome and a heartbeat's answer say of the worker's token: when it
// expires, and in how many seconds to renew it (0: now). Both are the server's clock's, so a
// worker's own clock being off does not matter.
func tokenHint(w projections.Worker, now time.Time) (expires time.Time, renewIn float64) {
	return w.ExpiresAt, max(w.TokenRenewAt().Sub(now).Seconds(), 0)
}

func (s *Server) workerEvent(r *request) error {
	var req wire.EventRequest
	if err := r.decode(int64(actors.ProgressDataBytesMax+envelopeBytes), &req); err != nil {
		return err
	}
	op, err := protocol.WorkerOp(r.by.worker.ID, r.PathValue("id"), wire.Frame{Type: wire.FrameEvent, LeaseID: req.LeaseID, EventType: req.EventType, Data: req.Data, Seq: req.Seq})
	if err != nil {
		return err
	}
	n, rc, err := r.b.Event(r.Context(), op.(actors.Progress))
	if err != nil {
		return err
	}
	return r.reply(http.StatusCreated, wire.EventAck{Number: n, Receipt: receipt(rc)})
}

func (s *Server) workerComplete(r *request) error {
	var req wire.CompleteRequest
	return s.workerReport(r, int64(actors.OutputBytesMax+envelopeBytes), &req, func() wire.Frame {
		return wire.Frame{Type: wire.FrameComplete, LeaseID: req.LeaseID, Nonce: req.Nonce, Output: req.Output, OutputHash: req.OutputHash,
			Signature: req.Signature}
	})
}

func (s *Server) workerFail(r *request) error {
	var req wire.FailRequest
	return s.workerReport(r, SmallBodyBytesMax, &req, func() wire.Frame {
		return wire.Frame{Type: wire.FrameFail, LeaseID: req.LeaseID, ErrorCode: req.ErrorCode, Message: req.Message, Retryable: req.Retryable}
	})
}

func (s *Server) workerRelease(r *request) error {
	var req wire.ReleaseRequest
	return s.workerReport(r, SmallBodyBytesMax, &req, func() wire.Frame {
		return wire.Frame{Type: wire.FrameRelease, LeaseID: req.LeaseID, Reason: req.Reason, Message: req.Message}
	})
}

// workerReport serves a worker's result sent over plain HTTP: the body, of at most limit bytes,
// decoded into req and put in frame form, becomes the broker's command as the WebSocket's frame
// would.
func (s *Server) workerReport(r *request, limit int64, req any, frame func() wire.Frame) error {
	if err := r.decode(limit, req); err != nil {
		return err
	}
	f := frame()
	f.JobID, f.Traceparent = r.PathValue("id"), r.Header.Get(traceparentKey)
	op, err := protocol.WorkerOp(r.by.worker.ID, f.JobID, f)
	if err != nil {
		return err
	}
	reported := s.reported(f, r.by.worker.ID)
	rc, err := r.b.Report(r.Context(), op)
	reported(err)
	if err != nil {
		return err
	}
	return r.reply(http.StatusOK, wire.Done{Receipt: receipt(rc)})
}

// contextFor is a context that ends after d or when stop closes.
func contextFor(stop <-chan struct{}, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
