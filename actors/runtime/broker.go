package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Config configures a Broker.
type Config struct {
	Dir    string
	FS     vfs.FS // nil: the OS file system
	Logger *zap.Logger
	Clock  func() time.Time // nil: time.Now
	Limits actors.Limits
	// CheckpointEvery is how many events pass between projection checkpoints, which bound the
	// tail replayed at start-up. 0: 100,000.
	CheckpointEvery uint64
	// Decorate, if set, wraps every behaviour the runtime makes; tests use it to inject faults.
	Decorate func(ref actors.Ref, b actors.Behaviour) actors.Behaviour
	// Companions names files kept in Dir beside the log (eventlog.Options.Companions).
	Companions []string
	// WorkerTokenTTL is how long a worker token lasts, from registration or renewal; 0:
	// WorkerTokenTTLDefault.
	WorkerTokenTTL time.Duration
	// IdleHeartbeat, if set below actors.HeartbeatInterval, is how often workers are told to
	// heartbeat while their leases need no more: sooner news of cancels and of their token's
	// renewal, at the cost of more requests. The sessions' liveness does not change.
	IdleHeartbeat time.Duration
}

// ErrClosed is returned by calls on a Broker that is closing or closed.
var ErrClosed = errors.New("runtime: broker closed")

// Broker is the core of tether in one process: the event log, the projections, and the
// supervised actors that run the behaviours. Its methods are the facade transport calls; each
// one that changes state returns once its events are durable, with their receipt.
type Broker struct {
	cfg Config
	log *zap.Logger
	// kindLogs are the actors' loggers, one per kind: made once, not once per job actor.
	kindLogs [actors.RefExternal + 1]*zap.Logger
	elog     *eventlog.Log
	clock    func() time.Time
	system   *actor.ActorSystem
	pool     *pool
	props    map[actors.RefKind]*actor.Props

	mu  sync.RWMutex // guards set
	set *projections.Set

	live liveness

	refsMu     sync.Mutex
	dispatcher *actor.PID
	tenants    map[string]*actor.PID
	jobs       map[string]*actor.PID
	sessions   map[string]*actor.PID

	// issued and applied count persists: issued when handed to the log, applied once their
	// events are in the projections (or failed). They complete in the order they were issued.
	issueMu sync.Mutex
	issued  uint64
	closed  bool // set under issueMu once the log is closed
	applyMu sync.Mutex
	applied uint64
	advance *sync.Cond

	// lastCheckpoint is the seq of the newest checkpoint; checkpointing is set while one is
	// being written in the background, and checkpoints waits for it.
	lastCheckpoint atomic.Uint64
	// checkpointTime is the time of the record at lastCheckpoint (Unix nanoseconds; 0: none).
	checkpointTime atomic.Int64
	checkpointing  atomic.Bool
	checkpoints    sync.WaitGroup

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
func Open(cfg Config) (*Broker, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.CheckpointEvery == 0 {
		cfg.CheckpointEvery = 100_000
	}
	elog, err := eventlog.Open(cfg.Dir, eventlog.Options{FS: cfg.FS, Clock: cfg.Clock, Logger: cfg.Logger.Named("eventlog"), Companions: cfg.Companions})
	if err != nil {
		return nil, err
	}
	b := &Broker{
		cfg: cfg, log: cfg.Logger.Named("broker"), elog: elog, clock: cfg.Clock,
		tenants: map[string]*actor.PID{}, jobs: map[string]*actor.PID{}, sessions: map[string]*actor.PID{},
		closing: make(chan struct{}), stopped: make(chan struct{}),
		changed: make(chan struct{}),
	}
	b.advance = sync.NewCond(&b.applyMu)
	for k := range b.kindLogs {
		b.kindLogs[k] = b.log.Named(kindName(actors.RefKind(k)))
	}
	if err := b.rebuildProjections(); err != nil {
		_ = elog.Close()
		return nil, err
	}
	if err := b.endStaleSessions(); err != nil {
		_ = elog.Close()
		return nil, err
	}
	b.startActors()
	if err := b.resume(); err != nil {
		_ = b.Close()
		return nil, err
	}
	return b, nil
}

// rebuildProjections loads the newest checkpoint, then folds every record after it.
func (b *Broker) rebuildProjections() error {
	start := time.Now()
	set, from, err := projections.Rebuild(b.elog, func(err error) {
		b.log.Warn("checkpoint unusable; replaying the whole log", zap.String("code", "CHECKPOINT_UNUSABLE"), zap.Error(err))
	})
	if err != nil {
		return err
	}
	b.set = set
	b.noteCheckpoint(from)
	b.log.Info("projections rebuilt", zap.Uint64("checkpoint_seq", from), zap.Uint64("head_seq", b.set.Seq()),
		zap.Uint64("replayed", b.set.Seq()-from), zap.Duration("took", time.Since(start)))
	return nil
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
		b.props[k] = actor.PropsFromFunc(nil, actor.WithGuardian(strategy), actor.WithDispatcher(b.pool))
	}
	b.dispatcher = b.spawn(actors.DispatcherRef(), func() actors.Behaviour { return actors.NewDispatcher() })
}

