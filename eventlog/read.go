package eventlog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"iter"
	"time"

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
	if seq <= l.Anchor().Seq {
		return l.getArchived(seq)
	}
	v, closer, err := l.db.Get(logKey(seq))
	if errors.Is(err, pebble.ErrNotFound) {
		if seq <= l.Anchor().Seq { // archived while we looked
			return l.getArchived(seq)
		}
		return Record{}, &ChainError{Seq: seq, Reason: "record is missing"}
	}
	if err != nil {
		return Record{}, fmt.Errorf("eventlog: read seq %d: %w", seq, err)
	}
	defer closer.Close()
	return decodeStored(seq, v)
}

func (l *Log) getArchived(seq uint64) (Record, error) {
	if l.arch == nil {
		return Record{}, l.ArchiveGaps()[0]
	}
	return l.arch.get(seq, l.Anchor())
}

// Range yields the durable records from seq `from` to seq `to`, both inclusive, in order; to == 0
// means up to the durable head. Archived records are read from their segments. It stops at the
// first error, which it yields. A record that is missing from the range is an error
// (*ChainError, or a *GapError for a segment that is not here), never a silent gap.
func (l *Log) Range(from, to uint64) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		l.walk(from, to, func(r Record, _ []byte, err error) bool { return yield(r, err) })
	}
}

// walk is Range with each record's stored bytes (for an archived record, its body and the hash
// recomputed from its segment), valid only during the call.
func (l *Log) walk(from, to uint64, yield func(r Record, stored []byte, err error) bool) {
	head := l.Head().Seq
	if to == 0 || to > head {
		to = head
	}
	from = max(from, 1)
	for from <= to {
		anchor := l.Anchor()
		if from <= anchor.Seq {
			end := min(to, anchor.Seq)
			if l.arch == nil {
				yield(Record{}, nil, l.ArchiveGaps()[0])
				return
			}
			if !l.arch.walk(from, end, anchor, yield) {
				return
			}
			from = end + 1
			continue
		}
		if l.walkHot(from, to, yield) {
			return
		}
	}
}

// walkHot walks records in Pebble. It reports false, having yielded nothing, if records from
// `from` on were archived as it began: the caller reads them from the archive instead.
func (l *Log) walkHot(from, to uint64, yield func(r Record, stored []byte, err error) bool) bool {
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: logKey(from), UpperBound: logKey(to + 1)})
	if err != nil {
		yield(Record{}, nil, fmt.Errorf("eventlog: %w", err))
		return true
	}
	defer it.Close()
	// The anchor rises before records leave Pebble: if it is still below from now that the
	// iterator holds its snapshot, the snapshot has every record from `from` on.
	if from <= l.Anchor().Seq {
		return false
	}
	want := from
	for ok := it.First(); ok; ok = it.Next() {
		r, err := decodeAt(it)
		if err == nil && r.Seq != want {
			err = &ChainError{Seq: want, Reason: "record is missing"}
		}
		if err != nil {
			yield(Record{}, nil, err)
			return true
		}
		if !yield(r, it.Value(), nil) {
			return true
		}
		want++
	}
	if err := it.Error(); err != nil {
		yield(Record{}, nil, fmt.Errorf("eventlog: %w", err))
		return true
	}
	if want <= to {
		yield(Record{}, nil, &ChainError{Seq: want, Reason: "record is missing"})
	}
	return true
}

// Stream yields the durable records of one stream with seq >= from, in order. Its archived
// records are found through the segments' stream tables. A run of archived records from `from`
// on that no segment here holds is yielded as a *GapError where it falls, and the walk goes on
// after it if the caller does: records of the stream may be in it, so a reader that shows a
// stream must say so, never show the rest as the whole.
func (l *Log) Stream(stream string, from uint64) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		head := l.Head().Seq
		for from <= head {
			anchor := l.Anchor()
			if from <= anchor.Seq {
				if !l.streamArchived(stream, from, anchor, yield) {
					return
				}
				from = anchor.Seq + 1
				continue
			}
			if l.streamHot(stream, from, head, yield) {
				return
			}
		}
	}
}

