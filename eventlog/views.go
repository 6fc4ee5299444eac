package eventlog

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// A view table is the part of a projection that lives on disk instead of in memory: keys and
// values under view/, whose meaning belongs to the projection. The log never writes it on its
// own: a view table changes only when a checkpoint is saved, in the same atomic ingestion
// (SaveCheckpoint's writes),
// so the table and the checkpoint always cover the same records, and a crash leaves both as they
// were or both as saved.

// ViewWrite is one change to the view table: Value is stored under Key, or Key is deleted if
// Delete is set.
type ViewWrite struct {
	Key    []byte
	Value  []byte
	Delete bool
}

// ViewKeyLenMax bounds a view key; ViewValueLenMax a value.
const (
	ViewKeyLenMax   = 4 << 10
	ViewValueLenMax = 16 << 20
)

// Views reads the view table as the newest saved checkpoint left it.
type Views struct{ l *Log }

// Views returns the reader of the log's view table.
func (l *Log) Views() Views { return Views{l} }

// Get returns the value under key, or false. A read error fails the log (the store is damaged
// or gone, and the server must stop) and answers false.
func (v Views) Get(key []byte) ([]byte, bool) {
	return table{v.l.db, prefixView, v.l.fail}.get(key)
}

// Scan calls fn with every key that starts with prefix, from start on (start itself included if
// it exists; nil for the first), in key order or its reverse, until fn returns false. In
// reverse, start bounds from above (included). A read error fails the log and ends the scan.
// The key and value passed to fn are valid only during the call.
func (v Views) Scan(prefix, start []byte, reverse bool, fn func(key, value []byte) bool) {
	table{v.l.db, prefixView, v.l.fail}.scan(prefix, start, reverse, fn)
}

// table reads the keys of a Pebble store under a prefix, as a table of their own.
type table struct {
	db     *pebble.DB
	prefix string
	fail   func(error)
}

func (t table) key(key []byte) []byte {
	k := make([]byte, len(t.prefix)+len(key))
	copy(k, t.prefix)
	copy(k[len(t.prefix):], key)
	return k
}

func (t table) get(key []byte) ([]byte, bool) {
	val, closer, err := t.db.Get(t.key(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false
	}
	if err != nil {
		t.fail(fmt.Errorf("eventlog: read table key %q: %w", key, err))
		return nil, false
	}
	defer closer.Close()
	return bytes.Clone(val), true
}

func (t table) scan(prefix, start []byte, reverse bool, fn func(key, value []byte) bool) {
	lower, upper := t.key(prefix), t.key(prefixEnd(prefix))
	if prefixEnd(prefix) == nil {
		upper = prefixEnd([]byte(t.prefix)) // nil (no bound) for a table of the whole store
	}
	it, err := t.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		t.fail(fmt.Errorf("eventlog: scan table: %w", err))
		return
	}
	defer it.Close()
	var valid bool
	switch {
	case reverse && start != nil:
		valid = it.SeekLT(append(t.key(start), 0)) // start itself included
	case reverse:
		valid = it.Last()
	case start != nil:
		valid = it.SeekGE(t.key(start))
	default:
		valid = it.First()
	}
	for ; valid; valid = step(it, reverse) {
		val, err := it.ValueAndErr()
		if err != nil {
			t.fail(fmt.Errorf("eventlog: scan table: %w", err))
			return
		}
		if !fn(it.Key()[len(t.prefix):], val) {
			return
		}
	}
	if err := it.Error(); err != nil {
		t.fail(fmt.Errorf("eventlog: scan table: %w", err))
	}
}

func step(it *pebble.Iterator, reverse bool) bool {
	if reverse {
		return it.Prev()
	}
	return it.Next()
}

// prefixEnd is the least key greater than every key that starts with prefix (nil if none is).
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// ClearViews deletes the whole view table and every checkpoint called name, in one synced
// batch: what a server does before it rebuilds its projections from the whole log, so that no
// table of an earlier fold is mixed with the new one.
func (l *Log) ClearViews(name string) error {
	if l.opts.ReadOnly {
		return ErrReadOnly
	}
	if err := checkCheckpointName(name); err != nil {
		return err
	}
	b := l.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange([]byte(prefixView), []byte(prefixViewEnd), nil); err != nil {
		return err
	}
	if err := b.Delete(ckptKey(name), nil); err != nil {
		return err
	}
	if err := l.guard(func() error { return b.Commit(pebble.Sync) }); err != nil {
		l.fail(err)
		return l.Err()
	}
	return nil
}

func checkViewWrites(writes []ViewWrite) error {
	for _, w := range writes {
		if len(w.Key) == 0 || len(w.Key) > ViewKeyLenMax {
			return fmt.Errorf("eventlog: view key of %d bytes, want 1..%d", len(w.Key), ViewKeyLenMax)
		}
		if len(w.Value) > ViewValueLenMax {
			return fmt.Errorf("eventlog: view value of %d bytes, more than %d", len(w.Value), ViewValueLenMax)
		}
	}
	return nil
}
