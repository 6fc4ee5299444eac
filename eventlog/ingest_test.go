package eventlog_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/eventlog/eventlogtest"
)

// openWithARecord opens a log in memory holding one record, which a checkpoint needs to cover.
func openWithARecord(t *testing.T) *eventlog.Log {
	t.Helper()
	l, err := eventlog.Open("/data/log", eventlog.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if _, err := l.Append(context.Background(), eventlogtest.Event("job/c", 1)); err != nil {
		t.Fatal(err)
	}
	return l
}

// listCheckpoint is the table writes of a checkpoint that stores jobs first..first+n-1 the way
// the projections' table keys them (projections/table.go): the job, List's four indexes and
// the retention index. Every checkpoint's jobs come after the last one's, but for late ones,
// which finished after a job submitted after them was stored (one in 25 here).
func listCheckpoint(first, n int) []eventlog.ViewWrite {
	var writes []eventlog.ViewWrite
	for j := range n {
		row := make([]byte, 300) // a job's JSON, which compresses about as well as this
		_, _ = rand.NewChaCha8([32]byte{byte(j), byte(j >> 8), byte(first), byte(first >> 8)}).Read(row)
		id := fmt.Sprintf("%010d", first+j)
		if j%25 == 0 && first > 0 {
			id = fmt.Sprintf("%010d-late", first-1-j) // sorts among the jobs stored before
		}
		done := binary.BigEndian.AppendUint64([]byte("d"), uint64(first+j))
		writes = append(writes,
			eventlog.ViewWrite{Key: []byte("j" + id), Value: row},
			eventlog.ViewWrite{Key: []byte("lt\x00\x00\x00" + id), Value: []byte{}},
			eventlog.ViewWrite{Key: []byte("lt\x00qdefault\x00" + id), Value: []byte{}},
			eventlog.ViewWrite{Key: []byte("lt\x00ssucceeded\x00" + id), Value: []byte{}},
			eventlog.ViewWrite{Key: []byte("lt\x00yecho\x00" + id), Value: []byte{}},
			eventlog.ViewWrite{Key: append(done, id...), Value: []byte{}},
		)
	}
	return writes
}

// What a checkpoint adds to each index past everything the table holds goes into the bottom
// level as it is: no compaction rewrites it, nor what the checkpoints before it stored. When
// the list index's keys went in one table a checkpoint, from the first index's new keys to the
// last one's, the table overlapped all the list index held, went into L0, and every compaction
// of it rewrote the whole index (and view/j's table overlapped too, for its late jobs).
func TestCheckpointsAppendToTheBottomLevel(t *testing.T) {
	t.Parallel()
	l := openWithARecord(t)
	const rounds, jobs = 30, 1000
	for r := range rounds {
		if err := l.SaveCheckpoint("c", 1, []byte("state"), listCheckpoint(r*jobs, jobs)...); err != nil {
			t.Fatal(err)
		}
	}
	st := l.StorageStats()
	var ingested uint64
	for _, lv := range st.Levels {
		ingested += lv.IngestedBytes
	}
	bottom := st.Levels[6].IngestedBytes
	t.Logf("ingested %d bytes, %d of them into L6; tables by level %v", ingested, bottom, st.Levels)
	if bottom < ingested*9/10 {
		t.Fatalf("%d of %d ingested bytes went into L6, want 90 %% or more", bottom, ingested)
	}
	// And the views read back as written: the last checkpoint's jobs, and the first one's.
	for _, id := range []string{fmt.Sprintf("%010d", 0), fmt.Sprintf("%010d", rounds*jobs-1), fmt.Sprintf("%010d-late", (rounds-1)*jobs-1)} {
		if _, ok := l.Views().Get([]byte("lt\x00ssucceeded\x00" + id)); !ok {
			t.Errorf("the list index lost job %s", id)
		}
	}
	n := 0
	l.Views().Scan([]byte("lt\x00\x00\x00"), nil, false, func(_, _ []byte) bool { n++; return true })
	if n != rounds*jobs {
		t.Errorf("the list index holds %d jobs, want %d", n, rounds*jobs)
	}
}

// Keys scattered among those the table holds (a label's values, late jobs) do not make a table
// each: they go together, in as few tables as the store between them allows, and read back.
func TestCheckpointOfScatteredKeysIsFewTables(t *testing.T) {
	t.Parallel()
	l := openWithARecord(t)
	writes := func(parity int) (w []eventlog.ViewWrite) {
		for i := parity; i < 20000; i += 2 {
			w = append(w, eventlog.ViewWrite{Key: fmt.Appendf(nil, "L%06d", i), Value: []byte{}})
		}
		return w
	}
	tables := func() (n uint64) {
		for _, lv := range l.StorageStats().Levels {
			n += lv.IngestedTables
		}
		return n
	}
	if err := l.SaveCheckpoint("c", 1, nil, writes(0)...); err != nil {
		t.Fatal(err)
	}
	before := tables()
	if err := l.SaveCheckpoint("c", 1, nil, append(writes(1), eventlog.ViewWrite{Key: []byte("L000000"), Delete: true})...); err != nil {
		t.Fatal(err)
	}
	if n := tables() - before; n > 3 {
		t.Errorf("10,000 keys each between two the table holds went in %d tables, want the checkpoint's and one or two", n)
	}
	n := 0
	l.Views().Scan([]byte("L"), nil, false, func(_, _ []byte) bool { n++; return true })
	if n != 19999 {
		t.Errorf("the table holds %d keys, want 19,999", n)
	}
}
