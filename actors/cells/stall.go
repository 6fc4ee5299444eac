package cells

import (
	"sync"
	"time"
)

// The stall watch. A process can stop for a while without knowing it: a SIGSTOP, a frozen VM,
// a long pause of the Go runtime. Meanwhile its timers come due and its sockets fill with what
// its peers sent; when it goes on, the timers fire late, all at once, racing the reads of
// those sockets. A lease whose heartbeats wait unread in a socket must not run out for that
// (actors.Env.Resumed), so the runtime watches its own clock: its driver calls Tick every
// TickEvery, on a clock no step of the wall clock moves (Config.Monotonic), and a gap of StallMin
// or more since the tick before is a stall. A behaviour may run before the ticks catch up with
// a stall; Resumed then finds the last tick StallMin or more ago, and the stall ends now.
const (
	// TickEvery is how often the driver ticks.
	TickEvery = 250 * time.Millisecond
	// StallMin is the shortest gap between ticks that counts as a stall: long enough that a
	// busy process is not taken for a stopped one, short against the shortest lease's heartbeat
	// interval (actors.LeaseTTLMin / 3).
	StallMin = time.Second
)

// watch is the runtime's record of its own stalls.
type watch struct {
	mu       sync.Mutex
	lastTick time.Time // on Config.Monotonic; zero before the first tick
	resumed  time.Time // on Config.Clock: when the last stall ended
	// early is set when Resumed saw a stall before the ticks did: resumed is its end already,
	// so that every behaviour reckons from one instant.
	early bool
}

// Tick tells the runtime it runs; the driver calls it every TickEvery. It returns how long the
// runtime ran nothing before it, if that was a stall (StallMin or more), else 0. Without
// Config.Monotonic it does nothing.
func (rt *Runtime) Tick() (stalled time.Duration) {
	if rt.cfg.Monotonic == nil {
		return 0
	}
	mono, now := rt.cfg.Monotonic(), rt.cfg.Clock.Now()
	w := &rt.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if gap := mono.Sub(w.lastTick); !w.lastTick.IsZero() && gap >= StallMin {
		stalled = gap
		if !w.early {
			w.resumed = now
		}
	}
	w.lastTick, w.early = mono, false
	return stalled
}

// Resumed is when, on the runtime's Clock, it last came back from a stall; zero if it has not
// stalled since its first tick. A stall the ticks have not caught up with yet ended at the
// first call that saw it.
func (rt *Runtime) Resumed() time.Time {
	if rt.cfg.Monotonic == nil {
		return time.Time{}
	}
	mono := rt.cfg.Monotonic()
	w := &rt.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.lastTick.IsZero() && mono.Sub(w.lastTick) >= StallMin && !w.early {
		w.resumed, w.early = rt.cfg.Clock.Now(), true
	}
	return w.resumed
}
