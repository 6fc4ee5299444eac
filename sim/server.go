package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/cells"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/audit"
)

// dataDir is where the server keeps its log on the simulated disk, and archiveDir its segments.
const (
	dataDir    = "/data"
	archiveDir = "/data/archive"
	// archiveAfter is the simulated --archive-after: short, so a run archives many times.
	archiveAfter = 2 * time.Second
)

// server is the simulated tether process: the production behaviours on the production cell
// runtime, the production projections, and the production log on Pebble's crashable in-memory
// filesystem. Where the broker plugs protoactor's mailboxes, the log's group commit and the wall
// clock into the runtime, the server plugs in the simulator's seeded scheduler, a group commit
// on the virtual clock with faults, and the virtual clock. A crash throws all of it away but
// the disk, cut the way a power loss would cut it.
type server struct {
	s     *Sim
	epoch int // bumped by every crash; what belongs to an older epoch is dead
	up    bool
	// recovering is set from start until the start-up events are durable; the server takes no
	// requests meanwhile (it would answer /readyz with 503).
	recovering bool

	// On a replicated log (Sim.replicated) a server is one process of a node: its log is a
	// copy of the simulated stream, through link; its node's claim is its part in the election.
	// A process that was stalled or paused (frozen) runs nothing until it goes on; what came
	// due meanwhile (deferred) and what reached it, unread (inbox), then run in an order thaw
	// draws (stall.go). One cut off from NATS until cutUntil sends its requests when the cut
	// heals (cutQueue) and hears no answer meanwhile.
	node     *node
	link     *link
	frozen   bool
	deferred []*cells.Item
	inbox    []func()
	thaw     *rand.Rand
	cutUntil time.Time
	cutQueue []func()
	// overtaken: another process took over while this one was paused; it may not say it
	// leads beside that one once it goes on ("ready_alone").
	overtaken bool
	// decided is when each seq this process appended was decided, for the oracle when the
	// stream stores it; nextSeq is the last seq appended.
	decided map[uint64]decision
	nextSeq uint64
	// inflight are the appends handed to the log and not yet answered, in order; answered is
	// set by the log's goroutine (under link.mu), and drainDone takes them in order.
	inflight []*flight
	// lastAck is when the stream last acknowledged this process's publish.
	lastAck time.Time

	mem  *vfs.MemFS
	disk *disk
	log  *eventlog.Log
	// rt is the production cell runtime, which this server drives: it picks which cell runs
	// next (the sched stream), and commits as the group commit does, with faults.
	rt  *cells.Runtime
	set *projections.Set // rt's projections

	runnable  []*cells.Cell
	pending   []*persist
	committer bool // a commit item is scheduled
	external  map[string]func(any)
	extSeq    int
	polls     map[string]*simPoll // long polls waiting, by session

	// synced is the highest head the simulator saw made durable; it must survive every crash.
	synced eventlog.Head
	// lastBatch is the commit in flight when the server crashed mid-commit: if some of it
	// survives, the oracle folds it with the times it was decided at.
	lastBatch []*persist
	commits   int
	replayDue bool // a check against a full replay is due
	// checkpoint is the checkpoint begun and not yet saved, as the broker writes one on another
	// goroutine while commits go on; nil if none is.
	checkpoint *cells.Checkpoint
}

// mailbox is a cell's home in the simulator: what is scheduled to it, in order.
type mailbox struct {
	epoch  int
	box    []cells.Delivery
	queued bool // in runnable
}

// flight is one append on a replicated log, from AppendAsync to its answer.
type flight struct {
	batch    []*persist
	answered bool
	r        eventlog.Receipt
	err      error
}

// persist is one Commit waiting for the group commit.
type persist struct {
	events    []eventlog.Payload
	done      func(eventlog.Receipt, error)
	decidedAt time.Time
	clock     int // the clock-jump count when it was decided
}

func newServer(s *Sim) *server {
	return &server{s: s, mem: vfs.NewCrashableMem(), epoch: s.newEpoch()}
}

