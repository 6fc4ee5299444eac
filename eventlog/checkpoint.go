package eventlog

import (
	"bytes"
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
	sc := l.ingestScratch.Swap(nil)
	if sc == nil {
		sc = &ingestScratch{}
	}
	defer l.keepIngestScratch(sc)
	// The checkpoint's key first: it sorts before every view key, so writes that come in key
	// order stay one run (sortIngestKeys).
	keys := slices.Grow(sc.keys[:0], len(writes)+1)
	keys = append(keys, ingestKey{key: ckptKey(name), value: v})
	size := 0
	for _, w := range writes {
		size += len(prefixView) + len(w.Key)
	}
	arena := slices.Grow(sc.arena[:0], size) // the prefixed keys, carved from one buffer
	for _, w := range writes {
		start := len(arena)
		arena = append(append(arena, prefixView...), w.Key...)
		keys = append(keys, ingestKey{key: arena[start:len(arena):len(arena)], value: w.Value, del: w.Delete})
	}
	sc.keys, sc.arena = keys, arena
	paths, err := l.writeIngestTables(keys, &sc.merged)
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

// ingestScratch is the memory of a checkpoint's keys, kept for the next checkpoint: those of
// 5,000 jobs (30,000 keys, their copies with the prefix, and a copy to merge them into) are
// megabytes, and made anew at every checkpoint they were a good part of the garbage the
// collector chased.
type ingestScratch struct {
	keys, merged []ingestKey
	arena        []byte
}

// ingestScratchKeysMax bounds the scratch a Log keeps between checkpoints: a larger one (a
// rebuild's, or a backlog's) is left to the collector.
const ingestScratchKeysMax = 1 << 17

// keepIngestScratch keeps sc for the next checkpoint, holding none of the writes' memory.
func (l *Log) keepIngestScratch(sc *ingestScratch) {
	if cap(sc.keys) > ingestScratchKeysMax || cap(sc.merged) > ingestScratchKeysMax {
		return
	}
	clear(sc.keys)
	clear(sc.merged[:cap(sc.merged)])
	l.ingestScratch.Store(sc)
}

// ingestKey is one key of a checkpoint's tables: a view write, or the checkpoint itself.
type ingestKey struct {
	key, value []byte
	del        bool
}

// sortIngestKeys sorts keys by key, keeping the order they were written in among equal keys
// (the last write of a key wins), and returns them sorted, in keys or in scratch, which it
// grows to len(keys) if it must.
//
// It merges the ascending runs the keys come in, pairwise, run by run, as a natural merge
// sort does: n·log2(runs) comparisons, where a pdqsort of the same keys made n·log2(n) and was
// an eighth of a checkpoint's CPU. A checkpoint's writes come as few long runs, each index's
// keys of its jobs in order (projections' tableWrites); keys in any order cost a merge sort's
// n·log2(n).
func sortIngestKeys(keys []ingestKey, scratch *[]ingestKey) []ingestKey {
	// bounds are where each run starts, and len(keys) last.
	bounds := []int{0}
	for i := 1; i < len(keys); i++ {
		if bytes.Compare(keys[i-1].key, keys[i].key) > 0 {
			bounds = append(bounds, i)
		}
	}
	bounds = append(bounds, len(keys))
	if len(bounds) <= 2 {
		return keys // one run: sorted as written
	}
	*scratch = slices.Grow((*scratch)[:0], len(keys))[:len(keys)]
	src, dst := keys, *scratch
	for len(bounds) > 2 {
		merged := bounds[:1]
		for r := 0; r+1 < len(bounds); r += 2 {
			lo, mid := bounds[r], bounds[r+1]
			if r+2 == len(bounds) { // an odd run out: copied as it is
				copy(dst[lo:mid], src[lo:mid])
				merged = append(merged, mid)
				continue
			}
			hi := bounds[r+2]
			mergeIngestKeys(dst[lo:hi], src[lo:mid], src[mid:hi])
			merged = append(merged, hi)
		}
		bounds = merged
		src, dst = dst, src
	}
	return src
}

// mergeIngestKeys merges the sorted runs a and b, a written before b, into dst: a's key first
// of two equal ones, so that the order written holds among equal keys.
func mergeIngestKeys(dst, a, b []ingestKey) {
	i, j, k := 0, 0, 0
	for i < len(a) && j < len(b) {
		if bytes.Compare(b[j].key, a[i].key) < 0 {
			dst[k] = b[j]
			j++
		} else {
			dst[k] = a[i]
			i++
		}
		k++
	}
	k += copy(dst[k:], a[i:])
	copy(dst[k:], b[j:])
}

// ingestPrefix names the tables a checkpoint writes beside the store before Pebble takes them
// in; Pebble keeps links of its own, and these names go once the ingestion returns (or, after
// a crash between the two, at the next Open).
const ingestPrefix = "checkpoint-ingest-"

// writeIngestTables writes keys as tables to ingest, sorted, the last write of a key winning
// (a batch's rule). It cuts them where ingestGroups says, so that what a checkpoint appends
// past everything the store holds goes into the bottom level as it is (doc.go, "Tables").
func (l *Log) writeIngestTables(keys []ingestKey, scratch *[]ingestKey) (paths []string, err error) {
	keys = sortIngestKeys(keys, scratch)
	kept := keys[:0]
	for i, k := range keys {
		if i+1 < len(keys) && bytes.Equal(k.key, keys[i+1].key) {
			continue // a later write of the key replaces this one
		}
		kept = append(kept, k)
	}
	keys = kept
	groups, err := l.ingestGroups(keys)
	if err != nil {
		return nil, err
	}
	fs := l.popts.FS
	for _, g := range groups {
		path := fs.PathJoin(l.dir, fmt.Sprintf("%s%d.sst", ingestPrefix, l.ingestTables.Add(1)))
		f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
		if err != nil {
			return paths, err
		}
		paths = append(paths, path)
		w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), l.popts.MakeWriterOptions(0, l.db.TableFormat()))
		for _, k := range keys[g.start:g.end] {
			if k.del {
				err = w.Delete(k.key)
			} else {
				err = w.Set(k.key, k.value)
			}
			if err != nil {
				_ = w.Close()
				return paths, err
			}
		}
		if err := w.Close(); err != nil {
			return paths, err
		}
	}
	return paths, nil
}

