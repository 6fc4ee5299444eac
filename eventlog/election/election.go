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
	// ReasonLapsed: the key expired while this server was paused; another may have led and
	// fenced the stream meanwhile, with a key of its own that lapsed too.
	ReasonLapsed = "the key expired while this server was paused"
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
	// active is when this server last ticked or heard an outcome: a gap of more than a half
	// TTL since is this server paused (SIGSTOP, a VM freeze) or starved of CPU, not NATS
	// silent.
	active time.Time
	// unsure: this server was paused (a gap), maybe long enough for its key to expire and
	// another server to take over unseen. Until the bucket, asked since, says the key is still
	// its own (its renewal written, its own claim read), it does not say it leads (Healthy),
	// however promptly NATS answers; if the key expired meanwhile, it stops (ReasonLapsed): a
	// server that took over may have let its own key lapse too, and taking the key back
	// proves nothing. A leader that was not paused is never unsure: it goes on saying it leads
	// through a bucket that does not answer, a refused renewal, a lost answer or a NATS
	// connection that moves (which is how it keeps the lead through the bucket's own
	// election; making it unsure after NATS was silent for half a TTL, or after a refused
	// renewal, failed the leader over in two of three chaos runs that killed the bucket's raft
	// leader). So one cut off from NATS for less than a TTL, whose key a standby took
	// meanwhile, may say it leads from the moment NATS answers it again until its next
	// renewal reads the other's claim; its appends are refused all the same.
	unsure bool
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

// Healthy reports whether this server may say it leads (its /readyz, what a standby that asks
// is told): NATS answered it within the last half TTL, it has not been paused since it last
// ticked or heard an answer, and, if it was paused before, the bucket has said since that the
// key is its own (see unsure). The pause shows before the first tick after it runs: a paused
// process that goes on may answer a request before its timers fire.
func (h *Holder) Healthy(now time.Time) bool {
	return (!h.unsure || mutantHealthyWhileUnsure) && now.Sub(h.active) <= h.ttl/2 && now.Sub(h.contact) <= h.ttl/2
}

// wake notes that this server runs at now, and reports whether it comes out of a gap (it was
// paused): then silence proves nothing, since nothing was asked, and the key may be another's.
func (h *Holder) wake(now time.Time) bool {
	gap := now.Sub(h.active) > h.ttl/2
	h.active = now
	if gap {
		h.unsure = true
		h.heard(now, now)
	}
	return gap
}

// Tick is called every Every: renew, or stop if cut off from NATS or JetStream. After a gap
// in the ticks (the process was paused, or starved of CPU) it renews, and the answer says
// whether it still leads.
func (h *Holder) Tick(now time.Time) Action {
	h.wake(now)
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

// Done takes an action's outcome and returns what to do next. An outcome that comes out of a
// gap answered a request sent before it: it says nothing sure about the key now.
func (h *Holder) Done(now time.Time, o Outcome) Action {
	stale := h.wake(now)
	a := h.next(now, o)
	if !stale && (o.Kind == Updated || o.Kind == Found && bytes.Equal(o.Value, h.value)) {
		h.unsure = false // the key is this server's, as the bucket says now
	}
	return h.do(a)
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
		if h.unsure {
			// The key lapsed while this server was paused: who led meanwhile, the key does
			// not say, nor does taking it back. Stop, and come back as a standby.
			return Action{Kind: Stop, Reason: ReasonLapsed}
		}
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
	ttl   time.Duration
	value []byte
	// leader is the value the key last held: who led last, whom it asks before it takes a
	// key that expired.
	leader []byte
	// named is who the key holds as this standby last read it since its last gap: nil if the
	// key was absent, or if it has not been read since the standby was paused (what it read
	// before may be long out of date).
	named []byte
	// active is when this standby last ticked or heard an outcome: a gap of more than a half
	// TTL since is this server paused.
	active time.Time
}

// NewCandidate starts the part of a standby whose value, once it leads, is value, at now; ttl
// is the key's.
func NewCandidate(now time.Time, ttl time.Duration, value []byte) *Candidate {
	return &Candidate{ttl: ttl, value: value, active: now}
}

// Every is how often a standby looks at the key: a fraction of any TTL, so that a standby
// learns a key expired soon after it did (a bucket's expiry leaves no marker to watch for).
const Every = 100 * time.Millisecond

// wake notes that this standby runs at now, and reports whether it comes out of a gap.
func (c *Candidate) wake(now time.Time) bool {
	gap := now.Sub(c.active) > c.ttl/2
	c.active = now
	if gap {
		c.named = nil
	}
	return gap
}

// Tick is called every Every.
func (c *Candidate) Tick(now time.Time) Action {
	c.wake(now)
	return Action{Kind: Read}
}

// Leader is who the key holds as this standby last read it (nil if no one): whose URL standbys
// send clients to. A standby that was paused names no one until it has read the key again,
// rather than a leader that may have died meanwhile; nor before its first tick after the
// pause, which may come after a request it answers.
func (c *Candidate) Leader(now time.Time) []byte {
	if now.Sub(c.active) > c.ttl/2 {
		return nil
	}
	return c.named
}

// Done takes an action's outcome and returns what to do next. An outcome that comes out of a
// gap answered a request sent before it: the standby names no one on its word.
func (c *Candidate) Done(now time.Time, o Outcome) Action {
	stale := c.wake(now)
	switch o.Kind {
	case Found:
		c.leader = o.Value
		if !stale {
			c.named = o.Value
		}
	case Absent:
		c.named = nil
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
		c.leader, c.named = c.value, c.value
		return Action{Kind: Lead, Rev: o.Rev}
	case Exists:
		return Action{Kind: Read}
	}
	return Action{}
}
