package runtime

import (
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// envelope carries a behaviour message with the Ref of its sender.
type envelope struct {
	msg    any
	sender actors.Ref
}

// persisted carries a Persisted back to the incarnation that made the persist.
type persisted struct {
	incarnation uint64
	p           actors.Persisted
}

// fired is a timer's message arriving.
type fired struct {
	id          actors.TimerID
	incarnation uint64
	msg         any
}

// ping is answered once the actor has started (and so recovered). Close pings sessions that
// may have stopped already, so a ping that finds no one is not worth a dead-letter log line;
// nor is a timer that fired as its actor stopped.
type ping struct{}

func (ping) IgnoreDeadLetterLogging()  {}
func (fired) IgnoreDeadLetterLogging() {}

// sink is the handle of a RefExternal: a caller waiting for a reply, or a worker's connection.
type sink struct{ deliver func(any) }

// host runs one behaviour as a protoactor actor. The same host survives restarts (its producer
// returns it), so it can count incarnations and drop what was meant for an earlier one.
type host struct {
	b    *Broker
	ref  actors.Ref
	make func() actors.Behaviour
	log  *zap.Logger

	beh         actors.Behaviour
	incarnation uint64
	restarting  bool
	rand        *rand.Rand
	ctx         actor.Context
	sender      actors.Ref

	mu       sync.Mutex // guards timers, which fire on other goroutines
	timers   map[actors.TimerID]*time.Timer
	timerSeq actors.TimerID
}

func newHost(b *Broker, ref actors.Ref, make func() actors.Behaviour) *host {
	return &host{b: b, ref: ref, make: make}
}

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

// Receive implements actor.Actor.
func (h *host) Receive(c actor.Context) {
	h.ctx = c
	defer func() {
		if r := recover(); r != nil {
			h.Log().Error("behaviour panicked; its supervisor restarts it",
				zap.String("code", "ACTOR_PANIC"), zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
			panic(r)
		}
	}()
	switch m := c.Message().(type) {
	case *actor.Started:
		h.beh = h.make()
		if h.restarting {
			// Everything the failed incarnation persisted must be in the projections before the
			// new one reads them.
			h.b.drain()
			h.restarting = false
		}
		h.sender = actors.Ref{}
		h.beh.Recover(h)
	case *actor.Restarting:
		h.stopTimers()
		h.incarnation++
		h.restarting = true
	case *actor.Stopping:
		h.stopTimers()
	case *actor.Stopped:
		h.b.forget(h.ref, c.Self())
	case envelope:
		h.sender = m.sender
		h.beh.Receive(h, m.msg)
	case persisted:
		if m.incarnation == h.incarnation {
			h.sender = actors.Ref{}
			h.beh.Receive(h, m.p)
		}
	case fired:
		h.mu.Lock()
		_, live := h.timers[m.id]
		delete(h.timers, m.id)
		h.mu.Unlock()
		if live && m.incarnation == h.incarnation {
			h.sender = actors.Ref{}
			h.beh.Receive(h, m.msg)
		}
	case ping:
		c.Respond(ping{})
	}
}

func (h *host) stopTimers() {
	h.mu.Lock()
	for id, t := range h.timers {
		t.Stop()
		delete(h.timers, id)
	}
	h.mu.Unlock()
}

// The actors.Env methods. They run on the actor's goroutine.

func (h *host) Now() time.Time { return h.b.clock() }

// Rand is made on first use, seeded from the runtime's own randomness: the shell may use it, and
// most job actors draw only a nonce. Secrets (tokens) never come from here but from crypto/rand.
func (h *host) Rand() *rand.Rand {
	if h.rand == nil {
		h.rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return h.rand
}

// Log returns the actor's logger, named for its kind and carrying its id; made on first use,
// because most actors never log.
func (h *host) Log() *zap.Logger {
	if h.log == nil {
		h.log = h.b.kindLogs[h.ref.Kind].With(refField(h.ref))
	}
	return h.log
}
func (h *host) Sender() actors.Ref { return h.sender }

func (h *host) Persist(events []eventlog.Payload, then any) {
	h.b.persist(h.ctx.Self(), h.incarnation, events, then)
}

func (h *host) Send(to actors.Ref, msg any) { h.b.send(to, envelope{msg: msg, sender: h.ref}) }

func (h *host) Forward(to actors.Ref, msg any, sender actors.Ref) {
	h.b.send(to, envelope{msg: msg, sender: sender})
}

func (h *host) After(d time.Duration, msg any) actors.TimerID {
	self, inc := h.ctx.Self(), h.incarnation
	h.mu.Lock()
	defer h.mu.Unlock()
	h.timerSeq++
	id := h.timerSeq
	if h.timers == nil {
		h.timers = map[actors.TimerID]*time.Timer{}
	}
	h.timers[id] = time.AfterFunc(d, func() { h.b.system.Root.Send(self, fired{id: id, incarnation: inc, msg: msg}) })
	return id
}

func (h *host) Cancel(id actors.TimerID) {
	h.mu.Lock()
	if t := h.timers[id]; t != nil {
		t.Stop()
		delete(h.timers, id)
	}
	h.mu.Unlock()
}

func (h *host) Stop(ref actors.Ref) { h.b.stop(ref) }

func (h *host) Read(fn func(*projections.Set)) {
	h.b.mu.RLock()
	defer h.b.mu.RUnlock()
	fn(h.b.set)
}

var _ actors.Env = (*host)(nil)
