package cells

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Scheduler runs cells. Schedule puts a delivery in c's mailbox; later, one at a time per cell,
// the scheduler hands it to Runtime.Handle. Schedule must not block and may be called from any
// goroutine the runtime is used on, with one of the runtime's binding locks held.
type Scheduler interface {
	// Start is called once for a new cell, before anything is scheduled to it; a scheduler
	// keeps its mailbox in Cell.Home.
	Start(c *Cell)
	Schedule(c *Cell, d Delivery)
}

// Committer makes events durable. Commit returns at once; c.Done is called once per Commit,
// in the order of the calls, with the receipt of c.Events or the error that stopped them. The
// Dones of durable commits are called on one goroutine at a time, and after those of a group
// (a group commit's, or any number) the committer calls Runtime.Flush on that goroutine: the
// runtime applies and tells a group at once, so that an actor told of many commits of one
// fsync is woken once, not once per commit. A failed commit is told at once.
type Committer interface {
	Commit(c *Commit)
}

// Commit is one persist on its way to the committer: its events, and memory for the log's
// request (eventlog.Log.AppendPayloadsTo, which tells Done), so that a persist costs at most
// one allocation, this. Each persist has its own, never reused: the Persisted notice it
// carries is delivered by pointer, and the cell it goes to may keep it.
type Commit struct {
	Events []eventlog.Payload
	Log    eventlog.AppendRequest

	rt     *Runtime
	p      persisting
	notice actors.Persisted
}

// Done takes the commit's outcome (see Committer).
func (c *Commit) Done(r eventlog.Receipt, err error) { c.rt.committed(c, r, err) }

// Clock is the runtime's time. AfterFunc calls f once d has passed (on any goroutine) unless
// the Timer is stopped first.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is an armed AfterFunc (a *time.Timer, an Agenda's *Item).
type Timer interface {
	Stop() bool
}

// Config configures a Runtime.
type Config struct {
	Scheduler Scheduler
	Committer Committer
	Clock     Clock
	// Monotonic, if set, is the process's own clock, which no step of the wall clock moves
	// (time.Now, whose monotonic reading Sub uses; the simulator's true time): with it the
	// runtime watches itself for stalls (stall.go), and the driver must call Tick.
	Monotonic func() time.Time
	// Set is the projections as recovered; the runtime folds every commit into it.
	Set *projections.Set
	// Make returns the behaviour of a tenant, job or dispatcher cell made on first use, and nil
	// for a Ref that cannot be made (a session that is gone).
	Make func(ref actors.Ref) actors.Behaviour
	// External delivers a message to a party outside the behaviours (RefExternal).
	External func(to actors.Ref, msg any)
	// Rand, if set, is the randomness of every cell (a single-goroutine runtime); otherwise each
	// cell gets its own stream on first use, seeded from the global one.
	Rand *rand.Rand
	// Logger returns a cell's logger, made on first use; nil: no logging.
	Logger func(ref actors.Ref) *zap.Logger
	// Applied, if set, is called after each event is folded into the projections, with the
	// write lock held: the projections at every seq.
	Applied func(seq uint64, at time.Time, p eventlog.Payload)
	// Committed, if set, is called after each commit is applied and told, on the committer's
	// goroutine, before Drain counts the commit done: where production wakes watchers and
	// decides on a checkpoint.
	Committed func()
	// Refused is called when the projections refuse a durable event: the fold and the
	// behaviours disagree. The runtime delivers nothing more of that commit. nil: panic.
	Refused func(seq uint64, p eventlog.Payload, err error)
	// CheckInvariants checks a behaviour's invariants (actors.Checker) after every message it
	// handles, and Broken hears of a failed check (nil: panic).
	CheckInvariants bool
	Broken          func(ref actors.Ref, err error)
}

// Runtime binds Refs to cells and carries out the ordering rules (see the package comment).
// It is safe for concurrent use by the cells of a concurrent scheduler.
type Runtime struct {
	cfg Config

	// shards hold the bindings, spread by Ref so that making and stopping a job's cell (a
	// write lock each) does not stall the sends to every other cell.
	shards [shardCount]shard
	seed   maphash.Seed

	setMu sync.RWMutex // guards set
	set   *projections.Set
	// tableMu is held for reading by a read of the projections' table outside setMu
	// (ReadOutside), and for writing while a checkpoint lets memory drop what the table now
	// holds (Checkpoint.Save): during such a read, memory masks every stored job it masked when
	// the read began. Lock order: tableMu, then setMu.
	tableMu sync.RWMutex

	// issued and applied count persists: issued when handed to the committer, applied once
	// their events are in the projections (or failed). They complete in the order issued.
	issueMu sync.Mutex
	issued  uint64
	closed  bool // no persist may start
	applyMu sync.Mutex
	applied uint64
	advance *sync.Cond
	// settleMu guards durable, the commits whose dones came since the last Flush.
	settleMu sync.Mutex
	durable  []settled
	// flush is Flush's scratch, only the committer's goroutine touches it: the commits it is
	// settling and their deliveries grouped by cell.
	flush flushScratch
	// deferred holds the commits the apply_after_reply mutant has not applied yet.
	deferred []settled
	// turns is held for reading while a behaviour runs (Handle), and for writing by Halt,
	// which ends them for good: after it, nothing a behaviour reads (the log's views) may be
	// open any more.
	turns  sync.RWMutex
	halted bool

	watch watch
}

