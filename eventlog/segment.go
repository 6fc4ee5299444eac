package eventlog

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/klauspost/compress/zstd"
)

// A segment is a sealed, compressed file of consecutive records that left the hot log
// (archive.go says when). doc.go draws its layout; this file writes, reads and verifies one.

const (
	segmentMagic     = "TSEG\x00v1\x00"
	segmentSuffix    = ".tseg"
	segmentTmpSuffix = ".tseg.tmp"
	// frameRawMax is the raw size at which a frame is cut: big enough for zstd to find the
	// repetition between records, small enough that reading one record decodes little.
	frameRawMax = 256 << 10
	// SegmentRecordsMax bounds the records of one segment, so that writing one holds a bounded
	// stream table and index deletions in memory.
	SegmentRecordsMax = 1 << 18

	frameEntryLen  = 8 + 8 + hashLen // first seq, offset, chain hash before the frame
	streamEntryLen = 8 + 4           // stream hash, seq - first
	trailerLen     = 8 + 8 + 8 + 8 + 8 + hashLen + hashLen + 4 + 8 + 8 + hashLen
)

// SegmentInfo describes a sealed segment: the records First..Last, which chain from Anchor (the
// hash of record First-1, Genesis for the first segment) to End (the hash of record Last).
type SegmentInfo struct {
	Name                string
	First, Last         uint64
	FirstTime, LastTime time.Time
	Anchor, End         Hash
	Bytes               int64

	frames                  uint32
	frameTable, streamTable int64 // offsets
}

// Records is how many records the segment holds.
func (s SegmentInfo) Records() uint64 { return s.Last - s.First + 1 }

// segmentName is the file name of the segment of records first..last: zero-padded, so names
// sort in seq order.
func segmentName(first, last uint64) string {
	return fmt.Sprintf("seg-%020d-%020d%s", first, last, segmentSuffix)
}

var (
	zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBetterCompression), zstd.WithEncoderConcurrency(1))
		if err != nil {
			panic(err) // only for invalid options
		}
		return e
	})
	zstdDecoder = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(2*DataLenMax+frameRawMax+1<<20))
		if err != nil {
			panic(err)
		}
		return d
	})
)

// streamHash is FNV-1a over a stream name: the stream table's key. Collisions are harmless,
// because a reader checks the stream of every record it finds.
func streamHash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

type streamEntry struct {
	hash uint64
	off  uint32
}

// segmentWriter writes one segment to a temporary file.
type segmentWriter struct {
	f       vfs.File
	w       *bufio.Writer
	sum     hash.Hash
	off     int64
	info    SegmentInfo
	prev    Hash
	raw     []byte // the frame being filled
	frames  []byte // the frame table so far
	streams []streamEntry
	zbuf    []byte
}

func newSegmentWriter(f vfs.File, anchor Head) *segmentWriter {
	w := &segmentWriter{f: f, sum: sha256.New(), prev: anchor.Hash}
	// The checksum sees each buffer before the file does: a vfs.File may scribble over what it
	// was given once Write returns (Pebble's invariants builds, -race, do on purpose).
	w.w = bufio.NewWriterSize(io.MultiWriter(w.sum, f), 256<<10)
	w.info.First, w.info.Anchor = anchor.Seq+1, anchor.Hash
	return w
}

// add appends a record, given as the bytes the hot log stores (hash included).
func (w *segmentWriter) add(r Record, stored []byte) error {
	if r.Seq != w.info.First+uint64(len(w.streams)) {
		return fmt.Errorf("eventlog: segment writer: seq %d out of order", r.Seq)
	}
	if len(w.raw) == 0 {
		w.frames = binary.BigEndian.AppendUint64(w.frames, r.Seq)
		w.frames = binary.BigEndian.AppendUint64(w.frames, uint64(w.off))
		w.frames = append(w.frames, w.prev[:]...)
		w.info.frames++
	}
	body := stored[:len(stored)-hashLen]
	w.raw = binary.AppendUvarint(w.raw, uint64(len(body)))
	w.raw = append(w.raw, body...)
	w.streams = append(w.streams, streamEntry{streamHash(r.Stream), uint32(r.Seq - w.info.First)})
	if len(w.streams) == 1 {
		w.info.FirstTime = r.Time
	}
	w.info.Last, w.info.LastTime, w.prev = r.Seq, r.Time, r.Hash
	if len(w.raw) >= frameRawMax {
		return w.cut()
	}
	return nil
}

