package broker

import (
	"cmp"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/cells"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Config configures a Broker.
type Config struct {
	Dir    string
	FS     vfs.FS // nil: the OS file system
	Logger *zap.Logger
	Clock  func() time.Time // nil: time.Now
	// AfterFunc runs the behaviours' timers (nil: time.AfterFunc). A test that moves Clock
	// passes one that also fires the timers the move makes due.
	AfterFunc func(d time.Duration, f func()) cells.Timer
	Limits    actors.Limits
	// Retention is how long finished jobs stay queryable; the zero value keeps them all.
	Retention projections.Retention
	// CheckpointEvery is how many events pass between projection checkpoints, which bound the
	// tail replayed at start-up and the finished jobs held in memory until they move to the
	// table on disk. 0: 20,000.
	CheckpointEvery uint64
	// Decorate, if set, wraps every behaviour the runtime makes; tests use it to inject faults.
	Decorate func(ref actors.Ref, b actors.Behaviour) actors.Behaviour
	// Observe, if set, sees every event committed from now on once it is folded into the
	// projections (view), in the log's order, on the committer's goroutine with the
	// projections' write lock held: it must not block, and must not keep view (the tracer's
	// observer reads a job or two and hands its spans to a batch).
	Observe func(view *projections.Set, seq uint64, at time.Time, p eventlog.Payload)
	// Companions names files kept in Dir beside the log (eventlog.Options.Companions).
	Companions []string
	// OnStorageFault, if set, is told of a write to Dir that the file system refused for good
	// (eventlog.Options.OnStorageFault): the server stops there.
	OnStorageFault func(*eventlog.StorageFault)
	// WorkerTokenTTL is how long a worker token lasts, from registration or renewal; 0:
	// WorkerTokenTTLDefault.
	WorkerTokenTTL time.Duration
	// IdleHeartbeat, if set below actors.HeartbeatInterval, is how often workers are told to
	// heartbeat while their leases need no more: sooner news of cancels and of their token's
	// renewal, at the cost of more requests. The sessions' liveness does not change.
	IdleHeartbeat time.Duration
	// Archive says when old records move into sealed segments (archive.go).
	Archive ArchiveConfig
	// Upstream, if set, is the replicated log the broker leads (eventlog.Options.Upstream):
	// Open catches the local copy in Dir up with it and fences it before anything else.
	Upstream eventlog.Upstream
}

// ErrClosed is returned by calls on a Broker that is closing or closed.
var ErrClosed = errors.New("broker: closed")

// Broker is the core of tether in one process: the event log, the projections, and the
// supervised actors that run the behaviours on the cell runtime. Its methods are the facade
// transport calls; each one that changes state returns once its events are durable, with their
// receipt.
type Broker struct {
	cfg Config
	log *zap.Logger
	// kindLogs are the actors' loggers, one per kind: made once, not once per job actor.
	kindLogs [actors.RefExternal + 1]*zap.Logger
	elog     *eventlog.Log
	clock    func() time.Time
	// rt carries the ordering rules; protoactor is its scheduler (scheduler, host) and the log
	// its committer.
	rt     *cells.Runtime
	system *actor.ActorSystem
	pool   *pool
	props  map[actors.RefKind]*actor.Props
	// parked are the hosts of jobs and sessions whose cell stopped, by kind, kept for the next
	// cells of the kind (host.retire).
	parkedMu sync.Mutex
	parked   [actors.RefExternal + 1][]*host

	live liveness

	// lastCheckpoint is the seq of the newest checkpoint; checkpointing is set while one is
	// being written in the background, and checkpoints waits for it.
	lastCheckpoint atomic.Uint64
	// checkpointTime is the time of the record at lastCheckpoint (Unix nanoseconds; 0: none).
	checkpointTime atomic.Int64
	checkpointing  atomic.Bool
	checkpoints    sync.WaitGroup

	archiver sync.WaitGroup // the archive and scrub loops
	archive  archiveCounters
	scrub    scrubState
	ticker   sync.WaitGroup // the stall watch's ticks (watchStalls)

	changedMu sync.Mutex
	changed   chan struct{} // closed and replaced when the projections change, if watched
	watched   bool          // Changed handed out changed since it was last replaced

	closeOnce sync.Once
	closing   chan struct{} // closed when Close starts: no new calls
	stopped   chan struct{} // closed when Close is done: no reply will come any more
}

// Open opens the log in cfg.Dir, rebuilds the projections from the newest checkpoint and the
// tail after it, ends the sessions the last run left open, starts the actors, gives every active
// lease a fresh lease_ttl of grace, and returns a Broker that is ready.
func Open(cfg Config) (*Broker, error) { return open(cfg, nil) }

// open is Open, with the reader of the finished jobs' table wrapped by wrapTable if it is set
// (tests slow the disk down so).
func open(cfg Config, wrapTable func(projections.Store) projections.Store) (*Broker, error) {
	cfg = cfg.withDefaults()
	elog, err := eventlog.Open(cfg.Dir, cfg.logOptions(cfg.Upstream != nil))
	if err != nil {
		return nil, err
	}
	b := newBroker(cfg, elog)
	set, err := b.rebuildProjections()
	if err != nil {
		_ = elog.Close()
		return nil, err
	}
	if wrapTable != nil {
		set.WrapStore(wrapTable)
	}
	return b.start(set)
}

// withDefaults fills in what a Config leaves unset.
func (cfg Config) withDefaults() Config {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.AfterFunc == nil {
		cfg.AfterFunc = func(d time.Duration, f func()) cells.Timer { return time.AfterFunc(d, f) }
	}
	if cfg.CheckpointEvery == 0 {
		cfg.CheckpointEvery = 20_000
	}
	if cfg.Archive.Dir == "" {
		cfg.Archive.Dir = filepath.Join(cfg.Dir, "archive")
	}
	return cfg
}

// logOptions are the options the broker's log opens with; lead makes it the upstream's writer.
func (cfg Config) logOptions(lead bool) eventlog.Options {
	return eventlog.Options{FS: cfg.FS, Clock: cfg.Clock, Logger: cfg.Logger.Named("eventlog"),
		Companions: append(cfg.Companions, "archive"), ArchiveDir: cfg.Archive.Dir, Upstream: cfg.Upstream, Lead: lead,
		OnStorageFault: cfg.OnStorageFault}
}

func newBroker(cfg Config, elog *eventlog.Log) *Broker {
	b := &Broker{
		cfg: cfg, log: cfg.Logger.Named("broker"), elog: elog, clock: cfg.Clock,
		closing: make(chan struct{}), stopped: make(chan struct{}),
		changed: make(chan struct{}),
	}
	for k := range b.kindLogs {
		b.kindLogs[k] = b.log.Named(kindName(actors.RefKind(k)))
	}
	for _, g := range elog.ArchiveGaps() { // the log opens only when these are the oldest
		if !g.ByKeep {
			b.log.Warn("the oldest archived records are not here: reads and audits of them will say so",
				zap.Uint64("first_seq", g.First), zap.Uint64("last_seq", g.Last), zap.String("why", g.Why))
		}
	}
	return b
}

// start runs the broker over the recovered projections: it ends the sessions the last run left
// open, starts the actors, and resumes the jobs in flight. On failure it closes the log.
func (b *Broker) start(set *projections.Set) (*Broker, error) {
	b.rt = b.newRuntime(set)
	if err := b.endStaleSessions(); err != nil {
		_ = b.elog.Close()
		return nil, err
	}
	b.ticker.Add(1)
	go b.watchStalls()
	b.startActors()
	if err := b.resume(); err != nil {
		_ = b.Close()
		return nil, err
	}
	if b.cfg.Archive.After > 0 || b.cfg.Archive.Keep > 0 {
		b.archiver.Add(1)
		go b.archiveLoop()
	}
	if b.cfg.Archive.ScrubEvery > 0 {
		b.archiver.Add(1)
		go b.scrubLoop()
	}
	return b, nil
}

// rebuildProjections loads the newest checkpoint, then folds every record after it.
func (b *Broker) rebuildProjections() (*projections.Set, error) {
	start := time.Now()
	set, from, err := projections.Rebuild(b.elog, func(err error) {
		b.log.Warn("checkpoint unusable; replaying the whole log", zap.String("code", "CHECKPOINT_UNUSABLE"), zap.Error(err))
	})
	if err != nil {
		return nil, err
	}
	b.noteCheckpoint(from)
	b.log.Info("projections rebuilt", zap.Uint64("checkpoint_seq", from), zap.Uint64("head_seq", set.Seq()),
		zap.Uint64("replayed", set.Seq()-from), zap.Duration("took", time.Since(start)))
	return set, nil
}

// newRuntime makes the cell runtime over the recovered projections, with protoactor as its
// scheduler, the log as its committer and the wall clock.
// observer is the runtime's Applied: Config.Observe given set, or nil.
func (b *Broker) observer(set *projections.Set) func(uint64, time.Time, eventlog.Payload) {
	if b.cfg.Observe == nil {
		return nil
	}
	return func(seq uint64, at time.Time, p eventlog.Payload) { b.cfg.Observe(set, seq, at, p) }
}

func (b *Broker) newRuntime(set *projections.Set) *cells.Runtime {
	rt := cells.New(cells.Config{
		Scheduler: (*scheduler)(b), Committer: (*committer)(b), Clock: runtimeClock{b.clock, b.cfg.AfterFunc}, Set: set,
		Monotonic: time.Now,
		Make:      b.make,
		Committed: b.committed,
		Applied:   b.observer(set),
		External:  func(to actors.Ref, msg any) { to.External.(sink).deliver(msg) },
		Logger:    func(ref actors.Ref) *zap.Logger { return b.kindLogs[ref.Kind].With(refField(ref)) },
		Refused: func(seq uint64, p eventlog.Payload, err error) {
			b.log.Fatal("projections rejected a durable event; the fold and the behaviours disagree",
				zap.String("code", "PROJECTION_REJECTED"), zap.Uint64("seq", seq), zap.String("stream", p.Stream()), zap.Error(err))
		},
	})
	b.elog.AfterEachBatch(rt.Flush) // a group commit's notices are told together
	return rt
}

// watchStalls ticks the runtime's stall watch (cells.TickEvery) until Close, on the monotonic
// clock whatever Config.Clock is, and says when the server was stopped: its leases then run
// lease_ttl from now, since it heard nothing its workers sent meanwhile.
func (b *Broker) watchStalls() {
	defer b.ticker.Done()
	t := time.NewTicker(cells.TickEvery)
	defer t.Stop()
	b.rt.Tick()
	for {
		select {
		case <-t.C:
			if d := b.rt.Tick(); d > 0 {
				b.log.Warn("the server ran nothing for a while (SIGSTOP, a frozen VM, a long pause): leases whose heartbeats it could not read run lease_ttl from now",
					zap.String("code", "SERVER_STALLED"), zap.Duration("stalled", d))
			}
		case <-b.closing:
			return
		}
	}
}

// make returns the behaviour of a tenant, job or dispatcher cell, as Decorate has it.
func (b *Broker) make(ref actors.Ref) actors.Behaviour {
	var beh actors.Behaviour
	switch ref.Kind {
	case actors.RefDispatcher:
		beh = actors.NewDispatcher(b.cfg.Retention)
	case actors.RefTenant:
		beh = actors.NewTenant(ref.ID, b.cfg.Limits)
	case actors.RefJob:
		beh = actors.NewJob(ref.ID)
	default:
		return nil
	}
	if d := b.cfg.Decorate; d != nil {
		beh = d(ref, beh)
	}
	return beh
}

func (b *Broker) startActors() {
	core := b.log.Core()
	b.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(zapslog.NewHandler(core, zapslog.WithName("protoactor")))
	}))
	b.system.EventStream.Subscribe(func(evt any) {
		if e, ok := evt.(*actor.SupervisorEvent); ok {
			b.log.Error("supervisor acted on a failure", zap.String("code", "ACTOR_SUPERVISED"), zap.Stringer("actor", e.Child),
				zap.Any("reason", e.Reason), zap.Stringer("directive", e.Directive))
		}
	})
	// One OneForOne supervisor (a protoactor guardian) per kind of actor: a failing actor is
	// restarted alone, up to 10 times in 10 seconds, then stopped.
	b.pool = newPool(defaultPoolWorkers(), 300)
	b.props = map[actors.RefKind]*actor.Props{}
	for _, k := range []actors.RefKind{actors.RefDispatcher, actors.RefTenant, actors.RefJob, actors.RefSession} {
		strategy := actor.NewOneForOneStrategy(10, 10*time.Second, actor.DefaultDecider)
		b.props[k] = actor.PropsFromFunc(nil, actor.WithGuardian(strategy), actor.WithDispatcher(b.pool), actor.WithMailbox(newMailbox))
	}
}

