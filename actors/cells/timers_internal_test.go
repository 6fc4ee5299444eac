package cells

import (
	"testing"

	"github.com/tetherhq/tether/actors"
)

type stubTimer struct{ stopped bool }

func (t *stubTimer) Stop() bool { t.stopped = true; return true }

// A cell's timers: the first few live in the cell, the rest in a map, and each is taken once,
// by id, wherever it lives.
func TestTimerSet(t *testing.T) {
	var s timerSet
	timers := map[actors.TimerID]*stubTimer{}
	for id := actors.TimerID(1); id <= 5; id++ {
		timers[id] = &stubTimer{}
		s.put(id, timers[id])
	}
	for _, id := range []actors.TimerID{4, 1, 1, 9} {
		got := s.take(id)
		if want, running := timers[id]; running && got != Timer(want) || !running && got != nil {
			t.Fatalf("take(%d) = %v; want %v", id, got, timers[id])
		}
		delete(timers, id)
	}
	s.put(6, &stubTimer{}) // into the slot 1 left
	if s.first[0].id != 6 {
		t.Fatalf("timer 6 went to %+v, not the free slot", s.first)
	}
	s.stopAll()
	for id, tm := range timers {
		if !tm.stopped {
			t.Errorf("timer %d still runs after stopAll", id)
		}
		if s.take(id) != nil {
			t.Errorf("timer %d still held after stopAll", id)
		}
	}
	if n := testing.AllocsPerRun(100, func() { s.put(7, timers[2]); s.take(7) }); n != 0 {
		t.Fatalf("a cell's one timer costs %v allocations to hold; want 0", n)
	}
}
