// Package actorstest runs behaviours in a deterministic, single-goroutine world: the shared
// cell runtime (actors/cells) driven by a virtual clock, a seeded PRNG, one FIFO of deliveries
// and projections fed by the events the behaviours persist. Tests script it (given events, when
// a message, then events or a rejection), and it checks the behaviours' invariants after every
// message.
//
// Durability is explicit: persisted events wait until Sync (Run syncs whenever the world is
// otherwise idle), so a test can look at the moment between a decision and its fsync.
//
// The runtime watches itself for stalls on the world's clock: Advance ticks it every
// cells.TickEvery as the clock moves, and Stall moves the clock with no tick, as a process
// stopped for a while.
package actorstest

import (
	"math/rand/v2"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/cells"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Record is an event the world made durable.
type Record struct {
	Seq     uint64
	Time    time.Time
	Payload eventlog.Payload
}

// World is the deterministic driver of the cell runtime. Its fields may be read between calls.
type World struct {
	Clock  time.Time
	Set    *projections.Set
	Log    []Record
	Limits actors.Limits
	// Retention is the dispatcher's policy for finished jobs (zero: keep them).
	Retention projections.Retention
	// Applied, if set, is called after each durable event is folded into Set, with the Set as
	// it stands at that record: the live projections at every seq.
	Applied func(Record)

	rt      *cells.Runtime
	queue   []queued
	pending []pendingCommit
	agenda  cells.Agenda
	inbox   map[string][]any // replies and frames by external name
	ticked  time.Time        // the clock at the runtime's last tick
}

type queued struct {
	c *cells.Cell
	d cells.Delivery
}

type pendingCommit struct {
	events []eventlog.Payload
	done   func(eventlog.Receipt, error)
}

// New returns a world whose clock starts at start and whose randomness comes from seed.
func New(seed uint64, start time.Time) *World {
	w := &World{Clock: start, inbox: map[string][]any{}}
	w.rt = cells.New(cells.Config{
		Scheduler: (*fifo)(w), Committer: (*syncer)(w), Clock: (*clock)(w),
		Monotonic: func() time.Time { return w.Clock },
		Make:      w.make,
		External: func(to actors.Ref, msg any) {
			w.inbox[to.ID] = append(w.inbox[to.ID], msg)
		},
		Rand: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		Applied: func(seq uint64, at time.Time, p eventlog.Payload) {
			w.Log = append(w.Log, Record{Seq: seq, Time: at, Payload: p})
			if w.Applied != nil {
				w.Applied(w.Log[len(w.Log)-1])
			}
		},
		CheckInvariants: true,
	})
	w.Set = w.rt.Set()
	w.tick()
	return w
}

// tick ticks the runtime's stall watch at the clock's time.
func (w *World) tick() {
	w.ticked = w.Clock
	w.rt.Tick()
}

// tickTo ticks the runtime every cells.TickEvery from its last tick up to at, moving the clock
// with the ticks: the process ran all along. After a Stall the first tick is at once.
func (w *World) tickTo(at time.Time) {
	for {
		next := w.ticked.Add(cells.TickEvery)
		if next.Before(w.Clock) {
			next = w.Clock
		}
		if next.After(at) {
			return
		}
		w.Clock = next
		w.tick()
	}
}

func (w *World) make(ref actors.Ref) actors.Behaviour {
	switch ref.Kind {
	case actors.RefDispatcher:
		return actors.NewDispatcher(w.Retention)
	case actors.RefTenant:
		return actors.NewTenant(ref.ID, w.Limits)
	case actors.RefJob:
		return actors.NewJob(ref.ID)
	}
	return nil
}

// fifo is the world's scheduler: one queue for every cell, in the order things were sent.
type fifo World

func (f *fifo) Start(*cells.Cell) {}
func (f *fifo) Schedule(c *cells.Cell, d cells.Delivery) {
	f.queue = append(f.queue, queued{c: c, d: d})
}

// syncer is the world's committer: commits wait until Sync.
type syncer World

func (s *syncer) Commit(c *cells.Commit) {
	s.pending = append(s.pending, pendingCommit{events: c.Events, done: c.Done})
}

// clock is the world's virtual clock.
type clock World

func (c *clock) Now() time.Time { return c.Clock }
func (c *clock) AfterFunc(d time.Duration, f func()) cells.Timer {
	return c.agenda.At(c.Clock.Add(d), "", f)
}

// External is the Ref of a named party outside the behaviours (a caller, a worker's
// connection); what is sent to it lands in Inbox(name).
func External(name string) actors.Ref { return actors.Ref{Kind: actors.RefExternal, ID: name} }

// Inbox returns and clears what was sent to External(name).
func (w *World) Inbox(name string) []any {
	msgs := w.inbox[name]
	delete(w.inbox, name)
	return msgs
}

// Spawn places a behaviour at ref; actors of the other kinds are made on first use.
func (w *World) Spawn(ref actors.Ref, b actors.Behaviour) {
	w.rt.Spawn(ref, func() actors.Behaviour { return b })
}

// Send queues a message from sender.
func (w *World) Send(to actors.Ref, msg any, sender actors.Ref) { w.rt.Send(to, msg, sender) }

// Call sends msg from External(name), runs the world until it is idle, and returns what
// External(name) received.
func (w *World) Call(name string, to actors.Ref, msg any) []any {
	w.Send(to, msg, External(name))
	w.Run()
	return w.Inbox(name)
}

// Step delivers the queued messages until none is left, without syncing. It returns how many
// it delivered.
func (w *World) Step() int {
	n := 0
	for len(w.queue) > 0 {
		q := w.queue[0]
		w.queue[0] = queued{}
		w.queue = w.queue[1:]
		w.rt.Handle(q.c, q.d)
		n++
	}
	return n
}

// Sync makes every pending persist durable, in order, which queues their Persisted messages.
func (w *World) Sync() {
	pending := w.pending
	w.pending = nil
	first := uint64(len(w.Log)) + 1
	for _, p := range pending {
		last := first + uint64(len(p.events)) - 1
		p.done(eventlog.Receipt{First: first, Last: last, Time: w.Clock}, nil)
		first = last + 1
	}
	w.rt.Flush() // one group commit
}

// FailSync fails every pending persist, as a failed fsync does: nothing becomes durable, and
// each actor gets Persisted with Err set.
func (w *World) FailSync(err error) {
	pending := w.pending
	w.pending = nil
	for _, p := range pending {
		p.done(eventlog.Receipt{}, err)
	}
}

// Run delivers and syncs until nothing is queued or pending. Timers do not fire; Advance moves
// the clock.
func (w *World) Run() {
	for {
		w.Step()
		if len(w.pending) == 0 {
			return
		}
		w.Sync()
	}
}

// Advance moves the clock forward by d, firing timers as their time comes, and runs the world.
func (w *World) Advance(d time.Duration) { w.advance(d, w.Run) }

// AdvanceUnsynced moves the clock forward by d as Advance does, firing timers as their time
// comes, but makes nothing durable: the log is slow (a disk that stalls, a replicated log that
// waits on its stream), and what is persisted meanwhile waits for a Sync.
func (w *World) AdvanceUnsynced(d time.Duration) { w.advance(d, func() { w.Step() }) }

func (w *World) advance(d time.Duration, run func()) {
	end := w.Clock.Add(d)
	run()
	for {
		it, ok := w.agenda.Next()
		if !ok || it.At.After(end) {
			break
		}
		w.agenda.Take()
		if it.At.After(w.Clock) {
			w.tickTo(it.At)
			w.Clock = it.At
		}
		it.Run()
		run()
	}
	w.tickTo(end)
	w.Clock = end
}

// Stall stops the process for d: the clock moves, and nothing runs, not even the runtime's
// ticks. Then it goes on as a process does after a SIGSTOP: the timers that came due meanwhile
// fire first, all at once, before anything sent to it after (a heartbeat that waited in a
// socket) is read; the world runs once they have.
func (w *World) Stall(d time.Duration) {
	w.Run()
	w.Clock = w.Clock.Add(d)
	for {
		it, ok := w.agenda.Next()
		if !ok || it.At.After(w.Clock) {
			break
		}
		w.agenda.Take()
		it.Run()
	}
	w.Run()
}

// Since returns the payloads made durable after the first n records.
func (w *World) Since(n int) []eventlog.Payload {
	var out []eventlog.Payload
	for _, r := range w.Log[n:] {
		out = append(out, r.Payload)
	}
	return out
}

// Types returns the event types of payloads, for compact assertions.
func Types(ps []eventlog.Payload) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.EventType()
	}
	return out
}

// Restart replaces the actor at ref with a fresh behaviour that recovers before its next
// message, as a supervisor does after a panic. Pending persists are synced first, as the
// runtime waits for them.
func (w *World) Restart(ref actors.Ref, b actors.Behaviour) {
	w.Sync()
	if c := w.rt.Bound(ref); c != nil {
		w.rt.Restart(c, b)
		return
	}
	w.Spawn(ref, b)
}

// Connect opens a worker session whose frames land in Inbox(sink), and runs the world. It
// returns what the caller received.
func (w *World) Connect(sessionID, sink string, open actors.OpenSession) []any {
	ref := actors.SessionRef(sessionID)
	w.Spawn(ref, actors.NewSession(sessionID, External(sink)))
	return w.Call("connect:"+sessionID, ref, open)
}