func (b *Broker) spawn(ref actors.Ref, make func() actors.Behaviour) *actor.PID {
	if d := b.cfg.Decorate; d != nil {
		inner := make
		make = func() actors.Behaviour { return d(ref, inner()) }
	}
	h := newHost(b, ref, make)
	props := *b.props[ref.Kind]
	return b.system.Root.Spawn(props.Configure(actor.WithProducer(func() actor.Actor { return h })))
}

// endStaleSessions logs the end of every session the last run left open: their connections
// are gone. It runs before any actor starts, so the dispatcher never sees them.
func (b *Broker) endStaleSessions() error {
	payloads := actors.StaleSessionEnds(b.set)
	if len(payloads) == 0 {
		return nil
	}
	r, err := b.elog.Append(context.Background(), encode(payloads)...)
	if err != nil {
		return err
	}
	for i, p := range payloads {
		if err := b.set.Apply(r.First+uint64(i), r.Time, p); err != nil {
			return err
		}
	}
	return nil
}

// resume starts the dispatcher, then the actors of actors.ResumedRefs (tenants with
// reservations, which arm their expiry timers, and leased jobs, which log a fresh lease_ttl of
// grace), and returns once all of it is durable.
func (b *Broker) resume() error {
	b.mu.RLock()
	refs := actors.ResumedRefs(b.set)
	b.mu.RUnlock()
	// The dispatcher rebuilds before Open returns, not whenever its mailbox first runs.
	if _, err := b.system.Root.RequestFuture(b.dispatcher, ping{}, time.Minute).Result(); err != nil {
		return fmt.Errorf("runtime: starting the dispatcher: %w", err)
	}
	leases := 0
	for _, ref := range refs {
		var pid *actor.PID
		if ref.Kind == actors.RefJob {
			pid = b.jobPID(ref.ID)
			leases++
		} else {
			pid = b.tenantPID(ref.ID)
		}
		if _, err := b.system.Root.RequestFuture(pid, ping{}, time.Minute).Result(); err != nil {
			return fmt.Errorf("runtime: resuming %s %s: %w", kindName(ref.Kind), ref.ID, err)
		}
	}
	b.drain()
	if leases > 0 {
		b.log.Info("leases resumed with a fresh lease_ttl of grace", zap.Int("leases", leases))
	}
	return b.elog.Err()
}

// persist hands a behaviour's events to the log. When they are durable, commit applies them to
// the projections and then tells the actor.
func (b *Broker) persist(to *actor.PID, incarnation uint64, payloads []eventlog.Payload, then any) {
	events := encode(payloads)
	b.issueMu.Lock()
	if b.closed {
		b.issueMu.Unlock()
		return // a timer fired during Close; the log takes nothing more
	}
	b.issued++
	b.elog.AppendAsync(events, func(r eventlog.Receipt, err error) {
		b.commit(to, incarnation, payloads, persisted{incarnation: incarnation, p: actors.Persisted{Then: then, Receipt: r, Err: err}})
	})
	b.issueMu.Unlock()
}

// encode turns payloads into events of their streams.
func encode(payloads []eventlog.Payload) []eventlog.Event {
	events := make([]eventlog.Event, len(payloads))
	for i, p := range payloads {
		e, err := eventlog.NewEvent(eventlog.StreamOf(p), p)
		if err != nil {
			panic(err) // a catalogue payload always encodes
		}
		events[i] = e
	}
	return events
}

