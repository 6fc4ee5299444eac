package eventlog

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"go.uber.org/zap"
)

// Scratch is a table on disk for a fold that belongs to no server: `tether replay` folds a log
// of any length into projections whose finished jobs spill here, instead of into memory. It has
// no WAL and is never synced, since nothing survives its Close, which deletes it.
type Scratch struct {
	db    *pebble.DB
	cache *pebble.Cache
	dir   string

	mu  sync.Mutex
	err error // the first read or write failure
}

// OpenScratch makes an empty scratch table in a new directory under parent (os.TempDir() if
// empty).
func OpenScratch(parent string) (*Scratch, error) {
	dir, err := os.MkdirTemp(parent, "tether-scratch-")
	if err != nil {
		return nil, fmt.Errorf("eventlog: scratch table: %w", err)
	}
	opts := scratchOptions()
	db, err := pebble.Open(dir, opts)
	if err != nil {
		opts.Cache.Unref()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("eventlog: scratch table: %w", err)
	}
	return &Scratch{db: db, cache: opts.Cache, dir: dir}, nil
}

// scratchOptions tune Pebble for a fold's churn. A replay writes each finished job once and,
// under retention, deletes it a while later, reading it back in between, so most of a scratch
// table's work is to drop what it was just given. Tables are left uncompressed (the disk space
// is scratch; the CPU of compressing and decompressing is not), a Bloom filter answers a Get of
// a job never spilled without reading a block, and L0 is let grow further before it is
// compacted.
func scratchOptions() *pebble.Options {
	o := &pebble.Options{
		DisableWAL:            true,
		Logger:                newPebbleLogger(zap.NewNop(), time.Now),
		MemTableSize:          scratchMemTable,
		Cache:                 pebble.NewCache(scratchCache),
		L0CompactionThreshold: 8,
		L0StopWritesThreshold: 64,
		LBaseMaxBytes:         256 << 20,
	}
	for i := range o.Levels {
		o.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.NoCompression }
		o.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		o.Levels[i].BlockSize = 16 << 10
	}
	return o
}

// scratchMemTable is the scratch table's memtable. `tether replay verify` of a 2M-job soak
// (7.8M events) took 21 s with 8 or 16 MiB, 30 s with 32 or 128 MiB, and 220-390 MB of memory.
const scratchMemTable = 16 << 20

// scratchCache is the scratch table's block cache: the jobs that expire next were spilled a
// retention period ago and are mostly in tables by then.
const scratchCache = 64 << 20

func (s *Scratch) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

// Err is the first read or write failure, or nil. A read that failed answered as if the key
// were missing, so a fold over a Scratch that failed is not to be trusted.
func (s *Scratch) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Get returns the value under key, or false.
func (s *Scratch) Get(key []byte) ([]byte, bool) { return table{s.db, "", s.fail}.get(key) }

// Scan is Views.Scan on the scratch table.
func (s *Scratch) Scan(prefix, start []byte, reverse bool, fn func(key, value []byte) bool) {
	table{s.db, "", s.fail}.scan(prefix, start, reverse, fn)
}

// Apply applies writes in order, in one batch.
func (s *Scratch) Apply(writes []ViewWrite) error {
	if err := checkViewWrites(writes); err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	for _, w := range writes {
		var err error
		if w.Delete {
			err = b.Delete(w.Key, nil)
		} else {
			err = b.Set(w.Key, w.Value, nil)
		}
		if err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		s.fail(err)
		return fmt.Errorf("eventlog: scratch table: %w", err)
	}
	return nil
}

// Close deletes the scratch table.
func (s *Scratch) Close() error {
	err := s.db.Close()
	s.cache.Unref()
	if rerr := os.RemoveAll(s.dir); err == nil {
		err = rerr
	}
	return err
}