// cellKey is what names a cell in the map: a Ref without its External handle, which would make
// every lookup hash an interface.
type cellKey struct {
	kind actors.RefKind
	id   string
}

func keyOf(ref actors.Ref) cellKey { return cellKey{ref.Kind, ref.ID} }

const shardCount = 64

// shard binds some of the Refs. A message is scheduled to the cell its Ref is bound to under
// the read lock, and Stop unbinds and schedules the stop under the write lock, so every message
// reaches either the old cell before its stop or a new cell: none is lost in between.
type shard struct {
	mu    sync.RWMutex
	cells map[cellKey]*Cell
}

func (rt *Runtime) shard(k cellKey) *shard {
	return &rt.shards[maphash.String(rt.seed, k.id)%shardCount]
}

// New returns a runtime with no cells.
func New(cfg Config) *Runtime {
	if cfg.Set == nil {
		cfg.Set = projections.New()
	}
	rt := &Runtime{cfg: cfg, seed: maphash.MakeSeed(), set: cfg.Set}
	for i := range rt.shards {
		rt.shards[i].cells = map[cellKey]*Cell{}
	}
	rt.advance = sync.NewCond(&rt.applyMu)
	return rt
}

// Cell is one actor: a Ref bound to a behaviour, which it runs as an actors.Env. Its fields
// other than Home belong to the runtime and are used only on the cell's turn.
type Cell struct {
	rt   *Runtime
	ref  actors.Ref
	beh  actors.Behaviour
	make func() actors.Behaviour // nil: Config.Make
	// Home is the scheduler's: a protoactor PID, a simulator's mailbox.
	Home any

	incarnation uint64
	recovered   bool
	stopped     bool
	// draining: the cell stopped itself (Cell.Stop of its own Ref) and is unbound, but still
	// runs what reached it before, as a stop delivery would have let it.
	draining bool
	sender   actors.Ref
	rand     *rand.Rand
	// pcg and rnd back rand, in the cell itself: a job's cell draws a nonce, and a stream of
	// its own made apart cost two allocations a job.
	pcg      rand.PCG
	rnd      rand.Rand
	log      *zap.Logger
	timers   timerSet
	timerSeq actors.TimerID
	// relayEpoch counts DropRelays: a relay made before the last one sends nothing. It is
	// written on the cell's turn and read on the committer's goroutine.
	relayEpoch atomic.Uint64
	// outbox holds what the cell sends on a batch's turn (coalescing), until the turn ends.
	outbox     []pendingGroup
	coalescing bool
	// commits is the rest of the last chunk of Commits made for the cell's persists
	// (newCommit), and commitChunk the size of the next.
	commits     []Commit
	commitChunk int
}

// Ref names the cell.
func (c *Cell) Ref() actors.Ref { return c.ref }

// Stopped reports whether the cell has handled its stop; the scheduler may then let it go.
func (c *Cell) Stopped() bool { return c.stopped }

type deliveryKind uint8

const (
	kindMessage deliveryKind = iota
	kindPersisted
	kindTimer
	kindStop
	kindWake
	// kindBatch carries several deliveries (msg, a []Delivery) to one cell in one turn: what
	// one Flush tells it.
	kindBatch
)

// Delivery is one item of a cell's mailbox.
type Delivery struct {
	kind        deliveryKind
	msg         any
	sender      actors.Ref
	incarnation uint64
	timer       actors.TimerID
}

// Wake is a delivery that only makes the cell recover if it has not yet.
func Wake() Delivery { return Delivery{kind: kindWake} }

// Droppable reports whether a stopped cell drops the delivery anyway (a Persisted, a timer, a
// batch of those): no message of a sender is lost with it.
func (d Delivery) Droppable() bool {
	if d.kind == kindBatch {
		for _, in := range d.msg.([]Delivery) {
			if !in.Droppable() {
				return false
			}
		}
		return true
	}
	return d.kind == kindPersisted || d.kind == kindTimer
}

