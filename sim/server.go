package sim

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/audit"
)

// dataDir is where the server keeps its log on the simulated disk.
const dataDir = "/data"

// server is the simulated tether process: the production behaviours in per-actor mailboxes, the
// production projections, and the production log on Pebble's crashable in-memory filesystem.
// What the runtime does with protoactor and goroutines (mailboxes, timers, group commit,
// start-up) it does in the simulator's one goroutine. A crash throws all of it away but the
// disk, cut the way a power loss would cut it.
type server struct {
	s     *Sim
	epoch int // bumped by every crash; what belongs to an older epoch is dead
	up    bool
	// recovering is set from start until the start-up events are durable; the server takes no
	// requests meanwhile (it would answer /readyz with 503).
	recovering bool

	mem  *vfs.MemFS
	disk *disk
	log  *eventlog.Log
	set  *projections.Set

	cells     map[actors.Ref]*cell
	runnable  []*cell
	pending   []*persist
	committer bool                    // a commit item is scheduled
	timers    map[actors.TimerID]bool // armed and neither fired nor cancelled
	timerSeq  actors.TimerID
	external  map[string]func(any)
	extSeq    int
	polls     map[string]*simPoll // long polls waiting, by session

	// synced is the highest head the simulator saw made durable; it must survive every crash.
	synced eventlog.Head
	// lastBatch is the commit in flight when the server crashed mid-commit: if some of it
	// survives, the oracle folds it with the times it was decided at.
	lastBatch []*persist
	commits   int
}

type cell struct {
	ref       actors.Ref
	b         actors.Behaviour
	box       []delivery
	queued    bool
	recovered bool
	stopped   bool
}

type delivery struct {
	msg    any
	sender actors.Ref
	stop   bool
}

type persist struct {
	cell      *cell // nil for the start-up events
	events    []eventlog.Payload
	then      any
	decidedAt time.Time
	clock     int // the clock-jump count when it was decided
}

func newServer(s *Sim) *server {
	return &server{s: s, mem: vfs.NewCrashableMem()}
}

// start opens the log on the disk as it is and brings the server up the way the runtime does:
// projections from the checkpoint and the tail, the stale sessions ended, the dispatcher, then
// the tenants with reservations and the leased jobs. It checks on the way that nothing durable
// was lost and that the checkpoint plus the tail equals a full replay.
func (v *server) start() {
	s := v.s
	v.disk = &disk{}
	l, err := eventlog.Open(dataDir, eventlog.Options{FS: errorfs.Wrap(v.mem, v.disk), Clock: s.serverNow})
	if err != nil {
		s.fail("recovery", "the log does not open after a crash: %v", err)
		return
	}
	v.log = l
	set, _, err := projections.Rebuild(l, func(err error) { s.fail("checkpoint", "the checkpoint is unusable: %v", err) })
	if err != nil {
		s.fail("recovery", "the projections do not rebuild: %v", err)
		return
	}
	v.set = set
	v.up, v.recovering = true, true
	v.cells, v.runnable, v.pending, v.committer = map[actors.Ref]*cell{}, nil, nil, false
	v.timers, v.external, v.polls = map[actors.TimerID]bool{}, map[string]func(any){}, map[string]*simPoll{}
	if !v.checkRecovered() {
		return
	}
	s.record(fmt.Sprintf("server up at seq %d", l.Head().Seq))
	if ends := actors.StaleSessionEnds(v.set); len(ends) > 0 {
		v.pending = append(v.pending, &persist{events: ends, decidedAt: s.serverNow(), clock: s.clockJumps})
		if !v.commit() {
			return
		}
	}
	epoch := v.epoch
	v.recover(v.cellAt(actors.DispatcherRef()))
	for _, ref := range actors.ResumedRefs(v.set) {
		if v.epoch != epoch {
			return
		}
		v.recover(v.cellAt(ref))
	}
	if len(v.pending) == 0 {
		v.recovering = false
	} else {
		v.scheduleCommit()
	}
}