// endStaleSessions logs the end of every session the last run left open: their connections
// are gone. It runs before any actor starts, so the dispatcher never sees them.
func (b *Broker) endStaleSessions() error {
	payloads := actors.StaleSessionEnds(b.rt.Set())
	if len(payloads) == 0 {
		return nil
	}
	var err error
	b.rt.Persist(payloads, func(_ eventlog.Receipt, e error) { err = e })
	b.rt.Drain()
	return err
}

// resume starts the dispatcher, then the actors of actors.ResumedRefs (tenants with
// reservations, which arm their expiry timers, and leased jobs, which log a fresh lease_ttl of
// grace), and returns once all of it is durable.
func (b *Broker) resume() error {
	var refs []actors.Ref
	b.rt.Read(func(s *projections.Set) { refs = actors.ResumedRefs(s) })
	// The dispatcher rebuilds before Open returns, not whenever its mailbox first runs.
	leases := 0
	for _, ref := range append([]actors.Ref{actors.DispatcherRef()}, refs...) {
		if ref.Kind == actors.RefJob {
			leases++
		}
		pid := pidOf(b.rt.Bind(ref))
		if _, err := b.system.Root.RequestFuture(pid, ping{}, time.Minute).Result(); err != nil {
			return fmt.Errorf("broker: resuming %s %s: %w", kindName(ref.Kind), ref.ID, err)
		}
	}
	b.rt.Drain()
	if leases > 0 {
		b.log.Info("leases resumed with a fresh lease_ttl of grace", zap.Int("leases", leases))
	}
	return b.elog.Err()
}