// String names the delivery for traces.
func (d Delivery) String() string {
	switch d.kind {
	case kindBatch:
		var b strings.Builder
		for i, in := range d.msg.([]Delivery) {
			if i > 0 {
				b.WriteString("; ")
			}
			b.WriteString(in.String())
		}
		return b.String()
	case kindStop:
		return "stop"
	case kindWake:
		return "wake"
	case kindPersisted:
		return fmt.Sprintf("persisted %T", d.msg.(*actors.Persisted).Then)
	case kindTimer:
		return fmt.Sprintf("timer %T", d.msg)
	}
	return fmt.Sprintf("%T", d.msg)
}

// Send delivers msg from sender to the actor at to: to an external party at once, or into the
// mailbox of the cell bound to to now, making a tenant, job or dispatcher cell on first use. A
// message to a session that is gone bounces.
func (rt *Runtime) Send(to actors.Ref, msg any, sender actors.Ref) {
	if to.Kind == actors.RefExternal {
		rt.cfg.External(to, msg)
		return
	}
	if !rt.schedule(to, Delivery{msg: msg, sender: sender}) {
		rt.bounce(to, msg)
	}
}

// schedule puts d in the mailbox of the cell bound to to now, making a tenant, job or
// dispatcher cell on first use; false if there is none (a session that is gone).
func (rt *Runtime) schedule(to actors.Ref, d Delivery) bool {
	key := keyOf(to)
	sh := rt.shard(key)
	sh.mu.RLock()
	c := sh.cells[key]
	if c != nil {
		rt.cfg.Scheduler.Schedule(c, d)
		sh.mu.RUnlock()
		return true
	}
	sh.mu.RUnlock()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	c = rt.bindLocked(sh, to, nil)
	if c != nil {
		rt.cfg.Scheduler.Schedule(c, d)
	}
	return c != nil
}

// SendIfBound delivers msg to the cell bound to to, if there is one, and reports whether it did;
// it never makes a cell.
func (rt *Runtime) SendIfBound(to actors.Ref, msg any, sender actors.Ref) bool {
	key := keyOf(to)
	sh := rt.shard(key)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	c := sh.cells[key]
	if c != nil {
		rt.cfg.Scheduler.Schedule(c, Delivery{msg: msg, sender: sender})
	}
	return c != nil
}

// Spawn binds ref to a new cell running what make returns (a session, or a behaviour a test
// places), replacing any cell bound there, and returns it. A restart calls make again.
func (rt *Runtime) Spawn(ref actors.Ref, make func() actors.Behaviour) *Cell {
	key := keyOf(ref)
	sh := rt.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	delete(sh.cells, key)
	return rt.bindLocked(sh, ref, make)
}

// Bind returns the cell bound to ref, making a tenant, job or dispatcher cell if there is none;
// nil for a session that is gone.
func (rt *Runtime) Bind(ref actors.Ref) *Cell {
	sh := rt.shard(keyOf(ref))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return rt.bindLocked(sh, ref, nil)
}

// Bound returns the cell bound to ref, or nil.
func (rt *Runtime) Bound(ref actors.Ref) *Cell {
	key := keyOf(ref)
	sh := rt.shard(key)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.cells[key]
}

// Cells returns the cells bound to Refs of kind k.
func (rt *Runtime) Cells(k actors.RefKind) []*Cell {
	var out []*Cell
	for i := range rt.shards {
		sh := &rt.shards[i]
		sh.mu.RLock()
		for key, c := range sh.cells {
			if key.kind == k {
				out = append(out, c)
			}
		}
		sh.mu.RUnlock()
	}
	return out
}

// bindLocked runs with sh, the shard of ref, write-locked.
func (rt *Runtime) bindLocked(sh *shard, ref actors.Ref, make func() actors.Behaviour) *Cell {
	if c := sh.cells[keyOf(ref)]; c != nil {
		return c
	}
	var b actors.Behaviour
	if make == nil {
		if ref.Kind == actors.RefSession {
			return nil // a session is made only by Spawn: one that is gone stays gone
		}
		if b = rt.cfg.Make(ref); b == nil {
			return nil
		}
	} else {
		b = make()
	}
	c := &Cell{rt: rt, ref: ref, make: make, beh: b}
	sh.cells[keyOf(ref)] = c
	rt.cfg.Scheduler.Start(c)
	return c
}

// Stop unbinds ref at once, so the next message to it makes a new cell, and stops the cell
// that was bound after the messages already scheduled to it.
func (rt *Runtime) Stop(ref actors.Ref) {
	key := keyOf(ref)
	sh := rt.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c := sh.cells[key]; c != nil {
		delete(sh.cells, key)
		rt.cfg.Scheduler.Schedule(c, Delivery{kind: kindStop})
	}
}

