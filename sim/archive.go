package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections/audit"
)

// archiveDamage is what an operator or an accident does to the archive while the server is
// down: it takes the oldest segment (allowed: the archive may lose its oldest records), or
// another one, or swaps two segments' names, or moves the whole directory away.
type archiveDamage int

const (
	oldestRemoved archiveDamage = iota
	otherRemoved
	namesSwapped
	dirMoved
	archiveDamages
)

var archiveDamageNames = [archiveDamages]string{"the oldest segment removed", "a newer segment removed", "two segments' names swapped", "the archive directory moved away"}

// damageArchive, before a start, takes segments from the archive as archiveDamage says, and
// checks what the production code makes of it against what the intact archive held: the log
// opens to write only when what is gone is the oldest segments (else ErrArchiveBroken); a read
// of a record or a stream that was archived answers the record or a gap that holds it, never
// leaves it out; the audit fails on a hole and passes when only the oldest are gone. Then it
// puts the archive back as it was, as the operator would, and the start goes on.
//
// A start in the safety phase is damaged now and then (the class's rate); the final check's
// start always is, when the seed has the class, so that every such seed with two segments
// checks the reads around a hole once: the restarts in the safety phase are few (a crash must
// come first), and left the check to a seed in thirty or so.
func (v *server) damageArchive(final bool) {
	s := v.s
	if len(segmentNames(v.mem)) < 2 {
		return
	}
	if final {
		if s.off[FaultArchive] || s.rates[FaultArchive] == 0 {
			return
		}
	} else if !s.strikes(FaultArchive, 0.3) {
		return
	}
	rng := s.faultRand[FaultArchive]
	// The segments the log holds: not one a crash left past the anchor, which the next open
	// rolls back.
	names, truth, err := archivedStreams(v.mem, rng)
	if err != nil {
		s.fail("archive", "reading the intact archive: %v", err)
		return
	}
	if len(names) < 2 {
		return
	}
	backup := map[string][]byte{}
	for _, n := range segmentNames(v.mem) {
		if backup[n], err = readMemFile(v.mem, v.mem.PathJoin(archiveDir, n)); err != nil {
			panic(fmt.Sprintf("sim: read segment: %v", err))
		}
	}
	damage := archiveDamage(rng.IntN(int(archiveDamages)))
	moved := archiveDir + ".moved"
	switch damage {
	case oldestRemoved:
		_ = v.mem.Remove(v.mem.PathJoin(archiveDir, names[0]))
	case otherRemoved:
		_ = v.mem.Remove(v.mem.PathJoin(archiveDir, names[1+rng.IntN(len(names)-1)]))
	case namesSwapped:
		i := rng.IntN(len(names) - 1)
		a, b, tmp := v.mem.PathJoin(archiveDir, names[i]), v.mem.PathJoin(archiveDir, names[i+1]), v.mem.PathJoin(archiveDir, "swap")
		_, _, _ = v.mem.Rename(a, tmp), v.mem.Rename(b, a), v.mem.Rename(tmp, b)
	case dirMoved:
		_ = v.mem.Rename(archiveDir, moved)
	}
	s.probe(ProbeArchiveDamaged)
	s.record(fmt.Sprintf("archive damaged while the server is down: %s", archiveDamageNames[damage]))

	allowed := damage == oldestRemoved
	l, err := eventlog.Open(dataDir, eventlog.Options{FS: v.mem, Clock: s.serverNow, ArchiveDir: archiveDir})
	switch {
	case err == nil:
		_ = l.Close()
		if !allowed {
			s.fail("archive", "the log opened to write with %s", archiveDamageNames[damage])
			return
		}
	case allowed:
		s.fail("archive", "the log does not open with only its oldest segment gone: %v", err)
		return
	case !errors.Is(err, eventlog.ErrArchiveBroken):
		s.fail("archive", "with %s the log refused to open, but not as ErrArchiveBroken: %v", archiveDamageNames[damage], err)
		return
	}
	ro, err := eventlog.Open(dataDir, eventlog.Options{FS: v.mem, ArchiveDir: archiveDir, ReadOnly: true})
	if err != nil {
		s.fail("archive", "the log does not open read-only with %s: %v", archiveDamageNames[damage], err)
		return
	}
	ok := checkArchivedReads(s, ro, truth)
	if _, err := audit.Verify(context.Background(), ro, nil); ok && (err == nil) != allowed {
		s.fail("archive", "the audit with %s: %v (want it to pass: %v)", archiveDamageNames[damage], err, allowed)
	}
	_ = ro.Close()

	// The operator puts the archive back.
	for _, dir := range []string{archiveDir, moved} {
		if left, err := v.mem.List(dir); err == nil {
			for _, n := range left {
				_ = v.mem.Remove(v.mem.PathJoin(dir, n))
			}
			_ = v.mem.Remove(dir)
		}
	}
	if err := writeSynced(v.mem, backup); err != nil {
		panic(fmt.Sprintf("sim: restore the archive: %v", err))
	}
}

