package eventlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	iofs "io/fs"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
)

const (
	// keyAnchor holds the hot log's anchor: <seq: 8> <time: 8> <hash: 32>, the last archived
	// record.
	keyAnchor = "meta/anchor"
	// keyFloor holds the archive's floor, in the anchor's layout: the last record of the
	// segments --archive-keep deleted. Records up to it are gone on purpose.
	keyFloor = "meta/archive-floor"
)

func encodeAnchor(h Head) []byte {
	b := binary.BigEndian.AppendUint64(nil, h.Seq)
	b = binary.BigEndian.AppendUint64(b, uint64(h.Time.UnixNano()))
	return append(b, h.Hash[:]...)
}

// loadHead reads a head stored as encodeAnchor wrote it: the anchor or the floor; {0, Genesis}
// when it was never written.
func (l *Log) loadHead(key string) (Head, error) {
	v, closer, err := l.db.Get([]byte(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return Head{Hash: Genesis}, nil
	}
	if err != nil {
		return Head{}, fmt.Errorf("eventlog: read %s: %w", key, err)
	}
	defer closer.Close()
	if len(v) != 16+hashLen {
		return Head{}, fmt.Errorf("%w: %s is %d bytes", ErrCorruptRecord, key, len(v))
	}
	h := Head{Seq: binary.BigEndian.Uint64(v), Time: time.Unix(0, int64(binary.BigEndian.Uint64(v[8:]))).UTC()}
	copy(h.Hash[:], v[16:])
	return h, nil
}

// archive is the sealed segments in a directory, sorted by seq. It need not hold every archived
// record: the oldest may have been deleted on purpose (by --archive-keep, up to the floor, or by
// an operator), and a read-only open takes a directory with holes too, so that an audit can
// check what is there. A read of a record no segment holds is a *GapError, never a silent gap.
type archive struct {
	fs  vfs.FS
	dir string
	// missing says the directory itself is not there.
	missing bool
	// broken is what loading found wrong besides missing records: segments that do not read,
	// overlap, or do not chain to their neighbours, the floor or the anchor.
	broken []error
	// unread are the records that segments here claim by their names but that do not read:
	// missing, but not pruned.
	unread []SegmentInfo

	mu    sync.RWMutex
	segs  []SegmentInfo
	floor Head     // the last record --archive-keep deleted; {0, Genesis} if none
	cache struct { // the segment read last, kept open for the next read nearby
		sync.Mutex
		f *segmentFile
	}
	// checked are the segments whose checksum a read has checked since the log opened.
	checked sync.Map
}

// loadArchive lists the segments in dir, reading each one's trailer. A missing dir is an empty
// archive. Temporary files of a segment that was never sealed are removed unless readOnly.
func loadArchive(fs vfs.FS, dir string, readOnly bool, logger *zap.Logger) (*archive, error) {
	a := &archive{fs: fs, dir: dir, floor: Head{Hash: Genesis}}
	names, err := fs.List(dir)
	if err != nil {
		if _, statErr := fs.Stat(dir); statErr != nil {
			a.missing = true
			return a, nil
		}
		return nil, fmt.Errorf("eventlog: list archive %s: %w", dir, err)
	}
	slices.Sort(names)
	for _, name := range names {
		path := fs.PathJoin(dir, name)
		switch {
		case strings.HasSuffix(name, segmentTmpSuffix):
			if !readOnly {
				logger.Info("removing a segment that was never sealed", zap.String("file", path))
				if err := fs.Remove(path); err != nil {
					return nil, fmt.Errorf("eventlog: remove %s: %w", path, err)
				}
			}
			continue
		case !strings.HasSuffix(name, segmentSuffix):
			continue
		}
		info, err := statSegment(fs, dir, name)
		if err != nil {
			// Its records count as missing, not pruned; the rest of the archive can still
			// be read.
			a.broken = append(a.broken, err)
			var first, last uint64
			if _, scanErr := fmt.Sscanf(name, "seg-%020d-%020d"+segmentSuffix, &first, &last); scanErr == nil && first > 0 && last >= first {
				a.unread = append(a.unread, SegmentInfo{Name: name, First: first, Last: last})
			}
			continue
		}
		a.segs = append(a.segs, info)
	}
	slices.SortFunc(a.segs, func(x, y SegmentInfo) int { return cmpU64(x.First, y.First) })
	return a, nil
}

// settle keeps, of segments that overlap, the one that chains to the log: back from the
// anchor, which Pebble holds, or forward from genesis or the floor. The others are not this
// log's (or not this run's), and are reported broken. It takes time in proportion to the
// segments, which a server that has run for years has many of.
func (a *archive) settle(anchor Head) {
	overlaps := func(x, y SegmentInfo) bool { return x.First <= y.Last && y.First <= x.Last }
	byFirst, byLast := map[uint64][]int{}, map[uint64][]int{}
	for i, s := range a.segs {
		byFirst[s.First] = append(byFirst[s.First], i)
		byLast[s.Last] = append(byLast[s.Last], i)
	}
	chained := map[string]bool{}
	// Back from the anchor first: what chains to it is this log's, whatever else chains
	// from genesis; it runs without a gap from lowest up to the anchor.
	lowest := anchor.Seq + 1
	for cur, found := anchor, true; found; {
		found = false
		for _, i := range byLast[cur.Seq] {
			if s := a.segs[i]; s.End == cur.Hash && !chained[s.Name] {
				chained[s.Name], cur, found, lowest = true, Head{Seq: s.First - 1, Hash: s.Anchor}, true, s.First
				break
			}
		}
	}
	for _, start := range []Head{{Hash: Genesis}, a.floor} {
		for cur, found := start, true; found; {
			found = false
			for _, i := range byFirst[cur.Seq+1] {
				// A segment that overlaps the chain back from the anchor is not this log's.
				if s := a.segs[i]; s.Anchor == cur.Hash && !chained[s.Name] && s.Last < lowest {
					chained[s.Name], cur, found = true, Head{Seq: s.Last, Hash: s.End}, true
					break
				}
			}
		}
	}
	// The chained ones first, so that one that overlaps an unchained one sorted before it is
	// kept and the other reported.
	var keep []SegmentInfo
	for _, s := range a.segs {
		if chained[s.Name] {
			keep = append(keep, s)
		}
	}
	for _, s := range a.segs {
		if chained[s.Name] {
			continue
		}
		i, _ := slices.BinarySearchFunc(keep, s.First, func(k SegmentInfo, first uint64) int { return cmpU64(k.First, first) })
		switch {
		case i > 0 && overlaps(keep[i-1], s):
			a.broken = append(a.broken, overlapError(s, keep[i-1], chained))
		case i < len(keep) && overlaps(keep[i], s):
			a.broken = append(a.broken, overlapError(s, keep[i], chained))
		default:
			keep = slices.Insert(keep, i, s)
		}
	}
	a.segs = keep
}

// overlapError reports segment s, left out because it overlaps kept.
func overlapError(s, kept SegmentInfo, chained map[string]bool) error {
	if chained[kept.Name] {
		return &SegmentError{Name: s.Name, Reason: fmt.Sprintf("it overlaps %s, which chains to the log: it is not this log's", kept.Name)}
	}
	return &SegmentError{Name: s.Name, Reason: "it overlaps " + kept.Name}
}

func statSegment(fs vfs.FS, dir, name string) (SegmentInfo, error) {
	f, err := fs.Open(fs.PathJoin(dir, name))
	if err != nil {
		return SegmentInfo{}, fmt.Errorf("eventlog: open segment: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return SegmentInfo{}, fmt.Errorf("eventlog: stat segment %s: %w", name, err)
	}
	return readTrailer(f, name, st.Size())
}

// segments returns a copy of the list.
func (a *archive) segments() []SegmentInfo {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return slices.Clone(a.segs)
}

// find returns the segment holding seq.
func (a *archive) find(seq uint64) (SegmentInfo, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	i, _ := slices.BinarySearchFunc(a.segs, seq, func(s SegmentInfo, seq uint64) int { return cmpU64(s.Last, seq) })
	if i < len(a.segs) && a.segs[i].First <= seq {
		return a.segs[i], true
	}
	return SegmentInfo{}, false
}

// open returns the segment file, from the cache if it was read last; release gives it back.
func (a *archive) open(info SegmentInfo) (*segmentFile, error) {
	a.cache.Lock()
	f := a.cache.f
	a.cache.f = nil
	a.cache.Unlock()
	if f != nil && f.info.Name == info.Name {
		return f, nil
	}
	if f != nil {
		_ = f.Close()
	}
	f, err := openSegment(a.fs, a.dir, info)
	if errors.Is(err, iofs.ErrNotExist) {
		// Removed since the log opened: its records are missing now, pruned if it was the
		// oldest.
		a.mu.Lock()
		a.segs = slices.DeleteFunc(a.segs, func(s SegmentInfo) bool { return s.Name == info.Name })
		a.mu.Unlock()
		return nil, errSegmentGone
	}
	if err != nil {
		return nil, err
	}
	if _, ok := a.checked.Load(info.Name); !ok {
		// The first read of a segment checks the whole file's checksum, so a changed byte
		// anywhere (its stream table too) is an error rather than a wrong answer.
		if err := f.checkSum(); err != nil {
			_ = f.Close()
			return nil, err
		}
		a.checked.Store(info.Name, true)
	}
	return f, nil
}

// errSegmentGone is archive.open's word that the segment was removed; the reader looks up the
// gap it left.
var errSegmentGone = errors.New("eventlog: segment removed")

func (a *archive) release(f *segmentFile) {
	a.cache.Lock()
	old := a.cache.f
	a.cache.f = f
	a.cache.Unlock()
	if old != nil {
		_ = old.Close()
	}
}

func (a *archive) close() {
	if a != nil {
		a.release(nil)
	}
}

// walk yields the archived records from..to in order, checking that each segment chains from
// the one before; a seq no segment holds is a *GapError.
func (a *archive) walk(from, to uint64, anchor Head, yield func(Record, []byte, error) bool) bool {
	var prev *SegmentInfo
	for seq := from; seq <= to; {
		info, ok := a.find(seq)
		if !ok {
			return yield(Record{}, nil, a.gapAt(seq, anchor))
		}
		if prev != nil && info.Anchor != prev.End {
			return yield(Record{}, nil, &ChainError{Seq: seq, Reason: fmt.Sprintf("segment %s does not chain from %s", info.Name, prev.Name)})
		}
		f, err := a.open(info)
		if errors.Is(err, errSegmentGone) {
			return yield(Record{}, nil, a.gapAt(seq, anchor))
		}
		if err != nil {
			return yield(Record{}, nil, err)
		}
		more, err := f.walk(seq, min(to, info.Last), func(r Record, stored []byte) bool { return yield(r, stored, nil) })
		a.release(f)
		if err != nil {
			return yield(Record{}, nil, err)
		}
		if !more {
			return false
		}
		prev, seq = &info, info.Last+1
	}
	return true
}

// get returns one archived record.
func (a *archive) get(seq uint64, anchor Head) (Record, error) {
	var out Record
	var outErr error
	a.walk(seq, seq, anchor, func(r Record, _ []byte, err error) bool {
		out, outErr = r, err
		return false
	})
	return out, outErr
}

// checkStreamTable checks a segment's stream table against the one its records make.
func (a *archive) checkStreamTable(info SegmentInfo, streams []uint64) error {
	f, err := a.open(info)
	if err != nil {
		return err
	}
	defer a.release(f)
	return f.checkStreamTable(streams)
}

// streamSeqs returns the archived seqs from..to of a stream, in order.
func (a *archive) streamSeqs(stream string, from, to uint64) ([]uint64, error) {
	var out []uint64
	for _, info := range a.segments() {
		if info.Last < from || info.First > to {
			continue
		}
		f, err := a.open(info)
		if errors.Is(err, errSegmentGone) {
			continue // the gaps, read after this, name its records
		}
		if err != nil {
			return nil, err
		}
		seqs, err := f.streamSeqs(stream, from)
		a.release(f)
		if err != nil {
			return nil, err
		}
		for _, s := range seqs {
			if s <= to {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// gaps returns the runs of records 1..anchor that no segment here holds, oldest first. Those
// before the oldest segment here are pruned: deleted by --archive-keep up to the floor, and by
// an operator past it. Any other run, or one a segment here claims but that does not read, is
// a hole.
func (a *archive) gaps(anchor Head) []*GapError {
	a.mu.RLock()
	defer a.mu.RUnlock()
	var out []*GapError
	add := func(first, last uint64, after, before string) {
		if first > last {
			return
		}
		g := &GapError{First: first, Last: last}
		switch {
		case slices.ContainsFunc(a.unread, func(u SegmentInfo) bool { return u.First <= last && first <= u.Last }):
			i := slices.IndexFunc(a.unread, func(u SegmentInfo) bool { return u.First <= last && first <= u.Last })
			g.Why = fmt.Sprintf("segment %s is here but does not read", a.unread[i].Name)
		case after == "" && last <= a.floor.Seq:
			g.Pruned, g.ByKeep, g.Why = true, true, "deleted by --archive-keep"
		case after == "" && before != "":
			if first <= a.floor.Seq {
				out = append(out, &GapError{First: first, Last: a.floor.Seq, Pruned: true, ByKeep: true, Why: "deleted by --archive-keep"})
				g.First = a.floor.Seq + 1
			}
			g.Pruned, g.Why = true, fmt.Sprintf("the oldest segments, before %s, were deleted (not by --archive-keep)", before)
		case a.missing:
			g.Why = fmt.Sprintf("the archive directory %s is not there", a.dir)
		case after == "":
			g.Why = fmt.Sprintf("%s holds none of them; the newest segment, which ends at the hot log's anchor, must stay", a.dir)
		case before == "":
			g.Why = fmt.Sprintf("the newest segments, after %s, are not in %s", after, a.dir)
		default:
			g.Why = fmt.Sprintf("no segment holds them between %s and %s", after, before)
		}
		out = append(out, g)
	}
	next, after := uint64(1), ""
	for _, s := range a.segs {
		if s.First > anchor.Seq {
			continue
		}
		add(next, s.First-1, after, s.Name)
		next, after = s.Last+1, s.Name
	}
	add(next, anchor.Seq, after, "")
	return out
}

// gapAt returns the gap that holds seq.
func (a *archive) gapAt(seq uint64, anchor Head) *GapError {
	for _, g := range a.gaps(anchor) {
		if g.First <= seq && seq <= g.Last {
			return g
		}
	}
	return &GapError{First: seq, Last: seq, Why: "no segment holds it"} // a segment dropped since we looked
}

// checkChain returns what is wrong with how the segments join: a segment that does not chain
// from the one before it, from genesis, or from the floor, or that does not end at the anchor.
func (a *archive) checkChain(anchor Head) []error {
	var out []error
	for i, s := range a.segs {
		switch {
		case i > 0 && s.First == a.segs[i-1].Last+1 && s.Anchor != a.segs[i-1].End:
			out = append(out, &ChainError{Seq: s.First, Reason: fmt.Sprintf("segment %s does not chain from %s", s.Name, a.segs[i-1].Name)})
		case s.First == 1 && s.Anchor != Genesis:
			out = append(out, &ChainError{Seq: s.First, Reason: fmt.Sprintf("segment %s starts the log but not at the genesis hash", s.Name)})
		case a.floor.Seq > 0 && s.First == a.floor.Seq+1 && s.Anchor != a.floor.Hash:
			out = append(out, &ChainError{Seq: s.First, Reason: fmt.Sprintf("segment %s does not chain from seq %d, the last record --archive-keep deleted", s.Name, a.floor.Seq)})
		}
		if s.Last == anchor.Seq && s.End != anchor.Hash {
			out = append(out, &ChainError{Seq: anchor.Seq, Reason: fmt.Sprintf("segment %s does not end at the hot log's anchor", s.Name)})
		}
	}
	return out
}

// ErrArchiveBroken is returned by Open, for a log that may be written to, when its archive does
// not hold every archived record past the pruned oldest ones, or its segments do not chain;
// the error names the records and the segments.
var ErrArchiveBroken = errors.New("eventlog: the archive does not hold the log")

// ArchiveGaps returns the runs of archived records that no segment here holds, oldest first
// (see GapError): the pruned oldest ones, and on a log opened read-only any hole.
func (l *Log) ArchiveGaps() []*GapError {
	anchor := l.Anchor()
	if anchor.Seq == 0 {
		return nil
	}
	if l.arch == nil {
		return []*GapError{{First: 1, Last: anchor.Seq, Why: "no archive directory was given"}}
	}
	return l.arch.gaps(anchor)
}

// ArchiveProblems returns what opening found wrong with the archive besides missing records:
// segments that do not read, overlap, or do not chain. A log that may be written to does not
// open with any; a read-only one opens, so that an audit can report them and check the rest.
func (l *Log) ArchiveProblems() []error {
	if l.arch == nil {
		return nil
	}
	return slices.Clone(l.arch.broken)
}

// Anchor is where the hot log starts: the last archived record ({0, Genesis} before the first
// archiving). Records above it are in Pebble; records up to it are in segments.
func (l *Log) Anchor() Head {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.anchor
}

// Oldest is the position the readable log starts from: Genesis when every archived record is in
// a segment here, else the anchor of the oldest segment from which the segments run unbroken to
// the hot log (the hot log's anchor when there is none).
func (l *Log) Oldest() Head {
	anchor := l.Anchor()
	if l.arch == nil || anchor.Seq == 0 {
		return anchor
	}
	segs := l.arch.segments()
	oldest, want := anchor, anchor.Seq
	for i := len(segs) - 1; i >= 0 && segs[i].Last == want; i-- {
		oldest = Head{Seq: segs[i].First - 1, Hash: segs[i].Anchor}
		want = segs[i].First - 1
	}
	return oldest
}

// RunStart returns where a run of records that starts right after seq chains from: the hot
// log's anchor when seq is the anchor, else the anchor hash that the segment starting at seq+1
// states. Its Seq is seq only if one of those is here.
func (l *Log) RunStart(seq uint64) Head {
	if anchor := l.Anchor(); seq == anchor.Seq {
		return anchor
	}
	if l.arch != nil {
		if s, ok := l.arch.find(seq + 1); ok && s.First == seq+1 {
			return Head{Seq: seq, Hash: s.Anchor}
		}
	}
	return Head{}
}

// Segments lists the sealed segments in the archive directory, oldest first.
func (l *Log) Segments() []SegmentInfo {
	if l.arch == nil {
		return nil
	}
	return l.arch.segments()
}

// openArchive loads the archive directory and reconciles it with the anchor and the floor: a
// segment beyond the anchor is an archiving step that never committed, whose records are all
// still hot, and is removed (or, read-only, ignored). A segment up to the floor that is here
// again (given back) is read like any other. A log that may be written to refuses an archive
// with a hole or a broken chain (ErrArchiveBroken).
func (l *Log) openArchive() error {
	anchor, err := l.loadHead(keyAnchor)
	if err != nil {
		return err
	}
	l.anchor = anchor
	if l.opts.ArchiveDir == "" {
		return nil
	}
	a, err := loadArchive(l.opts.FS, l.opts.ArchiveDir, l.opts.ReadOnly, l.opts.Logger)
	if err != nil {
		return err
	}
	if a.floor, err = l.loadHead(keyFloor); err != nil {
		return err
	}
	keep := a.segs[:0]
	for _, s := range a.segs {
		switch {
		case s.First > anchor.Seq:
			if !l.stillHot(s) {
				return &SegmentError{Name: s.Name, Reason: fmt.Sprintf("it lies beyond the hot log, whose anchor is at seq %d: it is not this log's", anchor.Seq)}
			}
			if !l.opts.ReadOnly {
				l.opts.Logger.Info("rolling back an archiving step that did not commit; its records are in the hot log",
					zap.String("segment", s.Name))
				if err := removeSynced(l.opts.FS, l.opts.ArchiveDir, s.Name); err != nil {
					return err
				}
			}
			continue
		case s.Last > anchor.Seq:
			return &SegmentError{Name: s.Name, Reason: fmt.Sprintf("it straddles the hot log's anchor at seq %d", anchor.Seq)}
		}
		keep = append(keep, s)
	}
	a.segs = keep
	a.settle(anchor)
	a.broken = append(a.broken, a.checkChain(anchor)...)
	l.arch = a
	if l.opts.ReadOnly {
		return nil
	}
	problems := slices.Clone(a.broken)
	for _, g := range a.gaps(anchor) {
		if !g.Pruned {
			problems = append(problems, g)
		}
	}
	if len(problems) > 0 {
		a.close()
		return fmt.Errorf("%w in %s: %w (put the segments back, or copy them from a backup; the oldest may be deleted, the others must stay)",
			ErrArchiveBroken, l.opts.ArchiveDir, errors.Join(problems...))
	}
	return nil
}

// stillHot reports whether a segment that starts right after the anchor holds records the hot
// log still has: the step that sealed it did not commit.
func (l *Log) stillHot(s SegmentInfo) bool {
	if s.First != l.anchor.Seq+1 {
		return false
	}
	v, closer, err := l.db.Get(logKey(s.Last))
	if err != nil {
		return false
	}
	defer closer.Close()
	r, err := decodeStored(s.Last, v)
	return err == nil && r.Hash == s.End
}

// removeSynced removes a file and syncs its directory.
func removeSynced(fs vfs.FS, dir, name string) error {
	if err := fs.Remove(fs.PathJoin(dir, name)); err != nil {
		return fmt.Errorf("eventlog: remove %s: %w", name, err)
	}
	return syncDir(fs, dir)
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("eventlog: open %s: %w", dir, err)
	}
	return errors.Join(d.Sync(), d.Close())
}

// ArchivableTo returns the highest seq that may leave the hot log: covered by the newest
// checkpoint (covered), stamped at or before cutoff, and durable. It is the anchor's seq when
// nothing may.
func (l *Log) ArchivableTo(covered uint64, cutoff time.Time) uint64 {
	anchor := l.Anchor().Seq
	hi := min(covered, l.Head().Seq)
	// Records' times never decrease along the log: find the last one at or before cutoff.
	lo := anchor
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		r, err := l.Get(mid)
		if err != nil {
			return anchor
		}
		if r.Time.After(cutoff) {
			hi = mid - 1
		} else {
			lo = mid
		}
	}
	return lo
}

// A SealedSegment is a segment written, synced and verified by SealSegment and not yet
// committed: its records are in it and still in the hot log.
type SealedSegment struct {
	Info    SegmentInfo
	deletes *pebble.Batch // the records' index keys
}

// SealSegment writes the records after the anchor up to seq `to` (at most SegmentRecordsMax of
// them) into a new segment, syncs it, renames it into place, syncs the directory, and reads it
// back and verifies it against the hot log. Nothing is removed from the hot log: CommitSegment
// does that. On any failure the new file is removed and the hot log is as it was.
func (l *Log) SealSegment(ctx context.Context, to uint64) (*SealedSegment, error) {
	if l.opts.ReadOnly {
		return nil, ErrReadOnly
	}
	if l.arch == nil {
		return nil, errors.New("eventlog: no archive directory")
	}
	anchor := l.Anchor()
	to = min(to, l.Head().Seq, anchor.Seq+SegmentRecordsMax)
	if to <= anchor.Seq {
		return nil, fmt.Errorf("eventlog: nothing to archive after seq %d", anchor.Seq)
	}
	fs, dir := l.opts.FS, l.opts.ArchiveDir
	if _, err := fs.Stat(dir); err != nil {
		// A new directory's name is durable once its parent is synced.
		if err := fs.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("eventlog: make archive directory: %w", err)
		}
		if err := syncDir(fs, fs.PathDir(dir)); err != nil {
			return nil, err
		}
	}
	name := segmentName(anchor.Seq+1, to)
	tmp := fs.PathJoin(dir, name+".tmp")
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("eventlog: create segment: %w", err)
	}
	deletes := l.db.NewBatch()
	info, err := l.writeSegment(ctx, f, anchor, to, deletes)
	err = errors.Join(err, f.Close())
	if err == nil {
		err = fs.Rename(tmp, fs.PathJoin(dir, name))
	}
	if err == nil {
		err = syncDir(fs, dir)
	}
	if err == nil {
		info.Name = name
		err = l.checkSealed(info)
	}
	if err != nil {
		_ = deletes.Close()
		_ = fs.Remove(tmp)
		_ = fs.Remove(fs.PathJoin(dir, name))
		return nil, fmt.Errorf("eventlog: archive seq %d..%d: %w", anchor.Seq+1, to, err)
	}
	return &SealedSegment{Info: info, deletes: deletes}, nil
}

func (l *Log) writeSegment(ctx context.Context, f vfs.File, anchor Head, to uint64, deletes *pebble.Batch) (SegmentInfo, error) {
	w := newSegmentWriter(f, anchor)
	var err error
	l.walkHot(anchor.Seq+1, to, func(r Record, stored []byte, rerr error) bool {
		if err = rerr; err == nil && r.Seq%4096 == 0 {
			err = ctx.Err()
		}
		if err == nil {
			err = w.add(r, stored)
		}
		if err == nil {
			err = deletes.Delete(idxKey(r.Stream, r.Seq), nil)
		}
		return err == nil
	})
	if err != nil {
		return SegmentInfo{}, err
	}
	if w.info.Last != to {
		return SegmentInfo{}, fmt.Errorf("the hot log ended at seq %d, before %d", w.info.Last, to)
	}
	return w.finish()
}

// checkSealed reads the new segment back from the disk and verifies all of it, and that it
// starts at the anchor and ends at the hot log's record.
func (l *Log) checkSealed(want SegmentInfo) error {
	got, err := statSegment(l.opts.FS, l.opts.ArchiveDir, want.Name)
	if err != nil {
		return err
	}
	end, err := l.hashAt(want.Last)
	if err != nil {
		return err
	}
	if got.First != want.First || got.Last != want.Last || got.Anchor != l.Anchor().Hash || got.End != end || got.Bytes != want.Bytes {
		return &SegmentError{Name: want.Name, Reason: "it does not read back as written"}
	}
	return verifySegment(l.opts.FS, l.opts.ArchiveDir, got)
}

// CommitSegment moves the hot log's anchor to the end of a sealed segment and removes its
// records and their index keys from Pebble, in one synced batch. Readers are sent to the
// segment before the records leave Pebble. A failure to write is a failure of the log.
func (l *Log) CommitSegment(s *SealedSegment) error {
	defer s.deletes.Close()
	anchor := Head{Seq: s.Info.Last, Hash: s.Info.End, Time: s.Info.LastTime}
	l.mu.Lock()
	if l.anchor.Seq != s.Info.First-1 {
		l.mu.Unlock()
		return fmt.Errorf("eventlog: segment %s does not start at the anchor %d", s.Info.Name, l.anchor.Seq)
	}
	// The segment joins the archive before the anchor passes it, so a reader sent to the
	// archive finds it.
	l.arch.mu.Lock()
	l.arch.segs = append(l.arch.segs, s.Info)
	l.arch.mu.Unlock()
	l.anchor = anchor
	l.mu.Unlock()
	b := s.deletes
	err := errors.Join(
		b.DeleteRange(logKey(s.Info.First), logKey(s.Info.Last+1), nil),
		b.Set([]byte(keyAnchor), encodeAnchor(anchor), nil))
	if err == nil {
		err = l.guard(func() error { return b.Commit(pebble.Sync) })
	}
	if err != nil {
		l.fail(err)
		return l.Err()
	}
	return nil
}

// Archive seals the records after the anchor up to seq `to` (at most SegmentRecordsMax) into a
// segment and commits it: SealSegment then CommitSegment.
func (l *Log) Archive(ctx context.Context, to uint64) (SegmentInfo, error) {
	l.archiving.Lock()
	defer l.archiving.Unlock()
	s, err := l.SealSegment(ctx, to)
	if err != nil {
		return SegmentInfo{}, err
	}
	if err := l.CommitSegment(s); err != nil {
		return SegmentInfo{}, err
	}
	return s.Info, nil
}

// CompactArchived asks Pebble to compact the log keys the records from seq `from` to the anchor
// left, so their space is reclaimed now rather than when compaction would next reach them.
func (l *Log) CompactArchived(ctx context.Context, from uint64) error {
	return l.db.Compact(ctx, logKey(from), logKey(l.Anchor().Seq+1), false)
}

// DropSegments deletes the oldest segments whose last record is older than before, oldest
// first, and returns them. Each moves the floor up to its last record first. The hot log's
// anchor is untouched: what is dropped is the audit trail before it, which reads and replay
// then report as pruned (GapError).
func (l *Log) DropSegments(before time.Time) ([]SegmentInfo, error) {
	if l.arch == nil {
		return nil, nil
	}
	l.archiving.Lock()
	defer l.archiving.Unlock()
	var dropped []SegmentInfo
	for {
		l.arch.mu.Lock()
		if len(l.arch.segs) == 0 || !l.arch.segs[0].LastTime.Before(before) {
			l.arch.mu.Unlock()
			return dropped, nil
		}
		s := l.arch.segs[0]
		floor := Head{Seq: s.Last, Hash: s.End, Time: s.LastTime}
		l.arch.segs = slices.Delete(l.arch.segs, 0, 1)
		l.arch.floor = floor
		l.arch.mu.Unlock()
		// The file goes before the floor moves: a crash between the two leaves the oldest
		// segment missing past the floor, which reads as deleted by hand (pruned all the
		// same), and never a floor past a segment that is still here and would be ignored.
		if err := removeSynced(l.opts.FS, l.opts.ArchiveDir, s.Name); err != nil {
			return dropped, err
		}
		if err := l.guard(func() error { return l.db.Set([]byte(keyFloor), encodeAnchor(floor), pebble.Sync) }); err != nil {
			l.fail(err)
			return dropped, l.Err()
		}
		dropped = append(dropped, s)
	}
}

// ScrubSegment reads segment s whole, as the disk holds it now, and checks it against the
// checksum it ends with: a scrub, which finds a segment damaged since it was sealed (a flipped
// bit, a bad sector, a file cut short or overwritten) before a read of its records needs it.
// Before each read of scrubChunk bytes or fewer it calls pace with the size, which may wait
// (so that a scrub's reads leave the disk to the log's syncs) or refuse (ctx done). It does not
// touch what reads keep open or have checked.
//
// It returns nil for a whole segment, an error that wraps fs.ErrNotExist for one that is no
// longer there (deleted by --archive-keep or by hand since the list was taken), the error pace
// returned, a *SegmentError (ErrCorruptSegment) for one whose size or checksum is not what it
// was sealed with, or the read's error.
func (l *Log) ScrubSegment(ctx context.Context, s SegmentInfo, pace func(ctx context.Context, n int) error) error {
	if l.arch == nil {
		return fmt.Errorf("eventlog: scrub %s: %w", s.Name, iofs.ErrNotExist)
	}
	f, err := l.arch.fs.Open(l.arch.fs.PathJoin(l.arch.dir, s.Name))
	if err != nil {
		return fmt.Errorf("eventlog: scrub segment %s: %w", s.Name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("eventlog: scrub segment %s: %w", s.Name, err)
	}
	if st.Size() != s.Bytes {
		return &SegmentError{Name: s.Name, Reason: fmt.Sprintf("it is %d bytes, and was sealed with %d", st.Size(), s.Bytes)}
	}
	return checkSum(ctx, f, s, pace)
}

// ArchiveSummary is what VerifyArchive found.
type ArchiveSummary struct {
	Segments int    `json:"segments"`
	First    uint64 `json:"first"` // the records the segments hold
	Last     uint64 `json:"last"`
	Anchor   Hash   `json:"anchor"` // the hash the first segment starts from
	End      Hash   `json:"end"`    // and the last ends at
	Bytes    int64  `json:"bytes"`
}

// VerifyArchive checks the segments in dir alone: each one whole (VerifySegment's checks), and
// that they run without a gap, each chaining from the one before. It checks every segment
// whatever it finds wrong with the others, and returns everything it found, joined. progress,
// if not nil, is called after each segment that verifies.
func VerifyArchive(ctx context.Context, fs vfs.FS, dir string, progress func(SegmentInfo)) (ArchiveSummary, error) {
	if fs == nil {
		fs = vfs.Default
	}
	if _, err := fs.Stat(dir); err != nil {
		return ArchiveSummary{}, fmt.Errorf("eventlog: archive %s: %w", dir, err)
	}
	a, err := loadArchive(fs, dir, true, zap.NewNop())
	if err != nil {
		return ArchiveSummary{}, err
	}
	var sum ArchiveSummary
	problems := a.broken
	if len(a.segs) == 0 {
		return sum, errors.Join(append(problems, fmt.Errorf("eventlog: archive %s holds no segments", dir))...)
	}
	sum.First, sum.Anchor = a.segs[0].First, a.segs[0].Anchor
	if sum.First == 1 && sum.Anchor != Genesis {
		problems = append(problems, &SegmentError{Name: a.segs[0].Name, Reason: "it starts the log but not at the genesis hash"})
	}
	for i, s := range a.segs {
		if err := ctx.Err(); err != nil {
			return sum, err
		}
		if i > 0 {
			prev := a.segs[i-1]
			if s.First != prev.Last+1 {
				problems = append(problems, &GapError{First: prev.Last + 1, Last: s.First - 1,
					Why: fmt.Sprintf("no segment holds them between %s and %s", prev.Name, s.Name)})
			} else if s.Anchor != prev.End {
				problems = append(problems, &ChainError{Seq: s.First, Reason: fmt.Sprintf("segment %s does not chain from %s", s.Name, prev.Name)})
			}
		}
		sum.Last, sum.End = s.Last, s.End
		if err := verifySegment(fs, dir, s); err != nil {
			problems = append(problems, err)
			continue
		}
		sum.Segments++
		sum.Bytes += s.Bytes
		if progress != nil {
			progress(s)
		}
	}
	return sum, errors.Join(problems...)
}