// Forget unbinds c if it is still bound: the scheduler gave up on it (a supervisor that stopped
// a cell failing too often).
func (rt *Runtime) Forget(c *Cell) {
	key := keyOf(c.ref)
	sh := rt.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.cells[key] == c {
		delete(sh.cells, key)
	}
	c.stopTimers()
}

// bounce sends back what a session that is gone cannot take.
func (rt *Runtime) bounce(to actors.Ref, msg any) {
	if back, notice, ok := actors.Bounce(msg); ok && to.Kind == actors.RefSession {
		rt.Send(back, notice, actors.Ref{})
	}
}

// Handle runs one delivery on the cell; the scheduler calls it on the cell's turn.
func (rt *Runtime) Handle(c *Cell, d Delivery) {
	rt.turns.RLock()
	defer rt.turns.RUnlock()
	if rt.halted {
		return // the broker has closed: no behaviour runs again
	}
	if d.kind == kindBatch {
		// What the cell sends on a batch's turn goes at its end, one delivery per cell it
		// goes to: a tenant told of eight durable submits enqueues them with the dispatcher
		// in one delivery, not eight.
		c.coalescing = true
		defer func() { // a panic sends what was sent before it, as it would without a batch
			c.coalescing = false
			c.sendOutbox()
		}()
		for _, in := range d.msg.([]Delivery) {
			rt.handle(c, in)
		}
		return
	}
	rt.handle(c, d)
}

// handle runs one delivery that is not a batch, on the cell's turn.
func (rt *Runtime) handle(c *Cell, d Delivery) {
	if d.kind == kindStop {
		c.stopped, c.draining = true, false
		c.stopTimers()
		return
	}
	if c.stopped && !c.draining {
		rt.bounce(c.ref, d.msg) // a dead letter
		return
	}
	switch d.kind {
	case kindPersisted:
		if d.incarnation != c.incarnation {
			return
		}
	case kindTimer:
		if c.timers.take(d.timer) == nil || d.incarnation != c.incarnation {
			return
		}
	}
	c.sender = d.sender
	if !c.recovered {
		c.recovered = true
		c.sender = actors.Ref{}
		c.beh.Recover(c)
		c.sender = d.sender
		rt.check(c)
	}
	if d.kind == kindWake {
		return
	}
	c.beh.Receive(c, d.msg)
	rt.check(c)
	if c.draining {
		c.stopTimers()
	}
}

func (rt *Runtime) check(c *Cell) {
	if !rt.cfg.CheckInvariants {
		return
	}
	ch, ok := c.beh.(actors.Checker)
	if !ok {
		return
	}
	if err := ch.CheckInvariants(); err != nil {
		if rt.cfg.Broken == nil {
			panic(fmt.Sprintf("cells: %v broke an invariant: %v", c.ref, err))
		}
		rt.cfg.Broken(c.ref, err)
	}
}

// Restart replaces the cell's behaviour with b (nil: a fresh one of its kind) that recovers
// before its next message, as a supervisor does after a panic. What the old incarnation
// persisted is applied first, and its timers and pending Persisted are dropped. It runs on the
// cell's turn; with a single-goroutine committer, commit everything pending before calling it.
func (rt *Runtime) Restart(c *Cell, b actors.Behaviour) {
	c.stopTimers()
	c.incarnation++
	rt.Drain()
	switch {
	case b != nil:
	case c.make != nil:
		b = c.make()
	default:
		b = rt.cfg.Make(c.ref)
	}
	c.beh, c.recovered = b, false
}

// Persist commits events outside any cell (start-up's), through the same path: done is called
// once they are durable and applied, or failed. Like a behaviour's, the events are the
// runtime's from then on: the caller must not change them.
func (rt *Runtime) Persist(events []eventlog.Payload, done func(eventlog.Receipt, error)) {
	rt.issue(&Commit{p: persisting{events: events, done: done}})
}

// newCommit returns a Commit for a persist of the cell, on its turn. A cell's Commits are
// carved from chunks, the first of two (a job's cell persists its lease and its end) and each
// next one twice as large, up to 16 (a tenant's submits): one allocation for many persists.
// None is reused, so nothing the log or the cell still reads changes; a chunk is garbage once
// all of its Commits are, which is soon after each is told.
func (c *Cell) newCommit() *Commit {
	if len(c.commits) == 0 {
		c.commitChunk = min(max(2*c.commitChunk, 2), 16)
		c.commits = make([]Commit, c.commitChunk)
	}
	cm := &c.commits[0]
	c.commits = c.commits[1:]
	return cm
}

