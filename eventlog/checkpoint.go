package eventlog

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
)

// Checkpoint is an opaque projection snapshot tagged with the position in the chain it covers:
// it reflects exactly the records 1..Seq, and Hash is the hash of record Seq (Genesis for 0).
type Checkpoint struct {
	Name string
	Seq  uint64
	Hash Hash
	Data []byte
}

// CheckpointNameLenMax bounds a checkpoint name; names use [a-z0-9._-].
const CheckpointNameLenMax = 64

func checkCheckpointName(name string) error {
	if name == "" || len(name) > CheckpointNameLenMax {
		return fmt.Errorf("eventlog: checkpoint name must be 1..%d bytes", CheckpointNameLenMax)
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("eventlog: checkpoint name %q: only [a-z0-9._-]", name)
		}
	}
	return nil
}

// SaveCheckpoint stores data as the newest checkpoint called name, covering the records up to
// seq, which must be durable, and applies writes to the view table with it: the checkpoint and
// the table change together or not at all. It replaces the previous checkpoint of that name and
// returns once the change is durable.
//
// A checkpoint moves thousands of finished jobs (tens of thousands of keys, megabytes), so it
// does not go through Pebble's WAL: written there as one batch, it held the commit pipeline,
// and every append behind it, for 20-50 ms each time (the appends' p99 under load was these
// stalls). It is written instead as sorted tables beside the store, off every lock, and
// ingested: one atomic change to the LSM whose only wait for the appends is its manifest sync.
func (l *Log) SaveCheckpoint(name string, seq uint64, data []byte, writes ...ViewWrite) error {
	if l.opts.ReadOnly {
		return ErrReadOnly
	}
	if err := checkCheckpointName(name); err != nil {
		return err
	}
	if err := checkViewWrites(writes); err != nil {
		return err
	}
	if err := l.Err(); err != nil {
		return err
	}
	hash, err := l.hashAt(seq)
	if err != nil {
		return err
	}
	v := make([]byte, 8+hashLen+len(data))
	binary.BigEndian.PutUint64(v, seq)
	copy(v[8:], hash[:])
	copy(v[8+hashLen:], data)
	keys := make([]ingestKey, 0, len(writes)+1)
	size := 0
	for _, w := range writes {
		size += len(prefixView) + len(w.Key)
	}
	arena := make([]byte, 0, size) // the prefixed keys, carved from one buffer
	for i, w := range writes {
		start := len(arena)
		arena = append(append(arena, prefixView...), w.Key...)
		keys = append(keys, ingestKey{key: arena[start:len(arena):len(arena)], value: w.Value, del: w.Delete, order: i})
	}
	keys = append(keys, ingestKey{key: ckptKey(name), value: v, order: len(writes)})
	paths, err := l.writeIngestTables(keys)
	defer removeFiles(l.popts.FS, paths)
	if err == nil {
		// The records the checkpoint covers must be on the disk before it is: a standby applies
		// the stream's records without a sync of its own (upstream.go), and a checkpoint beyond
		// the records a crash left would not open. The batch this replaced synced the WAL, and
		// with it them; an ingestion does not, so an empty WAL record does.
		err = l.guard(func() error { return l.db.LogData(nil, pebble.Sync) })
	}
	if err == nil {
		err = l.guard(func() error { return l.db.Ingest(context.Background(), paths) })
	}
	if err != nil {
		l.fail(fmt.Errorf("eventlog: save checkpoint %q at seq %d: %w", name, seq, err))
		return l.Err()
	}
	return nil
}

// ingestKey is one key of a checkpoint's tables: a view write, or the checkpoint itself.
type ingestKey struct {
	key, value []byte
	del        bool
	order      int // its place among the writes: the last write of a key wins
}

// ingestPrefix names the tables a checkpoint writes beside the store before Pebble takes them
// in; Pebble keeps links of its own, and these names go once the ingestion returns (or, after
// a crash between the two, at the next Open).
const ingestPrefix = "checkpoint-ingest-"

