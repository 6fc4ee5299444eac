package eventlogtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tetherhq/tether/eventlog"
)

// DeposedWriter checks a log on an upstream against a deposed leader, the worst a network
// allows: its publish is still in flight when a new leader catches up, fences and appends, and
// arrives after all that, as does the retry of one whose answer it never got, with more appends
// waiting behind it. For every interleaving up to a bound (0..2 of its messages landed before
// the fence, the one in flight lost and retried or not, 1..2 appends waiting behind it, 0..2
// appends by the new leader), the upstream must end up holding one chain: a fresh copy of it
// verifies, it holds every append either leader was told was durable, the deposed leader fails
// with ErrFenced, and the new leader goes on. The new leader either opens to lead, or is a
// follower, copying all along, that Lead promotes. newUpstream returns an empty upstream each
// time.
func DeposedWriter(t *testing.T, newUpstream func(t *testing.T) eventlog.Upstream) {
	for landed := 0; landed <= 2; landed++ {
		for _, retried := range []bool{false, true} {
			for behind := 1; behind <= 2; behind++ {
				for appends := 0; appends <= 2; appends++ {
					for _, promoted := range []bool{false, true} {
						name := fmt.Sprintf("landed=%d/retried=%t/behind=%d/appends=%d/promoted=%t", landed, retried, behind, appends, promoted)
						t.Run(name, func(t *testing.T) {
							deposed(t, newUpstream(t), landed, retried, behind, appends, promoted)
						})
					}
				}
			}
		}
	}
}

func deposed(t *testing.T, up eventlog.Upstream, landed int, retried bool, behind, appends int, promoted bool) {
	ctx := context.Background()
	fs := vfs.NewMem()
	gate := &holdingUpstream{Upstream: up, t: t, captured: make(chan *heldPublish, 16)}
	old, err := eventlog.Open("/old", eventlog.Options{FS: fs, Upstream: gate, Lead: true})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	gate.mu.Lock()
	gate.holding = true // its fence went through; from now on every publish is held
	gate.mu.Unlock()
	type result struct {
		r   eventlog.Receipt
		err error
	}
	results := make(chan result, 8)
	appendOld := func(i int) {
		old.AppendAsync([]eventlog.Event{Event("job/old", i)}, func(r eventlog.Receipt, err error) { results <- result{r, err} })
	}
	var follower *eventlog.Log // the new leader, if it follows first
	if promoted {
		follower, err = eventlog.Open("/new", eventlog.Options{FS: fs, Upstream: up})
		if err != nil {
			t.Fatal(err)
		}
		followed := make(chan error, 1)
		go func() { followed <- follower.Follow(ctx) }()
		defer func() { // after Close, which ends Follow if Lead did not
			if err := <-followed; err != nil {
				t.Errorf("Follow: %v", err)
			}
		}()
		defer follower.Close()
	}
	var acked []eventlog.Receipt // what either leader was told is durable
	for i := range landed {
		appendOld(i)
		gate.next().deliver()
		res := <-results
		if res.err != nil {
			t.Fatalf("an append that landed before the fence: %v", res.err)
		}
		acked = append(acked, res.r)
	}

	// One publish in flight, more appends waiting behind it.
	for i := range behind {
		appendOld(landed + i)
	}
	inflight := gate.next()
	if retried {
		// Lost on the way: the old leader reads its message back, finds nothing, and
		// publishes it again; the retry is in flight in its turn.
		inflight.drop()
		inflight = gate.next()
	}

	next := follower
	if promoted {
		err = follower.Lead(ctx)
	} else {
		next, err = eventlog.Open("/new", eventlog.Options{FS: fs, Upstream: up, Lead: true})
		if err == nil {
			defer next.Close()
		}
	}
	if err != nil {
		t.Fatalf("the new leader's open or Lead: %v", err)
	}
	for i := range appends {
		r, err := next.Append(ctx, Event("job/new", i))
		if err != nil {
			t.Fatalf("the new leader's append %d: %v", i, err)
		}
		acked = append(acked, r)
	}

	// What the old leader had in flight arrives now; it learns it was deposed, and what waited
	// behind is never published.
	gate.mu.Lock()
	gate.delivered = inflight
	gate.mu.Unlock()
	inflight.deliver()
	for range behind {
		if res := <-results; !errors.Is(res.err, eventlog.ErrFenced) && !errors.Is(res.err, eventlog.ErrFailed) {
			t.Fatalf("a deposed leader's append after the fence: %+v %v, want it refused", res.r, res.err)
		}
	}
	if err := old.Err(); !errors.Is(err, eventlog.ErrFenced) {
		t.Fatalf("the deposed leader's log: %v, want ErrFenced", err)
	}
	r, err := next.Append(ctx, Event("job/new", appends))
	if err != nil {
		t.Fatalf("the new leader's append after its predecessor was refused: %v", err)
	}
	acked = append(acked, r)

	// One chain, holding everything acknowledged.
	copied, err := eventlog.Open("/copy", eventlog.Options{FS: fs, Upstream: up})
	if err != nil {
		t.Fatalf("a fresh copy of the upstream: %v", err)
	}
	defer copied.Close()
	if h := MustVerify(t, copied); h != next.Head() {
		t.Fatalf("the upstream ends at %d/%s, the new leader at %d/%s", h.Seq, h.Hash, next.Head().Seq, next.Head().Hash)
	}
	for _, r := range acked {
		got, err := copied.Get(r.Last)
		if err != nil || got.Hash != r.Hash {
			t.Fatalf("acknowledged seq %d (%s) is not in the upstream: %+v %v", r.Last, r.Hash, got, err)
		}
	}
}

