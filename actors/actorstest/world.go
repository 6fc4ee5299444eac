// Package actorstest runs behaviours in a deterministic, single-goroutine world: a virtual
// clock, a seeded PRNG, one FIFO of deliveries, timers on the virtual clock, and projections fed
// by the events the behaviours persist. Tests script it (given events, when a message, then
// events or a rejection); the simulator grows from it.
//
// Durability is explicit: persisted events wait until Sync (Run syncs whenever the world is
// otherwise idle), so a test can look at the moment between a decision and its fsync.
package actorstest

import (
	"container/heap"
	"math/rand/v2"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Record is an event the world made durable.
type Record struct {
	Seq     uint64
	Time    time.Time
	Payload eventlog.Payload
}

// World is the deterministic runtime. Its fields may be read between calls.
type World struct {
	Clock  time.Time
	Set    *projections.Set
	Log    []Record
	Limits actors.Limits
	// Applied, if set, is called after each durable event is folded into Set, with the Set as
	// it stands at that record: the live projections at every seq.
	Applied func(Record)

	rand     *rand.Rand
	cells    map[actors.Ref]*cell
	queue    []delivery
	pending  []pendingPersist
	timers   timerHeap
	timerSeq uint64
	inbox    map[string][]any // replies and frames by external name
	logger   *zap.Logger
}

type cell struct {
	ref       actors.Ref
	b         actors.Behaviour
	stopped   bool
	recovered bool
	// incarnation counts restarts; a Persisted meant for an earlier incarnation is dropped,
	// since the new one rebuilt its state with those events in it.
	incarnation int
}

type delivery struct {
	to     actors.Ref
	cell   *cell // the actor at `to` when the message was sent, if there was one
	msg    any
	sender actors.Ref
	stop   bool
	inc    int
}

type pendingPersist struct {
	from   *cell
	events []eventlog.Payload
	then   any
	inc    int
}

// New returns a world whose clock starts at start and whose randomness comes from seed.
func New(seed uint64, start time.Time) *World {
	return &World{
		Clock: start, Set: projections.New(), rand: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		cells: map[actors.Ref]*cell{}, inbox: map[string][]any{}, logger: zap.NewNop(),
	}
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

func (w *World) commit(events []eventlog.Payload) eventlog.Receipt {
	r := eventlog.Receipt{First: uint64(len(w.Log)) + 1, Time: w.Clock}
	for _, e := range events {
		seq := uint64(len(w.Log)) + 1
		if err := w.Set.Apply(seq, w.Clock, e); err != nil {
			panic(err)
		}
		w.Log = append(w.Log, Record{Seq: seq, Time: w.Clock, Payload: e})
		if w.Applied != nil {
			w.Applied(w.Log[len(w.Log)-1])
		}
	}
	r.Last = uint64(len(w.Log))
	return r
}

// Spawn places a behaviour at ref; actors of the other kinds are made on first use.
func (w *World) Spawn(ref actors.Ref, b actors.Behaviour) {
	w.cells[ref] = &cell{ref: ref, b: b}
}

// Send queues a message from sender.
func (w *World) Send(to actors.Ref, msg any, sender actors.Ref) {
	w.enqueue(delivery{to: to, msg: msg, sender: sender})
}

// enqueue binds a message to the actor at its Ref now, as a mailbox would: an actor stopped
// later still gets what was sent to it before, and a Ref reused after a stop names a new actor.
func (w *World) enqueue(d delivery) {
	d.cell = w.cells[d.to]
	w.queue = append(w.queue, d)
}

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
		d := w.queue[0]
		w.queue = w.queue[1:]
		w.deliver(d)
		n++
	}
	return n
}

// Sync makes every pending persist durable, in order, and queues their Persisted messages.
func (w *World) Sync() {
	pending := w.pending
	w.pending = nil
	for _, p := range pending {
		r := w.commit(p.events)
		w.queue = append(w.queue, delivery{to: p.from.ref, cell: p.from, msg: actors.Persisted{Then: p.then, Receipt: r}, inc: p.inc})
	}
}

