package eventlog

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/cockroachdb/pebble/v2"
)

// Every read is bounded by the durable head, read once when the read starts: a reader never sees
// a record that could still be lost in a crash, even though Pebble already holds it in memory.

// Get returns the durable record at seq, or ErrNotFound.
func (l *Log) Get(seq uint64) (Record, error) {
	if seq == 0 || seq > l.Head().Seq {
		return Record{}, fmt.Errorf("%w: seq %d", ErrNotFound, seq)
	}
	return l.get(seq)
}

func (l *Log) get(seq uint64) (Record, error) {
	v, closer, err := l.db.Get(logKey(seq))
	if errors.Is(err, pebble.ErrNotFound) {
		return Record{}, &ChainError{Seq: seq, Reason: "record is missing"}
	}
	if err != nil {
		return Record{}, fmt.Errorf("eventlog: read seq %d: %w", seq, err)
	}
	defer closer.Close()
	return decodeStored(seq, v)
}

// Range yields the durable records from seq `from` to seq `to`, both inclusive, in order; to == 0
// means up to the durable head. It stops at the first error, which it yields. A record that is
// missing from the range is an error (*ChainError), never a silent gap.
func (l *Log) Range(from, to uint64) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		head := l.Head().Seq
		if to == 0 || to > head {
			to = head
		}
		from = max(from, 1)
		if from > to {
			return
		}
		it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: logKey(from), UpperBound: logKey(to + 1)})
		if err != nil {
			yield(Record{}, fmt.Errorf("eventlog: %w", err))
			return
		}
		defer it.Close()
		want := from
		for ok := it.First(); ok; ok = it.Next() {
			r, err := decodeAt(it)
			if err == nil && r.Seq != want {
				err = &ChainError{Seq: want, Reason: "record is missing"}
			}
			if err != nil {
				yield(Record{}, err)
				return
			}
			if !yield(r, nil) {
				return
			}
			want++
		}
		if err := it.Error(); err != nil {
			yield(Record{}, fmt.Errorf("eventlog: %w", err))
			return
		}
		if want <= to {
			yield(Record{}, &ChainError{Seq: want, Reason: "record is missing"})
		}
	}
}

// Stream yields the durable records of one stream with seq >= from, in order.
func (l *Log) Stream(stream string, from uint64) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		head := l.Head().Seq
		if from > head {
			return
		}
		it, err := l.db.NewIter(&pebble.IterOptions{
			LowerBound: idxKey(stream, from),
			UpperBound: idxKey(stream, head+1),
		})
		if err != nil {
			yield(Record{}, fmt.Errorf("eventlog: %w", err))
			return
		}
		defer it.Close()
		for ok := it.First(); ok; ok = it.Next() {
			r, err := l.get(idxKeySeq(it.Key()))
			if err == nil && r.Stream != stream {
				err = &ChainError{Seq: r.Seq, Reason: fmt.Sprintf("index of stream %q points at a record of %q", stream, r.Stream)}
			}
			if err != nil {
				yield(Record{}, err)
				return
			}
			if !yield(r, nil) {
				return
			}
		}
		if err := it.Error(); err != nil {
			yield(Record{}, fmt.Errorf("eventlog: %w", err))
		}
	}
}

// Verify walks the whole durable chain from the genesis hash and returns the head it reached.
// The first record that is missing, undecodable, out of order, or whose hash does not match its
// contents and its predecessor is reported as a *ChainError with its seq.
func (l *Log) Verify(ctx context.Context) (Head, error) {
	head := Head{Hash: Genesis}
	for r, err := range l.Range(1, 0) {
		if err != nil {
			return head, err
		}
		if r.Seq%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return head, err
			}
		}
		if !r.ChainsFrom(head.Hash) {
			return head, &ChainError{Seq: r.Seq, Reason: "hash does not match the record's contents and its predecessor"}
		}
		head = Head{Seq: r.Seq, Hash: r.Hash, Time: r.Time}
	}
	if want := l.Head(); head.Seq < want.Seq {
		return head, &ChainError{Seq: head.Seq + 1, Reason: "record is missing"}
	}
	return head, nil
}

// Subscription delivers durable records in seq order, from a starting seq on.
type Subscription struct {
	log  *Log
	next uint64
}

// Subscribe returns a subscription whose first record is the one at seq from (at least 1).
func (l *Log) Subscribe(from uint64) *Subscription {
	return &Subscription{log: l, next: max(from, 1)}
}

// Next blocks until at least one new record is durable and returns up to limit of them.
func (s *Subscription) Next(ctx context.Context, limit int) ([]Record, error) {
	if err := s.log.WaitDurable(ctx, s.next); err != nil {
		return nil, err
	}
	limit = max(limit, 1)
	out := make([]Record, 0, min(limit, 1024))
	for r, err := range s.log.Range(s.next, s.next+uint64(limit)-1) {
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	s.next += uint64(len(out))
	return out, nil
}