// streamArchived is Stream over the archived records from..anchor, each gap in its place;
// false means the caller stopped it or an error ended it.
func (l *Log) streamArchived(stream string, from uint64, anchor Head, yield func(Record, error) bool) bool {
	var seqs []uint64
	if l.arch != nil {
		var err error
		if seqs, err = l.arch.streamSeqs(stream, from, anchor.Seq); err != nil {
			yield(Record{}, err)
			return false
		}
	}
	var gaps []*GapError // after the stream table's read, which finds a segment removed since
	for _, g := range l.ArchiveGaps() {
		if g.Last >= from && !mutantStreamSkipsGaps {
			gaps = append(gaps, g)
		}
	}
	for _, seq := range seqs {
		for len(gaps) > 0 && gaps[0].First < seq {
			if !yield(Record{}, gaps[0]) {
				return false
			}
			gaps = gaps[1:]
		}
		r, err := l.arch.get(seq, anchor)
		if err == nil && r.Stream != stream {
			continue // another stream with the same hash
		}
		if !yield(r, err) || err != nil {
			return false
		}
	}
	for _, g := range gaps {
		if !yield(Record{}, g) {
			return false
		}
	}
	return true
}

// streamHot is Stream over the hot log; like walkHot, it reports false if the records from
// `from` on were archived as it began.
func (l *Log) streamHot(stream string, from, head uint64, yield func(Record, error) bool) bool {
	it, err := l.db.NewIter(&pebble.IterOptions{
		LowerBound: idxKey(stream, from),
		UpperBound: idxKey(stream, head+1),
	})
	if err != nil {
		yield(Record{}, fmt.Errorf("eventlog: %w", err))
		return true
	}
	defer it.Close()
	if from <= l.Anchor().Seq {
		return false
	}
	for ok := it.First(); ok; ok = it.Next() {
		r, err := l.get(idxKeySeq(it.Key()))
		if err == nil && r.Stream != stream {
			err = &ChainError{Seq: r.Seq, Reason: fmt.Sprintf("index of stream %q points at a record of %q", stream, r.Stream)}
		}
		if err != nil {
			yield(Record{}, err)
			return true
		}
		if !yield(r, nil) {
			return true
		}
	}
	if err := it.Error(); err != nil {
		yield(Record{}, fmt.Errorf("eventlog: %w", err))
	}
	return true
}

// Verified yields the durable records from seq 1 to seq `to` (0: the head) in order, checking
// the chain from the genesis hash as it goes. The first record that is missing, undecodable, out
// of order, or whose hash does not match its contents and its predecessor ends the walk with a
// *ChainError naming its seq (a damaged segment, with a *SegmentError); ctx ending ends it with
// ctx's error.
func (l *Log) Verified(ctx context.Context, to uint64) iter.Seq2[Record, error] {
	return l.VerifiedFrom(ctx, Head{Hash: Genesis}, to)
}

// VerifiedFrom is Verified from a known position in the chain (Oldest, when the oldest segments
// are not here): the records from start.Seq+1 on, the first chaining from start.Hash.
func (l *Log) VerifiedFrom(ctx context.Context, start Head, to uint64) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		prev := start.Hash
		d := sha256.New()
		var sum Hash
		// A segment gives each record the hash it computes from the record before, checking
		// every frame and segment boundary and each segment's end as it reads (segment.go), so
		// of the archived records only the first needs hashing here, against start.
		archived := l.Anchor().Seq
		l.walk(start.Seq+1, to, func(r Record, stored []byte, err error) bool {
			if err == nil && r.Seq%4096 == 0 {
				err = ctx.Err()
			}
			if err == nil && (r.Seq > archived || r.Seq == start.Seq+1) {
				// The stored bytes are the encoding the hash was taken over (DecodeRecord
				// accepts only the canonical layout), so they are hashed as they are.
				d.Reset()
				d.Write(prev[:])
				d.Write(stored[:len(stored)-hashLen])
				if d.Sum(sum[:0]); sum != r.Hash {
					err = &ChainError{Seq: r.Seq, Reason: "hash does not match the record's contents and its predecessor"}
				}
			}
			if err != nil {
				yield(Record{}, err)
				return false
			}
			prev = r.Hash
			return yield(r, nil)
		})
	}
}

