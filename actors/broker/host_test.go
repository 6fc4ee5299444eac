package broker

import (
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/cells"
)

// spy is a behaviour that remembers what it was sent.
type spy struct {
	mu  sync.Mutex
	got []any
}

func (s *spy) Recover(actors.Env) {}
func (s *spy) Receive(_ actors.Env, msg any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, msg)
}

func (s *spy) messages() []any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]any(nil), s.got...)
}

type noTimer struct{}

func (noTimer) Stop() bool { return false }

// TestJobHostsAreRecycled: the actor that ran a job's cell runs the next job's once the first
// stopped, and a delivery late for the first (a timer that fired as it stopped) is dropped,
// never handed to the next job, whose timers are numbered from 1 as well.
func TestJobHostsAreRecycled(t *testing.T) {
	t.Parallel()
	b, err := Open(Config{Dir: t.TempDir(), AfterFunc: func(d time.Duration, f func()) cells.Timer {
		if d == 0 { // at once, on the caller's goroutine: the test knows when it is scheduled
			f()
			return noTimer{}
		}
		return time.AfterFunc(d, f)
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	settled := func(c *cells.Cell) { // every delivery scheduled to c's host so far is handled
		t.Helper()
		if _, err := b.system.Root.RequestFuture(pidOf(c), ping{}, time.Minute).Result(); err != nil {
			t.Fatal(err)
		}
	}

	x, y := &spy{}, &spy{}
	cx := b.rt.Spawn(actors.JobRef("x"), func() actors.Behaviour { return x })
	b.rt.Send(actors.JobRef("x"), "for x", actors.Ref{})
	b.rt.Stop(actors.JobRef("x"))
	settled(cx)

	cy := b.rt.Spawn(actors.JobRef("y"), func() actors.Behaviour { return y })
	if cy.Home != cx.Home {
		t.Fatal("the next job's cell got a new actor: the host of the stopped one was not parked")
	}
	settled(cy)
	cy.After(time.Hour, "y's lease timer") // timer 1 of y
	defer cy.Cancel(1)
	cx.After(0, "late for x") // timer 1 of x, fired after x stopped
	b.rt.Send(actors.JobRef("y"), "for y", actors.Ref{})
	settled(cy)

	if got := x.messages(); len(got) != 1 || got[0] != "for x" {
		t.Errorf("x got %v, want [for x]", got)
	}
	if got := y.messages(); len(got) != 1 || got[0] != "for y" {
		t.Errorf("y got %v, want [for y]: a delivery for the host's last cell reached the next", got)
	}
}