// start opens the log on the disk as it is and brings the server up the way the runtime does:
// projections from the checkpoint and the tail, the stale sessions ended, the dispatcher, then
// the tenants with reservations and the leased jobs. It checks on the way that nothing durable
// was lost and that the checkpoint plus the tail equals a full replay. On a replicated log the
// open catches the node's copy up with the stream and fences it, as a new leader's does.
func (v *server) start() {
	s := v.s
	if v.node == nil {
		v.damageArchive(false)
		if s.violation != nil {
			return
		}
	}
	v.disk = &disk{archiveFailIn: -1, saveCrashIn: -1}
	opts := eventlog.Options{FS: errorfs.Wrap(v.mem, v.disk), Clock: s.serverNow, ArchiveDir: archiveDir}
	if v.node != nil {
		v.link = newLink(v, s.nats)
		opts.Upstream, opts.Rand, opts.Sleep = v.link, randReader{s.serverRand}, v.link.Sleep
	}
	l, err := eventlog.Open(dataDir, opts)
	if err == nil && v.node != nil {
		// A standby that won: its copy, open as a follower, is promoted in place, as the
		// server's (broker's Standby.Lead) is.
		if err = l.Lead(context.Background()); err != nil {
			_ = l.Close()
		}
	}
	if err != nil {
		if v.node != nil && (errors.Is(err, errUnanswered) || errors.Is(err, eventlog.ErrFenced)) {
			// The stream did not answer, or another writer's messages kept landing: it
			// stands by again.
			s.record(fmt.Sprintf("%s could not open its log: %v", v.node.name, err))
			return
		}
		s.fail("recovery", "the log does not open after a crash: %v", err)
		return
	}
	v.log = l
	if v.link != nil {
		v.link.opened()
		v.decided, v.nextSeq = map[uint64]decision{}, l.Head().Seq
	}
	set, _, err := projections.Rebuild(l, func(err error) { s.fail("checkpoint", "the checkpoint is unusable: %v", err) })
	if err != nil {
		s.fail("recovery", "the projections do not rebuild: %v", err)
		return
	}
	v.set = set
	v.up, v.recovering = true, true
	v.runnable, v.pending, v.committer = nil, nil, false
	v.external, v.polls = map[string]func(any){}, map[string]*simPoll{}
	v.rt = cells.New(cells.Config{
		Scheduler: (*scheduler)(v), Committer: (*committer)(v), Clock: &clock{v: v}, Set: set,
		Monotonic: func() time.Time { return s.now }, // a stall stops the process, not time
		Make: func(ref actors.Ref) actors.Behaviour {
			switch ref.Kind {
			case actors.RefDispatcher:
				return actors.NewDispatcher(s.retention)
			case actors.RefTenant:
				return actors.NewTenant(ref.ID, actors.Limits{})
			case actors.RefJob:
				return actors.NewJob(ref.ID)
			}
			return nil
		},
		External: func(to actors.Ref, msg any) {
			if h := v.external[to.ID]; h != nil {
				h(msg)
			}
		},
		Rand: s.serverRand,
		Refused: func(seq uint64, _ eventlog.Payload, err error) {
			s.fail("projections", "the projections refused seq %d: %v", seq, err)
		},
		CheckInvariants: true,
		Broken: func(ref actors.Ref, err error) {
			s.fail("behaviour_state", "%s: %v", refName(ref), err)
		},
	})
	if !v.checkRecovered() {
		return
	}
	s.record(fmt.Sprintf("server up at seq %d", l.Head().Seq))
	v.tick()
	v.inherit()
	if ends := actors.StaleSessionEnds(v.set); len(ends) > 0 {
		v.rt.Persist(ends, func(eventlog.Receipt, error) {})
		if !v.commit() {
			return
		}
	}
	epoch := v.epoch
	v.recover(actors.DispatcherRef())
	for _, ref := range actors.ResumedRefs(v.set) {
		if v.epoch != epoch {
			return
		}
		v.recover(ref)
	}
	v.recovered()
}

// recovered ends the recovery once the start-up's events are durable.
func (v *server) recovered() {
	switch {
	case !v.recovering || len(v.inflight) > 0:
	case len(v.pending) == 0:
		v.recovering = false
	default:
		v.scheduleCommit()
	}
}

// randReader reads bytes from a seeded random stream: the fence's nonce, in the simulator.
type randReader struct{ r *rand.Rand }

func (rr randReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(rr.r.Uint32())
	}
	return len(p), nil
}