// ingestGroup is keys[start:end] of a checkpoint, written as one table.
type ingestGroup struct{ start, end int }

// ingestRunKeysMin is the fewest keys a run that overlaps nothing gets a table of its own for:
// one table a key (a lone late job, a label's new value) would cost a file and a sync each, at
// every checkpoint, for a few bytes that a compaction merges cheaply.
const ingestRunKeysMin = 64

// ingestGapBytesMax is how much of the store a table of scattered keys may reach across and
// still take in its neighbours: past it they go in tables of their own, so that a compaction
// merges each with what is around it, not with everything between (retention's deletes at the
// old end of a span, late jobs at its new end).
const ingestGapBytesMax = 1 << 20

// ingestTablesMax bounds the tables of one checkpoint: past it, the scattered keys of a span go
// in one table, however far apart.
const ingestTablesMax = 256

// ingestGroups cuts sorted keys into the tables of a checkpoint's ingestion. Pebble puts an
// ingested table in the lowest level where nothing overlaps it (nothing of the store lies
// between its first and last key): a table there is never rewritten by a compaction of its
// own, where one that overlaps goes into L0 and is merged, with every table of the level below
// that it overlaps, into the bottom again.
//
// So the keys are cut into runs, at the end of each span of the layout (layout.go), as Pebble
// cuts its own tables, and wherever the store holds a key between two of them or the key
// itself. A run of ingestRunKeysMin keys or more that overlaps nothing is a table: the jobs a
// checkpoint adds to each index past all it held (view/j, each of List's indexes, view/d, ...),
// which land in the bottom level beside the tables before them. The other runs of a span (late
// jobs, deletes, overwrites) go together into one table between two such, unless the store
// holds more than ingestGapBytesMax between them.
func (l *Log) ingestGroups(keys []ingestKey) ([]ingestGroup, error) {
	type run struct {
		ingestGroup
		clean   bool   // the store holds no key from the run's first key to its last
		spanEnd []byte // the end of the run's span
	}
	var runs []run
	// Over the view table alone: the checkpoint's own key replaces the last one, always. The
	// seeks go forwards only, so that Pebble tries each from where the last one stopped, in
	// the block it holds, before it seeks again from the top of every level.
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte(prefixView), UpperBound: []byte(prefixViewEnd)})
	if err != nil {
		return nil, err
	}
	var next []byte // the first key of the store after the run's last key so far; nil: none
	for i, k := range keys {
		if len(runs) > 0 {
			r := &runs[len(runs)-1]
			if (r.spanEnd == nil || bytes.Compare(k.key, r.spanEnd) < 0) && (next == nil || bytes.Compare(k.key, next) < 0) {
				r.end = i + 1
				continue
			}
		}
		_, spanEnd, _ := keySpan(k.key)
		r := run{ingestGroup: ingestGroup{i, i + 1}, clean: true, spanEnd: spanEnd}
		next = nil
		if !bytes.HasPrefix(k.key, []byte(prefixView)) {
			r.clean = false
		} else if it.SeekGE(k.key) {
			if bytes.Equal(it.Key(), k.key) {
				// k replaces or deletes a key the store holds: look on from the key after k.
				r.clean = false
				it.SeekGE(append(k.key[:len(k.key):len(k.key)], 0))
			}
			if it.Valid() {
				next = bytes.Clone(it.Key())
			}
		}
		runs = append(runs, r)
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	group := func(bridgeGaps bool) ([]ingestGroup, error) {
		var groups []ingestGroup
		scattered := false // the last group is of scattered runs, which the next may join
		for i, r := range runs {
			alone := r.clean && r.end-r.start >= ingestRunKeysMin
			if !alone && scattered && bytes.Equal(r.spanEnd, runs[i-1].spanEnd) {
				join := bridgeGaps
				if !join {
					gap, err := l.db.EstimateDiskUsage(keys[r.start-1].key, keys[r.start].key)
					if err != nil {
						return nil, err
					}
					join = gap <= ingestGapBytesMax
				}
				if join {
					groups[len(groups)-1].end = r.end
					continue
				}
			}
			groups = append(groups, r.ingestGroup)
			scattered = !alone
		}
		return groups, nil
	}
	groups, err := group(len(runs) > 4*ingestTablesMax) // past that, the gaps are not worth a look each
	if err == nil && len(groups) > ingestTablesMax {
		groups, err = group(true)
	}
	return groups, err
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
