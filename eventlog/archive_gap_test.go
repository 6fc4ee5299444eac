package eventlog_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tetherhq/tether/eventlog"
)

// TestArchiveHoles takes segments away from an archive of four (records 1..150, ..300, ..450,
// ..600; each job/i has its records at seqs 3i+1 and 3i+3) and checks what every reader makes
// of it: a log that may be written to opens only when what is gone is the oldest segments;
// a read-only one opens whatever is gone, names each run of missing records and whether it was
// pruned, and a read of a missing record or of a stream with records there is an error that
// names the run, never a silent gap.
func TestArchiveHoles(t *testing.T) {
	build := func(t *testing.T) (*vfs.MemFS, []string) { return archived(t, 250, 150, 300, 450, 600) }
	type gap struct {
		first, last uint64
		pruned      bool
	}
	cases := []struct {
		name     string
		damage   func(fs *vfs.MemFS, names []string)
		gaps     []gap
		writable bool
		job      string // a job with records in a gap
	}{
		{"intact", func(*vfs.MemFS, []string) {}, nil, true, ""},
		{"oldest deleted", func(fs *vfs.MemFS, names []string) {
			_ = fs.Remove(fs.PathJoin(archDir, names[0]))
		}, []gap{{1, 150, true}}, true, "job/10"},
		{"two oldest deleted", func(fs *vfs.MemFS, names []string) {
			_ = fs.Remove(fs.PathJoin(archDir, names[0]))
			_ = fs.Remove(fs.PathJoin(archDir, names[1]))
		}, []gap{{1, 300, true}}, true, "job/60"},
		{"middle deleted", func(fs *vfs.MemFS, names []string) {
			_ = fs.Remove(fs.PathJoin(archDir, names[2]))
		}, []gap{{301, 450, false}}, false, "job/110"},
		{"newest deleted", func(fs *vfs.MemFS, names []string) {
			_ = fs.Remove(fs.PathJoin(archDir, names[3]))
		}, []gap{{451, 600, false}}, false, "job/160"},
		{"all deleted", func(fs *vfs.MemFS, names []string) {
			for _, n := range names {
				_ = fs.Remove(fs.PathJoin(archDir, n))
			}
		}, []gap{{1, 600, false}}, false, "job/10"},
		{"directory moved away", func(fs *vfs.MemFS, names []string) {
			if err := fs.Rename(archDir, "/elsewhere"); err != nil {
				t.Fatal(err)
			}
		}, []gap{{1, 600, false}}, false, "job/160"},
		{"oldest and middle deleted", func(fs *vfs.MemFS, names []string) {
			_ = fs.Remove(fs.PathJoin(archDir, names[0]))
			_ = fs.Remove(fs.PathJoin(archDir, names[2]))
		}, []gap{{1, 150, true}, {301, 450, false}}, false, "job/110"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs, names := build(t)
			c.damage(fs, names)

			w, err := eventlog.Open(archDataDir, eventlog.Options{FS: fs, ArchiveDir: archDir})
			if c.writable != (err == nil) {
				t.Fatalf("open to write: %v, want it to open: %v", err, c.writable)
			}
			if err == nil {
				_ = w.Close()
			} else if !errors.Is(err, eventlog.ErrArchiveBroken) {
				t.Fatalf("open to write: %v, want ErrArchiveBroken", err)
			}

			l := archLog(t, fs, true)
			defer l.Close()
			var got []gap
			for _, g := range l.ArchiveGaps() {
				got = append(got, gap{g.First, g.Last, g.Pruned})
			}
			if !slices.Equal(got, c.gaps) {
				t.Fatalf("gaps %v, want %v", got, c.gaps)
			}
			if c.job == "" {
				return
			}
			first := c.gaps[len(c.gaps)-1]
			var ge *eventlog.GapError
			if _, err := l.Get(first.first + 1); !errors.As(err, &ge) || ge.First != first.first || ge.Last != first.last {
				t.Fatalf("get %d: %v, want the gap %v", first.first+1, err, first)
			}
			for r, err := range l.Range(1, 0) {
				if err != nil {
					if !errors.As(err, &ge) || ge.First != c.gaps[0].first {
						t.Fatalf("range: %v, want the gap %v", err, c.gaps[0])
					}
					break
				}
				if r.Seq >= c.gaps[0].first {
					t.Fatalf("range yielded seq %d in the gap %v", r.Seq, c.gaps[0])
				}
			}
			// The stream's records in the gap are not here: the gap is yielded in their
			// place, and the reader that goes on gets the rest.
			var seqs []uint64
			var gaps []uint64
			for r, err := range l.Stream(c.job, 0) {
				if errors.As(err, &ge) {
					gaps = append(gaps, ge.First)
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				seqs = append(seqs, r.Seq)
			}
			if len(gaps) != len(c.gaps) {
				t.Fatalf("stream %s yielded gaps at %v, want %v", c.job, gaps, c.gaps)
			}
			for _, s := range seqs {
				for _, g := range c.gaps {
					if g.first <= s && s <= g.last {
						t.Fatalf("stream %s yielded seq %d from the gap %v", c.job, s, g)
					}
				}
			}
		})
	}
}

