package eventlog_test

import (
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/eventlog/eventlogtest"
)

// AfterEachBatch's hook runs after the dones of each group commit, on the goroutine that called
// them, so that the cells runtime tells a group's actors together: every done is followed by a
// hook call before any done of a later batch, and no hook call comes without a done before it.
func TestAfterEachBatchFollowsTheDonesOfEachBatch(t *testing.T) {
	l, err := eventlog.Open("/log", eventlog.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var (
		mu     sync.Mutex
		trace  []byte // 'd' a done, 'h' the hook
		wg     sync.WaitGroup
		hooked = make(chan struct{}, 1)
	)
	l.AfterEachBatch(func() {
		mu.Lock()
		trace = append(trace, 'h')
		mu.Unlock()
		select {
		case hooked <- struct{}{}:
		default:
		}
	})
	const n = 200
	wg.Add(n)
	for i := range n {
		l.AppendAsync([]eventlog.Event{eventlogtest.Event("job/a", i)}, func(_ eventlog.Receipt, err error) {
			defer wg.Done()
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			trace = append(trace, 'd')
			mu.Unlock()
		})
	}
	wg.Wait()
	for {
		mu.Lock()
		done := len(trace) > 0 && trace[len(trace)-1] == 'h'
		mu.Unlock()
		if done {
			break
		}
		<-hooked // the last batch's hook is yet to run
	}
	mu.Lock()
	defer mu.Unlock()
	dones, hooks := 0, 0
	for i, c := range trace {
		switch {
		case c == 'd':
			dones++
		case i == 0 || trace[i-1] != 'd':
			t.Fatalf("a hook call with no done before it: %s", trace)
		default:
			hooks++
		}
	}
	if dones != n || hooks == 0 || hooks > n {
		t.Fatalf("%d dones and %d hook calls for %d appends: %s", dones, hooks, n, trace)
	}
}
