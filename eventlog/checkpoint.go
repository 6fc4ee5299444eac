package eventlog

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
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
// seq, which must be durable, and applies writes to the view table in the same batch: the
// checkpoint and the table change together or not at all. It replaces the previous checkpoint
// of that name and returns once the batch is fsynced.
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
	size := len(v) + len(ckptKey(name)) + 16
	for _, w := range writes {
		size += len(prefixView) + len(w.Key) + len(w.Value) + 16 // a record's kind and varints
	}
	b := l.db.NewBatchWithSize(size) // sized at once: a checkpoint may move thousands of jobs
	defer b.Close()
	key := []byte(prefixView)
	for _, w := range writes {
		key = append(key[:len(prefixView)], w.Key...) // the batch copies it
		if w.Delete {
			err = b.Delete(key, nil)
		} else {
			err = b.Set(key, w.Value, nil)
		}
		if err != nil {
			return err
		}
	}
	if err := b.Set(ckptKey(name), v, nil); err != nil {
		return err
	}
	if err := l.guard(func() error { return b.Commit(pebble.Sync) }); err != nil {
		l.fail(err)
		return l.Err()
	}
	return nil
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
