package eventlogtest

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/tetherhq/tether/eventlog"
)

// attempt is one append an appender tried, in the order its events were given.
type attempt struct {
	events  []eventlog.Event
	receipt eventlog.Receipt
	acked   bool
}

// CrashRecovery crashes the store under running appenders and checks, after reopening, that
// every acknowledged append is there byte for byte, that the log is a gap-free, verifying prefix
// of what was attempted, whole appends only, and that the next append continues the chain. The
// seed draws the number of appenders, the event sizes, the crash point and the share of
// unsynced data that survives. s must have Crash set; it may hold a log already. CrashRecovery
// returns the store that survived, closed, so that a caller can crash it again.
func CrashRecovery(t *testing.T, s Store, seed uint64) Store {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0xc0ffee))

	// Some history before the crash run, so recovery starts from a non-empty log sometimes.
	if pre := rng.IntN(3); pre > 0 {
		l := Open(t, s, eventlog.Options{})
		for i := range pre * 10 {
			if _, err := l.Append(context.Background(), Event("job/pre", i)); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	l, err := eventlog.Open(s.Dir, s.Options(eventlog.Options{}))
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	base := l.Head().Seq

	appenders := 1 + rng.IntN(16)
	crashAfter := 1 + rng.IntN(300) // acknowledged appends before the crash
	keepUnsynced := rng.IntN(101)
	appenderSeeds := make([]uint64, appenders)
	for i := range appenderSeeds {
		appenderSeeds[i] = rng.Uint64()
	}

	var (
		mu       sync.Mutex
		attempts []*attempt
		acks     int
		crashed  = make(chan struct{})
		wg       sync.WaitGroup
		crashMu  sync.Once
		survivor Store
		snapshot []attempt // the acknowledged appends, taken before the crash
	)
	crash := func() {
		crashMu.Do(func() {
			mu.Lock()
			for _, a := range attempts {
				if a.acked {
					snapshot = append(snapshot, *a)
				}
			}
			mu.Unlock()
			// Everything in snapshot was fsynced before this point, so it must survive.
			survivor = s.Crash(keepUnsynced, rand.New(rand.NewPCG(seed, 1)))
			close(crashed)
		})
	}
	for p := range appenders {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(appenderSeeds[p], 2))
			for i := 0; ; i++ {
				select {
				case <-crashed:
					return
				default:
				}
				evs := make([]eventlog.Event, 1+r.IntN(4))
				for k := range evs {
					pad := bytes.Repeat([]byte("x"), r.IntN(600))
					evs[k] = eventlog.Event{
						Stream: fmt.Sprintf("job/%d-%d", p, r.IntN(4)),
						Type:   "test.crash",
						Data:   fmt.Appendf(nil, `{"p":%d,"i":%d,"k":%d,"pad":%q}`, p, i, k, pad),
					}
				}
				a := &attempt{events: evs}
				mu.Lock()
				attempts = append(attempts, a)
				mu.Unlock()
				rec, err := l.Append(context.Background(), evs...)
				if err != nil {
					t.Errorf("seed %d: append before the crash failed: %v", seed, err)
					return
				}
				mu.Lock()
				a.receipt, a.acked = rec, true
				acks++
				done := acks >= crashAfter
				mu.Unlock()
				if done {
					crash()
				}
			}
		})
	}
	wg.Wait()
	_ = l.Close() // the old process's log; the crash clone is what survives

	recovered := Open(t, survivor, eventlog.Options{})
	head, err := recovered.Verify(context.Background())
	if err != nil {
		t.Fatalf("seed %d (appenders=%d crashAfter=%d keepUnsynced=%d%%): recovered log does not verify: %v",
			seed, appenders, crashAfter, keepUnsynced, err)
	}
	if h := recovered.Head(); h != head {
		t.Fatalf("seed %d: recovered head %+v, verify reached %+v", seed, h, head)
	}

	// Every acknowledged append is present byte for byte, with its receipt's hash.
	for _, a := range snapshot {
		if a.receipt.Last > head.Seq {
			t.Fatalf("seed %d: acknowledged append %d..%d lost: recovered head is %d", seed, a.receipt.First, a.receipt.Last, head.Seq)
		}
		for i, ev := range a.events {
			r, err := recovered.Get(a.receipt.First + uint64(i))
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			if r.Stream != ev.Stream || r.Type != ev.Type || !bytes.Equal(r.Data, ev.Data) {
				t.Fatalf("seed %d: seq %d holds %s/%s %s, acknowledged %s/%s %s", seed, r.Seq, r.Stream, r.Type, r.Data, ev.Stream, ev.Type, ev.Data)
			}
			if i == len(a.events)-1 && r.Hash != a.receipt.Hash {
				t.Fatalf("seed %d: seq %d hash differs from its receipt", seed, r.Seq)
			}
		}
	}

	// Everything past the pre-crash history was attempted, whole appends only.
	byFirstEvent := map[string]*attempt{}
	for _, a := range attempts {
		byFirstEvent[string(a.events[0].Data)] = a
	}
	for seq := base + 1; seq <= head.Seq; {
		r, err := recovered.Get(seq)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		a, ok := byFirstEvent[string(r.Data)]
		if !ok {
			t.Fatalf("seed %d: seq %d holds %s, which no append started with", seed, seq, r.Data)
		}
		if seq+uint64(len(a.events))-1 > head.Seq {
			t.Fatalf("seed %d: append at seq %d survived only in part", seed, seq)
		}
		for i, ev := range a.events {
			got, err := recovered.Get(seq + uint64(i))
			if err != nil || !bytes.Equal(got.Data, ev.Data) {
				t.Fatalf("seed %d: append at seq %d survived out of order or torn: %v", seed, seq, err)
			}
		}
		seq += uint64(len(a.events))
	}

	// The next append continues the chain.
	next, err := recovered.Append(context.Background(), Event("job/after", 0))
	if err != nil {
		t.Fatalf("seed %d: append after recovery: %v", seed, err)
	}
	if next.First != head.Seq+1 {
		t.Fatalf("seed %d: append after recovery got seq %d, want %d", seed, next.First, head.Seq+1)
	}
	if _, err := recovered.Verify(context.Background()); err != nil {
		t.Fatalf("seed %d: chain after the post-recovery append: %v", seed, err)
	}
	if err := recovered.Close(); err != nil {
		t.Fatalf("seed %d: close after recovery: %v", seed, err)
	}
	return survivor
}