// checkRecovered checks a freshly opened log against what the simulator saw durable, then
// folds into the oracle what survived beyond it. On a replicated log the stream is what was
// durable: the copy must end where the stream's chain does.
func (v *server) checkRecovered() bool {
	s := v.s
	head := v.log.Head()
	if v.node != nil {
		if n := s.nats; head.Seq != n.head.Seq || head.Hash != n.head.Hash {
			s.fail("durability", "%s's log opened at seq %d, the stream's chain ends at seq %d", v.node.name, head.Seq, n.head.Seq)
			return false
		}
		v.synced = head
		if _, err := audit.Verify(context.Background(), v.log, nil); err != nil {
			s.fail("replay", "the recovered log does not verify: %v", err)
			return false
		}
		return v.sameAsReplay("checkpoint + tail")
	}
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

// sameAsReplay compares the live projections, wherever they keep their jobs (memory or the
// table on the disk), with a full replay of the log into memory, and checks the table's indexes.
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
	live, err1 := v.set.MarshalFold()
	full, err2 := replay.MarshalFold()
	if err1 != nil || err2 != nil || !bytes.Equal(live, full) {
		v.s.fail("replay", "%s differs from a full replay of the log at seq %d", what, replay.Seq())
		return false
	}
	if _, err := v.set.CheckTable(); err != nil {
		v.s.fail("table", "%s: %v", what, err)
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
	rng := s.faultRand[FaultServerCrash]
	keep := rng.IntN(101)
	down := func() time.Duration {
		if down := time.Duration(50+rng.IntN(3000)) * time.Millisecond; rng.IntN(8) != 0 {
			return down
		}
		return time.Duration(60+rng.IntN(120)) * time.Second // a long outage: schedules miss ticks
	}
	what := fmt.Sprintf("server crash (%s), %d%% of unsynced WAL blocks kept", why, keep)
	if nd := v.node; nd != nil {
		// A process of a replicated log: its node comes back as a standby, and whoever
		// wins the key once it expires leads. Its copy keeps what was synced, no more: it
		// writes the stream's messages without syncing, through a WAL that Pebble's own
		// goroutine writes out whenever it runs, so no other cut is the same in every run.
		what = fmt.Sprintf("server crash (%s), its copy's unsynced writes lost", why)
		mem := v.mem.CrashClone(vfs.CrashCloneCfg{})
		v.halt(what)
		nd.mem, nd.downUntil = mem, s.now.Add(down())
		return
	}
	v.replace(what, keep, rng, down)
}

// crashTo kills the process with its disk as crashed holds it (taken at the moment the machine
// stopped, unsynced writes lost).
func (v *server) crashTo(crashed *vfs.MemFS, why string) {
	v.mem = crashed
	v.crash(why)
}

// stop stops a process of a replicated log cleanly, for why: its disk stays as it is.
func (v *server) stop(why string) {
	if v.up {
		v.halt(fmt.Sprintf("%s stops: %s", v.node.name, why))
	}
}

// halt ends a process of a replicated log: its log and its link go, and its node stands by.
func (v *server) halt(what string) {
	s := v.s
	v.s.record(what)
	v.link.kill() // first: the log's goroutines stop waiting on the simulator
	v.shutdown()
	v.epoch = s.newEpoch()
	v.up, v.recovering, v.frozen = false, false, false
	v.rt, v.runnable, v.pending, v.external, v.checkpoint, v.deferred, v.inflight, v.inbox = nil, nil, nil, nil, nil, nil, nil, nil
	nd := v.node
	if nd.proc == v {
		nd.proc = nil
		nd.standBy()
	}
	if s.srv == v {
		for _, w := range s.workers {
			w.serverCrashed()
		}
	}
}

// replace throws the server away, keeping of the disk what a crash that keeps keep percent
// of the unsynced WAL blocks would, and starts it again after down().
func (v *server) replace(what string, keep int, rng *rand.Rand, down func() time.Duration) {
	s := v.s
	mem, err := crashClone(v.mem, dataDir, keep, rng)
	if err != nil {
		panic(fmt.Sprintf("sim: crash clone: %v", err))
	}
	v.shutdown()
	v.mem = mem
	v.epoch = s.newEpoch()
	v.up, v.recovering, v.frozen = false, false, false
	v.rt, v.runnable, v.pending, v.external, v.checkpoint, v.deferred, v.inbox = nil, nil, nil, nil, nil, nil, nil
	s.record(what)
	for _, w := range s.workers {
		w.serverCrashed()
	}
	s.after(down(), "server restart", func() {
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

// after schedules fn on the process's behalf: it dies with the process, and waits while the
// process is paused (resume puts it back on the agenda).
func (v *server) after(d time.Duration, label string, fn func()) *cells.Item {
	if !v.up { // a process that is gone does nothing more
		it := &cells.Item{}
		it.Stop()
		return it
	}
	epoch := v.epoch
	it := v.s.after(d, label, nil)
	it.Run = func() {
		switch {
		case v.epoch != epoch:
		case v.frozen:
			v.deferred = append(v.deferred, it)
		default:
			fn()
		}
	}
	return it
}

func (v *server) runnableCount() int { return len(v.runnable) }

// scheduler is the server as the runtime's Scheduler: a mailbox per cell, and the sched stream
// picks which runnable cell goes next (runOne).
type scheduler server

func (sc *scheduler) Start(c *cells.Cell) { c.Home = &mailbox{epoch: sc.epoch} }

func (sc *scheduler) Schedule(c *cells.Cell, d cells.Delivery) {
	mb := c.Home.(*mailbox)
	if mb.epoch != sc.epoch {
		return // a cell of a process that crashed
	}
	mb.box = append(mb.box, d)
	if !mb.queued {
		mb.queued = true
		sc.runnable = append(sc.runnable, c)
	}
}

// committer is the server as the runtime's Committer: commits wait for the group commit, an
// fsync's time later (scheduleCommit, commit).
type committer server

func (cm *committer) Commit(c *cells.Commit) {
	v := (*server)(cm)
	v.pending = append(v.pending, &persist{events: c.Events, done: c.Done, decidedAt: v.s.serverNow(), clock: v.s.clockJumps})
	v.scheduleCommit()
}

// clock is the server's clock for the runtime: timers are items on the simulator's agenda that
// die with the process that armed them, and wait while it is paused.
type clock struct{ v *server }

func (c *clock) Now() time.Time { return c.v.s.serverNow() }

func (c *clock) AfterFunc(d time.Duration, f func()) cells.Timer { return c.v.after(d, "timer", f) }

func (v *server) spawnSession(id string, sink actors.Ref) {
	v.rt.Spawn(actors.SessionRef(id), func() actors.Behaviour { return actors.NewSession(id, sink) })
}

// send delivers msg to ref: to an actor's mailbox, or to an external party's handler.
func (v *server) send(to actors.Ref, msg any, sender actors.Ref) { v.rt.Send(to, msg, sender) }

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

// runOne hands one delivery of a cell the scheduler picks to the runtime.
func (v *server) runOne() {
	i := v.s.sched.IntN(len(v.runnable))
	c := v.runnable[i]
	mb := c.Home.(*mailbox)
	d := mb.box[0]
	mb.box[0] = cells.Delivery{}
	mb.box = mb.box[1:]
	if len(mb.box) == 0 {
		mb.queued = false
		v.runnable = slices.Delete(v.runnable, i, i+1)
	}
	v.s.record(fmt.Sprintf("actor %s %s", refName(c.Ref()), d))
	v.rt.Handle(c, d)
}

// recover brings up the actor at ref before anything reaches it, as start-up does.
func (v *server) recover(ref actors.Ref) {
	if c := v.rt.Bind(ref); c != nil {
		v.rt.Handle(c, cells.Wake())
	}
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

// scheduleCommit puts a group commit on the clock, an fsync's time from now, if none is.
func (v *server) scheduleCommit() {
	if v.committer {
		return
	}
	v.committer = true
	latency := time.Duration(100+v.s.sched.IntN(1900)) * time.Microsecond
	v.after(latency, "commit", func() {
		v.committer = false
		v.commit()
	})
}

// commit makes everything pending durable in one append, as the group commit does, folds it
// into the projections and only then tells the actors. Faults strike here: a crash with the
// records written but not synced, a crash after the sync before anyone hears of it, a failed
// write or sync. It reports whether the server is still up. On a replicated log the append is
// published, and its answer comes back later (committed, from drainDone).
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
			p.done(eventlog.Receipt{}, err)
		}
		return false
	}
	var events []eventlog.Event
	for _, p := range batch {
		for _, pl := range p.events {
			e, err := eventlog.NewEvent(pl.Stream(), pl)
			if err != nil {
				panic(err)
			}
			events = append(events, e)
		}
	}
	if v.link != nil {
		return v.publish(batch, events)
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
			p.done(eventlog.Receipt{}, res.err)
		}
		// A failed log stops the server; what was already decided may still answer with 503.
		v.after(time.Millisecond, "server stops: the log failed", func() { v.crash("the log failed") })
		return false
	}
	appendAsync()
	res := <-done
	if res.err != nil {
		s.fail("durability", "an append failed with no fault injected: %v", res.err)
		return false
	}
	seq := res.r.First
	s.deciding = v.epoch
	for _, p := range batch {
		for _, pl := range p.events {
			s.oracle.apply(seq, res.r.Time, pl, p.decidedAt, p.clock)
			seq++
		}
	}
	s.deciding = -1
	return v.committed(batch, res.r)
}

// publish hands a batch to a log on the replicated stream and lets the log's goroutines run
// until they wait on the simulator. The stream's answer comes back later.
func (v *server) publish(batch []*persist, events []eventlog.Event) bool {
	f := &flight{batch: batch}
	v.inflight = append(v.inflight, f)
	for _, p := range batch {
		for range p.events {
			v.nextSeq++
			v.decided[v.nextSeq] = decision{p.decidedAt, p.clock}
		}
	}
	l := v.link
	v.log.AppendAsync(events, func(r eventlog.Receipt, err error) {
		l.mu.Lock()
		f.r, f.err, f.answered = r, err, true
		l.mu.Unlock()
	})
	l.pump()
	return v.up
}

// drainDone takes, in order, the appends the log has answered since the last time.
func (v *server) drainDone() {
	s := v.s
	for len(v.inflight) > 0 && v.up {
		f := v.inflight[0]
		v.link.mu.Lock()
		answered := f.answered
		v.link.mu.Unlock()
		if !answered {
			return
		}
		v.inflight = v.inflight[1:]
		if f.err != nil {
			// Refused (another server fenced the stream), or unsettled for good: the log
			// failed, and the process stops, as the server does.
			if errors.Is(f.err, eventlog.ErrFenced) {
				s.probe(ProbeDeposedAppendRefused)
				if c := v.node.claim; c.proc == v {
					c.d.StreamRefused()
				}
			}
			s.record(fmt.Sprintf("%s's append failed: %v", v.node.name, f.err))
			for _, p := range f.batch {
				p.done(eventlog.Receipt{}, f.err)
			}
			why := f.err.Error()
			v.after(time.Millisecond, "server stops: the log failed", func() { v.stop("its log failed: " + why) })
			continue
		}
		v.lastAck = s.now
		if !v.committed(f.batch, f.r) {
			return
		}
	}
}

// committed tells the actors of a durable append, as the runtime does: it folds the events
// into the projections, then schedules Persisted to the cells that made them.
func (v *server) committed(batch []*persist, r eventlog.Receipt) bool {
	s := v.s
	v.synced = eventlog.Head{Seq: r.Last, Hash: r.Hash, Time: r.Time}
	s.record(fmt.Sprintf("commit seq %d..%d hash %s", r.First, r.Last, r.Hash.String()[:16]))
	if s.strikes(FaultServerCrash, 0.02) {
		if !v.recovering { // start-up's events have no replies
			s.probe(ProbeCrashBeforeReply)
		}
		v.crash("after a commit, before its replies")
		return false
	}
	for _, p := range batch {
		for _, pl := range p.events {
			if id, ok := strings.CutPrefix(pl.Stream(), "job/"); ok && v.set.Stored(id) {
				s.probe(ProbeStoredJobChanged)
			}
		}
	}
	// Each Commit hears of its own events; then the runtime folds the group into the
	// projections and tells each cell that made some of them, once (Runtime.Flush).
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
		p.done(rc, nil)
		first = last + 1
	}
	v.rt.Flush()
	if s.violation != nil {
		return false
	}
	if v.checkpoint == nil && s.sched.IntN(10) == 0 {
		v.beginCheckpoint()
	}
	// Now and then the live projections must equal a full replay: once they hold every record
	// the log does (on a replicated log one message may carry several commits).
	v.replayDue = v.replayDue || v.commits%50 == 0
	if v.replayDue && r.Last == v.log.Head().Seq {
		v.replayDue = false
		if !v.sameAsReplay("the live projections") {
			return false
		}
	}
	v.recovered()
	return true
}

