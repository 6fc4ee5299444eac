package eventlog_test

import (
	"context"
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
	for i := range 100 {
		if _, err := l.Append(context.Background(), eventlogtest.Event("job/s", i)); err != nil {
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
