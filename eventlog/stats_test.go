package eventlog_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/eventlog/eventlogtest"
)

// StorageStats counts what Pebble wrote: the WAL, a flush into L0, a checkpoint's ingestion,
// and the tables each level holds after them.
func TestStorageStatsCountPebblesWrites(t *testing.T) {
	t.Parallel()
	l, err := eventlog.Open("/data/log", eventlog.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	before := l.StorageStats()
	big := eventlog.Event{Stream: "job/b", Type: "test.big", Data: fmt.Appendf(nil, `{"pad":%q}`, strings.Repeat("x", 1000))}
	for i := range 100 {
		ev := eventlogtest.Event("job/s", i)
		if i%2 == 0 {
			ev = big // a value the flush separates into a blob file (layout.go)
		}
		if _, err := l.Append(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := l.SaveCheckpoint("c", 100, []byte("state"), eventlog.ViewWrite{Key: []byte("j1"), Value: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	st := l.StorageStats()
	if st.WALBytesIn <= before.WALBytesIn || st.WALBytesWritten < st.WALBytesIn {
		t.Errorf("WAL bytes in %d (%d before), written %d", st.WALBytesIn, before.WALBytesIn, st.WALBytesWritten)
	}
	if st.Flushes != before.Flushes+1 || st.Levels[0].FlushedBytes == 0 {
		t.Errorf("flushes %d (%d before), L0 flushed %d bytes", st.Flushes, before.Flushes, st.Levels[0].FlushedBytes)
	}
	if st.Compactions == before.Compactions && st.CompactedBytes() != 0 {
		t.Errorf("no compaction ran, and yet compactions wrote %d bytes (a flush's blob file counted twice?)", st.CompactedBytes())
	}
	var tables, ingested uint64
	for _, lv := range st.Levels {
		tables += uint64(lv.Tables)
		ingested += lv.IngestedTables
	}
	if st.Ingestions != before.Ingestions+1 || ingested == 0 {
		t.Errorf("ingestions %d (%d before), tables ingested %d", st.Ingestions, before.Ingestions, ingested)
	}
	if tables < 2 || st.ReadAmp < 1 {
		t.Errorf("%d tables in the levels, read amp %d: want the flush's and the checkpoint's", tables, st.ReadAmp)
	}
}