// checkRecovered checks a freshly opened log against what the simulator saw durable, then
// folds into the oracle what survived beyond it.
func (v *server) checkRecovered() bool {
	s := v.s
	head := v.log.Head()
	if head.Seq < v.synced.Seq {
		s.fail("durability", "the log recovered to seq %d, but seq %d was durable before the crash", head.Seq, v.synced.Seq)
		return false
	}
	if v.synced.Seq > 0 {
		r, err := v.log.Get(v.synced.Seq)
		if err != nil || r.Hash != v.synced.Hash {
			s.fail("durability", "the durable prefix changed: seq %d's hash is not the one acknowledged (%v)", v.synced.Seq, err)
			return false
		}
	}
	if head.Seq > v.synced.Seq {
		s.probe(ProbeUnsyncedSurvived)
		var decided []*persist
		for _, p := range v.lastBatch {
			for range p.events {
				decided = append(decided, p)
			}
		}
		i := 0
		for r, err := range v.log.Range(v.synced.Seq+1, 0) {
			if err != nil {
				s.fail("chain", "reading the surviving tail: %v", err)
				return false
			}
			p, err := eventlog.Decode(r.Type, r.Data)
			if err != nil {
				s.fail("chain", "seq %d does not decode: %v", r.Seq, err)
				return false
			}
			at, clock := r.Time, -1
			if i < len(decided) {
				at, clock = decided[i].decidedAt, decided[i].clock
			}
			i++
			s.oracle.apply(r.Seq, r.Time, p, at, clock)
		}
		v.synced = head
	}
	v.lastBatch = nil
	if _, err := audit.Verify(context.Background(), v.log, nil); err != nil {
		s.fail("replay", "the recovered log does not verify: %v", err)
		return false
	}
	return v.sameAsReplay("checkpoint + tail")
}

// sameAsReplay compares the live projections with a full replay of the log.
func (v *server) sameAsReplay(what string) bool {
	replay := projections.New()
	for r, err := range v.log.Range(1, 0) {
		if err == nil {
			err = replay.ApplyRecord(r)
		}
		if err != nil {
			v.s.fail("replay", "replaying the log: %v", err)
			return false
		}
	}
	live, err1 := v.set.MarshalCheckpoint()
	full, err2 := replay.MarshalCheckpoint()
	if err1 != nil || err2 != nil || !bytes.Equal(live, full) {
		v.s.fail("replay", "%s differs from a full replay of the log at seq %d", what, replay.Seq())
		return false
	}
	return true
}

// crash kills the process now. keepPercent of the WAL's unsynced blocks survive.
func (v *server) crash(why string) {
	s := v.s
	if !v.up {
		return
	}
	if v.recovering {
		s.probe(ProbeRecoveryCrash)
	}
	keep := s.faultRand[FaultServerCrash].IntN(101)
	mem, err := crashClone(v.mem, dataDir, keep, s.faultRand[FaultServerCrash])
	if err != nil {
		panic(fmt.Sprintf("sim: crash clone: %v", err))
	}
	v.shutdown()
	v.mem = mem
	v.epoch++
	v.up, v.recovering = false, false
	v.cells, v.runnable, v.pending, v.external = nil, nil, nil, nil
	s.record(fmt.Sprintf("server crash (%s), %d%% of unsynced WAL blocks kept", why, keep))
	for _, w := range s.workers {
		w.serverCrashed()
	}
	s.after(time.Duration(50+s.faultRand[FaultServerCrash].IntN(3000))*time.Millisecond, "server restart", func() {
		if !v.up {
			v.start()
		}
	})
}

// shutdown lets go of the current process's log: its disk is no longer the one that counts.
func (v *server) shutdown() {
	if v.disk != nil {
		v.disk.releaseSync()
	}
	if v.log != nil {
		_ = v.log.Close()
		v.log = nil
	}
}

func (v *server) runnableCount() int { return len(v.runnable) }

// cellAt returns the actor at ref, making tenants and jobs on first use as the runtime does.
func (v *server) cellAt(ref actors.Ref) *cell {
	if c := v.cells[ref]; c != nil {
		return c
	}
	var b actors.Behaviour
	switch ref.Kind {
	case actors.RefDispatcher:
		b = actors.NewDispatcher()
	case actors.RefTenant:
		b = actors.NewTenant(ref.ID, actors.Limits{})
	case actors.RefJob:
		b = actors.NewJob(ref.ID)
	default:
		return nil // a session that is gone
	}
	c := &cell{ref: ref, b: b}
	v.cells[ref] = c
	return c
}

func (v *server) spawnSession(id string, sink actors.Ref) {
	v.cells[actors.SessionRef(id)] = &cell{ref: actors.SessionRef(id), b: actors.NewSession(id, sink)}
}

// send delivers msg to ref: to an actor's mailbox, or to an external party's handler.
func (v *server) send(to actors.Ref, msg any, sender actors.Ref) {
	if to.Kind == actors.RefExternal {
		if h := v.external[to.ID]; h != nil {
			h(msg)
		}
		return
	}
	if c := v.cellAt(to); c != nil {
		v.enqueue(c, delivery{msg: msg, sender: sender})
		return
	}
	v.bounce(to, msg)
}

// bounce sends back what a session that is gone cannot take, as the runtime does.
func (v *server) bounce(to actors.Ref, msg any) {
	if back, notice, ok := actors.Bounce(msg); ok && to.Kind == actors.RefSession {
		v.send(back, notice, actors.Ref{})
	}
}

