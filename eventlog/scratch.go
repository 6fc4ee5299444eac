package eventlog

import (
	"fmt"
	"os"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"
)

// Scratch is a table on disk for a fold that belongs to no server: `tether replay` folds a log
// of any length into projections whose finished jobs spill here, instead of into memory. It has
// no WAL and is never synced, since nothing survives its Close, which deletes it.
type Scratch struct {
	db  *pebble.DB
	dir string

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
	db, err := pebble.Open(dir, &pebble.Options{DisableWAL: true, Logger: pebbleLogger{log: zap.NewNop().Sugar()}})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("eventlog: scratch table: %w", err)
	}
	return &Scratch{db: db, dir: dir}, nil
}

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
	if rerr := os.RemoveAll(s.dir); err == nil {
		err = rerr
	}
	return err
}