func (c *Cell) persist(events []eventlog.Payload, then any) {
	p := persisting{events: events, cell: c, incarnation: c.incarnation, then: then}
	if mutantPersistedBeforeDurable {
		c.rt.cfg.Scheduler.Schedule(c, Delivery{kind: kindPersisted, msg: &actors.Persisted{Then: then}, incarnation: c.incarnation})
		p.cell, p.done = nil, func(eventlog.Receipt, error) {}
	}
	cm := c.newCommit()
	cm.p = p
	c.rt.issue(cm)
}

func (c *Cell) relay(events []eventlog.Payload, to actors.Ref, msg any) {
	p := persisting{events: events, cell: c, relayTo: to, relay: msg, relayEpoch: c.relayEpoch.Load()}
	if mutantPersistedBeforeDurable {
		c.rt.Send(to, msg, c.ref)
		p.cell, p.relay, p.done = nil, nil, func(eventlog.Receipt, error) {}
	}
	cm := c.newCommit()
	cm.p = p
	c.rt.issue(cm)
}

// persisting is one persist on its way: what it commits and whom to tell.
type persisting struct {
	events []eventlog.Payload
	// A cell's persist tells the cell (Persisted{Then: then}, to the incarnation that made it),
	// or, for a relay, sends relay to relayTo from the cell; Runtime.Persist calls done.
	cell        *Cell
	incarnation uint64
	then        any
	relayTo     actors.Ref
	relay       any
	relayEpoch  uint64 // the cell's relayEpoch when the relay was made
	done        func(eventlog.Receipt, error)
}

// issue hands a persist, in its Commit, to the committer. The persist counts as issued before
// it is handed over, so Drain waits for it; the hand-over itself (where production encodes the
// events) is outside the lock, which every cell's persists share.
func (rt *Runtime) issue(cm *Commit) {
	rt.issueMu.Lock()
	if rt.closed {
		rt.issueMu.Unlock()
		return // a timer fired while the runtime closed; nothing more is committed
	}
	rt.issued++
	rt.issueMu.Unlock()
	cm.Events, cm.rt = cm.p.events, rt
	rt.cfg.Committer.Commit(cm)
}

// committed takes a commit's outcome: a durable one waits for Flush, which applies and tells
// the group it is part of; a failed one, which the projections never see, is told at once.
func (rt *Runtime) committed(c *Commit, r eventlog.Receipt, err error) {
	if err == nil {
		rt.settleMu.Lock()
		rt.durable = append(rt.durable, settled{c: c, r: r})
		rt.settleMu.Unlock()
		return
	}
	switch p := &c.p; {
	case p.relay != nil:
	case p.cell != nil:
		c.notice = actors.Persisted{Then: p.then, Err: err}
		rt.cfg.Scheduler.Schedule(p.cell, Delivery{kind: kindPersisted, msg: &c.notice, incarnation: p.incarnation})
	default:
		p.done(eventlog.Receipt{}, err)
	}
	rt.settledCount(1)
}

// settled is a durable commit waiting for Flush; refused says the projections refused one of
// its events, and nothing of it is told.
type settled struct {
	c       *Commit
	r       eventlog.Receipt
	refused bool
}

// flushScratch is what Flush reuses from one group to the next.
type flushScratch struct {
	group []settled
	// cells and refs group the deliveries of a flush by the cell they go to: a persist's cell,
	// or a relay's Ref, which is bound when the group is scheduled. order is their first
	// appearance, the order the groups are scheduled in.
	cells map[*Cell]int
	refs  map[cellKey]int
	order []pendingGroup
}

// pendingGroup is what one Flush tells one cell: its one delivery, or all of them in more
// once there is a second.
type pendingGroup struct {
	cell  *Cell      // a persist's cell; nil for a relay's, bound to to
	to    actors.Ref // a relay's destination
	first Delivery
	more  []Delivery
	// done and r: a persist made outside the cells (Runtime.Persist), told alone.
	done func(eventlog.Receipt, error)
	r    eventlog.Receipt
}

// add adds a delivery to the group.
func (g *pendingGroup) add(d Delivery) {
	if g.more == nil {
		g.more = []Delivery{g.first}
	}
	g.more = append(g.more, d)
}