// commit applies an append's events to the projections and only then delivers Persisted: an
// actor that hears its events are durable can read them back. It runs as the log's completion
// callback, which the log calls in seq order on its own goroutine (or at once, for an append
// that fails before it is sequenced), so the projections are folded in log order with no
// hand-off to another goroutine between an fsync and the replies that wait for it.
func (b *Broker) commit(to *actor.PID, incarnation uint64, payloads []eventlog.Payload, done persisted) {
	if r := done.p.Receipt; done.p.Err == nil {
		b.mu.Lock()
		for i, p := range payloads {
			if err := b.set.Apply(r.First+uint64(i), r.Time, p); err != nil {
				b.mu.Unlock()
				b.log.Fatal("projections rejected a durable event; the fold and the behaviours disagree",
					zap.String("code", "PROJECTION_REJECTED"), zap.Uint64("seq", r.First+uint64(i)), zap.String("stream", eventlog.StreamOf(p)), zap.Error(err))
			}
		}
		b.mu.Unlock()
		b.signalChanged()
	}
	b.system.Root.Send(to, done)
	b.applyMu.Lock()
	b.applied++
	b.advance.Broadcast()
	b.applyMu.Unlock()
	if done.p.Err == nil {
		b.maybeCheckpoint()
	}
}

// drain waits until every persist issued so far is applied.
func (b *Broker) drain() {
	b.issueMu.Lock()
	target := b.issued
	b.issueMu.Unlock()
	b.applyMu.Lock()
	for b.applied < target {
		b.advance.Wait()
	}
	b.applyMu.Unlock()
}

// maybeCheckpoint starts a checkpoint once CheckpointEvery events, and at least four times as
// many events as the Set holds jobs, have passed since the last. A checkpoint costs in
// proportion to the jobs it holds, so the second condition keeps its cost per event constant
// as the Set grows, while start-up replays a tail of about four events per job it loads.
//
// commit only clones the Set (79 ms for 100,000 jobs, against 313 ms to encode it); the
// encoding and the synced write happen on another goroutine while commits go on.
func (b *Broker) maybeCheckpoint() {
	since := b.set.Seq() - b.lastCheckpoint.Load()
	if since < b.cfg.CheckpointEvery || since < 4*uint64(b.set.JobCount()) || !b.checkpointing.CompareAndSwap(false, true) {
		return
	}
	snapshot := b.set.Clone()
	b.checkpoints.Add(1)
	go func() {
		defer b.checkpoints.Done()
		defer b.checkpointing.Store(false)
		if err := b.checkpoint(snapshot); err != nil {
			b.log.Error("checkpoint failed", zap.String("code", "CHECKPOINT_FAILED"), zap.Uint64("seq", snapshot.Seq()), zap.Error(err))
		}
	}()
}

