package eventlog_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/eventlog/eventlogtest"
)

// walFault injects errorfs.ErrInjected into the given operations on Pebble's WAL files.
func walFault(kinds ...errorfs.OpKind) *errorfs.Toggle {
	return &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !strings.HasSuffix(op.Path, ".log") {
			return nil
		}
		for _, k := range kinds {
			if op.Kind == k {
				return errorfs.ErrInjected
			}
		}
		return nil
	})}
}

// TestStorageFaults runs appenders into an injected WAL write or sync error and checks the
// failure contract: every waiting appender gets ErrFailed, nothing is acknowledged after the
// failure, the log refuses further appends, and everything acknowledged before it survives.
func TestStorageFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		kinds []errorfs.OpKind
	}{
		{"sync", []errorfs.OpKind{errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo}},
		{"write", []errorfs.OpKind{errorfs.OpFileWrite, errorfs.OpFileWriteAt}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mem := vfs.NewCrashableMem()
			fault := walFault(tc.kinds...)
			l, err := eventlog.Open("/data/log", eventlog.Options{FS: errorfs.Wrap(mem, fault)})
			if err != nil {
				t.Fatal(err)
			}

			const appenders, faultAfter = 8, 100
			var (
				mu       sync.Mutex
				acked    []eventlog.Receipt
				failures int
				wg       sync.WaitGroup
			)
			for p := range appenders {
				wg.Go(func() {
					for i := 0; ; i++ {
						r, err := l.Append(context.Background(), eventlogtest.Event("job/f", p*100000+i))
						mu.Lock()
						if err != nil {
							failures++
							mu.Unlock()
							if !errors.Is(err, eventlog.ErrFailed) {
								t.Errorf("appender %d: %v, want ErrFailed", p, err)
							}
							return
						}
						acked = append(acked, r)
						if len(acked) == faultAfter {
							fault.On()
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait() // every appender got its answer: nobody hangs on a failed sync
			// What is on disk now is what a crash at the failure would leave, before Close or a
			// healed disk gets a chance to sync more.
			synced := mem.CrashClone(vfs.CrashCloneCfg{})

			select {
			case <-l.Failed():
			default:
				t.Fatal("Failed() is not closed after a storage error")
			}
			if failures != appenders {
				t.Fatalf("%d of %d appenders saw the failure", failures, appenders)
			}
			head := l.Head()
			for _, r := range acked {
				if r.Last > head.Seq {
					t.Fatalf("append %d..%d acknowledged beyond the durable head %d", r.First, r.Last, head.Seq)
				}
			}
			fault.Off() // even with the disk healthy again, a failed log stays failed
			if _, err := l.Append(context.Background(), eventlogtest.Event("job/f", -1)); !errors.Is(err, eventlog.ErrFailed) {
				t.Fatalf("append after the failure: %v, want ErrFailed", err)
			}
			if err := l.SaveCheckpoint("c", head.Seq, nil); !errors.Is(err, eventlog.ErrFailed) {
				t.Fatalf("checkpoint after the failure: %v, want ErrFailed", err)
			}
			if h := l.Head(); h != head {
				t.Fatalf("head moved after the failure: %+v → %+v", head, h)
			}
			_ = l.Close() // may report the failure again; it must not hang

			// Restart on what was synced at the failure: every acknowledged append is there.
			re := eventlogtest.Open(t, eventlogtest.Store{FS: synced, Dir: "/data/log"}, eventlog.Options{})
			got := eventlogtest.MustVerify(t, re)
			for _, r := range acked {
				if r.Last > got.Seq {
					t.Fatalf("acknowledged append %d..%d lost after restart (head %d)", r.First, r.Last, got.Seq)
				}
				rec, err := re.Get(r.Last)
				if err != nil || rec.Hash != r.Hash {
					t.Fatalf("acknowledged record %d differs after restart: %v", r.Last, err)
				}
			}
			if len(acked) < faultAfter {
				t.Fatalf("only %d appends acknowledged before the fault", len(acked))
			}
		})
	}
}

// TestCheckpointSyncFault: a checkpoint whose fsync fails (its tables', or the manifest's that
// takes them in) reports it and fails the log, and a restart finds the checkpoint before it.
func TestCheckpointSyncFault(t *testing.T) {
	t.Parallel()
	for _, file := range []string{"checkpoint-ingest-", "MANIFEST-"} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			fault := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
				if strings.Contains(op.Path, file) && (op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo) {
					return errorfs.ErrInjected
				}
				return nil
			})}
			mem := vfs.NewCrashableMem()
			l, err := eventlog.Open("/data/log", eventlog.Options{FS: errorfs.Wrap(mem, fault)})
			if err != nil {
				t.Fatal(err)
			}
			for seq := range 2 {
				if _, err := l.Append(context.Background(), eventlogtest.Event("job/c", seq)); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.SaveCheckpoint("queue", 1, []byte("one"), eventlog.ViewWrite{Key: []byte("j1"), Value: []byte("a")}); err != nil {
				t.Fatal(err)
			}
			fault.On()
			if err := l.SaveCheckpoint("queue", 2, []byte("two"), eventlog.ViewWrite{Key: []byte("j1"), Delete: true}); !errors.Is(err, eventlog.ErrFailed) {
				t.Fatalf("checkpoint with a failing sync: %v, want ErrFailed", err)
			}
			if _, err := l.Append(context.Background(), eventlogtest.Event("job/c", 3)); !errors.Is(err, eventlog.ErrFailed) {
				t.Fatalf("append after a failed checkpoint: %v, want ErrFailed", err)
			}
			synced := mem.CrashClone(vfs.CrashCloneCfg{}) // what the disk holds if the machine stops now
			_ = l.Close()
			re, err := eventlog.Open("/data/log", eventlog.Options{FS: synced})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = re.Close() }()
			c, err := re.LoadCheckpoint("queue")
			if err != nil || c.Seq < 1 {
				t.Fatalf("after the restart: checkpoint %+v, %v", c, err)
			}
			v, ok := re.Views().Get([]byte("j1"))
			if got := c.Seq == 1 && ok && string(v) == "a" || c.Seq == 2 && !ok; !got {
				t.Fatalf("after the restart: checkpoint at %d with view j1 = %q (%v): the table and the checkpoint disagree", c.Seq, v, ok)
			}
			if names, _ := synced.List("/data/log"); slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "checkpoint-ingest-") }) {
				t.Fatalf("tables to ingest left beside the store after a restart: %v", names)
			}
		})
	}
}