func (v *server) enqueue(c *cell, d delivery) {
	c.box = append(c.box, d)
	if !c.queued {
		c.queued = true
		v.runnable = append(v.runnable, c)
	}
}

// listen registers a handler for what the server sends to External(id); once is for a reply.
func (v *server) listen(prefix string, once bool, h func(any)) actors.Ref {
	v.extSeq++
	id := fmt.Sprintf("%s#%d", prefix, v.extSeq)
	v.external[id] = func(msg any) {
		if once {
			delete(v.external, id)
		}
		h(msg)
	}
	return actors.Ref{Kind: actors.RefExternal, ID: id}
}

// request sends a command from outside to an actor, and msg's one reply to onReply.
func (v *server) request(prefix string, to actors.Ref, msg any, onReply func(any)) {
	v.send(to, msg, v.listen(prefix, true, onReply))
}

// runOne handles one message of an actor the scheduler picks.
func (v *server) runOne() {
	i := v.s.sched.IntN(len(v.runnable))
	c := v.runnable[i]
	d := c.box[0]
	c.box[0] = delivery{}
	c.box = c.box[1:]
	if len(c.box) == 0 {
		c.queued = false
		v.runnable = slices.Delete(v.runnable, i, i+1)
	}
	v.s.record(fmt.Sprintf("actor %s %s", refName(c.ref), msgName(d)))
	if d.stop {
		c.stopped = true
		return
	}
	if c.stopped {
		v.bounce(c.ref, d.msg)
		return // a dead letter
	}
	env := &env{v: v, c: c, sender: d.sender}
	if !c.recovered {
		c.recovered = true
		c.b.Recover(env)
	}
	c.b.Receive(env, d.msg)
}

func (v *server) recover(c *cell) {
	c.recovered = true
	c.b.Recover(&env{v: v, c: c})
}

func refName(r actors.Ref) string {
	switch r.Kind {
	case actors.RefDispatcher:
		return "dispatcher"
	case actors.RefTenant:
		return "tenant/" + r.ID
	case actors.RefJob:
		return "job/" + r.ID
	case actors.RefSession:
		return "session/" + r.ID
	}
	return "external/" + r.ID
}

func msgName(d delivery) string {
	if d.stop {
		return "stop"
	}
	if p, ok := d.msg.(actors.Persisted); ok {
		return fmt.Sprintf("persisted %T", p.Then)
	}
	return fmt.Sprintf("%T", d.msg)
}

// scheduleCommit puts a group commit on the clock, an fsync's time from now, if none is.
func (v *server) scheduleCommit() {
	if v.committer {
		return
	}
	v.committer = true
	epoch := v.epoch
	latency := time.Duration(100+v.s.sched.IntN(1900)) * time.Microsecond
	v.s.after(latency, "commit", func() {
		if v.epoch == epoch {
			v.committer = false
			v.commit()
		}
	})
}