// maybeCheckpoint starts a checkpoint once CheckpointEvery events, and at least four times as
// many events as there are live jobs, have passed since the last. A checkpoint costs the live
// jobs and the finished jobs it moves to the table (projections.Flush), so the second
// condition keeps its cost per event constant as the queue grows, while start-up replays a
// tail of about four events per live job, and memory holds the jobs that finished since.
//
// commit only begins the checkpoint (a copy of the live state); the encoding and the synced
// write happen on another goroutine while commits go on.
func (b *Broker) maybeCheckpoint() {
	set := b.rt.Set() // the log's goroutine, which calls this, is the only one that writes it
	since := set.Seq() - b.lastCheckpoint.Load()
	if since < b.cfg.CheckpointEvery || since < 4*uint64(set.LiveCount()) || !b.checkpointing.CompareAndSwap(false, true) {
		return
	}
	cp := b.rt.BeginCheckpoint()
	b.checkpoints.Add(1)
	go func() {
		defer b.checkpoints.Done()
		defer b.checkpointing.Store(false)
		if err := b.checkpoint(cp); err != nil {
			b.log.Error("checkpoint failed", zap.String("code", "CHECKPOINT_FAILED"), zap.Uint64("seq", cp.Seq()), zap.Error(err))
		}
	}()
}