// Flush applies the commits made durable since the last Flush to the projections, in log
// order under one hold of the write lock, and only then tells who made them: each cell gets
// what the group holds for it (its Persisted notices, the relays to it) in one delivery, in the
// order of the commits. The committer calls it after the dones of a group (see Committer).
func (rt *Runtime) Flush() {
	rt.settleMu.Lock()
	f := &rt.flush
	f.group, rt.durable = rt.durable, f.group[:0]
	rt.settleMu.Unlock()
	if len(f.group) == 0 {
		return
	}
	if mutantApplyAfterReply {
		// The planted bug: the projections catch up on the next group, after its replies.
		behind := rt.deferred
		rt.deferred = slices.Clone(f.group)
		rt.apply(behind)
	} else {
		rt.apply(f.group)
	}
	rt.deliver(f)
	// The hook runs before the commits count as applied, so Drain (and Close) wait for it too:
	// what it starts, a checkpoint, is then known to whoever waits after a Drain.
	if rt.cfg.Committed != nil {
		rt.cfg.Committed()
	}
	n := len(f.group)
	clear(f.group)
	f.group = f.group[:0]
	rt.settledCount(n)
}

// settledCount counts n persists as applied (or failed), for Drain.
func (rt *Runtime) settledCount(n int) {
	rt.applyMu.Lock()
	rt.applied += uint64(n)
	rt.advance.Broadcast()
	rt.applyMu.Unlock()
}

// apply folds the group's events into the projections, in log order. A commit with an event
// the projections refuse is marked refused, and the fold goes on with the next commit.
func (rt *Runtime) apply(group []settled) {
	rt.setMu.Lock()
	defer rt.setMu.Unlock()
	for k := range group {
		s := &group[k]
		for i, p := range s.c.p.events {
			seq := s.r.First + uint64(i)
			if err := rt.set.Apply(seq, s.r.Time, p); err != nil {
				if rt.cfg.Refused == nil {
					panic(fmt.Sprintf("cells: the projections refused durable seq %d: %v", seq, err))
				}
				rt.cfg.Refused(seq, p, err)
				s.refused = true
				break
			}
			if rt.cfg.Applied != nil {
				rt.cfg.Applied(seq, s.r.Time, p)
			}
		}
	}
}

// deliver tells the group's makers, one delivery per cell, in the order of each cell's first
// notice: nothing is told before what an earlier commit told is scheduled.
func (rt *Runtime) deliver(f *flushScratch) {
	if f.cells == nil {
		f.cells, f.refs = map[*Cell]int{}, map[cellKey]int{}
	}
	for _, s := range f.group {
		p := &s.c.p
		switch {
		case s.refused:
		case p.relay != nil:
			if p.cell.relayEpoch.Load() != p.relayEpoch {
				continue // dropped (Env.DropRelays)
			}
			d := Delivery{msg: p.relay, sender: p.cell.ref}
			if p.relayTo.Kind == actors.RefExternal {
				f.order = append(f.order, pendingGroup{to: p.relayTo, first: d})
				continue
			}
			k := keyOf(p.relayTo)
			if i, ok := f.refs[k]; ok {
				f.order[i].add(d)
				continue
			}
			f.refs[k] = len(f.order)
			f.order = append(f.order, pendingGroup{to: p.relayTo, first: d})
		case p.cell != nil:
			s.c.notice = actors.Persisted{Then: p.then, Receipt: s.r}
			d := Delivery{kind: kindPersisted, msg: &s.c.notice, incarnation: p.incarnation}
			if i, ok := f.cells[p.cell]; ok {
				f.order[i].add(d)
				continue
			}
			f.cells[p.cell] = len(f.order)
			f.order = append(f.order, pendingGroup{cell: p.cell, first: d})
		default:
			f.order = append(f.order, pendingGroup{done: p.done, r: s.r})
		}
	}
	for i := range f.order {
		f.order[i].tell(rt)
		f.order[i] = pendingGroup{}
	}
	f.order = f.order[:0]
	clear(f.cells)
	clear(f.refs)
}

// tell schedules the group's delivery, or calls its done.
func (g *pendingGroup) tell(rt *Runtime) {
	d := g.first
	if g.more != nil {
		d = Delivery{kind: kindBatch, msg: g.more}
	}
	switch {
	case g.done != nil:
		g.done(g.r, nil)
	case g.cell != nil:
		rt.cfg.Scheduler.Schedule(g.cell, d)
	case g.to.Kind == actors.RefExternal:
		rt.cfg.External(g.to, d.msg)
	case !rt.schedule(g.to, d):
		if g.more == nil {
			g.more = []Delivery{g.first}
		}
		for _, in := range g.more {
			rt.bounce(g.to, in.msg)
		}
	}
}

// Drain waits until every persist issued so far is applied. With a single-goroutine
// committer, it must be called only when none is pending.
func (rt *Runtime) Drain() {
	rt.issueMu.Lock()
	target := rt.issued
	rt.issueMu.Unlock()
	rt.applyMu.Lock()
	for rt.applied < target {
		rt.advance.Wait()
	}
	rt.applyMu.Unlock()
}

// Close refuses every persist from now on (a timer that fires late commits nothing) and waits
// for those in flight. The projections are then the caller's alone.
func (rt *Runtime) Close() {
	rt.issueMu.Lock()
	rt.closed = true
	rt.issueMu.Unlock()
	rt.Drain()
}

