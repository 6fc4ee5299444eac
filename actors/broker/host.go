package broker

import (
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/cells"
)

// mail carries a delivery of the cell runtime into a protoactor mailbox, with the cell it is
// for: a job's host outlives the job (it is recycled), so a delivery late for the last job it
// ran must not reach the next. Every delivery is one, so they are pooled: a delivery boxed by
// value would cost an allocation each (fifteen a job). The host returns a mail to the pool once
// it has copied the delivery out; one lost to a dead letter is left to the collector.
type mail struct {
	c *cells.Cell
	d cells.Delivery
}

var mailPool = sync.Pool{New: func() any { return new(mail) }}

// bindMail hands a parked host its next cell, which recovers on it before its first message.
type bindMail mail

// quietMail is a delivery that a stopped cell drops anyway (a Persisted, a timer), so one that
// finds the actor gone is not worth a dead-letter log line; nor is a ping, which Close sends to
// sessions that may have stopped already.
type quietMail mail

type ping struct{}

func (ping) IgnoreDeadLetterLogging()       {}
func (*quietMail) IgnoreDeadLetterLogging() {}

// sink is the handle of a RefExternal: a caller waiting for a reply, or a worker's connection.
// Every one is a pointer, so a Ref that holds it stays comparable.
type sink interface{ deliver(any) }

// connSink is the sink of a worker's connection.
type connSink struct{ send func(any) }

func (f *connSink) deliver(m any) { f.send(m) }

// host runs one cell at a time as a protoactor actor: protoactor is the cell runtime's
// scheduler (a mailbox and a turn on the pool per cell) and its supervisor. The same host
// survives restarts (its producer returns it), and the runtime counts the cell's incarnations.
//
// A job's cell lives for one lease or less, and a session's for one connection, so their host
// is not stopped when the cell stops: it is parked (Broker.parkHost) and the next cell of its
// kind is bound to it (bindMail). Spawning and stopping an actor per job was a twentieth of the
// server's CPU in a burn-down, and one per connection left protoactor's registry of actors a
// little larger for each worker that ever connected (its maps keep their buckets). A host that
// was ever restarted is not parked: its supervisor counts failures per actor, and they were
// not the next cell's.
type host struct {
	b *Broker
	// c is the cell the host runs, nil while parked; only the host's own turns touch it.
	c         *cells.Cell
	restarted bool
	// pid is the actor's, stored by Start once Spawn returns and by the actor itself when it
	// starts, whichever comes first: a cell's own persists (from Recover on) may complete before
	// Spawn has returned.
	pid atomic.Pointer[actor.PID]
}

