package sim

import (
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/transport/longpoll"
	"github.com/tetherhq/tether/transport/protocol"
	"github.com/tetherhq/tether/transport/wire"
)

// simPoll is a long poll the server holds, driven by the state machine transport/poll.go
// drives (transport/longpoll): the session offers the worker's free slots while it waits; on
// the first assignment, or when its wait is over, the offer is withdrawn, and the answer
// carries everything it brought, up to OfferEnded. A poll whose worker went away puts what it
// got back (Undelivered).
type simPoll struct {
	w    *worker
	conn *wconn
	id   int
	m    *longpoll.Poll
}

// onPoll starts a poll of the worker's session.
func (v *server) onPoll(w *worker, c *wconn, id, n int, wait time.Duration) {
	s := v.s
	if v.polls[c.session] != nil {
		return // one poll of a session at a time; the worker asks again after its timeout
	}
	epoch := v.epoch
	p := &simPoll{w: w, conn: c, id: id, m: longpoll.New(n)}
	v.request(w.name, actors.SessionRef(c.session), actors.Offer{N: n}, func(reply any) {
		if v.epoch != epoch {
			return // the server crashed meanwhile: the poll died with it
		}
		v.step(c.session, p, longpoll.OfferAcked{Refused: reply.(actors.OfferAck).Err != nil})
		if p.m.Over() {
			return // the session ended; the worker hears of that and reconnects
		}
		v.polls[c.session] = p
		s.after(wait, w.name+" poll waited", func() {
			if v.epoch == epoch && v.polls[c.session] == p {
				v.step(c.session, p, longpoll.WaitOver{})
			}
		})
	})
}

// step feeds the session's poll an input and does what the machine says, as
// transport's awaitOffer does.
func (v *server) step(session string, p *simPoll, in longpoll.Input) {
	act := p.m.Step(in)
	if act.CloseSession {
		v.send(actors.SessionRef(session), actors.CloseSession{Reason: eventlog.EndedClosed}, actors.Ref{})
	}
	if act.Withdraw {
		v.send(actors.SessionRef(session), actors.Withdraw{}, actors.Ref{})
	}
	for _, a := range act.HandBack {
		to, notice, _ := actors.Bounce(a)
		v.send(to, notice, actors.Ref{})
	}
	if act.Respond {
		v.answer(p, act.Answer)
	}
	if p.m.Over() && v.polls[session] == p {
		delete(v.polls, session)
	}
}

// pollSink takes what a long-poll session sends its connection.
func (v *server) pollSink(w *worker, session string, msg any) {
	s := v.s
	p := v.polls[session]
	switch m := msg.(type) {
	case actors.Assignment:
		if !leaseOK(v.set, m) {
			s.fail("durability", "job %s's lease %s was sent to %s before it was durable", m.JobID, m.LeaseID, w.name)
			return
		}
		if p == nil {
			s.fail("delivery", "session %s got lease %s of job %s with no poll waiting", session, m.LeaseID, m.JobID)
			return
		}
		v.step(session, p, longpoll.Assigned{Assignment: m})
	case actors.OfferEnded:
		if p != nil {
			v.step(session, p, longpoll.OfferEnded{})
		}
	case actors.SessionEnded:
		if p != nil {
			v.step(session, p, longpoll.SessionEnded{})
		}
		w.sessionEnded(session, m.Reason)
	}
}

// answer sends a poll's assignments to its worker.
func (v *server) answer(p *simPoll, got []actors.Assignment) {
	frames := make([]wire.Frame, len(got))
	for i, a := range got {
		frames[i] = decode(encode(protocol.AssignFrame(a)))
	}
	v.s.transmit(p.w.name, "poll answer", func() { p.w.pollAnswered(p.conn, p.id, frames) })
}
