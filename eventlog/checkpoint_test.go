package eventlog_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/eventlog/eventlogtest"
)

// checkpointWrites is a checkpoint's table writes the size of a busy server's: 5,000 finished
// jobs of about 600 bytes, each with seven index keys.
func checkpointWrites(round int) []eventlog.ViewWrite {
	row := []byte(strings.Repeat("j", 600))
	var writes []eventlog.ViewWrite
	for j := range 5000 {
		id := fmt.Sprintf("%08d-%06d", round, j)
		writes = append(writes, eventlog.ViewWrite{Key: []byte("j" + id), Value: row})
		for k := range 7 {
			writes = append(writes, eventlog.ViewWrite{Key: fmt.Appendf(nil, "%c%s", 'a'+k, id)})
		}
	}
	return writes
}

// A checkpoint does not go through Pebble's WAL, where its megabytes would hold every append
// behind them: saving one that moves 5,000 jobs (3.4 MB of table writes) adds no more to the
// WAL than its empty sync record.
func TestCheckpointBypassesTheWAL(t *testing.T) {
	t.Parallel()
	mem := vfs.NewCrashableMem()
	l, err := eventlog.Open("/data/log", eventlog.Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(context.Background(), eventlogtest.Event("job/c", 1)); err != nil {
		t.Fatal(err)
	}
	walBytes := func() (n int64) {
		names, _ := mem.List("/data/log")
		for _, name := range names {
			if strings.HasSuffix(name, ".log") {
				if fi, err := mem.Stat("/data/log/" + name); err == nil {
					n += fi.Size()
				}
			}
		}
		return n
	}
	writes := checkpointWrites(0)
	before := walBytes()
	if err := l.SaveCheckpoint("queue", 1, []byte("state"), writes...); err != nil {
		t.Fatal(err)
	}
	if n := walBytes() - before; n > 1024 {
		t.Fatalf("a checkpoint of %d view keys wrote %d bytes to the WAL, want an empty record's", len(writes), n)
	}
	// What was ingested is what a restart reads: the checkpoint and every view key.
	synced := mem.CrashClone(vfs.CrashCloneCfg{})
	_ = l.Close()
	re, err := eventlog.Open("/data/log", eventlog.Options{FS: synced})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = re.Close() }()
	if c, err := re.LoadCheckpoint("queue"); err != nil || c.Seq != 1 || string(c.Data) != "state" {
		t.Fatalf("after a crash: checkpoint %+v, %v", c, err)
	}
	n := 0
	re.Views().Scan(nil, nil, false, func(k, _ []byte) bool { n++; return true })
	if n != len(writes) {
		t.Fatalf("after a crash: %d view keys, want %d", n, len(writes))
	}
	if names, _ := synced.List("/data/log"); slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "checkpoint-ingest-") }) {
		t.Fatalf("tables to ingest left beside the store: %v", names)
	}
}

// BenchmarkAppendBesideCheckpoints measures what checkpoints cost the appends beside them, on
// the real disk: 64 producers append and wait for their fsyncs while checkpoints the size of a
// busy server's (5,000 finished jobs, 40,000 view keys) are saved back to back. Metrics: the
// appends' p99 and max latency, in ms, and checkpoints saved. b.N is the appends.
func BenchmarkAppendBesideCheckpoints(b *testing.B) {
	l, err := eventlog.Open(b.TempDir(), eventlog.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	rounds := make([][]eventlog.ViewWrite, 4)
	for i := range rounds {
		rounds[i] = checkpointWrites(i)
	}
	stop := make(chan struct{})
	var checkpoints atomic.Int64
	var cwg sync.WaitGroup
	cwg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := l.SaveCheckpoint("queue", l.Head().Seq, []byte("state"), rounds[i%len(rounds)]...); err != nil {
				b.Error(err)
				return
			}
			checkpoints.Add(1)
		}
	})
	const producers = 64
	latencies := make([][]time.Duration, producers)
	var next atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				start := time.Now()
				if _, err := l.Append(context.Background(), eventlog.Event{Stream: "job/b", Type: "job.leased", Data: benchData}); err != nil {
					b.Error(err)
					return
				}
				latencies[p] = append(latencies[p], time.Since(start))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(stop)
	cwg.Wait()
	all := slices.Concat(latencies...)
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	b.ReportMetric(float64(all[len(all)*99/100])/1e6, "p99-ms")
	b.ReportMetric(float64(all[len(all)-1])/1e6, "max-ms")
	b.ReportMetric(float64(checkpoints.Load()), "checkpoints")
}

// A table a crashed checkpoint left that cannot be removed at the next open is in nobody's way:
// the checkpoints after it write tables of other names.
func TestCheckpointPastAStuckLeftover(t *testing.T) {
	t.Parallel()
	mem := vfs.NewMem()
	if err := mem.MkdirAll("/data/log", 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := eventlog.Open("/data/log", eventlog.Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(context.Background(), eventlogtest.Event("job/c", 1)); err != nil {
		t.Fatal(err)
	}
	_ = l.Close()
	// One leftover is a file, the other a directory whose removal fails (a directory no table
	// can be created over, as an operator's mistake or a permission would leave).
	f, err := mem.Create("/data/log/checkpoint-ingest-1.sst", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if err := mem.MkdirAll("/data/log/checkpoint-ingest-2.sst/x", 0o755); err != nil {
		t.Fatal(err)
	}
	stuck := errorfs.InjectorFunc(func(op errorfs.Op) error {
		// The directory can be neither removed nor created over (Pebble's memory filesystem
		// would replace it; a disk's refuses).
		if (op.Kind == errorfs.OpRemove || op.Kind == errorfs.OpRemoveAll || op.Kind == errorfs.OpCreate) && strings.HasSuffix(op.Path, "checkpoint-ingest-2.sst") {
			return errorfs.ErrInjected
		}
		return nil
	})
	re, err := eventlog.Open("/data/log", eventlog.Options{FS: errorfs.Wrap(mem, stuck)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = re.Close() }()
	for seq := range 3 {
		if err := re.SaveCheckpoint("queue", 1, []byte("state"), eventlog.ViewWrite{Key: fmt.Appendf(nil, "j%d", seq), Value: []byte("x")}); err != nil {
			t.Fatalf("checkpoint %d beside a leftover that could not be removed: %v", seq, err)
		}
	}
	if names, _ := mem.List("/data/log"); !slices.Contains(names, "checkpoint-ingest-2.sst") || slices.Contains(names, "checkpoint-ingest-1.sst") {
		t.Fatalf("the leftovers after the open and three checkpoints: %v; want the stuck one alone", names)
	}
}