// holdingUpstream holds every publish, once holding, until the test delivers or drops it, and fails the test
// if a publish comes while another is held: a leader publishes after the message it knows.
type holdingUpstream struct {
	eventlog.Upstream
	t        *testing.T
	mu       sync.Mutex
	holding  bool
	held     bool
	captured chan *heldPublish
	// delivered is the last publish the test delivered after the fence, if it did: the
	// publisher may send it again while it settles it (a read that did not find it), and
	// nothing else.
	delivered *heldPublish
}

type heldPublish struct {
	g       *holdingUpstream
	after   uint64
	payload []byte
	answer  chan func() (uint64, error)
}

func (g *holdingUpstream) Publish(after uint64, payload []byte) func() (uint64, error) {
	g.mu.Lock()
	if !g.holding {
		g.mu.Unlock()
		return g.Upstream.Publish(after, payload)
	}
	if g.held {
		g.t.Errorf("a publish after message %d while another was in flight", after)
	}
	if d := g.delivered; d != nil {
		if d.after != after || !bytes.Equal(d.payload, payload) {
			g.t.Errorf("a deposed leader published a new message after message %d", after)
		}
		g.mu.Unlock()
		return g.Upstream.Publish(after, payload)
	}
	g.held = true
	g.mu.Unlock()
	h := &heldPublish{g: g, after: after, payload: payload, answer: make(chan func() (uint64, error), 1)}
	g.captured <- h
	return func() (uint64, error) { return (<-h.answer)() }
}

// next waits for the next publish.
func (g *holdingUpstream) next() *heldPublish {
	g.t.Helper()
	select {
	case h := <-g.captured:
		return h
	case <-time.After(time.Minute):
		g.t.Fatal("no publish came to the upstream")
		return nil
	}
}

func (h *heldPublish) release() {
	h.g.mu.Lock()
	h.g.held = false
	h.g.mu.Unlock()
}

// deliver hands the publish to the upstream now, and its answer to the publisher.
func (h *heldPublish) deliver() {
	h.release()
	h.answer <- h.g.Upstream.Publish(h.after, h.payload)
}

// drop loses the publish on the way: the publisher hears that the connection went away.
func (h *heldPublish) drop() {
	h.release()
	h.answer <- func() (uint64, error) { return 0, errors.New("the connection went away before the answer") }
}