func (w *segmentWriter) cut() error {
	if len(w.raw) == 0 {
		return nil
	}
	w.zbuf = zstdEncoder().EncodeAll(w.raw, w.zbuf[:0])
	w.raw = w.raw[:0]
	return w.write(w.zbuf)
}

func (w *segmentWriter) write(b []byte) error {
	n, err := w.w.Write(b)
	w.off += int64(n)
	return err
}

// finish writes the tables and the trailer, and syncs the file.
func (w *segmentWriter) finish() (SegmentInfo, error) {
	if len(w.streams) == 0 {
		return SegmentInfo{}, errors.New("eventlog: an empty segment")
	}
	if err := w.cut(); err != nil {
		return SegmentInfo{}, err
	}
	w.info.End = w.prev
	w.info.frameTable = w.off
	if err := w.write(w.frames); err != nil {
		return SegmentInfo{}, err
	}
	w.info.streamTable = w.off
	if err := w.write(encodeStreamTable(w.streams)); err != nil {
		return SegmentInfo{}, err
	}
	if err := w.write(encodeTrailer(w.info)); err != nil {
		return SegmentInfo{}, err
	}
	if err := w.w.Flush(); err != nil {
		return SegmentInfo{}, err
	}
	if _, err := w.f.Write(w.sum.Sum(nil)); err != nil {
		return SegmentInfo{}, err
	}
	w.info.Bytes = w.off + hashLen
	return w.info, w.f.Sync()
}

