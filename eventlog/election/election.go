package election

import (
	"bytes"
	"time"
)

// Kind is what a server is to do next, or how a request to the bucket ended.
type Kind int

// Actions: what the driver does next. Every action but None and Stop ends in one Outcome,
// which the driver hands back with Done.
const (
	// None: nothing until the next tick.
	None Kind = iota
	// Renew: update the key to the Holder's value at revision Rev.
	Renew
	// Read: read the key.
	Read
	// Create: create the key with the value, if it does not exist.
	Create
	// Probe: ping the NATS server: does it answer at all? And when did the stream last take
	// a message?
	Probe
	// Check: ask the last leader, whose value is Value, whether it still leads (its /readyz).
	Check
	// Lead: the Candidate won the key at revision Rev: open the log as its writer.
	Lead
	// Stop: the Holder no longer leads, for Reason.
	Stop
)

// Outcomes: how an action ended.
const (
	// Updated: the renewal was written, at revision Rev.
	Updated Kind = iota + 100
	// Refused: the renewal was refused, the key's revision is not the one named.
	Refused
	// Found: the key holds Value at revision Rev.
	Found
	// Absent: there is no key.
	Absent
	// Created: the key was created, at revision Rev.
	Created
	// Exists: the key was not created: it exists.
	Exists
	// Unanswered: the bucket (or, for Probe, the NATS server) gave no answer in time.
	Unanswered
	// Answered: the NATS server answered a Probe's ping; the Outcome's At is when the stream
	// last took a message (JetStream answered with its quorum).
	Answered
	// Leads: the last leader answered that it still leads, and NATS answers it.
	Leads
	// NotLeading: the last leader did not answer that it leads.
	NotLeading
)

// Reasons a Holder stops.
const (
	// ReasonTaken: another server holds the key.
	ReasonTaken = "another server holds the lead"
	// ReasonCutOff: the NATS server did not answer for a whole TTL.
	ReasonCutOff = "NATS did not answer for a whole TTL"
	// ReasonUnanswered: JetStream answered nothing for Patience.
	ReasonUnanswered = "JetStream answered nothing for 15 s"
	// ReasonFenced: the stream refused an append: another server fenced it (Driver.StreamRefused).
	ReasonFenced = "the stream refused an append: another server fenced it"
)

// Patience is how long a leader whose NATS server answers waits for JetStream to answer again:
// long enough for JetStream to elect the leaders of the stream and the bucket after a NATS node
// is lost (nats-server's election timeouts are 4-9 s), as long as the log waits to settle a
// publish.
const Patience = 15 * time.Second

// Action is a decision: what to do next.
type Action struct {
	Kind   Kind
	Rev    uint64
	Value  []byte // Check: the value of the leader to ask
	Reason string // Stop
}

// Outcome is how an action ended.
type Outcome struct {
	Kind  Kind
	Rev   uint64
	Value []byte    // Found
	At    time.Time // Answered
}

// Holder is a leader's part: it renews the key every TTL/4 and decides, from what the bucket
// and the stream answer, whether it still leads.
type Holder struct {
	ttl   time.Duration
	value []byte
	rev   uint64
	// contact is when the NATS server last answered; answered, when JetStream did (the bucket
	// or the stream).
	contact, answered time.Time
	// active is when this server last ticked or heard an outcome: a gap of several ticks
	// since is this server paused, not NATS silent.
	active time.Time
	// pending is the action whose outcome Done takes next.
	pending Kind
}

// NewHolder starts the part of a server that took the key with value at revision rev, at now.
func NewHolder(now time.Time, ttl time.Duration, value []byte, rev uint64) *Holder {
	return &Holder{ttl: ttl, value: value, rev: rev, contact: now, answered: now, active: now}
}

// Every is how often the Holder renews: four times a TTL, so that a renewal or two may go
// unanswered before the key expires.
func (h *Holder) Every() time.Duration { return h.ttl / 4 }

// Rev is the key's revision this server last wrote, or read back as its own.
func (h *Holder) Rev() uint64 { return h.rev }

// Healthy reports whether the NATS server answered this leader within the last half TTL: what
// it tells a standby that asks whether it still leads.
func (h *Holder) Healthy(now time.Time) bool { return now.Sub(h.contact) <= h.ttl/2 }

