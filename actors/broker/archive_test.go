package broker_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/eventlog"
)

// TestArchiverSealsWhatIsOldAndDropsWhatIsPastKeep drives the archiver on a fake clock: a few
// records wait for another --archive-after, then leave the hot log while a job's events still
// read the same, and the segment goes once it is older than --archive-keep.
func TestArchiverSealsWhatIsOldAndDropsWhatIsPastKeep(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	cfg := broker.Config{Dir: t.TempDir(), Clock: clock, Archive: broker.ArchiveConfig{After: time.Minute, Every: time.Hour}}
	events := func(b *broker.Broker, id string) []uint64 {
		var seqs []uint64
		for r, err := range b.JobStream(id, 0) {
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, r.Seq)
		}
		return seqs
	}

	b := open(t, cfg)
	var ids []string
	for range 20 {
		res, _, err := b.Submit(ctx(t), "acme", "", actors.JobSpec{Queue: "q", Type: "t"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res[0].Job.ID)
	}
	if _, err := b.Cancel(ctx(t), "acme", "", ids[0]); err != nil {
		t.Fatal(err)
	}
	want := events(b, ids[0])
	head := b.Head().Seq
	if err := b.Close(); err != nil { // saves a checkpoint of everything
		t.Fatal(err)
	}

	advance(90 * time.Second)
	b = open(t, cfg)
	b.ArchiveOnce(ctx(t))
	if st := b.Archive(); st.Segments != 0 || st.OldestHotSeq != 1 {
		t.Fatalf("a few records younger than twice --archive-after were archived: %+v", st)
	}
	advance(2 * time.Minute)
	b.ArchiveOnce(ctx(t))
	st := b.Archive()
	if st.Segments != 1 || st.Sealed != 1 || st.OldestHotSeq != head+1 || st.ArchiveBytes == 0 {
		t.Fatalf("after waiting, every record covered by the checkpoint should be archived: %+v (head %d)", st, head)
	}
	if got := events(b, ids[0]); !slices.Equal(got, want) || len(want) < 2 {
		t.Fatalf("job events %v from the archive, want %v", got, want)
	}
	if j, ok := b.Get("acme", ids[0]); !ok || j.Status != "cancelled" {
		t.Fatalf("the archived job's view: %v %v", j, ok)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	advance(10 * time.Minute)
	cfg.Archive.Keep = 5 * time.Minute
	b = open(t, cfg) // an empty hot log: it starts at the anchor
	defer b.Close()
	if h := b.Head().Seq; h < head || b.Archive().OldestHotSeq != head+1 {
		t.Fatalf("head %d after reopening on an empty hot log, want at least %d", h, head)
	}
	b.ArchiveOnce(ctx(t))
	if st := b.Archive(); st.Segments != 0 || st.Dropped != 1 || st.ArchiveBytes != 0 {
		t.Fatalf("a segment past --archive-keep was kept: %+v", st)
	}
}

// archivedBroker is a data dir on a fake clock and a way to seal everything in it so far into a
// segment of its own: the broker it is given is closed (a checkpoint of everything), and a new
// one seals and closes.
type archivedBroker struct {
	t       *testing.T
	cfg     broker.Config
	mu      sync.Mutex
	now     time.Time
	archive func(b *broker.Broker)
}

func newArchivedBroker(t *testing.T) *archivedBroker {
	a := &archivedBroker{t: t, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	a.cfg = broker.Config{Dir: t.TempDir(), Clock: a.clock, Archive: broker.ArchiveConfig{After: time.Minute, Every: time.Hour}}
	a.archive = func(b *broker.Broker) {
		t.Helper()
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		a.mu.Lock()
		a.now = a.now.Add(5 * time.Minute)
		a.mu.Unlock()
		b = open(t, a.cfg)
		sealed := b.Archive().Sealed
		b.ArchiveOnce(ctx(t))
		if b.Archive().Sealed != sealed+1 {
			t.Fatalf("nothing was archived: %+v", b.Archive())
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

func (a *archivedBroker) clock() time.Time { a.mu.Lock(); defer a.mu.Unlock(); return a.now }

// segments are the archive's files, oldest first.
func (a *archivedBroker) segments() []string {
	segs, err := filepath.Glob(filepath.Join(a.cfg.Dir, "archive", "seg-*.tseg"))
	if err != nil {
		a.t.Fatal(err)
	}
	slices.Sort(segs)
	return segs
}

func submitTo(t *testing.T, b *broker.Broker) string {
	t.Helper()
	res, _, err := b.Submit(ctx(t), "acme", "", actors.JobSpec{Queue: "q", Type: "t"})
	if err != nil {
		t.Fatal(err)
	}
	return res[0].Job.ID
}

// A job that expired stays expired (JOB_EXPIRED to its tenant, not found to another) after the
// segments that held its whole history are deleted by hand, oldest first, as the README lets
// an operator do once they are copied off the machine.
func TestAnExpiredJobStaysExpiredOnceItsHistoryIsPruned(t *testing.T) {
	t.Parallel()
	a := newArchivedBroker(t)
	b := open(t, a.cfg)
	gone := submitTo(t, b)
	if _, err := b.Cancel(ctx(t), "acme", "", gone); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Delete(ctx(t), "acme", "", gone); err != nil {
		t.Fatal(err)
	}
	if !b.Expired("acme", gone) || b.Expired("other", gone) {
		t.Fatal("a deleted job is not expired to its tenant alone while its history is here")
	}
	a.archive(b)
	b = open(t, a.cfg)
	submitTo(t, b)
	a.archive(b)
	segs := a.segments()
	if len(segs) != 2 {
		t.Fatalf("segments %v; want 2", segs)
	}
	if err := os.Remove(segs[0]); err != nil { // the oldest, which holds the whole of the job's stream
		t.Fatal(err)
	}

	b = open(t, a.cfg)
	defer b.Close()
	for r, err := range b.JobStream(gone, 0) {
		var gap *eventlog.GapError
		if !errors.As(err, &gap) || !gap.Pruned {
			t.Fatalf("the job's history is still readable after its segment went: %+v, %v", r, err)
		}
	}
	if !b.Expired("acme", gone) {
		t.Error("the job whose history was pruned is no longer expired to its tenant")
	}
	if b.Expired("other", gone) {
		t.Error("the job whose history was pruned is expired to another tenant")
	}
	if _, ok := b.Get("acme", gone); ok {
		t.Error("the expired job reads again")
	}
	if b.Expired("acme", "01J0000000000000000000000") {
		t.Error("a job that never was is expired")
	}
}

// A byte flipped inside a sealed segment while the server runs is found by the next scrub,
// without a read of its records: logged ARCHIVE_DAMAGED once however many scrubs find it,
// reported in ArchiveState while it is damaged, and forgotten once a good copy is back.
func TestScrubFindsADamagedSegment(t *testing.T) {
	t.Parallel()
	a := newArchivedBroker(t)
	b := open(t, a.cfg)
	submitTo(t, b)
	a.archive(b)
	b = open(t, a.cfg)
	submitTo(t, b)
	a.archive(b)
	segs := a.segments()
	if len(segs) != 2 {
		t.Fatalf("segments %v; want 2", segs)
	}

	core, logs := observer.New(zap.InfoLevel)
	a.cfg.Logger = zap.New(core)
	b = open(t, a.cfg)
	defer b.Close()
	b.ScrubOnce(ctx(t))
	st := b.Archive()
	if len(st.Damaged) != 0 || st.ScrubPasses != 1 || st.ScrubbedBytes == 0 || st.ScrubLastEnd.IsZero() {
		t.Fatalf("a scrub of a whole archive: %+v", st)
	}
	good, err := os.ReadFile(segs[1])
	if err != nil {
		t.Fatal(err)
	}
	bad := slices.Clone(good)
	bad[len(bad)/3] ^= 0x04 // inside the frames: the trailer, all that start-up reads, still holds
	if err := os.WriteFile(segs[1], bad, 0o644); err != nil {
		t.Fatal(err)
	}
	damaged := func() []observer.LoggedEntry { return logs.FilterField(zap.String("code", "ARCHIVE_DAMAGED")).All() }
	for range 2 {
		b.ScrubOnce(ctx(t))
	}
	st = b.Archive()
	name := filepath.Base(segs[1])
	if len(st.Damaged) != 1 || st.Damaged[0].Name != name || st.Damaged[0].Reason != "its checksum does not match its contents" ||
		st.Damaged[0].First == 0 || st.Damaged[0].Last < st.Damaged[0].First || st.ScrubPasses != 3 {
		t.Fatalf("after a byte flipped in %s: %+v", name, st)
	}
	if d := damaged(); len(d) != 1 || d[0].Level != zap.ErrorLevel || d[0].ContextMap()["segment"] != name {
		t.Fatalf("ARCHIVE_DAMAGED logged %d times, want once naming %s: %+v", len(d), name, d)
	}
	if err := os.WriteFile(segs[1], good, 0o644); err != nil {
		t.Fatal(err)
	}
	b.ScrubOnce(ctx(t))
	if st = b.Archive(); len(st.Damaged) != 0 || len(damaged()) != 1 || logs.FilterMessage("archive segment whole again").Len() != 1 {
		t.Fatalf("after the good copy is back: %+v", st)
	}
}