// writeIngestTables writes keys as tables to ingest, sorted, the last write of a key winning
// (a batch's rule), one table per span of the store's layout (layout.go), so that an ingested
// table is cut where Pebble's own would be and lands beside them.
func (l *Log) writeIngestTables(keys []ingestKey) (paths []string, err error) {
	// By key, then in the order written: pdqsort with the order as a tiebreak, several times
	// faster here than a stable sort's merges.
	slices.SortFunc(keys, func(a, b ingestKey) int {
		if c := bytes.Compare(a.key, b.key); c != 0 {
			return c
		}
		return cmp.Compare(a.order, b.order)
	})
	fs := l.popts.FS
	var (
		w       *sstable.Writer
		spanEnd []byte
	)
	finish := func() error {
		if w == nil {
			return nil
		}
		err := w.Close()
		w = nil
		return err
	}
	for i, k := range keys {
		if i+1 < len(keys) && bytes.Equal(k.key, keys[i+1].key) {
			continue // a later write of the key replaces this one
		}
		if w == nil || spanEnd != nil && bytes.Compare(k.key, spanEnd) >= 0 {
			if err := finish(); err != nil {
				return paths, err
			}
			_, spanEnd, _ = keySpan(k.key)
			path := fs.PathJoin(l.dir, fmt.Sprintf("%s%d.sst", ingestPrefix, l.ingestTables.Add(1)))
			f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
			if err != nil {
				return paths, err
			}
			paths = append(paths, path)
			w = sstable.NewWriter(objstorageprovider.NewFileWritable(f), l.popts.MakeWriterOptions(0, l.db.TableFormat()))
		}
		if k.del {
			err = w.Delete(k.key)
		} else {
			err = w.Set(k.key, k.value)
		}
		if err != nil {
			_ = finish()
			return paths, err
		}
	}
	return paths, finish()
}

// removeIngestLeftovers removes the tables to ingest that a crash left beside the store. One it
// cannot remove is said, and new tables are numbered past it, so that it is in nobody's way.
func (l *Log) removeIngestLeftovers() {
	fs := l.popts.FS
	names, _ := fs.List(l.dir)
	for _, n := range names {
		if !strings.HasPrefix(n, ingestPrefix) {
			continue
		}
		if err := fs.RemoveAll(fs.PathJoin(l.dir, n)); err != nil {
			l.opts.Logger.Warn("a table a crashed checkpoint left could not be removed", zap.String("file", n), zap.Error(err))
			var at uint64
			if _, err := fmt.Sscanf(n, ingestPrefix+"%d.sst", &at); err == nil && at > l.ingestTables.Load() {
				l.ingestTables.Store(at)
			}
		}
	}
}

func removeFiles(fs vfs.FS, paths []string) {
	for _, p := range paths {
		_ = fs.Remove(p)
	}
}

// LoadCheckpoint returns the newest checkpoint called name, or ErrNotFound. A checkpoint whose
// hash does not match the log's record at its seq, or whose seq is beyond the head (a checkpoint
// of another log, or of a log that was cut back) is refused with a *ChainError naming its seq,
// so nobody folds a tail onto the wrong state.
func (l *Log) LoadCheckpoint(name string) (Checkpoint, error) {
	if err := checkCheckpointName(name); err != nil {
		return Checkpoint{}, err
	}
	v, closer, err := l.db.Get(ckptKey(name))
	if errors.Is(err, pebble.ErrNotFound) {
		return Checkpoint{}, fmt.Errorf("%w: checkpoint %q", ErrNotFound, name)
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("eventlog: read checkpoint %q: %w", name, err)
	}
	defer closer.Close()
	if len(v) < 8+hashLen {
		return Checkpoint{}, fmt.Errorf("%w: checkpoint %q is %d bytes", ErrCorruptRecord, name, len(v))
	}
	c := Checkpoint{Name: name, Seq: binary.BigEndian.Uint64(v), Data: append([]byte(nil), v[8+hashLen:]...)}
	copy(c.Hash[:], v[8:])
	if c.Seq > l.Head().Seq {
		return Checkpoint{}, &ChainError{Seq: c.Seq, Reason: fmt.Sprintf("checkpoint %q is beyond the head of the log", name)}
	}
	want, err := l.hashAt(c.Seq)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint %q: %w", name, err)
	}
	if want != c.Hash {
		return Checkpoint{}, &ChainError{Seq: c.Seq, Reason: fmt.Sprintf("checkpoint %q does not match the log at this seq", name)}
	}
	return c, nil
}

// hashAt returns the chain hash after the record at seq (Genesis for 0); seq must be durable.
func (l *Log) hashAt(seq uint64) (Hash, error) {
	if seq == 0 {
		return Genesis, nil
	}
	r, err := l.Get(seq)
	if err != nil {
		return Hash{}, err
	}
	return r.Hash, nil
}