// Tick is called every Every: renew, or stop if cut off from NATS or JetStream. After a gap
// in the ticks (the process was paused, or starved of CPU) silence proves nothing, since
// nothing was asked: it renews, and the answer says whether it still leads.
func (h *Holder) Tick(now time.Time) Action {
	if now.Sub(h.active) > 2*h.Every() {
		h.heard(now, now)
	}
	h.active = now
	switch {
	case now.Sub(h.contact) > h.ttl:
		return h.do(Action{Kind: Stop, Reason: ReasonCutOff})
	case now.Sub(h.answered) > Patience:
		return h.do(Action{Kind: Stop, Reason: ReasonUnanswered})
	}
	return h.do(Action{Kind: Renew, Rev: h.rev})
}

func (h *Holder) do(a Action) Action {
	h.pending = a.Kind
	return a
}

// heard notes that the NATS server answered at now, and JetStream at js.
func (h *Holder) heard(now, js time.Time) {
	if now.After(h.contact) {
		h.contact = now
	}
	if js.After(h.answered) {
		h.answered = js
	}
}

// Done takes an action's outcome and returns what to do next.
func (h *Holder) Done(now time.Time, o Outcome) Action {
	h.active = now
	return h.do(h.next(now, o))
}

func (h *Holder) next(now time.Time, o Outcome) Action {
	switch o.Kind {
	case Unanswered:
	case Answered:
		h.heard(now, o.At)
	case Updated, Created:
		h.heard(now, now) // the bucket took a write: a quorum of it answered
	default:
		// A read, or a refusal, which a bucket's leader answers without its quorum (for a
		// while after it lost it): the NATS server answered, JetStream maybe not.
		h.heard(now, time.Time{})
	}
	switch o.Kind {
	case Updated, Created:
		h.rev = o.Rev
	case Refused:
		if mutantStopOnRefusedRenewal {
			return Action{Kind: Stop, Reason: ReasonTaken}
		}
		// The key moved on from the revision this leader last wrote: a renewal of its own
		// whose answer was lost, the key expired while the bucket did not answer, or another
		// server's claim. Only the key says which.
		return Action{Kind: Read}
	case Found:
		if !bytes.Equal(o.Value, h.value) {
			return Action{Kind: Stop, Reason: ReasonTaken}
		}
		h.rev = o.Rev
	case Absent:
		return Action{Kind: Create} // it expired while unrenewed; no one took it: take it back
	case Exists:
		return Action{Kind: Read}
	case Unanswered:
		if h.pending == Probe {
			return Action{}
		}
		// The bucket may be electing a leader of its own; the stream may still answer, and a
		// leader whose NATS server answers keeps leading.
		return Action{Kind: Probe}
	}
	return Action{}
}

// Candidate is a standby's part: it watches the key, and takes it once it is free and the last
// leader does not say it still leads.
type Candidate struct {
	value []byte
	// leader is the value the key last held: who led last.
	leader []byte
}

// NewCandidate starts the part of a standby whose value, once it leads, is value.
func NewCandidate(value []byte) *Candidate { return &Candidate{value: value} }

// Every is how often a standby looks at the key: a fraction of any TTL, so that a standby
// learns a key expired soon after it did (a bucket's expiry leaves no marker to watch for).
const Every = 100 * time.Millisecond

// Tick is called every Every.
func (c *Candidate) Tick() Action { return Action{Kind: Read} }

// Leader is the value the key last held (nil if none was seen): whose URL standbys send
// clients to.
func (c *Candidate) Leader() []byte { return c.leader }

// Done takes an action's outcome and returns what to do next.
func (c *Candidate) Done(o Outcome) Action {
	switch o.Kind {
	case Found:
		c.leader = o.Value
	case Absent:
		if c.leader != nil && !bytes.Equal(c.leader, c.value) {
			// The key expired: the leader died, is paused or cut off, or the bucket lost
			// its own leader for longer than the TTL while the leader went on. Only the
			// leader can tell the last apart.
			return Action{Kind: Check, Value: c.leader}
		}
		return Action{Kind: Create}
	case NotLeading:
		return Action{Kind: Create}
	case Created:
		c.leader = c.value
		return Action{Kind: Lead, Rev: o.Rev}
	case Exists:
		return Action{Kind: Read}
	}
	return Action{}
}