// checkpoint saves a checkpoint begun on the runtime.
func (b *Broker) checkpoint(cp *cells.Checkpoint) error {
	start := time.Now()
	if err := cp.Save(b.elog); err != nil {
		return err
	}
	b.noteCheckpoint(cp.Seq())
	b.log.Info("checkpoint saved", zap.Uint64("seq", cp.Seq()), zap.Duration("took", time.Since(start)))
	return nil
}

// noteCheckpoint records that the newest checkpoint covers the records up to seq.
func (b *Broker) noteCheckpoint(seq uint64) {
	b.lastCheckpoint.Store(seq)
	if seq == 0 {
		b.checkpointTime.Store(0)
		return
	}
	if r, err := b.elog.Get(seq); err == nil {
		b.checkpointTime.Store(r.Time.UnixNano())
	}
}

// Checkpoint says what the newest checkpoint covers: the records up to seq, the last of them
// written at covers. It is zero before the first checkpoint.
func (b *Broker) Checkpoint() (seq uint64, covers time.Time) {
	seq = b.lastCheckpoint.Load()
	if n := b.checkpointTime.Load(); n != 0 {
		covers = time.Unix(0, n).UTC()
	}
	return seq, covers
}

// Failed is closed when the event log fails; the server must stop.
func (b *Broker) Failed() <-chan struct{} { return b.elog.Failed() }

// Err is the log's failure, or nil.
func (b *Broker) Err() error { return b.elog.Err() }

// Head is the log's durable head.
func (b *Broker) Head() eventlog.Head { return b.elog.Head() }

// LogStats reports the log's work since this process opened it: events, batches, fsyncs and
// their latency.
func (b *Broker) LogStats() eventlog.Stats { return b.elog.Stats() }

// LogBytes is the space the log's store takes on disk.
func (b *Broker) LogBytes() uint64 { return b.elog.DiskBytes() }

// StorageStats reports what the log's store (Pebble) wrote and holds: flushes, compactions,
// ingestions, levels.
func (b *Broker) StorageStats() eventlog.StorageStats { return b.elog.StorageStats() }