// saveCheckpoint saves the checkpoint in progress, or a new one, now.
func (v *server) saveCheckpoint() {
	cp := v.checkpoint
	if cp == nil {
		cp = v.rt.BeginCheckpoint()
	}
	v.checkpoint = nil
	if err := cp.Save(v.log); err != nil {
		v.s.fail("checkpoint", "saving a checkpoint: %v", err)
		return
	}
	v.s.record(fmt.Sprintf("checkpoint at seq %d", cp.Seq()))
}

// beginCheckpoint begins a checkpoint, as the broker does now and then, and saves it a while
// later, while commits go on, as the broker's checkpoint goroutine does: unless the server
// crashes first, and the recovery starts from the checkpoint before. It begins after one
// commit in ten and takes up to a second, so that jobs change under a flush in flight (expire,
// are deleted, redriven) in most seeds, not a few.
func (v *server) beginCheckpoint() {
	s := v.s
	cp := v.rt.BeginCheckpoint()
	v.checkpoint = cp
	v.after(time.Duration(s.sched.IntN(1000))*time.Millisecond, "checkpoint saved", func() {
		if v.checkpoint != cp {
			return
		}
		if s.strikes(FaultServerCrash, 0.1) {
			s.probe(ProbeCrashMidCheckpoint)
			v.crash(fmt.Sprintf("while the checkpoint at seq %d was being written", cp.Seq()))
			return
		}
		v.checkpoint = nil
		if s.strikes(FaultCheckpoint, 0.1) {
			v.disk.crashInSave(v.mem, s.faultRand[FaultCheckpoint].IntN(64))
		}
		err := cp.Save(v.log)
		if crashed := v.disk.savedCrash(); crashed != nil {
			s.probe(ProbeCrashInCheckpointSave)
			v.crashTo(crashed, fmt.Sprintf("in the save of the checkpoint at seq %d", cp.Seq()))
			return
		}
		if err != nil {
			if v.log.Err() != nil { // a disk fault failed the log before: the server stops
				return
			}
			s.fail("checkpoint", "saving a checkpoint: %v", err)
			return
		}
		s.record(fmt.Sprintf("checkpoint at seq %d", cp.Seq()))
		v.archive(cp.Seq())
	})
}

