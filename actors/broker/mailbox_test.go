package broker

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// invoker records what a mailbox hands its actor, and fails the test if two turns overlap.
type invoker struct {
	t       *testing.T
	busy    atomic.Bool
	mu      sync.Mutex
	handled []any
}

func (v *invoker) record(m any) {
	if !v.busy.CompareAndSwap(false, true) {
		v.t.Error("two turns of one mailbox at once")
	}
	v.mu.Lock()
	v.handled = append(v.handled, m)
	v.mu.Unlock()
	v.busy.Store(false)
}

func (v *invoker) InvokeSystemMessage(m any)    { v.record(m) }
func (v *invoker) InvokeUserMessage(m any)      { v.record(m) }
func (v *invoker) EscalateFailure(r any, _ any) { v.t.Errorf("a turn failed: %v", r) }

// stepDispatcher keeps the run a mailbox schedules for the test to call.
type stepDispatcher struct{ runs []func() }

func (d *stepDispatcher) Schedule(fn func()) { d.runs = append(d.runs, fn) }
func (d *stepDispatcher) Throughput() int    { return 300 }

func (d *stepDispatcher) runAll() {
	for len(d.runs) > 0 {
		fn := d.runs[0]
		d.runs = d.runs[1:]
		fn()
	}
}

type note struct{ n int }

// A mailbox keeps protoactor's rules: system messages before user messages, nothing but system
// messages while suspended, one run scheduled at a time.
func TestMailboxOrderAndSuspension(t *testing.T) {
	v, d := &invoker{t: t}, &stepDispatcher{}
	m := newMailbox()
	m.RegisterHandlers(v, d)
	u1, u2, s1 := &note{1}, &note{2}, &note{-1}
	m.PostUserMessage(u1)
	m.PostSystemMessage(s1)
	m.PostSystemMessage(&actor.SuspendMailbox{})
	m.PostUserMessage(u2)
	if len(d.runs) != 1 {
		t.Fatalf("%d runs scheduled for four messages; want 1", len(d.runs))
	}
	d.runAll()
	if want := []any{s1}; !equalAll(v.handled, want) {
		t.Fatalf("handled %v before the resume; want %v", v.handled, want)
	}
	if n := m.UserMessageCount(); n != 2 {
		t.Fatalf("%d user messages waiting while suspended; want 2", n)
	}
	m.PostSystemMessage(&actor.ResumeMailbox{})
	d.runAll()
	if want := []any{s1, u1, u2}; !equalAll(v.handled, want) {
		t.Fatalf("handled %v; want %v", v.handled, want)
	}
}

func equalAll(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A message to an idle mailbox costs no allocation: protoactor's made a closure for each such
// turn, six a job.
func TestMailboxTurnAllocatesNothing(t *testing.T) {
	v, d := &invoker{t: t, handled: make([]any, 0, 1000)}, &stepDispatcher{runs: make([]func(), 0, 1)}
	m := newMailbox()
	m.RegisterHandlers(v, d)
	msg := &note{1}
	m.PostUserMessage(msg) // the ring's first growth
	d.runAll()
	if n := testing.AllocsPerRun(100, func() {
		m.PostUserMessage(msg)
		d.runs[0]()
		d.runs = d.runs[:0]
	}); n != 0 {
		t.Fatalf("a turn of an idle mailbox makes %v allocations; want 0", n)
	}
}

// Many posters, the pool's goroutines: every message is taken once, in each poster's order, and
// no two turns overlap (run with -race).
func TestMailboxUnderManyPosters(t *testing.T) {
	const posters, each = 8, 5000
	p := newPool(4, 300)
	defer p.close()
	v := &invoker{t: t}
	m := newMailbox()
	m.RegisterHandlers(v, p)
	var wg sync.WaitGroup
	for i := range posters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range each {
				m.PostUserMessage(&note{i*each + n})
			}
		}()
	}
	wg.Wait()
	for deadline := time.Now().Add(time.Minute); !handled(v, posters*each); runtime.Gosched() {
		if time.Now().After(deadline) {
			v.mu.Lock()
			defer v.mu.Unlock()
			t.Fatalf("%d messages of %d taken", len(v.handled), posters*each)
		}
	}
	last := make([]int, posters)
	for i := range last {
		last[i] = -1
	}
	for _, h := range v.handled {
		n, ok := h.(*note)
		if !ok {
			continue
		}
		poster, seq := n.n/each, n.n%each
		if seq != last[poster]+1 {
			t.Fatalf("poster %d's message %d came after its %d", poster, seq, last[poster])
		}
		last[poster] = seq
	}
}

func handled(v *invoker, n int) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.handled) == n
}