// Verify walks the whole durable chain from the genesis hash and returns the head it reached,
// or the first failure as Verified reports it.
func (l *Log) Verify(ctx context.Context) (Head, error) {
	head := Head{Hash: Genesis}
	for r, err := range l.Verified(ctx, 0) {
		if err != nil {
			return head, err
		}
		head = Head{Seq: r.Seq, Hash: r.Hash, Time: r.Time}
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

// AuditSummary is what Audit found in a log that verifies.
type AuditSummary struct {
	Head      Head
	FirstTime time.Time // the time of the first record walked; zero if none
	Streams   uint64    // distinct streams in the hot log's index
}

// Audit walks the durable chain from `from` (the genesis head, or Oldest) as VerifiedFrom does,
// handing each record to visit in seq order, then checks the stream index against the records:
// every hot record has its one idx/ key and there is no other, and every archive segment it
// walks whole has the stream table its records make (and the checksum its reads check). Visit may stop the walk by returning an error, which
// Audit returns. Memory stays bounded whatever the log's length.
//
// The index is compared through a digest of its keys (XOR of their SHA-256), computed from the
// records on the walk and from the keys themselves: a missing, extra or altered key shows,
// though not which one. The chain, not the index, is what a receipt proves; the check is there
// so that a history read through the index can be trusted as far as the chain is.
func (l *Log) Audit(ctx context.Context, from Head, visit func(Record) error) (AuditSummary, error) {
	var (
		sum    = AuditSummary{Head: from}
		digest Hash
		key    []byte
		anchor = l.Anchor().Seq // nothing archives under an audit: it runs on a log opened read-only
		// the segment of the archived record walked last, and its stream table so far
		seg        SegmentInfo
		segStreams []uint64
		wholeSeg   bool
	)
	for r, err := range l.VerifiedFrom(ctx, from, 0) {
		if err != nil {
			return sum, err
		}
		if r.Seq == from.Seq+1 {
			sum.FirstTime = r.Time
		}
		sum.Head = Head{Seq: r.Seq, Hash: r.Hash, Time: r.Time}
		if err := visit(r); err != nil {
			return sum, err
		}
		if r.Seq <= anchor {
			// Its index key left with it, for its segment's stream table, which is checked
			// against the records once the walk has read them all.
			if r.Seq > seg.Last || seg.Name == "" {
				seg, _ = l.arch.find(r.Seq)
				segStreams, wholeSeg = segStreams[:0], r.Seq == seg.First
			}
			segStreams = append(segStreams, streamHash(r.Stream))
			if r.Seq == seg.Last && wholeSeg {
				if err := l.arch.checkStreamTable(seg, segStreams); err != nil {
					return sum, err
				}
			}
			continue
		}
		if n := idxKeyLen(nameOf(r.Stream)); cap(key) < n {
			key = make([]byte, n, 2*n)
		} else {
			key = key[:n]
		}
		putIdxKey(key, nameOf(r.Stream), r.Seq)
		xorInto(&digest, sha256.Sum256(key))
	}
	streams, indexed, err := l.indexDigest(ctx)
	if err != nil {
		return sum, err
	}
	if indexed != digest {
		return sum, fmt.Errorf("%w: the stream index does not match the records (a key is missing, extra or altered)", ErrCorruptRecord)
	}
	sum.Streams = streams
	return sum, nil
}

// indexDigest walks every idx/ key, returning how many streams it names and the XOR of the
// keys' SHA-256.
func (l *Log) indexDigest(ctx context.Context) (streams uint64, digest Hash, err error) {
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte(prefixIdx), UpperBound: idxKeyEnd})
	if err != nil {
		return 0, digest, fmt.Errorf("eventlog: %w", err)
	}
	defer it.Close()
	var prev []byte
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) < len(prefixIdx)+1+8 || k[len(k)-9] != 0 {
			return 0, digest, fmt.Errorf("%w: malformed index key %q", ErrCorruptRecord, k)
		}
		if stream := k[len(prefixIdx) : len(k)-9]; !bytes.Equal(stream, prev) {
			streams++
			prev = append(prev[:0], stream...)
		}
		xorInto(&digest, sha256.Sum256(k))
		if n++; n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return 0, digest, err
			}
		}
	}
	if err := it.Error(); err != nil {
		return 0, digest, fmt.Errorf("eventlog: %w", err)
	}
	return streams, digest, nil
}

func xorInto(dst *Hash, h [sha256.Size]byte) {
	for i := range dst {
		dst[i] ^= h[i]
	}
}