// archive moves out of the hot log what the broker's archiver would: the records the checkpoint
// covers that are older than archiveAfter, in eventlog's two steps, with a disk error inside the
// first or a crash between or after them. Whatever happens, the next start must read every
// record from genesis, from the hot log or a verified segment (checkRecovered).
func (v *server) archive(covered uint64) {
	s := v.s
	to := v.log.ArchivableTo(covered, s.serverNow().Add(-archiveAfter))
	if to <= v.log.Anchor().Seq {
		return
	}
	failing := s.strikes(FaultArchive, 0.2)
	if failing {
		v.disk.failArchiveIn(s.faultRand[FaultArchive].IntN(12))
	}
	sealed, err := v.log.SealSegment(context.Background(), to)
	v.disk.failArchiveIn(-1)
	if err != nil {
		if !failing {
			s.fail("archive", "sealing a segment: %v", err)
			return
		}
		s.probe(ProbeArchiveFault)
		s.record(fmt.Sprintf("archiving up to seq %d failed: %v", to, err))
		if s.strikes(FaultArchive, 0.3) {
			v.crash("after a failed archiving step")
		}
		return
	}
	if s.strikes(FaultArchive, 0.15) {
		s.probe(ProbeCrashMidArchive)
		v.crash(fmt.Sprintf("between sealing segment %s and committing it", sealed.Info.Name))
		return
	}
	if err := v.log.CommitSegment(sealed); err != nil {
		if v.log.Err() == nil {
			s.fail("archive", "committing segment %s: %v", sealed.Info.Name, err)
		}
		return
	}
	s.probe(ProbeArchived)
	s.record(fmt.Sprintf("archived seqs %d..%d", sealed.Info.First, sealed.Info.Last))
	if s.strikes(FaultArchive, 0.1) {
		v.crash("right after an archiving step")
	}
}
