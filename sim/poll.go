package sim

import (
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/transport/protocol"
	"github.com/tetherhq/tether/transport/wire"
)

// simPoll is a long poll the server holds, as transport/poll.go holds one: the session offers
// the worker's free slots while it waits; on the first assignment, or when its wait is over,
// the offer is withdrawn, and the answer carries everything it brought, up to OfferEnded. A poll
// whose worker went away puts what it got back (Undelivered).
type simPoll struct {
	w         *worker
	conn      *wconn
	id        int
	got       []actors.Assignment
	withdrawn bool
	abandoned bool // the worker closed the connection: nobody takes the answer
}

// onPoll starts a poll of the worker's session.
func (v *server) onPoll(w *worker, c *wconn, id, n int, wait time.Duration) {
	s := v.s
	if v.polls[c.session] != nil {
		return // one poll of a session at a time; the worker asks again after its timeout
	}
	epoch := v.epoch
	v.request(w.name, actors.SessionRef(c.session), actors.Offer{N: n}, func(reply any) {
		if r := reply.(actors.OfferAck); r.Err != nil || v.epoch != epoch {
			return // the session ended; the worker hears of that and reconnects
		}
		p := &simPoll{w: w, conn: c, id: id}
		v.polls[c.session] = p
		s.after(wait, w.name+" poll waited", func() {
			if v.epoch == epoch && v.polls[c.session] == p {
				v.withdraw(c.session, p)
			}
		})
	})
}

func (v *server) withdraw(session string, p *simPoll) {
	if !p.withdrawn {
		p.withdrawn = true
		v.send(actors.SessionRef(session), actors.Withdraw{}, actors.Ref{})
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
		p.got = append(p.got, m)
		v.withdraw(session, p)
	case actors.OfferEnded:
		if p == nil {
			return
		}
		delete(v.polls, session)
		v.answer(p)
	case actors.SessionEnded:
		if p != nil {
			delete(v.polls, session)
			v.answer(p)
		}
		w.sessionEnded(session, m.Reason)
	}
}

// answer sends a poll's assignments to its worker, or puts them back if the worker is gone.
func (v *server) answer(p *simPoll) {
	s := v.s
	if p.abandoned {
		for _, a := range p.got {
			to, notice, _ := actors.Bounce(a)
			v.send(to, notice, actors.Ref{})
		}
		return
	}
	frames := make([]wire.Frame, len(p.got))
	for i, a := range p.got {
		frames[i] = decode(encode(protocol.AssignFrame(a)))
	}
	s.transmit(p.w.name, "poll answer", func() { p.w.pollAnswered(p.conn, p.id, frames) })
}