// archived makes a log of jobs appends (three records each) and archives it in segments that
// end at each of ends; it returns the filesystem and the segments' names, oldest first.
func archived(t *testing.T, jobs int, ends ...uint64) (*vfs.MemFS, []string) {
	t.Helper()
	fs := vfs.NewMem()
	l := archLog(t, fs, false)
	appendJobs(t, l, 0, jobs)
	for _, to := range ends {
		if _, err := l.Archive(context.Background(), to); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	names, _ := fs.List(archDir)
	slices.Sort(names)
	return fs, names
}

// TestArchiveKeepFloor checks that segments --archive-keep deletes read as pruned by it (the
// floor), that a deleted segment given back is read again, and that one deleted by hand past
// the floor is still told apart from one the server deleted.
func TestArchiveKeepFloor(t *testing.T) {
	fs := vfs.NewMem()
	l := archLog(t, fs, false)
	appendJobs(t, l, 0, 250)
	for _, to := range []uint64{150, 300, 450} {
		if _, err := l.Archive(context.Background(), to); err != nil {
			t.Fatal(err)
		}
	}
	names, _ := fs.List(archDir)
	slices.Sort(names)
	kept, err := readFile(fs, fs.PathJoin(archDir, names[0]))
	if err != nil {
		t.Fatal(err)
	}
	segs := l.Segments()
	dropped, err := l.DropSegments(segs[0].LastTime.Add(time.Nanosecond))
	if err != nil || len(dropped) != 1 || dropped[0].Name != names[0] {
		t.Fatalf("dropped %v: %v", dropped, err)
	}
	gaps := l.ArchiveGaps()
	if len(gaps) != 1 || gaps[0].First != 1 || gaps[0].Last != 150 || !gaps[0].Pruned || !gaps[0].ByKeep {
		t.Fatalf("gaps after a drop: %+v", gaps)
	}
	_ = l.Close()

	// Given back (from a copy), it is read again.
	writeFile(t, fs, fs.PathJoin(archDir, names[0]), kept)
	l = archLog(t, fs, false)
	if gaps := l.ArchiveGaps(); len(gaps) != 0 {
		t.Fatalf("gaps with the deleted segment given back: %+v", gaps)
	}
	if _, err := l.Verify(context.Background()); err != nil {
		t.Fatalf("verify with the deleted segment given back: %v", err)
	}
	_ = l.Close()
	_ = fs.Remove(fs.PathJoin(archDir, names[0]))

	// The next oldest, deleted by hand: pruned as well, but not by --archive-keep.
	_ = fs.Remove(fs.PathJoin(archDir, names[1]))
	l = archLog(t, fs, false)
	defer l.Close()
	gaps = l.ArchiveGaps()
	if len(gaps) != 2 || !gaps[0].ByKeep || gaps[1].First != 151 || gaps[1].Last != 300 || !gaps[1].Pruned || gaps[1].ByKeep {
		t.Fatalf("gaps after a segment deleted by hand: %+v", gaps)
	}
	if o := l.Oldest(); o.Seq != 300 {
		t.Fatalf("oldest %d, want 300", o.Seq)
	}
}

// TestArchiveForeignSegment drops another log's segment, overlapping this log's oldest and
// sorting before it, into the archive: the one that chains to the anchor is read, and the other
// is reported, never trusted.
func TestArchiveForeignSegment(t *testing.T) {
	fs, other := vfs.NewMem(), vfs.NewMem()
	l := archLog(t, fs, false)
	appendJobs(t, l, 0, 250)
	for _, to := range []uint64{150, 300} {
		if _, err := l.Archive(context.Background(), to); err != nil {
			t.Fatal(err)
		}
	}
	want := all(t, l)
	_ = l.Close()
	o := archLog(t, other, false)
	appendJobs(t, o, 1000, 250)
	seg, err := o.Archive(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	_ = o.Close()
	foreign, err := readFile(other, other.PathJoin(archDir, seg.Name))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, fs, fs.PathJoin(archDir, seg.Name), foreign)

	if _, err := eventlog.Open(archDataDir, eventlog.Options{FS: fs, ArchiveDir: archDir}); !errors.Is(err, eventlog.ErrArchiveBroken) {
		t.Fatalf("open to write with a foreign segment: %v", err)
	}
	l = archLog(t, fs, true)
	defer l.Close()
	if p := l.ArchiveProblems(); len(p) != 1 || !strings.Contains(p[0].Error(), seg.Name) {
		t.Fatalf("problems %v, want the foreign segment named", p)
	}
	for _, seq := range []uint64{1, 100, 150} {
		if r, err := l.Get(seq); err != nil || r.Hash != want[seq-1].Hash {
			t.Fatalf("seq %d did not read as this log's record: %v", seq, err)
		}
	}
}

// TestAuditChecksStreamTables rewrites a segment's stream table, checksum and all, so that it
// hides a stream's records from reads: Audit, which every replay verify runs, finds it.
func TestAuditChecksStreamTables(t *testing.T) {
	fs := vfs.NewMem()
	l := archLog(t, fs, false)
	appendJobs(t, l, 0, 100)
	seg, err := l.Archive(context.Background(), 150)
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Close()
	path := fs.PathJoin(archDir, seg.Name)
	b, err := readFile(fs, path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-trailerLen-12] ^= 1 // the last entry's stream hash
	sum := sha256.Sum256(b[:len(b)-sha256.Size])
	copy(b[len(b)-sha256.Size:], sum[:])
	writeFile(t, fs, path, b)

	l = archLog(t, fs, true)
	defer l.Close()
	if _, err := l.Audit(context.Background(), eventlog.Head{Hash: eventlog.Genesis}, func(eventlog.Record) error { return nil }); !errors.Is(err, eventlog.ErrCorruptSegment) {
		t.Fatalf("audit over a rewritten stream table: %v", err)
	}
}

// BenchmarkOpenManySegments opens a log whose archive holds 2,000 segments, as years of
// archiving leave: the start-up reads each trailer and settles the chain once.
func BenchmarkOpenManySegments(b *testing.B) {
	fs := vfs.NewMem()
	l, err := eventlog.Open(archDataDir, eventlog.Options{FS: fs, ArchiveDir: archDir})
	if err != nil {
		b.Fatal(err)
	}
	const segments = 2000
	appendJobs(b, l, 0, 2*segments)
	for i := range segments {
		if _, err := l.Archive(context.Background(), uint64(3*(i+1))); err != nil {
			b.Fatal(err)
		}
	}
	_ = l.Close()
	b.ResetTimer()
	for range b.N {
		l, err := eventlog.Open(archDataDir, eventlog.Options{FS: fs, ArchiveDir: archDir})
		if err != nil || len(l.Segments()) != segments {
			b.Fatalf("open: %v", err)
		}
		_ = l.Close()
	}
}