// Receive implements actor.Actor.
func (h *host) Receive(ctx actor.Context) {
	defer func() {
		if r := recover(); r != nil {
			if h.c != nil {
				h.c.Log().Error("behaviour panicked; its supervisor restarts it",
					zap.String("code", "ACTOR_PANIC"), zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
			}
			panic(r)
		}
	}()
	rt := h.b.rt
	switch m := ctx.Message().(type) {
	case *actor.Started:
		h.pid.Store(ctx.Self())
		if h.c != nil {
			rt.Handle(h.c, cells.Wake()) // recover before the first message
		}
	case *actor.Restarting:
		h.restarted = true
		if h.c != nil {
			rt.Restart(h.c, nil)
		}
	case *actor.Stopped:
		if h.c != nil {
			rt.Forget(h.c)
		}
	case *mail:
		h.handle(ctx, m)
	case *quietMail:
		h.handle(ctx, (*mail)(m))
	case *bindMail:
		h.c = m.c
		h.handle(ctx, (*mail)(m)) // a Wake: the cell recovers
	case ping:
		ctx.Respond(ping{})
	}
}

// handle runs a delivery on its cell: the host's, or a cell the host ran before, which has
// stopped and drops it.
func (h *host) handle(ctx actor.Context, m *mail) {
	c, d := m.c, m.d
	*m = mail{}
	mailPool.Put(m)
	h.b.rt.Handle(c, d)
	if c == h.c && c.Stopped() {
		h.retire(ctx)
	}
}

// retire ends the host's run of its cell, which has stopped: a job's or a session's host is
// parked for the next cell of its kind, any other stops.
func (h *host) retire(ctx actor.Context) {
	c := h.c
	if !parks(c.Ref().Kind) || h.restarted {
		ctx.Stop(ctx.Self()) // Stopped forgets the cell
		return
	}
	h.b.rt.Forget(c)
	h.c = nil
	if !h.b.parkHost(c.Ref().Kind, h) {
		ctx.Stop(ctx.Self())
	}
}

// parks reports whether the hosts of a kind of cell are parked when their cell stops: those of
// the short-lived kinds.
func parks(k actors.RefKind) bool { return k == actors.RefJob || k == actors.RefSession }

// hostsParkedMax bounds the parked hosts of a kind: about the jobs in flight, or the workers
// that come and go, at a busy moment; more hosts than that stop when their cell does.
const hostsParkedMax = 4096

// parkHost keeps a host of kind k whose cell stopped for the next cell of that kind; false if
// enough are parked already.
func (b *Broker) parkHost(k actors.RefKind, h *host) bool {
	b.parkedMu.Lock()
	defer b.parkedMu.Unlock()
	if len(b.parked[k]) >= hostsParkedMax {
		return false
	}
	b.parked[k] = append(b.parked[k], h)
	return true
}

// unparkHost returns a parked host of kind k, or nil.
func (b *Broker) unparkHost(k actors.RefKind) *host {
	b.parkedMu.Lock()
	defer b.parkedMu.Unlock()
	parked := b.parked[k]
	n := len(parked)
	if n == 0 {
		return nil
	}
	h := parked[n-1]
	parked[n-1] = nil
	b.parked[k] = parked[:n-1]
	return h
}

// scheduler is the Broker as the cell runtime's Scheduler: one protoactor actor per cell,
// under the supervisor of its kind.
type scheduler Broker

func (s *scheduler) Start(c *cells.Cell) {
	if parks(c.Ref().Kind) {
		if h := (*Broker)(s).unparkHost(c.Ref().Kind); h != nil {
			c.Home = h
			m := mailPool.Get().(*mail)
			m.c, m.d = c, cells.Wake()
			s.system.Root.Send(h.pid.Load(), (*bindMail)(m))
			return
		}
	}
	props := *s.props[c.Ref().Kind]
	h := &host{b: (*Broker)(s), c: c}
	c.Home = h
	h.pid.Store(s.system.Root.Spawn(props.Configure(actor.WithProducer(func() actor.Actor { return h }))))
}

// pidOf is the actor that runs c.
func pidOf(c *cells.Cell) *actor.PID { return c.Home.(*host).pid.Load() }

func (s *scheduler) Schedule(c *cells.Cell, d cells.Delivery) {
	m := mailPool.Get().(*mail)
	m.c, m.d = c, d
	if d.Droppable() {
		s.system.Root.Send(pidOf(c), (*quietMail)(m))
		return
	}
	s.system.Root.Send(pidOf(c), m)
}

// committer is the Broker as the cell runtime's Committer: the log's group commit. The log
// calls done in seq order on its own goroutine, so the projections are folded in log order with
// no hand-off between an fsync and the replies that wait for it.
type committer Broker

func (cm *committer) Commit(c *cells.Commit) {
	cm.elog.AppendPayloadsTo(&c.Log, c.Events, c)
}

// committed runs after each commit is applied and told: it wakes watchers and decides on a
// checkpoint.
func (b *Broker) committed() {
	b.signalChanged()
	b.maybeCheckpoint()
}

// runtimeClock is the runtime's clock: Config.Clock and Config.AfterFunc.
type runtimeClock struct {
	now   func() time.Time
	after func(d time.Duration, f func()) cells.Timer
}

func (c runtimeClock) Now() time.Time                                  { return c.now() }
func (c runtimeClock) AfterFunc(d time.Duration, f func()) cells.Timer { return c.after(d, f) }

// refField names what an actor concerns in its log lines: job_id, session_id or tenant.
func refField(ref actors.Ref) zap.Field {
	switch ref.Kind {
	case actors.RefJob:
		return zap.String("job_id", ref.ID)
	case actors.RefSession:
		return zap.String("session_id", ref.ID)
	case actors.RefTenant:
		return zap.String("tenant", ref.ID)
	}
	return zap.Skip()
}

func kindName(k actors.RefKind) string {
	switch k {
	case actors.RefDispatcher:
		return "dispatcher"
	case actors.RefTenant:
		return "tenant"
	case actors.RefJob:
		return "job"
	case actors.RefSession:
		return "session"
	}
	return "actor"
}
