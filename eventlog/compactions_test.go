package eventlog_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/eventlog/eventlogtest"
)

// compactionHold is a filesystem on which Pebble's compactions cannot write a table until the
// test lets them: a compaction that starts blocks in Create. Flushes go through and are counted.
type compactionHold struct {
	vfs.FS
	flushes atomic.Int32
	started chan struct{} // one per compaction that reached Create
	let     chan struct{} // closed: compactions write
	letOnce sync.Once
}

func holdCompactions(fs vfs.FS) *compactionHold {
	return &compactionHold{FS: fs, started: make(chan struct{}, 1024), let: make(chan struct{})}
}

func (h *compactionHold) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	switch category {
	case "pebble-memtable-flush":
		h.flushes.Add(1)
	case "pebble-compaction":
		h.started <- struct{}{}
		<-h.let
	}
	return h.FS.Create(name, category)
}

func (h *compactionHold) release() { h.letOnce.Do(func() { close(h.let) }) }

// TestOpenDoesNotWaitForCompactions: a store that a crash left with compactions due opens
// without running them first. pebble.Open flushes what it replays from the WAL and then waits
// for every compaction running; with history, that was a second or more of rewriting between
// a kill -9 and /readyz. Without the log's compaction gate this test never gets past Open.
func TestOpenDoesNotWaitForCompactions(t *testing.T) {
	t.Parallel()
	mem := vfs.NewCrashableMem()
	first := holdCompactions(mem)
	l, err := eventlog.Open("/data/log", eventlog.Options{FS: first, MemTableSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	// Enough flushes that level 0 asks for a compaction (Pebble's threshold is 4 tables), and
	// fewer than stop its writes; the compactions it starts wait in Create.
	for n := 0; first.flushes.Load() < 6; n++ {
		batch := make([]eventlog.Event, 200)
		for i := range batch {
			batch[i] = eventlogtest.Event(fmt.Sprintf("job/%d", n), n*1000+i)
		}
		if _, err := l.Append(context.Background(), batch...); err != nil {
			t.Fatal(err)
		}
	}
	head := l.Head()
	crashed := mem.CrashClone(vfs.CrashCloneCfg{}) // a kill -9 now
	t.Cleanup(func() {
		first.release()
		_ = l.Close()
	})

	second := holdCompactions(crashed)
	opened := make(chan error, 1)
	var reopened *eventlog.Log
	go func() {
		var err error
		reopened, err = eventlog.Open("/data/log", eventlog.Options{FS: second, MemTableSize: 256 << 10})
		opened <- err
	}()
	select {
	case err := <-opened:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second): // a failure's bound, not a timing: Open hangs without the gate
		second.release()
		t.Fatal("Open waited for a compaction it had started")
	}
	defer func() {
		second.release()
		if err := reopened.Close(); err != nil {
			t.Error(err)
		}
	}()
	if got := reopened.Head(); got != head {
		t.Fatalf("head after the crash %+v, want %+v", got, head)
	}
	<-second.started // the compactions were due: they start once Open has returned
}
