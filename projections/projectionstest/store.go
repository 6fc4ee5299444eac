// Package projectionstest holds what tests of projections need beside the package: a table of
// finished jobs in memory, as eventlog.Views is on disk.
package projectionstest

import (
	"bytes"
	"strings"

	"github.com/google/btree"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Store is a projections.Store in memory, with the checkpoint saved with it. The zero value is
// not usable; call NewStore.
type Store struct {
	t          *btree.BTreeG[entry]
	checkpoint []byte
}

type entry struct{ key, value string }

// NewStore returns an empty table.
func NewStore() *Store {
	return &Store{t: btree.NewG(16, func(a, b entry) bool { return a.key < b.key })}
}

// Get implements projections.Store.
func (s *Store) Get(key []byte) ([]byte, bool) {
	e, ok := s.t.Get(entry{key: string(key)})
	return []byte(e.value), ok
}

// Scan implements projections.Store.
func (s *Store) Scan(prefix, start []byte, reverse bool, fn func(key, value []byte) bool) {
	visit := func(e entry) bool {
		return strings.HasPrefix(e.key, string(prefix)) && fn([]byte(e.key), []byte(e.value))
	}
	switch {
	case reverse && start != nil:
		s.t.DescendLessOrEqual(entry{key: string(start)}, visit)
	case reverse:
		// From the last key under prefix: every key below its successor and not below it has it.
		end, ok := successor(string(prefix))
		if !ok {
			s.t.Descend(visit)
			return
		}
		s.t.DescendLessOrEqual(entry{key: end}, func(e entry) bool { return e.key == end || visit(e) })
	case start != nil:
		s.t.AscendGreaterOrEqual(entry{key: string(start)}, visit)
	default:
		s.t.AscendGreaterOrEqual(entry{key: string(prefix)}, visit)
	}
}

// successor is the least string greater than every string with prefix p, or false if none is.
func successor(p string) (string, bool) {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1]), true
		}
	}
	return "", false
}

// Len is the number of keys in the table.
func (s *Store) Len() int { return s.t.Len() }

// Checkpoint is the checkpoint saved with the table, as the last Flush left it.
func (s *Store) Checkpoint() []byte { return bytes.Clone(s.checkpoint) }

// Flush takes a whole flush of set into the table, as a server's checkpoint does, and returns
// the checkpoint's bytes.
func (s *Store) Flush(set *projections.Set) ([]byte, error) {
	f := set.BeginFlush()
	if err := s.Write(f); err != nil {
		return nil, err
	}
	set.EndFlush(f)
	return s.Checkpoint(), nil
}

// Write encodes a flush and applies it to the table, in the order SaveCheckpoint's batch does.
func (s *Store) Write(f *projections.Flush) error {
	data, writes, err := f.Encode()
	if err != nil {
		return err
	}
	s.Apply(writes)
	s.checkpoint = data
	return nil
}

// Apply applies writes in order.
func (s *Store) Apply(writes []eventlog.ViewWrite) {
	for _, w := range writes {
		if w.Delete {
			s.t.Delete(entry{key: string(w.Key)})
		} else {
			s.t.ReplaceOrInsert(entry{key: string(w.Key), value: string(w.Value)})
		}
	}
}
