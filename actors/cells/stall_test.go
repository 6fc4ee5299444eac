package cells_test

import (
	"testing"
	"time"

	"github.com/tetherhq/tether/actors/cells"
)

// stallClock is a runtime's two clocks: the wall clock its behaviours read (which may be set
// forward) and the monotonic one the stall watch measures.
type stallClock struct {
	wall, mono time.Time
}

func (c *stallClock) Now() time.Time                              { return c.wall }
func (c *stallClock) AfterFunc(time.Duration, func()) cells.Timer { panic("no timers here") }
func (c *stallClock) run(d time.Duration)                         { c.wall, c.mono = c.wall.Add(d), c.mono.Add(d) }

// tickFor runs the clock for d, ticking every TickEvery as a driver does, and reports whether
// any tick saw a stall.
func (c *stallClock) tickFor(rt *cells.Runtime, d time.Duration) bool {
	stalled := false
	for ; d > 0; d -= cells.TickEvery {
		c.run(cells.TickEvery)
		stalled = stalled || rt.Tick() > 0
	}
	return stalled
}

func newWatched(c *stallClock) *cells.Runtime {
	return cells.New(cells.Config{Clock: c, Monotonic: func() time.Time { return c.mono }})
}

// A runtime that ticks on time has not stalled, however far its wall clock is set forward.
func TestTicksOnTimeAreNoStall(t *testing.T) {
	c := &stallClock{wall: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), mono: time.Unix(0, 0)}
	rt := newWatched(c)
	if c.tickFor(rt, time.Minute) {
		t.Fatal("a tick every TickEvery was taken for a stall")
	}
	c.wall = c.wall.Add(time.Hour) // an NTP step, not a stall
	if c.tickFor(rt, time.Second) || !rt.Resumed().IsZero() {
		t.Fatalf("a step of the wall clock was taken for a stall: resumed %s", rt.Resumed())
	}
}

// A gap of StallMin between ticks is a stall that ends when the runtime runs again: at once
// for a behaviour that runs before the ticks catch up, then at the tick that saw it.
func TestAGapBetweenTicksIsAStall(t *testing.T) {
	c := &stallClock{wall: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), mono: time.Unix(0, 0)}
	rt := newWatched(c)
	c.tickFor(rt, time.Second)
	c.run(cells.StallMin - cells.TickEvery - time.Millisecond) // a gap just short of a stall
	if rt.Resumed() != (time.Time{}) || rt.Tick() != 0 {
		t.Fatal("a gap shorter than StallMin was taken for a stall")
	}
	c.run(30 * time.Second) // SIGSTOP
	seen := c.wall
	if got := rt.Resumed(); !got.Equal(seen) {
		t.Fatalf("before the ticks caught up, the stall ended at %s, not now (%s)", got, seen)
	}
	c.run(time.Millisecond)
	if got := rt.Resumed(); !got.Equal(seen) {
		t.Fatalf("asked again before the ticks caught up, the stall ended at %s, not where it was first seen (%s)", got, seen)
	}
	if got := rt.Tick(); got != 30*time.Second+time.Millisecond {
		t.Fatalf("the tick after the stall saw a gap of %s", got)
	}
	if c.tickFor(rt, time.Minute) || !rt.Resumed().Equal(seen) {
		t.Fatalf("after the stall: resumed %s, want %s, where a behaviour first saw it", rt.Resumed(), seen)
	}
	c.run(20 * time.Second) // another, which the ticks see first
	c.run(time.Millisecond)
	if got := rt.Tick(); got != 20*time.Second+time.Millisecond || !rt.Resumed().Equal(c.wall) {
		t.Fatalf("the second stall: a gap of %s, resumed %s, want %s", got, rt.Resumed(), c.wall)
	}
}

// A runtime whose driver gives it no monotonic clock watches nothing: no stall is ever seen.
func TestNoWatchWithoutAMonotonicClock(t *testing.T) {
	c := &stallClock{wall: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	rt := cells.New(cells.Config{Clock: c})
	rt.Tick()
	c.run(time.Hour)
	if rt.Tick() != 0 || !rt.Resumed().IsZero() {
		t.Fatal("a runtime with no monotonic clock saw a stall")
	}
}