// checkpoint saves a Set that nothing else writes to.
func (b *Broker) checkpoint(s *projections.Set) error {
	start := time.Now()
	data, err := s.MarshalCheckpoint()
	if err != nil {
		return err
	}
	if err := b.elog.SaveCheckpoint(projections.CheckpointName, s.Seq(), data); err != nil {
		return err
	}
	b.noteCheckpoint(s.Seq())
	b.log.Info("checkpoint saved", zap.Uint64("seq", s.Seq()), zap.Int("bytes", len(data)), zap.Duration("took", time.Since(start)))
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

// send delivers a message to the actor a Ref names, spawning tenant and job actors on first
// use. A message to a session that is gone bounces (actors.Bounce) or is dropped.
//
// A job or session actor is looked up, and the message put in its mailbox, under refsMu; stop
// unbinds and poisons under it too. So a message either reaches the old actor before its
// poison pill, or finds the Ref unbound and starts a new actor: none is lost to a stopped
// mailbox in between.
func (b *Broker) send(to actors.Ref, msg envelope) {
	switch to.Kind {
	case actors.RefExternal:
		to.External.(*sink).deliver(msg.msg)
		return
	case actors.RefDispatcher:
		b.system.Root.Send(b.dispatcher, msg)
		return
	case actors.RefTenant:
		b.system.Root.Send(b.tenantPID(to.ID), msg)
	case actors.RefJob:
		b.refsMu.Lock()
		b.system.Root.Send(b.jobPIDLocked(to.ID), msg)
		b.refsMu.Unlock()
	case actors.RefSession:
		b.refsMu.Lock()
		pid := b.sessions[to.ID]
		if pid != nil {
			b.system.Root.Send(pid, msg)
		}
		b.refsMu.Unlock()
		if pid == nil {
			if to, notice, ok := actors.Bounce(msg.msg); ok {
				b.send(to, envelope{msg: notice})
			}
		}
	}
}

// sendToLiveJob delivers msg to the job's actor if one is running and reports whether it did;
// it never starts one.
func (b *Broker) sendToLiveJob(id string, msg envelope) bool {
	b.refsMu.Lock()
	defer b.refsMu.Unlock()
	pid := b.jobs[id]
	if pid != nil {
		b.system.Root.Send(pid, msg)
	}
	return pid != nil
}

func (b *Broker) tenantPID(name string) *actor.PID {
	b.refsMu.Lock()
	defer b.refsMu.Unlock()
	pid := b.tenants[name]
	if pid == nil {
		limits := b.cfg.Limits
		pid = b.spawn(actors.TenantRef(name), func() actors.Behaviour { return actors.NewTenant(name, limits) })
		b.tenants[name] = pid
	}
	return pid
}

func (b *Broker) jobPID(id string) *actor.PID {
	b.refsMu.Lock()
	defer b.refsMu.Unlock()
	return b.jobPIDLocked(id)
}

func (b *Broker) jobPIDLocked(id string) *actor.PID {
	pid := b.jobs[id]
	if pid == nil {
		pid = b.spawn(actors.JobRef(id), func() actors.Behaviour { return actors.NewJob(id) })
		b.jobs[id] = pid
	}
	return pid
}

// stop unbinds a Ref at once, so the next message to it starts a new actor, and stops the old
// actor after the messages already in its mailbox.
func (b *Broker) stop(ref actors.Ref) {
	b.refsMu.Lock()
	defer b.refsMu.Unlock()
	var pid *actor.PID
	switch ref.Kind {
	case actors.RefJob:
		pid = b.jobs[ref.ID]
		delete(b.jobs, ref.ID)
	case actors.RefSession:
		pid = b.sessions[ref.ID]
		delete(b.sessions, ref.ID)
	}
	if pid != nil {
		b.system.Root.Poison(pid)
	}
}

// forget drops a binding when its actor stopped on its own (its supervisor gave up on it).
func (b *Broker) forget(ref actors.Ref, pid *actor.PID) {
	b.refsMu.Lock()
	defer b.refsMu.Unlock()
	var m map[string]*actor.PID
	switch ref.Kind {
	case actors.RefJob:
		m = b.jobs
	case actors.RefSession:
		m = b.sessions
	case actors.RefTenant:
		m = b.tenants
	}
	if bound := m[ref.ID]; bound != nil && bound.Equal(pid) {
		delete(m, ref.ID)
	}
}

// Failed is closed when the event log fails; the server must stop.
func (b *Broker) Failed() <-chan struct{} { return b.elog.Failed() }

// Err is the log's failure, or nil.
func (b *Broker) Err() error { return b.elog.Err() }

// Head is the log's durable head.
func (b *Broker) Head() eventlog.Head { return b.elog.Head() }

// Log returns the event log, for reads.
func (b *Broker) Log() *eventlog.Log { return b.elog }

// Close ends every session ("shutdown"), waits for the appends in flight, saves a checkpoint,
// stops the actors and closes the log.
func (b *Broker) Close() error {
	var err error
	b.closeOnce.Do(func() {
		close(b.closing)
		b.refsMu.Lock()
		var sessions []*actor.PID
		for _, pid := range b.sessions {
			sessions = append(sessions, pid)
		}
		b.refsMu.Unlock()
		// Sessions end with "shutdown" so workers go elsewhere or come back later: the end is
		// logged (first ping, then drain), and the worker told (second ping: the session has
		// handled its Persisted).
		for _, pid := range sessions {
			b.system.Root.Send(pid, envelope{msg: actors.CloseSession{Reason: "shutdown"}})
		}
		for range 2 {
			for _, pid := range sessions {
				_, _ = b.system.Root.RequestFuture(pid, ping{}, 5*time.Second).Result()
			}
			b.drain()
		}
		b.system.Shutdown()
		b.pool.close()
		// No actor appends any more; once the appends in flight are applied, the Set is the Close
		// goroutine's alone.
		b.issueMu.Lock()
		b.closed = true
		b.issueMu.Unlock()
		b.drain()
		b.checkpoints.Wait()
		if b.elog.Err() == nil && b.set.Seq() > b.lastCheckpoint.Load() {
			err = b.checkpoint(b.set)
		}
		if cerr := b.elog.Close(); err == nil {
			err = cerr
		}
		close(b.stopped)
	})
	return err
}
