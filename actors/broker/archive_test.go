package broker_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

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

// A job that expired stays expired (JOB_EXPIRED to its tenant, not found to another) after the
// segments that held its whole history are deleted by hand, oldest first, as the README lets
// an operator do once they are copied off the machine.
func TestAnExpiredJobStaysExpiredOnceItsHistoryIsPruned(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	dir := t.TempDir()
	cfg := broker.Config{Dir: dir, Clock: clock, Archive: broker.ArchiveConfig{After: time.Minute, Every: time.Hour}}
	submit := func(b *broker.Broker) string {
		res, _, err := b.Submit(ctx(t), "acme", "", actors.JobSpec{Queue: "q", Type: "t"})
		if err != nil {
			t.Fatal(err)
		}
		return res[0].Job.ID
	}
	// archive seals every record so far into a segment of its own.
	archive := func(b *broker.Broker) {
		t.Helper()
		if err := b.Close(); err != nil { // a checkpoint of everything
			t.Fatal(err)
		}
		advance(5 * time.Minute)
		b = open(t, cfg)
		sealed := b.Archive().Sealed
		b.ArchiveOnce(ctx(t))
		if b.Archive().Sealed != sealed+1 {
			t.Fatalf("nothing was archived: %+v", b.Archive())
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}

	b := open(t, cfg)
	gone := submit(b)
	if _, err := b.Cancel(ctx(t), "acme", "", gone); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Delete(ctx(t), "acme", "", gone); err != nil {
		t.Fatal(err)
	}
	if !b.Expired("acme", gone) || b.Expired("other", gone) {
		t.Fatal("a deleted job is not expired to its tenant alone while its history is here")
	}
	archive(b)
	b = open(t, cfg)
	submit(b)
	archive(b)
	segs, err := filepath.Glob(filepath.Join(dir, "archive", "seg-*.tseg"))
	if err != nil || len(segs) != 2 {
		t.Fatalf("segments %v, %v; want 2", segs, err)
	}
	slices.Sort(segs)
	if err := os.Remove(segs[0]); err != nil { // the oldest, which holds the whole of the job's stream
		t.Fatal(err)
	}

	b = open(t, cfg)
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