// checkArchivedReads checks every record of truth's streams against a read of the damaged
// archive: Get and Stream answer each record, or a *GapError that holds its seq.
func checkArchivedReads(s *Sim, l *eventlog.Log, truth map[string][]uint64) bool {
	streams := make([]string, 0, len(truth))
	for st := range truth {
		streams = append(streams, st)
	}
	slices.Sort(streams)
	for _, st := range streams {
		want := truth[st]
		var got []uint64
		var gaps []*eventlog.GapError
		for r, err := range l.Stream(st, 0) {
			var g *eventlog.GapError
			switch {
			case errors.As(err, &g):
				gaps = append(gaps, g)
			case err != nil:
				// A segment that does not read (its name swapped) ends the walk: what it
				// would have yielded is not claimed to be the whole.
				gaps = append(gaps, &eventlog.GapError{First: 1, Last: ^uint64(0)})
			default:
				got = append(got, r.Seq)
			}
			if err != nil && !errors.As(err, &g) {
				break
			}
		}
		for _, seq := range want {
			inGap := slices.ContainsFunc(gaps, func(g *eventlog.GapError) bool { return g.First <= seq && seq <= g.Last })
			if !slices.Contains(got, seq) && !inGap {
				s.fail("archive", "a read of stream %s left out its record at seq %d without naming a gap (gaps %v)", st, seq, gaps)
				return false
			}
			r, err := l.Get(seq)
			var g *eventlog.GapError
			switch {
			case err == nil && r.Stream != st:
				s.fail("archive", "seq %d read as a record of %s, not %s", seq, r.Stream, st)
				return false
			case err != nil && errors.As(err, &g) && (g.First > seq || seq > g.Last):
				s.fail("archive", "reading seq %d answered a gap %d..%d that does not hold it", seq, g.First, g.Last)
				return false
			case err != nil && !errors.Is(err, eventlog.ErrArchived) && !errors.Is(err, eventlog.ErrCorruptSegment):
				s.fail("archive", "reading seq %d: %v", seq, err)
				return false
			}
		}
		for _, seq := range got {
			if !slices.Contains(want, seq) {
				s.fail("archive", "a read of stream %s yielded seq %d, which the intact archive does not hold in it", st, seq)
				return false
			}
		}
	}
	return true
}

// archivedStreams opens the intact log read-only and returns the names of its segments, oldest
// first, and, for a few streams with archived records, every seq of theirs in the log.
func archivedStreams(fs vfs.FS, rng interface{ IntN(int) int }) ([]string, map[string][]uint64, error) {
	l, err := eventlog.Open(dataDir, eventlog.Options{FS: fs, ArchiveDir: archiveDir, ReadOnly: true})
	if err != nil {
		return nil, nil, err
	}
	defer l.Close()
	var names []string
	for _, seg := range l.Segments() {
		names = append(names, seg.Name)
	}
	anchor := l.Anchor().Seq
	out := map[string][]uint64{}
	for range 4 {
		if anchor == 0 {
			break
		}
		r, err := l.Get(1 + uint64(rng.IntN(int(anchor))))
		if err != nil {
			return nil, nil, err
		}
		if _, ok := out[r.Stream]; ok {
			continue
		}
		var seqs []uint64
		for r, err := range l.Stream(r.Stream, 0) {
			if err != nil {
				return nil, nil, err
			}
			seqs = append(seqs, r.Seq)
		}
		out[r.Stream] = seqs
	}
	return names, out, nil
}

// segmentNames lists the archive's segments, oldest first.
func segmentNames(fs vfs.FS) []string {
	all, _ := fs.List(archiveDir)
	var names []string
	for _, n := range all {
		if strings.HasSuffix(n, ".tseg") {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

func readMemFile(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// writeSynced writes the segments back into the archive directory, synced, as they were.
func writeSynced(fs vfs.FS, files map[string][]byte) error {
	if err := fs.MkdirAll(archiveDir, 0o755); err != nil {
		return err
	}
	for name, b := range files {
		f, err := fs.Create(fs.PathJoin(archiveDir, name), vfs.WriteCategoryUnspecified)
		if err != nil {
			return err
		}
		_, err = f.Write(b)
		if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
			return err
		}
	}
	for _, dir := range []string{archiveDir, fs.PathDir(archiveDir)} {
		d, err := fs.OpenDir(dir)
		if err != nil {
			return err
		}
		if err := errors.Join(d.Sync(), d.Close()); err != nil {
			return err
		}
	}
	return nil
}
