package longpoll

import "github.com/tetherhq/tether/actors"

// State is where a poll is in its life.
type State int

const (
	// Offering: the offer is on its way to the session; its acknowledgement is awaited.
	Offering State = iota
	// Waiting: the session took the offer; the worker's credit stands while the poll waits.
	Waiting
	// Withdrawing: the offer was withdrawn; the assignments it brought are still coming, up to
	// the session's OfferEnded.
	Withdrawing
	// Answered: the answer is the shell's to write; one it could not deliver comes back
	// (ClientGone).
	Answered
	// Done: nothing more is owed to anyone: the offer was refused, or everything was handed back.
	Done
)

func (s State) String() string {
	switch s {
	case Offering:
		return "offering"
	case Waiting:
		return "waiting"
	case Withdrawing:
		return "withdrawing"
	case Answered:
		return "answered"
	case Done:
		return "done"
	}
	return "unknown"
}

// Input is something that happened to a poll.
type Input interface{ input() }

type (
	// OfferAcked is the session's answer to the offer; Refused when it would not take it (the
	// session ended, SESSION_CLOSED).
	OfferAcked struct{ Refused bool }
	// Assigned is an assignment the session sent the poll.
	Assigned struct{ Assignment actors.Assignment }
	// WaitOver says the poll should end without being given work: its wait_seconds passed, a
	// newer poll of the worker took its turn, or the server shuts down.
	WaitOver struct{}
	// ClientGone says nobody takes the answer: the worker's request ended, its connection
	// closed, or the answer could not be written.
	ClientGone struct{}
	// OfferEnded is the session's word that the offer is over: every assignment it brought came
	// before.
	OfferEnded struct{}
	// SessionEnded says the session is over; it sends nothing more.
	SessionEnded struct{}
	// OfferEndOverdue says a withdrawn offer's OfferEnded did not come in time.
	OfferEndOverdue struct{}
)

func (OfferAcked) input()      {}
func (Assigned) input()        {}
func (WaitOver) input()        {}
func (ClientGone) input()      {}
func (OfferEnded) input()      {}
func (SessionEnded) input()    {}
func (OfferEndOverdue) input() {}

// Actions is what the shell must do after a step, in this order: close the session, withdraw
// the offer, hand back, answer.
type Actions struct {
	// CloseSession: the session stalled; close it so that it takes nothing more.
	CloseSession bool
	// Withdraw: send the session actors.Withdraw.
	Withdraw bool
	// HandBack lists assignments that never reached the worker: each goes back to the queue with
	// no attempt spent (actors.Bounce).
	HandBack []actors.Assignment
	// Respond: answer the poll now, with Answer (none: 204 No Content).
	Respond bool
	Answer  []actors.Assignment
}

// Poll is one long poll, from its offer to its answer.
type Poll struct {
	max   int
	state State
	got   []actors.Assignment
	// ended is set once the wait should end, before the offer was acknowledged: the poll
	// withdraws as soon as it is. abandoned is set once nobody takes the answer.
	ended, abandoned bool
}

// New returns a poll that offers max slots (1..actors.CapacityMax), in state Offering.
func New(max int) *Poll { return &Poll{max: max} }

// State returns where the poll is.
func (p *Poll) State() State { return p.state }

// Over reports whether the poll is answered or done: no input but ClientGone after the answer
// changes anything it was owed.
func (p *Poll) Over() bool { return p.state == Answered || p.state == Done }

// Step takes one input and returns what the shell must do.
func (p *Poll) Step(in Input) Actions {
	switch m := in.(type) {
	case OfferAcked:
		return p.acked(m.Refused)
	case Assigned:
		return p.assigned(m.Assignment)
	case WaitOver:
		return p.endWait(false)
	case ClientGone:
		return p.gone()
	case OfferEnded, SessionEnded:
		switch p.state {
		case Offering:
			if _, ok := in.(SessionEnded); ok {
				return p.handBackAll() // its offer is refused, if it ever arrives
			}
			return Actions{} // not this offer's end: this one was not withdrawn
		case Answered, Done:
			return Actions{}
		}
		return p.finish()
	case OfferEndOverdue:
		if p.state != Withdrawing {
			return Actions{}
		}
		a := p.finish()
		a.CloseSession = true
		return a
	}
	return Actions{}
}

func (p *Poll) acked(refused bool) Actions {
	if p.state != Offering {
		return Actions{}
	}
	if refused {
		return p.handBackAll()
	}
	p.state = Waiting
	if p.ended || p.abandoned || len(p.got) > 0 {
		return p.withdraw()
	}
	return Actions{}
}

func (p *Poll) assigned(a actors.Assignment) Actions {
	switch p.state {
	case Offering:
		p.got = append(p.got, a) // the offer reached the session before its acknowledgement came
		return Actions{}
	case Waiting:
		p.got = append(p.got, a)
		return p.withdraw() // the first assignment ends the wait
	case Withdrawing:
		p.got = append(p.got, a)
		return Actions{}
	}
	return Actions{HandBack: []actors.Assignment{a}} // after the answer: nobody takes it
}

// endWait ends the wait: at once when the offer stands, or as soon as it is acknowledged.
func (p *Poll) endWait(abandoned bool) Actions {
	p.abandoned = p.abandoned || abandoned
	switch p.state {
	case Offering:
		p.ended = true
	case Waiting:
		return p.withdraw()
	}
	return Actions{}
}

func (p *Poll) gone() Actions {
	switch p.state {
	case Answered: // the answer did not reach the worker
		p.state = Done
		back := p.got
		p.got = nil
		return Actions{HandBack: back}
	case Done:
		return Actions{}
	}
	return p.endWait(true)
}

func (p *Poll) withdraw() Actions {
	if mutantKeepsOffer {
		return p.finish()
	}
	p.state = Withdrawing
	return Actions{Withdraw: true}
}

// finish ends the collecting: the answer, at most max assignments, or everything handed back
// when nobody takes it.
func (p *Poll) finish() Actions {
	if p.abandoned {
		return p.handBackAll()
	}
	p.state = Answered
	n := min(len(p.got), p.max)
	var back []actors.Assignment
	if n < len(p.got) { // more than the offer: cannot happen, and must not go unanswered
		back = p.got[n:]
	}
	p.got = p.got[:n:n]
	return Actions{Respond: true, Answer: p.got, HandBack: back}
}

func (p *Poll) handBackAll() Actions {
	p.state = Done
	back := p.got
	p.got = nil
	return Actions{HandBack: back}
}
