package eventlog_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	iofs "io/fs"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/tetherhq/tether/eventlog"
)

const (
	// trailerLen is a segment trailer's size, checksum included (eventlog/doc.go).
	trailerLen  = 8 + 4*8 + 2*32 + 4 + 2*8 + 32
	archDataDir = "/data"
	archDir     = "/data/archive"
)

// archLog opens a log with an archive on fs, with a clock that moves a second per call.
func archLog(t testing.TB, fs vfs.FS, readOnly bool) *eventlog.Log {
	t.Helper()
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l, err := eventlog.Open(archDataDir, eventlog.Options{FS: fs, ArchiveDir: archDir, ReadOnly: readOnly,
		Clock: func() time.Time { clock = clock.Add(time.Second); return clock }})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// appendJobs appends n appends of three events each, on streams job/0..job/(n-1) and the shared
// stream tenant/t, and returns every record.
func appendJobs(t testing.TB, l *eventlog.Log, first, n int) {
	t.Helper()
	for i := first; i < first+n; i++ {
		s := fmt.Sprintf("job/%d", i)
		data := fmt.Appendf(nil, `{"n":%d,"pad":"%s"}`, i, "payload payload payload")
		if _, err := l.Append(context.Background(),
			eventlog.Event{Stream: s, Type: "job.submitted", Data: data},
			eventlog.Event{Stream: "tenant/t", Type: "tenant.noted", Data: data},
			eventlog.Event{Stream: s, Type: "job.succeeded", Data: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
}

func all(t testing.TB, l *eventlog.Log) []eventlog.Record {
	t.Helper()
	var out []eventlog.Record
	for r, err := range l.Range(1, 0) {
		if err != nil {
			t.Fatalf("range: %v", err)
		}
		out = append(out, r)
	}
	return out
}

func stream(t testing.TB, l *eventlog.Log, s string, from uint64) []uint64 {
	t.Helper()
	var out []uint64
	for r, err := range l.Stream(s, from) {
		if err != nil {
			t.Fatalf("stream %s: %v", s, err)
		}
		if r.Stream != s {
			t.Fatalf("stream %s yielded a record of %s", s, r.Stream)
		}
		out = append(out, r.Seq)
	}
	return out
}

// TestArchiveReadsAsOneLog archives part of a log in two segments and reads it back as one log:
// ranges, single records, streams, the verified chain and an audit, before and after a reopen.
func TestArchiveReadsAsOneLog(t *testing.T) {
	fs := vfs.NewMem()
	l := archLog(t, fs, false)
	appendJobs(t, l, 0, 3000) // 9000 records, several frames per segment
	want := all(t, l)
	wantStream := stream(t, l, "job/10", 0)
	wantTenant := stream(t, l, "tenant/t", 0)

	s1, err := l.Archive(context.Background(), 4000)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := l.Archive(context.Background(), 7001)
	if err != nil {
		t.Fatal(err)
	}
	if s1.First != 1 || s1.Last != 4000 || s2.First != 4001 || s2.Last != 7001 || s2.Anchor != s1.End {
		t.Fatalf("segments %+v %+v", s1, s2)
	}
	if a := l.Anchor(); a.Seq != 7001 || a.Hash != want[7000].Hash {
		t.Fatalf("anchor %d", a.Seq)
	}
	check := func(l *eventlog.Log) {
		t.Helper()
		got := all(t, l)
		if len(got) != len(want) {
			t.Fatalf("%d records, want %d", len(got), len(want))
		}
		for i := range got {
			if got[i].Hash != want[i].Hash || string(got[i].Data) != string(want[i].Data) || !got[i].Time.Equal(want[i].Time) {
				t.Fatalf("seq %d differs after archiving", i+1)
			}
		}
		for _, seq := range []uint64{1, 2, 4000, 4001, 7001, 7002, uint64(len(want))} {
			r, err := l.Get(seq)
			if err != nil || r.Hash != want[seq-1].Hash {
				t.Fatalf("get %d: %v", seq, err)
			}
		}
		if got := stream(t, l, "job/10", 0); !slices.Equal(got, wantStream) {
			t.Fatalf("stream job/10 %v, want %v", got, wantStream)
		}
		if got := stream(t, l, "tenant/t", 0); !slices.Equal(got, wantTenant) {
			t.Fatalf("stream tenant/t has %d records, want %d", len(got), len(wantTenant))
		}
		if got := stream(t, l, "tenant/t", 6999); len(got) != len(wantTenant)-2333 || got[0] != 7001 {
			t.Fatalf("stream tenant/t from 6999: %d records from %v", len(got), got[:1])
		}
		head, err := l.Verify(context.Background())
		if err != nil || head.Seq != uint64(len(want)) {
			t.Fatalf("verify: %v at %d", err, head.Seq)
		}
		if sum, err := l.Audit(context.Background(), eventlog.Head{Hash: eventlog.Genesis}, func(eventlog.Record) error { return nil }); err != nil || sum.Head.Seq != uint64(len(want)) {
			t.Fatalf("audit: %v", err)
		}
	}
	check(l)
	appendJobs(t, l, 3000, 10)
	want, wantTenant = all(t, l), stream(t, l, "tenant/t", 0)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = archLog(t, fs, true)
	defer l.Close()
	check(l)
}

// TestArchiveWithoutSegments reads a log whose segments were moved away: the hot log still
// opens and verifies from its anchor, and reads of archived records say so.
func TestArchiveWithoutSegments(t *testing.T) {
	fs := vfs.NewMem()
	l := archLog(t, fs, false)
	appendJobs(t, l, 0, 100)
	if _, err := l.Archive(context.Background(), 150); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Archive(context.Background(), 250); err != nil {
		t.Fatal(err)
	}
	_ = l.Close()
	segs, _ := fs.List(archDir)
	slices.Sort(segs)
	if err := fs.Remove(fs.PathJoin(archDir, segs[0])); err != nil {
		t.Fatal(err)
	}
	l = archLog(t, fs, true)
	defer l.Close()
	if o := l.Oldest(); o.Seq != 150 {
		t.Fatalf("oldest %d, want 150", o.Seq)
	}
	if _, err := l.Get(3); !errors.Is(err, eventlog.ErrArchived) {
		t.Fatalf("get of a record whose segment is gone: %v", err)
	}
	if r, err := l.Get(151); err != nil || r.Seq != 151 {
		t.Fatalf("get 151: %v", err)
	}
	if _, err := l.Verify(context.Background()); !errors.Is(err, eventlog.ErrArchived) {
		t.Fatalf("verify from genesis: %v", err)
	}
	n := 0
	for _, err := range l.VerifiedFrom(context.Background(), l.Oldest(), 0) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 150 {
		t.Fatalf("verified %d records from the oldest segment, want 150", n)
	}
}

// TestArchiveSegmentDamage checks VerifyArchive and the log's reads against damaged archives:
// a changed byte, a missing segment, segments swapped under each other's names, and a segment
// whose anchor does not chain.
func TestArchiveSegmentDamage(t *testing.T) {
	build := func(t *testing.T) (*vfs.MemFS, []string) {
		fs, names := archived(t, 200, 200, 400, 600)
		if sum, err := eventlog.VerifyArchive(context.Background(), fs, archDir, nil); err != nil || sum.Segments != 3 || sum.Last != 600 {
			t.Fatalf("intact archive: %+v %v", sum, err)
		}
		return fs, names
	}
	read := func(fs vfs.FS, name string) []byte {
		b, err := readFile(fs, fs.PathJoin(archDir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name   string
		damage func(fs *vfs.MemFS, names []string)
		want   error
	}{
		{"tampered", func(fs *vfs.MemFS, names []string) {
			b := read(fs, names[1])
			b[40] ^= 1
			writeFile(t, fs, fs.PathJoin(archDir, names[1]), b)
		}, eventlog.ErrCorruptSegment},
		{"rewritten with a fresh checksum", func(fs *vfs.MemFS, names []string) {
			// Whoever rewrites a segment can make its checksum again, not its chain: here
			// the end hash its trailer states.
			b := read(fs, names[1])
			trailer := len(b) - trailerLen
			b[trailer+72] ^= 1 // the end hash: after magic, 4 integers and the anchor
			sum := sha256.Sum256(b[:len(b)-sha256.Size])
			copy(b[len(b)-sha256.Size:], sum[:])
			writeFile(t, fs, fs.PathJoin(archDir, names[1]), b)
		}, eventlog.ErrCorruptSegment},
		{"missing", func(fs *vfs.MemFS, names []string) {
			_ = fs.Remove(fs.PathJoin(archDir, names[1]))
		}, eventlog.ErrArchived},
		{"reordered", func(fs *vfs.MemFS, names []string) {
			a, b := read(fs, names[0]), read(fs, names[1])
			writeFile(t, fs, fs.PathJoin(archDir, names[0]), b)
			writeFile(t, fs, fs.PathJoin(archDir, names[1]), a)
		}, eventlog.ErrCorruptSegment},
		{"anchor does not chain", func(fs *vfs.MemFS, names []string) {
			// A segment of another log, with the same seqs, in place of the middle one.
			other := vfs.NewMem()
			l := archLog(t, other, false)
			appendJobs(t, l, 1000, 200)
			for _, to := range []uint64{200, 400} {
				if _, err := l.Archive(context.Background(), to); err != nil {
					t.Fatal(err)
				}
			}
			_ = l.Close()
			writeFile(t, fs, fs.PathJoin(archDir, names[1]), read(other, names[1]))
		}, eventlog.ErrChainBroken},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs, names := build(t)
			c.damage(fs, names)
			_, err := eventlog.VerifyArchive(context.Background(), fs, archDir, nil)
			if !errors.Is(err, c.want) {
				t.Fatalf("VerifyArchive: %v, want %v", err, c.want)
			}
			l, err := eventlog.Open(archDataDir, eventlog.Options{FS: fs, ArchiveDir: archDir, ReadOnly: true})
			if err != nil {
				if errors.Is(err, eventlog.ErrCorruptSegment) {
					return // refused at open: as good as at verify
				}
				t.Fatal(err)
			}
			defer l.Close()
			if _, err := l.Verify(context.Background()); err == nil {
				t.Fatal("the log verifies over a damaged archive")
			}
		})
	}
}

// TestArchiveCrashAtEachStep fails or crashes an archiving step at each of its filesystem
// operations and checks that every record is still readable and verifies, from the hot log or
// a sealed segment, and that archiving then goes on.
func TestArchiveCrashAtEachStep(t *testing.T) {
	ops := []errorfs.OpKind{errorfs.OpCreate, errorfs.OpFileWrite, errorfs.OpFileSync,
		errorfs.OpRename, errorfs.OpOpenDir, errorfs.OpFileReadAt, errorfs.OpOpen}
	for _, op := range ops {
		for _, crash := range []bool{false, true} {
			t.Run(fmt.Sprintf("op=%d crash=%v", op, crash), func(t *testing.T) {
				mem := vfs.NewCrashableMem()
				l := archLog(t, mem, false)
				appendJobs(t, l, 0, 100)
				if _, err := l.Archive(context.Background(), 100); err != nil {
					t.Fatal(err)
				}
				_ = l.Close()
				inj := &armed{kind: op}
				l = archLog(t, errorfs.Wrap(mem, inj), false)
				want := all(t, l)
				inj.on.Store(true)
				_, err := l.Archive(context.Background(), 250)
				inj.on.Store(false)
				if !inj.fired.Load() || err == nil {
					t.Fatalf("archiving succeeded through an injected error (op %d)", op)
				}
				fs := vfs.FS(mem)
				if crash {
					fs = mem.CrashClone(vfs.CrashCloneCfg{})
				} else {
					_ = l.Close()
				}
				l = archLog(t, fs, false)
				defer l.Close()
				got := all(t, l)
				if len(got) != len(want) || got[len(got)-1].Hash != want[len(want)-1].Hash {
					t.Fatalf("%d records after the fault, want %d", len(got), len(want))
				}
				if _, err := l.Verify(context.Background()); err != nil {
					t.Fatal(err)
				}
				if _, err := l.Archive(context.Background(), 250); err != nil && l.Anchor().Seq < 250 {
					t.Fatalf("archiving after recovery: %v", err)
				}
				if a := l.Anchor().Seq; a != 250 {
					t.Fatalf("anchor %d after recovery and a second try, want 250", a)
				}
			})
		}
	}
}

// armed fails the first archive operation of one kind while on. Pebble's background goroutines
// (flushes, table stats, obsolete-file cleanup) consult it too, hence the atomics.
type armed struct {
	kind      errorfs.OpKind
	on, fired atomic.Bool
}

func (a *armed) MaybeError(op errorfs.Op) error {
	if !a.on.Load() || op.Kind != a.kind || !isArchivePath(op.Path) || !a.fired.CompareAndSwap(false, true) {
		return nil
	}
	return errorfs.ErrInjected
}

func (a *armed) String() string { return "armed" }

func isArchivePath(p string) bool { return len(p) >= len(archDir) && p[:len(archDir)] == archDir }

func readFile(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, st.Size())
	_, err = f.ReadAt(b, 0)
	return b, err
}

func writeFile(t *testing.T, fs vfs.FS, path string, b []byte) {
	t.Helper()
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkArchivedStream reads one job's history (two records) from segments: what a job's
// events page or `tether replay history` costs once the job is archived.
func BenchmarkArchivedStream(b *testing.B) {
	fs := vfs.NewMem()
	l := archLog(b, fs, false)
	defer l.Close()
	appendJobs(b, l, 0, 20_000)
	for l.Anchor().Seq < l.Head().Seq {
		if _, err := l.Archive(context.Background(), l.Head().Seq); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		if n := len(stream(b, l, fmt.Sprintf("job/%d", i%20_000), 0)); n != 2 {
			b.Fatalf("%d records", n)
		}
	}
}

// ScrubSegment reads a segment whole through pace, a chunk at a time, and finds it whole; a
// byte flipped, a file cut short or gone since the log opened are told apart, and pace's
// refusal stops it.
func TestScrubSegment(t *testing.T) {
	fs, names := archived(t, 200, 200, 400, 600)
	l := archLog(t, fs, false)
	defer l.Close()
	segs := l.Segments()
	if len(segs) != 3 {
		t.Fatalf("segments %v", segs)
	}
	var paced, calls int
	pace := func(_ context.Context, n int) error { paced += n; calls++; return nil }
	for _, s := range segs {
		if err := l.ScrubSegment(context.Background(), s, pace); err != nil {
			t.Fatalf("scrub of a whole segment %s: %v", s.Name, err)
		}
	}
	want := 0
	for _, s := range segs {
		want += int(s.Bytes) - sha256.Size
	}
	if paced != want || calls < len(segs) {
		t.Fatalf("paced %d bytes in %d calls, want the segments' %d before their checksums", paced, calls, want)
	}

	b, err := readFile(fs, fs.PathJoin(archDir, names[1]))
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x10
	writeFile(t, fs, fs.PathJoin(archDir, names[1]), b)
	writeFile(t, fs, fs.PathJoin(archDir, names[2]), b[:100])
	if err := fs.Remove(fs.PathJoin(archDir, names[0])); err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		is   error
		says string
	}{
		{iofs.ErrNotExist, names[0]},
		{eventlog.ErrCorruptSegment, names[1] + ": its checksum does not match its contents"},
		{eventlog.ErrCorruptSegment, fmt.Sprintf("%s: it is 100 bytes, and was sealed with %d", names[2], segs[2].Bytes)},
	} {
		err := l.ScrubSegment(context.Background(), segs[i], nil)
		if !errors.Is(err, want.is) || !strings.Contains(fmt.Sprint(err), want.says) {
			t.Errorf("scrub of %s: %v, want %v saying %q", segs[i].Name, err, want.is, want.says)
		}
	}
	stop := errors.New("stop")
	if err := l.ScrubSegment(context.Background(), segs[1], func(context.Context, int) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("a scrub pace refused: %v", err)
	}
}