// commit makes everything pending durable in one append, as the group commit does, folds it
// into the projections and only then tells the actors. Faults strike here: a crash with the
// records written but not synced, a crash after the sync before anyone hears of it, a failed
// write or sync. It reports whether the server is still up.
func (v *server) commit() bool {
	s := v.s
	batch := v.pending
	v.pending = nil
	if len(batch) == 0 {
		return true
	}
	v.commits++
	if err := v.log.Err(); err != nil { // failed before, and stopping: nothing more is durable
		for _, p := range batch {
			if p.cell != nil {
				v.enqueue(p.cell, delivery{msg: actors.Persisted{Then: p.then, Err: err}})
			}
		}
		return false
	}
	var events []eventlog.Event
	for _, p := range batch {
		for _, pl := range p.events {
			e, err := eventlog.NewEvent(eventlog.StreamOf(pl), pl)
			if err != nil {
				panic(err)
			}
			events = append(events, e)
		}
	}
	type result struct {
		r   eventlog.Receipt
		err error
	}
	done := make(chan result, 1)
	appendAsync := func() {
		v.log.AppendAsync(events, func(r eventlog.Receipt, err error) { done <- result{r, err} })
	}
	switch {
	case s.strikes(FaultServerCrash, 0.02):
		arrived := v.disk.holdNextSync()
		appendAsync()
		waitArrived(arrived)
		v.lastBatch = batch
		v.crash("mid-commit, records written and not synced")
		<-done
		return false
	case s.strikes(FaultDisk, 0.004):
		kind := []string{"write", "sync"}[s.faultRand[FaultDisk].IntN(2)]
		v.disk.failNext(kind)
		appendAsync()
		res := <-done
		if res.err == nil {
			s.fail("durability", "an injected %s error on the WAL did not fail the append", kind)
			return false
		}
		v.lastBatch = batch
		s.record(fmt.Sprintf("disk %s error: %v", kind, res.err))
		for _, p := range batch {
			if p.cell != nil {
				v.enqueue(p.cell, delivery{msg: actors.Persisted{Then: p.then, Err: res.err}})
			}
		}
		// A failed log stops the server; what was already decided may still answer with 503.
		epoch := v.epoch
		s.after(time.Millisecond, "server stops: the log failed", func() {
			if v.epoch == epoch {
				v.crash("the log failed")
			}
		})
		return false
	}
	appendAsync()
	res := <-done
	if res.err != nil {
		s.fail("durability", "an append failed with no fault injected: %v", res.err)
		return false
	}
	r := res.r
	seq := r.First
	for _, p := range batch {
		for _, pl := range p.events {
			if err := v.set.Apply(seq, r.Time, pl); err != nil {
				s.fail("projections", "the projections refused seq %d: %v", seq, err)
				return false
			}
			s.oracle.apply(seq, r.Time, pl, p.decidedAt, p.clock)
			seq++
		}
	}
	v.synced = eventlog.Head{Seq: r.Last, Hash: r.Hash, Time: r.Time}
	s.record(fmt.Sprintf("commit seq %d..%d hash %s", r.First, r.Last, r.Hash.String()[:16]))
	if s.sched.IntN(40) == 0 {
		v.checkpoint()
	}
	if v.commits%50 == 0 && !v.sameAsReplay("the live projections") {
		return false
	}
	if s.strikes(FaultServerCrash, 0.02) {
		if slices.ContainsFunc(batch, func(p *persist) bool { return p.cell != nil }) {
			s.probe(ProbeCrashBeforeReply)
		}
		v.crash("after a commit, before its replies")
		return false
	}
	first := r.First
	for _, p := range batch {
		last := first + uint64(len(p.events)) - 1
		rc := eventlog.Receipt{First: first, Last: last, Time: r.Time, Hash: r.Hash}
		if last != r.Last {
			rec, err := v.log.Get(last)
			if err != nil {
				s.fail("chain", "reading seq %d: %v", last, err)
				return false
			}
			rc.Hash = rec.Hash
		}
		if p.cell != nil {
			v.enqueue(p.cell, delivery{msg: actors.Persisted{Then: p.then, Receipt: rc}})
		}
		first = last + 1
	}
	if v.recovering && len(v.pending) == 0 {
		v.recovering = false
	}
	return true
}

// checkpoint saves the projections as the runtime does now and then.
func (v *server) checkpoint() {
	data, err := v.set.MarshalCheckpoint()
	if err == nil {
		err = v.log.SaveCheckpoint(projections.CheckpointName, v.set.Seq(), data)
	}
	if err != nil {
		v.s.fail("checkpoint", "saving a checkpoint: %v", err)
		return
	}
	v.s.record(fmt.Sprintf("checkpoint at seq %d", v.set.Seq()))
}

// env is what a behaviour sees of the simulated world.
type env struct {
	v      *server
	c      *cell
	sender actors.Ref
}

func (e *env) Now() time.Time            { return e.v.s.serverNow() }
func (e *env) Rand() *rand.Rand          { return e.v.s.serverRand }
func (e *env) Log() *zap.Logger          { return zap.NewNop() }
func (e *env) Sender() actors.Ref        { return e.sender }
func (e *env) Send(to actors.Ref, m any) { e.v.send(to, m, e.c.ref) }
func (e *env) Forward(to actors.Ref, m any, sender actors.Ref) {
	e.v.send(to, m, sender)
}

func (e *env) Persist(events []eventlog.Payload, then any) {
	v := e.v
	v.pending = append(v.pending, &persist{cell: e.c, events: slices.Clone(events), then: then, decidedAt: v.s.serverNow(), clock: v.s.clockJumps})
	v.scheduleCommit()
}

func (e *env) After(d time.Duration, msg any) actors.TimerID {
	v := e.v
	v.timerSeq++
	id, epoch, c := v.timerSeq, v.epoch, e.c
	v.timers[id] = true
	v.s.after(d, fmt.Sprintf("timer %s %T", refName(c.ref), msg), func() {
		if v.epoch == epoch && v.timers[id] {
			delete(v.timers, id)
			v.enqueue(c, delivery{msg: msg})
		}
	})
	return id
}

func (e *env) Cancel(id actors.TimerID) { delete(e.v.timers, id) }

func (e *env) Stop(ref actors.Ref) {
	if c := e.v.cells[ref]; c != nil {
		e.v.enqueue(c, delivery{stop: true})
		delete(e.v.cells, ref)
	}
}

func (e *env) Read(fn func(*projections.Set)) { fn(e.v.set) }
