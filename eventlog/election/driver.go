package election

import (
	"sync"
	"time"
)

// Clock is a Driver's time: the wall clock in the server, the virtual one in the simulator.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f once, d from now. It never calls f before it returns.
	AfterFunc(d time.Duration, f func())
}

// Bucket carries out the actions that go to NATS: Renew, Read and Create against the election's
// key, and Probe against the NATS server and the stream. It calls done once with the outcome,
// Unanswered if none came in time, and never before Do returns.
type Bucket interface {
	Do(a Action, done func(Outcome))
}

// Config is what a Driver runs on, and what it tells its server. The callbacks are called
// without the Driver's lock held, so they may call the Driver back.
type Config struct {
	// TTL is the key's time to live, as the bucket keeps it; Value is this server's claim.
	TTL   time.Duration
	Value []byte
	Clock Clock
	// Bucket carries out Renew, Read, Create and Probe.
	Bucket Bucket
	// Check asks the last leader, whose claim is value, whether it still leads, and calls done
	// with Leads or NotLeading (the server asks its /readyz).
	Check func(value []byte, done func(Outcome))
	// Won is called once, when this server took the key at revision rev: it takes over (folds
	// the rest of the stream, fences it, opens the broker). The renewals run already, so that a
	// slow hand-over does not lose the lead just won.
	Won func(rev uint64)
	// Deposed is called once, when this server, having led, no longer does, for reason; last is
	// the outcome that decided it (Found, with the successor's claim, when another holds the key).
	// The Driver does nothing more.
	Deposed func(reason string, last Outcome)
	// Unrenewed, if set, is called when the bucket did not answer a leader, which goes on
	// leading if the stream answers: for the server's log.
	Unrenewed func()
}

// Driver runs one server's part in the election, from standby to leader to deposed: one loop,
// which the server (actors/broker's Lead, on the wall clock) and the simulator (on its virtual
// clock) both drive, so the simulator proves the loop that runs. As a standby it runs a Candidate's round every
// Every until it wins the key; then a Holder's every Holder.Every until it is deposed or closed.
// A round still in flight when the next is due lets that one pass, as a ticker drops ticks.
type Driver struct {
	cfg Config

	mu sync.Mutex
	// INVARIANT: holder is nil while candidate campaigns; once set, candidate is done.
	candidate *Candidate
	holder    *Holder
	// busy: a round (a chain of actions and outcomes) is in flight.
	busy            bool
	closed, deposed bool
}

// Start begins the standby's part at once: it looks at the key now, and every Every after.
func Start(cfg Config) *Driver {
	d := &Driver{cfg: cfg, candidate: NewCandidate(cfg.Clock.Now(), cfg.TTL, cfg.Value)}
	d.campaign()
	return d
}

// campaign is a standby's tick.
func (d *Driver) campaign() {
	d.mu.Lock()
	if d.closed || d.holder != nil {
		d.mu.Unlock()
		return
	}
	d.cfg.Clock.AfterFunc(Every, d.campaign)
	if d.busy {
		d.mu.Unlock()
		return
	}
	d.busy = true
	a := d.candidate.Tick(d.cfg.Clock.Now())
	d.mu.Unlock()
	d.standby(a)
}

// standby carries out a Candidate's action.
func (d *Driver) standby(a Action) {
	switch a.Kind {
	case None:
		d.mu.Lock()
		d.busy = false
		d.mu.Unlock()
	case Lead:
		d.win(a.Rev)
	case Check:
		d.cfg.Check(a.Value, d.standbyDone)
	default:
		d.cfg.Bucket.Do(a, d.standbyDone)
	}
}

func (d *Driver) standbyDone(o Outcome) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	a := d.candidate.Done(d.cfg.Clock.Now(), o)
	d.mu.Unlock()
	d.standby(a)
}

// win makes the standby the leader: its Holder starts renewing, then the server takes over.
func (d *Driver) win(rev uint64) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.busy = false
	d.holder = NewHolder(d.cfg.Clock.Now(), d.cfg.TTL, d.cfg.Value, rev)
	d.cfg.Clock.AfterFunc(d.holder.Every(), d.renew)
	d.mu.Unlock()
	d.cfg.Won(rev)
}

// renew is a leader's tick.
func (d *Driver) renew() {
	d.mu.Lock()
	if d.closed || d.deposed {
		d.mu.Unlock()
		return
	}
	d.cfg.Clock.AfterFunc(d.holder.Every(), d.renew)
	if d.busy {
		d.mu.Unlock()
		return
	}
	d.busy = true
	a := d.holder.Tick(d.cfg.Clock.Now())
	d.mu.Unlock()
	d.lead(a, Outcome{})
}

// lead carries out a Holder's action; last is the outcome that led to it.
func (d *Driver) lead(a Action, last Outcome) {
	switch a.Kind {
	case None:
		d.mu.Lock()
		d.busy = false
		d.mu.Unlock()
	case Stop:
		d.mu.Lock()
		first := !d.closed && !d.deposed
		d.busy, d.deposed = false, true
		d.mu.Unlock()
		if first {
			d.cfg.Deposed(a.Reason, last)
		}
	default:
		d.cfg.Bucket.Do(a, d.leadDone)
	}
}

func (d *Driver) leadDone(o Outcome) {
	d.mu.Lock()
	if d.closed || d.deposed {
		d.mu.Unlock()
		return
	}
	renewal := d.holder.pending == Renew
	next := d.holder.Done(d.cfg.Clock.Now(), o)
	d.mu.Unlock()
	if mutantStopOnUnansweredRenewal && renewal && o.Kind == Unanswered {
		next = Action{Kind: Stop, Reason: ReasonCutOff}
	}
	if o.Kind == Unanswered && next.Kind != None && next.Kind != Stop && d.cfg.Unrenewed != nil {
		d.cfg.Unrenewed()
	}
	d.lead(next, o)
}

// StreamRefused tells a leader that the stream refused one of its appends (eventlog.ErrFenced):
// another server fenced it, so it leads no more, whatever the key says. The Driver stops as if
// deposed, for ReasonFenced, and calls Deposed unless it was deposed or closed already.
func (d *Driver) StreamRefused() {
	d.mu.Lock()
	if d.closed || d.deposed || d.holder == nil {
		d.mu.Unlock()
		return
	}
	d.deposed = true
	d.mu.Unlock()
	d.cfg.Deposed(ReasonFenced, Outcome{})
}

// Leader is the claim the key last held as a standby saw it since its last pause (nil if none
// was seen): whose URL a standby sends clients to (Candidate.Leader).
func (d *Driver) Leader() []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.candidate.Leader(d.cfg.Clock.Now())
}

// Healthy reports whether this server leads and may say so (Holder.Healthy): what its /readyz
// tells a standby that asks whether it still leads.
func (d *Driver) Healthy() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.holder != nil && !d.deposed && !d.closed && d.holder.Healthy(d.cfg.Clock.Now())
}

// Close stops the Driver: no more actions, and no callbacks after the ones in progress. held
// says whether this server still holds the key, at revision rev, as far as it knows: a server
// that stops resigns it, so that a standby need not wait for it to expire.
func (d *Driver) Close() (rev uint64, held bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.holder == nil || d.deposed {
		return 0, false
	}
	return d.holder.Rev(), true
}