func encodeStreamTable(entries []streamEntry) []byte {
	slices.SortFunc(entries, func(a, b streamEntry) int {
		if a.hash != b.hash {
			return cmpU64(a.hash, b.hash)
		}
		return int(a.off) - int(b.off)
	})
	out := make([]byte, 0, len(entries)*streamEntryLen)
	for _, e := range entries {
		out = binary.BigEndian.AppendUint64(out, e.hash)
		out = binary.BigEndian.AppendUint32(out, e.off)
	}
	return out
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// encodeTrailer encodes everything of the trailer but its last field, the checksum of the file.
func encodeTrailer(s SegmentInfo) []byte {
	b := make([]byte, 0, trailerLen)
	b = append(b, segmentMagic...)
	b = binary.BigEndian.AppendUint64(b, s.First)
	b = binary.BigEndian.AppendUint64(b, s.Last)
	b = binary.BigEndian.AppendUint64(b, uint64(s.FirstTime.UnixNano()))
	b = binary.BigEndian.AppendUint64(b, uint64(s.LastTime.UnixNano()))
	b = append(b, s.Anchor[:]...)
	b = append(b, s.End[:]...)
	b = binary.BigEndian.AppendUint32(b, s.frames)
	b = binary.BigEndian.AppendUint64(b, uint64(s.frameTable))
	b = binary.BigEndian.AppendUint64(b, uint64(s.streamTable))
	return b
}

// SegmentError says what is wrong with a segment file.
type SegmentError struct {
	Name   string
	Reason string
}

func (e *SegmentError) Error() string {
	return fmt.Sprintf("eventlog: archive segment %s: %s", e.Name, e.Reason)
}

// Unwrap makes errors.Is(err, ErrCorruptSegment) hold.
func (e *SegmentError) Unwrap() error { return ErrCorruptSegment }

// readTrailer reads a segment's trailer and checks that it is consistent with itself, the file's
// size and its name; it does not read the records (verifySegment does).
func readTrailer(f vfs.File, name string, size int64) (SegmentInfo, error) {
	bad := func(format string, args ...any) (SegmentInfo, error) {
		return SegmentInfo{}, &SegmentError{Name: name, Reason: fmt.Sprintf(format, args...)}
	}
	if size < trailerLen {
		return bad("%d bytes is too short for a segment", size)
	}
	b := make([]byte, trailerLen)
	if _, err := f.ReadAt(b, size-trailerLen); err != nil {
		return SegmentInfo{}, fmt.Errorf("eventlog: read segment %s: %w", name, err)
	}
	if string(b[:8]) != segmentMagic {
		return bad("not a tether segment (magic %q)", b[:8])
	}
	p := b[8:]
	u64 := func() uint64 { v := binary.BigEndian.Uint64(p); p = p[8:]; return v }
	s := SegmentInfo{Name: name, Bytes: size}
	s.First, s.Last = u64(), u64()
	s.FirstTime, s.LastTime = time.Unix(0, int64(u64())).UTC(), time.Unix(0, int64(u64())).UTC()
	copy(s.Anchor[:], p)
	copy(s.End[:], p[hashLen:])
	p = p[2*hashLen:]
	s.frames = binary.BigEndian.Uint32(p)
	p = p[4:]
	s.frameTable, s.streamTable = int64(u64()), int64(u64())
	switch {
	case s.First == 0 || s.Last < s.First || s.Last-s.First >= SegmentRecordsMax:
		return bad("records %d..%d", s.First, s.Last)
	case s.frames == 0 || s.frameTable+int64(s.frames)*frameEntryLen != s.streamTable:
		return bad("the frame table does not fit the file")
	case s.streamTable+int64(s.Records())*streamEntryLen != size-trailerLen:
		return bad("the stream table does not fit the file")
	case s.LastTime.Before(s.FirstTime):
		return bad("its last record is older than its first")
	case name != segmentName(s.First, s.Last):
		return bad("it holds records %d..%d, which its name does not say", s.First, s.Last)
	}
	return s, nil
}

// frameEntry is one row of a segment's frame table.
type frameEntry struct {
	first  uint64
	off    int64
	anchor Hash
}

func readFrameTable(f vfs.File, s SegmentInfo) ([]frameEntry, error) {
	b := make([]byte, int64(s.frames)*frameEntryLen)
	if _, err := f.ReadAt(b, s.frameTable); err != nil {
		return nil, fmt.Errorf("eventlog: read segment %s: %w", s.Name, err)
	}
	out := make([]frameEntry, s.frames)
	for i := range out {
		e := b[i*frameEntryLen:]
		out[i] = frameEntry{first: binary.BigEndian.Uint64(e), off: int64(binary.BigEndian.Uint64(e[8:]))}
		copy(out[i].anchor[:], e[16:])
		end := s.frameTable
		if i > 0 && (out[i].first <= out[i-1].first || out[i].off <= out[i-1].off) || out[i].off >= end ||
			out[i].first < s.First || out[i].first > s.Last || i == 0 && (out[0].first != s.First || out[0].off != 0) {
			return nil, &SegmentError{Name: s.Name, Reason: fmt.Sprintf("frame %d is out of place", i)}
		}
	}
	return out, nil
}

// segmentFile is an open segment with its frame table, for reads. It keeps the frame it decoded
// last, so reads of nearby records (a job's history, a receipt) decode it once.
type segmentFile struct {
	info   SegmentInfo
	f      vfs.File
	frames []frameEntry

	decoded int    // the frame in raw; -1 for none
	raw     []byte // its records' bodies
}

func openSegment(fs vfs.FS, dir string, info SegmentInfo) (*segmentFile, error) {
	f, err := fs.Open(fs.PathJoin(dir, info.Name))
	if err != nil {
		return nil, fmt.Errorf("eventlog: open segment: %w", err)
	}
	frames, err := readFrameTable(f, info)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &segmentFile{info: info, f: f, frames: frames, decoded: -1}, nil
}

func (s *segmentFile) Close() error { return s.f.Close() }

// frameOf returns the index of the frame that holds seq.
func (s *segmentFile) frameOf(seq uint64) int {
	i, found := slices.BinarySearchFunc(s.frames, seq, func(e frameEntry, seq uint64) int { return cmpU64(e.first, seq) })
	if !found {
		i--
	}
	return i
}

// frame returns the decompressed frame i.
func (s *segmentFile) frame(i int) ([]byte, error) {
	if s.decoded == i {
		return s.raw, nil
	}
	end := s.info.frameTable
	if i+1 < len(s.frames) {
		end = s.frames[i+1].off
	}
	z := make([]byte, end-s.frames[i].off)
	if _, err := s.f.ReadAt(z, s.frames[i].off); err != nil {
		return nil, fmt.Errorf("eventlog: read segment %s: %w", s.info.Name, err)
	}
	s.decoded = -1
	raw, err := zstdDecoder().DecodeAll(z, s.raw[:0])
	if err != nil {
		return nil, &SegmentError{Name: s.info.Name, Reason: fmt.Sprintf("frame %d does not decompress: %v", i, err)}
	}
	s.raw, s.decoded = raw, i
	return raw, nil
}

// records yields the records of frame i from seq `from` on, with their stored bytes (body and
// hash, valid during the call), chaining each from its predecessor; the records before `from`
// are only hashed. It reports whether the caller should go on: false if yield stopped.
func (s *segmentFile) records(i int, from uint64, yield func(Record, []byte) bool) (bool, error) {
	raw, err := s.frame(i)
	if err != nil {
		return false, err
	}
	bad := func(format string, args ...any) (bool, error) {
		return false, &SegmentError{Name: s.info.Name, Reason: fmt.Sprintf("frame %d: ", i) + fmt.Sprintf(format, args...)}
	}
	e := s.frames[i]
	if i == 0 && e.anchor != s.info.Anchor {
		return bad("it does not start at the segment's anchor")
	}
	last := s.info.Last
	if i+1 < len(s.frames) {
		last = s.frames[i+1].first - 1
	}
	prev, seq := e.anchor, e.first
	var stored []byte
	for ; len(raw) > 0; seq++ {
		n, k := binary.Uvarint(raw)
		if k <= 0 || n > uint64(len(raw)-k) || seq > last {
			return bad("malformed at seq %d", seq)
		}
		body := raw[k : k+int(n)]
		raw = raw[k+int(n):]
		prev = chainHash(prev, body)
		if seq < from {
			continue
		}
		stored = append(append(stored[:0], body...), prev[:]...)
		r, err := DecodeRecord(stored)
		if err == nil && r.Seq != seq {
			err = fmt.Errorf("holds seq %d where %d belongs", r.Seq, seq)
		}
		if err != nil {
			return bad("%v", err)
		}
		if !yield(r, stored) {
			return false, nil
		}
	}
	switch {
	case seq != last+1:
		return bad("it ends at seq %d, want %d", seq-1, last)
	case i+1 < len(s.frames) && s.frames[i+1].anchor != prev:
		return bad("it does not chain to frame %d", i+1)
	case i+1 == len(s.frames) && prev != s.info.End:
		return bad("its records do not chain to the end hash the segment states")
	}
	return true, nil
}

// walk yields the records from..to (within the segment) in order, each frame chained to the
// next and the first to the segment's anchor, the last to its end. It reports whether the
// caller should go on.
func (s *segmentFile) walk(from, to uint64, yield func(Record, []byte) bool) (bool, error) {
	past := false
	for i := s.frameOf(from); i < len(s.frames) && s.frames[i].first <= to; i++ {
		more, err := s.records(i, from, func(r Record, stored []byte) bool {
			if past = r.Seq > to; past {
				return false
			}
			return yield(r, stored)
		})
		if err != nil || !more {
			return past, err
		}
	}
	return true, nil
}

// streamSeqs returns the seqs >= from of the records whose stream hashes like stream's, in order.
func (s *segmentFile) streamSeqs(stream string, from uint64) ([]uint64, error) {
	h := streamHash(stream)
	n := int(s.info.Records())
	var e [streamEntryLen]byte
	var readErr error
	at := func(i int) streamEntry {
		if _, err := s.f.ReadAt(e[:], s.info.streamTable+int64(i)*streamEntryLen); err != nil && readErr == nil {
			readErr = err
		}
		return streamEntry{binary.BigEndian.Uint64(e[:]), binary.BigEndian.Uint32(e[8:])}
	}
	lo, hi := 0, n
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if at(mid).hash < h {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	var out []uint64
	for i := lo; i < n; i++ {
		x := at(i)
		if x.hash != h || readErr != nil {
			break
		}
		if seq := s.info.First + uint64(x.off); seq >= from {
			out = append(out, seq)
		}
	}
	if readErr != nil {
		return nil, fmt.Errorf("eventlog: read segment %s: %w", s.info.Name, readErr)
	}
	return out, nil
}

// checkSum checks the SHA-256 the segment ends with against everything before it.
func (s *segmentFile) checkSum() error { return checkSum(context.Background(), s.f, s.info, nil) }

// scrubChunk is how much a checksum reads at a time: what a scrub's pace is asked for.
const scrubChunk = 256 << 10

// checkSum checks the SHA-256 a segment file of info's size ends with against everything before
// it, reading it scrubChunk at a time, each read after pace (if not nil) lets it go.
func checkSum(ctx context.Context, f vfs.File, info SegmentInfo, pace func(ctx context.Context, n int) error) error {
	sum := sha256.New()
	buf := make([]byte, scrubChunk)
	for off := int64(0); off < info.Bytes-hashLen; {
		chunk := buf[:min(int64(len(buf)), info.Bytes-hashLen-off)]
		if pace != nil {
			if err := pace(ctx, len(chunk)); err != nil {
				return err
			}
		}
		if _, err := f.ReadAt(chunk, off); err != nil {
			return fmt.Errorf("eventlog: read segment %s: %w", info.Name, err)
		}
		sum.Write(chunk)
		off += int64(len(chunk))
	}
	var stated Hash
	if _, err := f.ReadAt(stated[:], info.Bytes-hashLen); err != nil {
		return fmt.Errorf("eventlog: read segment %s: %w", info.Name, err)
	}
	if !bytes.Equal(sum.Sum(nil), stated[:]) {
		return &SegmentError{Name: info.Name, Reason: "its checksum does not match its contents"}
	}
	return nil
}

// checkStreamTable checks the segment's stream table against its records' streams, given as
// the hash of each one's stream in seq order: the table must be their entries, one each, in
// (hash, offset) order, which is the one table encodeStreamTable makes of them. It checks each
// entry in place, without sorting.
func (s *segmentFile) checkStreamTable(hashes []uint64) error {
	n := s.info.Records()
	bad := func(why string) error {
		return &SegmentError{Name: s.info.Name, Reason: "its stream table does not match its records: " + why}
	}
	if uint64(len(hashes)) != n {
		return bad(fmt.Sprintf("%d records read, %d in the segment", len(hashes), n))
	}
	table := make([]byte, n*streamEntryLen)
	if _, err := s.f.ReadAt(table, s.info.streamTable); err != nil {
		return fmt.Errorf("eventlog: read segment %s: %w", s.info.Name, err)
	}
	seen := make([]bool, n)
	var prev streamEntry
	for i := range n {
		e := table[i*streamEntryLen:]
		ent := streamEntry{binary.BigEndian.Uint64(e), binary.BigEndian.Uint32(e[8:])}
		switch {
		case uint64(ent.off) >= n || seen[ent.off]:
			return bad(fmt.Sprintf("entry %d names offset %d", i, ent.off))
		case hashes[ent.off] != ent.hash:
			return bad(fmt.Sprintf("entry %d gives seq %d another stream", i, s.info.First+uint64(ent.off)))
		case i > 0 && (ent.hash < prev.hash || ent.hash == prev.hash && ent.off < prev.off):
			return bad(fmt.Sprintf("entry %d is out of order", i))
		}
		seen[ent.off], prev = true, ent
	}
	return nil
}

// verifySegment reads a whole segment and checks everything in it: the checksum, that every
// frame decodes, the seqs, the chain from its anchor to its end, the times, and the stream table.
func verifySegment(fs vfs.FS, dir string, info SegmentInfo) error {
	s, err := openSegment(fs, dir, info)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.checkSum(); err != nil {
		return err
	}
	streams := make([]uint64, 0, info.Records())
	last := info.FirstTime
	var bad error
	if _, err := s.walk(info.First, info.Last, func(r Record, _ []byte) bool {
		if r.Time.Before(last) || r.Time.After(info.LastTime) || r.Seq == info.First && !r.Time.Equal(info.FirstTime) {
			bad = &SegmentError{Name: info.Name, Reason: fmt.Sprintf("seq %d is stamped out of order", r.Seq)}
			return false
		}
		last = r.Time
		streams = append(streams, streamHash(r.Stream))
		return true
	}); err != nil {
		return err
	}
	if bad != nil {
		return bad
	}
	return s.checkStreamTable(streams)
}