// Halt waits for the behaviours running now to finish their turn and runs none again: what the
// broker closes after it (the log, and the views on its disk) no behaviour can touch. Close it
// first, so that nothing is left to persist.
func (rt *Runtime) Halt() {
	rt.turns.Lock()
	rt.halted = true
	rt.turns.Unlock()
}

// Read runs fn with the projections under the read lock. fn must not keep or modify what it
// reads.
func (rt *Runtime) Read(fn func(*projections.Set)) {
	rt.setMu.RLock()
	defer rt.setMu.RUnlock()
	fn(rt.set)
}

// ReadOutside runs fn, which reads the projections' table on disk with no lock held and its
// memory through locked, which runs its argument under the read lock, as often as fn needs
// (projections.ListOutside, projections.JobOutside): commits go on while it reads the disk.
// No checkpoint ends (lets memory drop what the table holds) until fn returns.
func (rt *Runtime) ReadOutside(fn func(locked projections.Locked)) {
	rt.tableMu.RLock()
	defer rt.tableMu.RUnlock()
	fn(rt.Read)
}

// Set returns the projections, for a single-goroutine driver or once the runtime is closed.
func (rt *Runtime) Set() *projections.Set { return rt.set }

// The actors.Env methods. They run on the cell's turn.

// Now is the runtime's clock.
func (c *Cell) Now() time.Time { return c.rt.cfg.Clock.Now() }

// Resumed is when the runtime last came back from a stall (Runtime.Resumed).
func (c *Cell) Resumed() time.Time { return c.rt.Resumed() }

// Rand is the runtime's shared randomness, or a stream of the cell's own made on first use
// (most job cells draw only a nonce). Secrets never come from here but from crypto/rand.
func (c *Cell) Rand() *rand.Rand {
	if c.rt.cfg.Rand != nil {
		return c.rt.cfg.Rand
	}
	if c.rand == nil {
		c.pcg.Seed(rand.Uint64(), rand.Uint64())
		c.rnd = *rand.New(&c.pcg)
		c.rand = &c.rnd
	}
	return c.rand
}

// Log returns the cell's logger, made on first use because most cells never log.
func (c *Cell) Log() *zap.Logger {
	if c.log == nil {
		if c.rt.cfg.Logger == nil {
			c.log = zap.NewNop()
		} else {
			c.log = c.rt.cfg.Logger(c.ref)
		}
	}
	return c.log
}

// Sender is who sent the message being handled.
func (c *Cell) Sender() actors.Ref { return c.sender }

// Persist hands events to the committer; Persisted{Then: then} comes back once they are durable
// and applied.
func (c *Cell) Persist(events []eventlog.Payload, then any) { c.persist(events, then) }

// Relay hands events to the committer; msg goes to `to`, from this cell, once they are durable
// and applied.
func (c *Cell) Relay(events []eventlog.Payload, to actors.Ref, msg any) { c.relay(events, to, msg) }

// DropRelays keeps the cell's relays made so far from sending their messages.
func (c *Cell) DropRelays() { c.relayEpoch.Add(1) }

// Send delivers msg to an actor, from this cell.
func (c *Cell) Send(to actors.Ref, msg any) { c.Forward(to, msg, c.ref) }

// Forward delivers msg as if sender had sent it.
func (c *Cell) Forward(to actors.Ref, msg any, sender actors.Ref) {
	if !c.coalescing {
		c.rt.Send(to, msg, sender)
		return
	}
	d := Delivery{msg: msg, sender: sender}
	if to.Kind != actors.RefExternal {
		for i := range c.outbox {
			if g := &c.outbox[i]; g.to.Kind != actors.RefExternal && keyOf(g.to) == keyOf(to) {
				g.add(d)
				return
			}
		}
	}
	c.outbox = append(c.outbox, pendingGroup{to: to, first: d})
}

// sendOutbox sends what the cell holds back on a batch's turn, in the order of each
// destination's first message.
func (c *Cell) sendOutbox() {
	for i := range c.outbox {
		c.outbox[i].tell(c.rt)
		c.outbox[i] = pendingGroup{}
	}
	c.outbox = c.outbox[:0]
}

// After delivers msg to this incarnation of the cell once d has passed on the clock.
func (c *Cell) After(d time.Duration, msg any) actors.TimerID {
	c.timerSeq++
	id, inc, rt := c.timerSeq, c.incarnation, c.rt
	c.timers.put(id, rt.cfg.Clock.AfterFunc(d, func() {
		rt.cfg.Scheduler.Schedule(c, Delivery{kind: kindTimer, msg: msg, incarnation: inc, timer: id})
	}))
	return id
}