// FailSync fails every pending persist, as a failed fsync does: nothing becomes durable, and
// each actor gets Persisted with Err set.
func (w *World) FailSync(err error) {
	pending := w.pending
	w.pending = nil
	for _, p := range pending {
		w.queue = append(w.queue, delivery{to: p.from.ref, cell: p.from, msg: actors.Persisted{Then: p.then, Err: err}, inc: p.inc})
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
func (w *World) Advance(d time.Duration) {
	end := w.Clock.Add(d)
	w.Run()
	for len(w.timers) > 0 && !w.timers[0].due.After(end) {
		t := heap.Pop(&w.timers).(*timer)
		if t.cancelled {
			continue
		}
		w.Clock = maxTime(w.Clock, t.due)
		w.queue = append(w.queue, delivery{to: t.owner.ref, cell: t.owner, msg: t.msg})
		w.Run()
	}
	w.Clock = end
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
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

func (w *World) deliver(d delivery) {
	if d.to.Kind == actors.RefExternal {
		w.inbox[d.to.ID] = append(w.inbox[d.to.ID], d.msg)
		return
	}
	c := d.cell
	if c == nil {
		c = w.cells[d.to]
	}
	if d.stop {
		if c != nil {
			c.stopped = true
		}
		return
	}
	if c != nil && c.stopped {
		w.bounce(d)
		return // a dead letter
	}
	if _, ok := d.msg.(actors.Persisted); ok && d.inc != c.incarnation {
		return
	}
	if c == nil {
		c = &cell{ref: d.to, b: w.make(d.to)}
		if c.b == nil {
			w.bounce(d)
			return // a session that is gone: a dead letter
		}
		w.cells[d.to] = c
	}
	env := &env{w: w, self: c, sender: d.sender}
	if !c.recovered {
		c.recovered = true
		c.b.Recover(env)
	}
	c.b.Receive(env, d.msg)
}

// bounce sends back what a session that is gone cannot take, as the runtime does.
func (w *World) bounce(d delivery) {
	if to, notice, ok := actors.Bounce(d.msg); ok && d.to.Kind == actors.RefSession {
		w.enqueue(delivery{to: to, msg: notice})
	}
}

func (w *World) make(ref actors.Ref) actors.Behaviour {
	switch ref.Kind {
	case actors.RefDispatcher:
		return actors.NewDispatcher()
	case actors.RefTenant:
		return actors.NewTenant(ref.ID, w.Limits)
	case actors.RefJob:
		return actors.NewJob(ref.ID)
	}
	return nil
}

// Restart replaces the actor at ref with a fresh behaviour that recovers before its next
// message, as the runtime does after a panic. Pending persists are synced first, as the runtime
// waits for them.
func (w *World) Restart(ref actors.Ref, b actors.Behaviour) {
	w.Sync()
	c := w.cells[ref]
	if c == nil {
		c = &cell{ref: ref}
		w.cells[ref] = c
	}
	c.b, c.recovered = b, false
	c.incarnation++
}

// Connect opens a worker session whose frames land in Inbox(sink), and runs the world. It
// returns what the caller received.
func (w *World) Connect(sessionID, sink string, open actors.OpenSession) []any {
	ref := actors.SessionRef(sessionID)
	w.Spawn(ref, actors.NewSession(sessionID, External(sink)))
	return w.Call("connect:"+sessionID, ref, open)
}

type env struct {
	w      *World
	self   *cell
	sender actors.Ref
}

func (e *env) Now() time.Time     { return e.w.Clock }
func (e *env) Rand() *rand.Rand   { return e.w.rand }
func (e *env) Log() *zap.Logger   { return e.w.logger }
func (e *env) Sender() actors.Ref { return e.sender }

func (e *env) Persist(events []eventlog.Payload, then any) {
	e.w.pending = append(e.w.pending, pendingPersist{from: e.self, events: slices.Clone(events), then: then, inc: e.self.incarnation})
}

func (e *env) Send(to actors.Ref, msg any) {
	e.w.enqueue(delivery{to: to, msg: msg, sender: e.self.ref})
}

func (e *env) Forward(to actors.Ref, msg any, sender actors.Ref) {
	e.w.enqueue(delivery{to: to, msg: msg, sender: sender})
}

func (e *env) After(d time.Duration, msg any) actors.TimerID {
	e.w.timerSeq++
	heap.Push(&e.w.timers, &timer{id: e.w.timerSeq, due: e.w.Clock.Add(d), owner: e.self, msg: msg, seq: e.w.timerSeq})
	return actors.TimerID(e.w.timerSeq)
}

func (e *env) Cancel(id actors.TimerID) {
	for _, t := range e.w.timers {
		if t.id == uint64(id) {
			t.cancelled = true
		}
	}
}

func (e *env) Stop(ref actors.Ref) {
	e.w.enqueue(delivery{to: ref, stop: true})
	delete(e.w.cells, ref)
}

func (e *env) Read(fn func(*projections.Set)) { fn(e.w.Set) }

type timer struct {
	id        uint64
	due       time.Time
	owner     *cell
	msg       any
	seq       uint64
	cancelled bool
}

type timerHeap []*timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if c := h[i].due.Compare(h[j].due); c != 0 {
		return c < 0
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(*timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}