// JobStream yields the durable records of a job's stream from seq on, in order: what an event
// stream (SSE) of the job sends.
func (b *Broker) JobStream(jobID string, from uint64) iter.Seq2[eventlog.Record, error] {
	if from <= b.elog.Anchor().Seq {
		// Start at the job's first record, so the archive searches only the segments from
		// there on.
		b.PeekJob(jobID, func(j *projections.Job) { from = max(from, j.SubmitSeq) })
	}
	return b.elog.Stream(eventlog.JobStream(jobID), from)
}

// flowStream yields the durable records of a flow's own stream from seq on (its steps' jobs
// have streams of their own).
func (b *Broker) flowStream(flowID string, from uint64) iter.Seq2[eventlog.Record, error] {
	b.rt.Read(func(s *projections.Set) {
		if f, ok := s.Flow(flowID); ok {
			from = max(from, f.SubmitSeq)
		}
	})
	return b.elog.Stream(eventlog.FlowStream(flowID), from)
}

// outOfFlowStream are the events of a flow's steps' jobs that its event stream leaves out: the
// workers' progress events and the lease extensions stay in the jobs' own streams, and a job's
// expiry is no part of the flow's story.
var outOfFlowStream = map[string]bool{
	eventlog.JobProgress{}.EventType():      true,
	eventlog.JobLeaseExtended{}.EventType(): true,
	eventlog.JobExpired{}.EventType():       true,
}

// FlowEvents reads the durable records that make up flow f's event stream from seq from on:
// its own stream and its steps' jobs' streams, merged in log order, less outOfFlowStream. It
// reads at most perStream records of each stream, and returns those up to the last seq every
// stream was read to, so a reader that goes on after the last record it got misses nothing and
// sees nothing twice. A step's job starts after the flow event or step end that started it, so
// the records up to any seq never change, and a reader can number them.
func (b *Broker) FlowEvents(f *projections.Flow, from uint64, perStream int) ([]eventlog.Record, error) {
	streams := []iter.Seq2[eventlog.Record, error]{b.flowStream(f.ID, from)}
	for _, st := range f.Steps {
		if id := f.State[st.Name].JobID; id != "" {
			streams = append(streams, b.JobStream(id, from))
		}
	}
	var recs []eventlog.Record
	upTo := uint64(math.MaxUint64) // the last seq every stream was read to
	for _, stream := range streams {
		n := 0
		for rec, err := range stream {
			if err != nil {
				return nil, err
			}
			if outOfFlowStream[rec.Type] {
				continue
			}
			recs = append(recs, rec)
			if n++; n == perStream {
				upTo = min(upTo, rec.Seq)
				break
			}
		}
	}
	slices.SortFunc(recs, func(a, b eventlog.Record) int { return cmp.Compare(a.Seq, b.Seq) })
	return slices.DeleteFunc(recs, func(r eventlog.Record) bool { return r.Seq > upTo }), nil
}

// Close ends every session (eventlog.EndedShutdown), waits for the appends in flight, saves a checkpoint,
// stops the actors and closes the log.
func (b *Broker) Close() error {
	var err error
	b.closeOnce.Do(func() {
		close(b.closing)
		sessions := b.rt.Cells(actors.RefSession)
		// Sessions end with EndedShutdown so workers go elsewhere or come back later: the end is
		// logged (first ping, then drain), and the worker told (second ping: the session has
		// handled its Persisted).
		for _, c := range sessions {
			b.rt.Send(c.Ref(), actors.CloseSession{Reason: eventlog.EndedShutdown}, actors.Ref{})
		}
		for range 2 {
			for _, c := range sessions {
				_, _ = b.system.Root.RequestFuture(pidOf(c), ping{}, 5*time.Second).Result()
			}
			b.rt.Drain()
		}
		b.system.Shutdown()
		b.pool.close()
		// No actor appends any more; once the appends in flight are applied, the Set is the Close
		// goroutine's alone. protoactor's Shutdown only signals: actors may still be handed a
		// message, and Halt keeps their behaviours from running once the log closes under them.
		b.rt.Close()
		b.rt.Halt()
		b.checkpoints.Wait()
		b.ticker.Wait()
		b.archiver.Wait() // it stops at its next 4096 records once closing is closed
		if set := b.rt.Set(); b.elog.Err() == nil && set.Seq() > b.lastCheckpoint.Load() {
			err = b.checkpoint(b.rt.BeginCheckpoint())
		}
		if cerr := b.elog.Close(); err == nil {
			err = cerr
		}
		close(b.stopped)
	})
	return err
}