// Cancel stops a timer of this cell; it will not fire.
func (c *Cell) Cancel(id actors.TimerID) {
	if t := c.timers.take(id); t != nil {
		t.Stop()
	}
}

// Stop stops the actor at ref after the messages already sent to it. A cell that stops itself
// is unbound at once and stops at the end of its turn, with no stop delivery: what reached it
// before still runs on it, and what is sent after goes to a new cell.
func (c *Cell) Stop(ref actors.Ref) {
	c.sendOutbox() // what was sent before the stop reaches the cell it stops
	if keyOf(ref) != keyOf(c.ref) {
		c.rt.Stop(ref)
		return
	}
	key := keyOf(ref)
	sh := c.rt.shard(key)
	sh.mu.Lock()
	if sh.cells[key] == c {
		delete(sh.cells, key)
	}
	sh.mu.Unlock()
	c.stopped, c.draining = true, true
}

// Read runs fn with the committed projections.
func (c *Cell) Read(fn func(*projections.Set)) { c.rt.Read(fn) }

// ReadBy runs r with the committed projections.
func (c *Cell) ReadBy(r actors.Reader) {
	c.rt.setMu.RLock()
	defer c.rt.setMu.RUnlock()
	r.ReadProjections(c.rt.set)
}

func (c *Cell) stopTimers() { c.timers.stopAll() }

// timerSet is a cell's running timers by id. A job's cell runs one at a time (its lease's
// expiry), so the first few live in the cell itself, and a map, made only for more, holds the
// rest: a map per job cell cost two allocations a job.
type timerSet struct {
	first [2]struct {
		id actors.TimerID // 0: free (ids count from 1)
		t  Timer
	}
	more map[actors.TimerID]Timer
}

func (s *timerSet) put(id actors.TimerID, t Timer) {
	for i := range s.first {
		if s.first[i].id == 0 {
			s.first[i].id, s.first[i].t = id, t
			return
		}
	}
	if s.more == nil {
		s.more = map[actors.TimerID]Timer{}
	}
	s.more[id] = t
}

// take removes the timer id and returns it, nil if it is not running.
func (s *timerSet) take(id actors.TimerID) Timer {
	for i := range s.first {
		if s.first[i].id == id {
			t := s.first[i].t
			s.first[i].id, s.first[i].t = 0, nil
			return t
		}
	}
	t := s.more[id]
	delete(s.more, id)
	return t
}

func (s *timerSet) stopAll() {
	for i := range s.first {
		if t := s.first[i].t; t != nil {
			t.Stop()
		}
		s.first[i].id, s.first[i].t = 0, nil
	}
	for id, t := range s.more {
		t.Stop()
		delete(s.more, id)
	}
}

var _ actors.Env = (*Cell)(nil)

// Checkpoint is a checkpoint of the projections in the making (projections.Flush): begun
// between two commits, written to the log wherever the driver likes while commits go on, and
// ended under the write lock, when the projections let go of what the log's table now holds.
type Checkpoint struct {
	rt    *Runtime
	flush *projections.Flush
}

// BeginCheckpoint starts a checkpoint of the projections as the last applied commit left them.
// It must be called where no commit is being applied (the committer's goroutine after a
// commit, or a single-goroutine driver), with no other checkpoint in progress; it costs the
// live jobs and what changed since the last checkpoint, not the history.
func (rt *Runtime) BeginCheckpoint() *Checkpoint {
	rt.setMu.RLock()
	defer rt.setMu.RUnlock()
	return &Checkpoint{rt: rt, flush: rt.set.BeginFlush()}
}

// Seq is the seq the checkpoint covers.
func (c *Checkpoint) Seq() uint64 { return c.flush.Seq() }

// endFlushPart is how many jobs a checkpoint lets go of per hold of the write lock.
const endFlushPart = 256

// Save writes the checkpoint and the changes to the finished jobs' table to the log in one
// batch, then lets the projections drop from memory what the table now holds, a part at a time
// so that commits and reads go on between the parts; reads of the table outside the lock
// (ReadOutside) wait for the whole of that last step, and it for them.
func (c *Checkpoint) Save(l *eventlog.Log) error {
	if err := c.flush.Write(l); err != nil {
		return err
	}
	// The table's new copies are masked until memory lets go of them: a read outside setMu
	// sees them come, but not the masks go.
	c.rt.tableMu.Lock()
	defer c.rt.tableMu.Unlock()
	for done := false; !done; {
		c.rt.setMu.Lock()
		done = c.rt.set.EndFlushPart(c.flush, endFlushPart)
		c.rt.setMu.Unlock()
	}
	return nil
}
