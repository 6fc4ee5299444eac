// Package eventlogtest is the conformance suite for the event log: every backend the log runs on
// (Pebble on disk, Pebble on the crashable in-memory filesystem, anything added later) must pass
// the same tests.
package eventlogtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/tetherhq/tether/eventlog"
)

// Store is where a backend keeps a log: a filesystem and a directory in it.
type Store struct {
	FS  vfs.FS
	Dir string
	// Crash, when the backend can simulate a power cut, returns the store as the cut would
	// leave it at this instant: everything synced, and each unsynced write with probability
	// keepUnsyncedPercent. Backends that cannot crash leave it nil and skip the crash tests.
	Crash func(keepUnsyncedPercent int, rng *rand.Rand) Store
	// WALPrefill is passed to every Open of this store (eventlog.Options.WALPrefill).
	WALPrefill int64
	// Upstream, if set, is the replicated log the store is a copy of: every Open of a writable
	// log leads it (eventlog.Options.Upstream and Lead), and a crash leaves it whole.
	Upstream eventlog.Upstream
	// HoldDurable returns the store with gate run before each append becomes durable. Nil: the
	// gate holds the WAL's fsync.
	HoldDurable func(gate func()) Store
}

// Options fills in what every Open of the store passes.
func (s Store) Options(opts eventlog.Options) eventlog.Options {
	opts.FS, opts.WALPrefill = s.FS, s.WALPrefill
	if s.Upstream != nil && !opts.ReadOnly {
		opts.Upstream, opts.Lead = s.Upstream, true
	}
	return opts
}

// MemUpstream returns an empty store on the crashable in-memory filesystem that is a copy of
// an upstream in memory.
func MemUpstream() Store {
	return withUpstream(CrashableMem(), eventlog.NewMemUpstream())
}

func withUpstream(s Store, up *eventlog.MemUpstream) Store {
	s.Upstream = up
	crash := s.Crash
	s.Crash = func(keep int, rng *rand.Rand) Store { return withUpstream(crash(keep, rng), up) }
	s.HoldDurable = func(gate func()) Store {
		up.Hold = gate
		return s
	}
	return s
}

// CrashableMem returns an empty store on Pebble's crashable in-memory filesystem.
func CrashableMem() Store { return crashableMem(vfs.NewCrashableMem(), 0) }

// CrashableMemPrefilled is CrashableMem with the WAL prefilled in fills of at most prefill
// bytes; a small prefill makes the WAL writer catch up with its fills all the time.
func CrashableMemPrefilled(prefill int64) Store { return crashableMem(vfs.NewCrashableMem(), prefill) }

func crashableMem(fs *vfs.MemFS, prefill int64) Store {
	return Store{FS: fs, Dir: "/data/log", WALPrefill: prefill, Crash: func(keep int, rng *rand.Rand) Store {
		return crashableMem(fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: keep, RNG: rng}), prefill)
	}}
}

// Run runs the suite. newStore must return a fresh, empty store for each call.
func Run(t *testing.T, newStore func(t *testing.T) Store) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s Store)
	}{
		{"EmptyLog", testEmptyLog},
		{"AppendAndRead", testAppendAndRead},
		{"ConcurrentAppendsAreAtomicAndGapFree", testConcurrentAppends},
		{"StreamsDoNotBleed", testStreams},
		{"ReopenContinuesChain", testReopen},
		{"TimeNeverRunsBackwards", testMonotonicTime},
		{"InvalidEventsRejected", testInvalidEvents},
		{"SubscriptionDeliversInOrder", testSubscription},
		{"CloseDrainsAcceptedAppends", testCloseDrains},
		{"Checkpoints", testCheckpoints},
		{"ViewTableMovesWithItsCheckpoint", testViews},
		{"ReadOnly", testReadOnly},
		{"RefusesForeignDirectories", testForeignDirectories},
		{"VerifyNamesTamperedSeq", testVerifyTampered},
		{"OpenRefusesBrokenHead", testBrokenHead},
		{"ReadersSeeOnlyDurableRecords", testReadersSeeOnlyDurable},
		{"CrashKeepsAcknowledgedAppends", testCrash},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStore(t)) })
	}
}

// Open opens the store's log with the given options (FS and WALPrefill are filled in) and
// closes it when the test ends, unless the test closed it.
func Open(t testing.TB, s Store, opts eventlog.Options) *eventlog.Log {
	t.Helper()
	l, err := eventlog.Open(s.Dir, s.Options(opts))
	if err != nil {
		t.Fatalf("open %s: %v", s.Dir, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// Event returns a small event with a recognisable payload.
func Event(stream string, n int) eventlog.Event {
	return eventlog.Event{Stream: stream, Type: "test.event", Data: fmt.Appendf(nil, `{"n":%d,"stream":%q}`, n, stream)}
}

// Collect drains an iterator of records, failing the test on an error.
func Collect(t testing.TB, seq func(func(eventlog.Record, error) bool)) []eventlog.Record {
	t.Helper()
	var out []eventlog.Record
	for r, err := range seq {
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		out = append(out, r)
	}
	return out
}

// MustVerify verifies the chain and checks it reaches the durable head.
func MustVerify(t testing.TB, l *eventlog.Log) eventlog.Head {
	t.Helper()
	head, err := l.Verify(context.Background())
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if want := l.Head(); head.Seq != want.Seq || head.Hash != want.Hash {
		t.Fatalf("verify reached %d/%s, durable head is %d/%s", head.Seq, head.Hash, want.Seq, want.Hash)
	}
	return head
}

func testEmptyLog(t *testing.T, s Store) {
	l := Open(t, s, eventlog.Options{})
	if h := l.Head(); h.Seq != 0 || h.Hash != eventlog.Genesis {
		t.Fatalf("empty head = %+v, want seq 0 and the genesis hash", h)
	}
	MustVerify(t, l)
	if got := Collect(t, l.Range(1, 0)); len(got) != 0 {
		t.Fatalf("empty log yielded %d records", len(got))
	}
	if _, err := l.Get(1); !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("Get(1) on empty log: %v, want ErrNotFound", err)
	}
}

func testAppendAndRead(t *testing.T, s Store) {
	clock := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	l := Open(t, s, eventlog.Options{Clock: func() time.Time { return clock }})
	ctx := context.Background()
	r1, err := l.Append(ctx, Event("job/a", 1))
	if err != nil {
		t.Fatal(err)
	}
	if r1.First != 1 || r1.Last != 1 {
		t.Fatalf("first receipt %+v, want seq 1..1", r1)
	}
	r2, err := l.Append(ctx, Event("job/a", 2), Event("job/b", 3), Event("tenant/x", 4))
	if err != nil {
		t.Fatal(err)
	}
	if r2.First != 2 || r2.Last != 4 {
		t.Fatalf("second receipt %+v, want seq 2..4", r2)
	}
	if h := l.Head(); h.Seq != 4 || h.Hash != r2.Hash {
		t.Fatalf("head %+v does not match the last receipt %+v", h, r2)
	}
	recs := Collect(t, l.Range(1, 0))
	if len(recs) != 4 {
		t.Fatalf("got %d records, want 4", len(recs))
	}
	prev := eventlog.Genesis
	for i, r := range recs {
		want := []eventlog.Event{Event("job/a", 1), Event("job/a", 2), Event("job/b", 3), Event("tenant/x", 4)}[i]
		if r.Seq != uint64(i+1) || r.Stream != want.Stream || r.Type != want.Type || !bytes.Equal(r.Data, want.Data) {
			t.Fatalf("record %d = %+v, want %+v", i+1, r, want)
		}
		// The receipt carries the time stamped on its records, which projections fold.
		if rc := []eventlog.Receipt{r1, r2, r2, r2}[i]; !r.Time.Equal(rc.Time) || !r.Time.Equal(clock) {
			t.Fatalf("record %d stamped %s, its receipt says %s", i+1, r.Time, rc.Time)
		}
		if !r.Time.Equal(clock) {
			t.Fatalf("record %d time %v, want %v", r.Seq, r.Time, clock)
		}
		if !r.ChainsFrom(prev) {
			t.Fatalf("record %d does not chain from its predecessor", r.Seq)
		}
		got, err := l.Get(r.Seq)
		if err != nil || got.Hash != r.Hash {
			t.Fatalf("Get(%d) = %v, %v; want the ranged record", r.Seq, got.Hash, err)
		}
		decoded, err := eventlog.DecodeRecord(r.Encode())
		if err != nil || decoded.Hash != r.Hash || decoded.Seq != r.Seq {
			t.Fatalf("record %d does not round-trip: %v", r.Seq, err)
		}
		prev = r.Hash
	}
	if r1.Hash != recs[0].Hash {
		t.Fatal("first receipt hash is not the hash of record 1")
	}
	if got := Collect(t, l.Range(2, 3)); len(got) != 2 || got[0].Seq != 2 || got[1].Seq != 3 {
		t.Fatalf("Range(2,3) = %d records", len(got))
	}
	MustVerify(t, l)
}

func testConcurrentAppends(t *testing.T, s Store) {
	l := Open(t, s, eventlog.Options{})
	const producers, appends = 16, 50
	var (
		mu       sync.Mutex
		receipts []eventlog.Receipt
		wg       sync.WaitGroup
	)
	for p := range producers {
		wg.Go(func() {
			for i := range appends {
				stream := fmt.Sprintf("job/p%d", p)
				n := 1 + i%3 // appends of 1..3 events must stay contiguous
				evs := make([]eventlog.Event, n)
				for k := range evs {
					evs[k] = Event(stream, i*10+k)
				}
				r, err := l.Append(context.Background(), evs...)
				if err != nil {
					t.Errorf("producer %d: %v", p, err)
					return
				}
				if r.Last-r.First+1 != uint64(n) {
					t.Errorf("receipt %+v for %d events", r, n)
				}
				mu.Lock()
				receipts = append(receipts, r)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.SortFunc(receipts, func(a, b eventlog.Receipt) int { return int(a.First) - int(b.First) })
	next := uint64(1)
	for _, r := range receipts {
		if r.First != next {
			t.Fatalf("receipts leave a gap or overlap at seq %d (receipt %+v)", next, r)
		}
		next = r.Last + 1
	}
	head := MustVerify(t, l)
	if head.Seq != next-1 {
		t.Fatalf("head %d, receipts cover 1..%d", head.Seq, next-1)
	}
	// Each receipt's records are one producer's consecutive events.
	for _, r := range receipts {
		recs := Collect(t, l.Range(r.First, r.Last))
		for _, rec := range recs[1:] {
			if rec.Stream != recs[0].Stream {
				t.Fatalf("append %d..%d interleaves streams %s and %s", r.First, r.Last, recs[0].Stream, rec.Stream)
			}
		}
		if recs[len(recs)-1].Hash != r.Hash {
			t.Fatalf("receipt hash for %d..%d is not the hash of its last record", r.First, r.Last)
		}
	}
	if st := l.Stats(); st.Events != head.Seq || st.Batches == 0 || st.Batches > st.Events || st.Syncs == 0 {
		t.Fatalf("stats %+v inconsistent with %d records", st, head.Seq)
	}
}

func testStreams(t *testing.T, s Store) {
	l := Open(t, s, eventlog.Options{})
	// "job/a" is a prefix of "job/ab": their index ranges must not overlap.
	streams := []string{"job/a", "job/ab", "job/a/b", "worker/a", "job/a"}
	for i, st := range streams {
		if _, err := l.Append(context.Background(), Event(st, i)); err != nil {
			t.Fatal(err)
		}
	}
	got := Collect(t, l.Stream("job/a", 0))
	if len(got) != 2 || got[0].Seq != 1 || got[1].Seq != 5 {
		t.Fatalf("stream job/a = %v, want seqs 1 and 5", seqs(got))
	}
	if got := Collect(t, l.Stream("job/a", 2)); len(got) != 1 || got[0].Seq != 5 {
		t.Fatalf("stream job/a from 2 = %v, want seq 5", seqs(got))
	}
	if got := Collect(t, l.Stream("job/ab", 0)); len(got) != 1 || got[0].Seq != 2 {
		t.Fatalf("stream job/ab = %v, want seq 2", seqs(got))
	}
	if got := Collect(t, l.Stream("job/none", 0)); len(got) != 0 {
		t.Fatalf("unknown stream yielded %v", seqs(got))
	}
}

func seqs(rs []eventlog.Record) []uint64 {
	out := make([]uint64, len(rs))
	for i, r := range rs {
		out[i] = r.Seq
	}
	return out
}

func testReopen(t *testing.T, s Store) {
	l := Open(t, s, eventlog.Options{})
	for i := range 10 {
		if _, err := l.Append(context.Background(), Event("job/x", i)); err != nil {
			t.Fatal(err)
		}
	}
	before := l.Head()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(context.Background(), Event("job/x", 99)); !errors.Is(err, eventlog.ErrClosed) {
		t.Fatalf("append after close: %v, want ErrClosed", err)
	}
	l = Open(t, s, eventlog.Options{})
	if h := l.Head(); h.Seq != before.Seq || h.Hash != before.Hash {
		t.Fatalf("reopened head %+v, want %+v", h, before)
	}
	r, err := l.Append(context.Background(), Event("job/x", 10))
	if err != nil {
		t.Fatal(err)
	}
	if r.First != before.Seq+1 {
		t.Fatalf("append after reopen got seq %d, want %d", r.First, before.Seq+1)
	}
	rec, err := l.Get(r.First)
	if err != nil || !rec.ChainsFrom(before.Hash) {
		t.Fatalf("record after reopen does not chain from the old head: %v", err)
	}
	MustVerify(t, l)
}

func testMonotonicTime(t *testing.T, s Store) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	l := Open(t, s, eventlog.Options{Clock: clock})
	step := func(d time.Duration) {
		mu.Lock()
		now = now.Add(d)
		mu.Unlock()
		if _, err := l.Append(context.Background(), Event("job/t", 0)); err != nil {
			t.Fatal(err)
		}
	}
	step(0)
	step(time.Hour)
	step(-2 * time.Hour) // a clock jump backwards
	step(3 * time.Hour)
	recs := Collect(t, l.Range(1, 0))
	for i := 1; i < len(recs); i++ {
		if recs[i].Time.Before(recs[i-1].Time) {
			t.Fatalf("record %d time %v is before record %d time %v", recs[i].Seq, recs[i].Time, recs[i-1].Seq, recs[i-1].Time)
		}
	}
	if want := time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC); !recs[2].Time.Equal(want) {
		t.Fatalf("after a backward jump the record time is %v, want it held at %v", recs[2].Time, want)
	}
}

func testInvalidEvents(t *testing.T, s Store) {
	l := Open(t, s, eventlog.Options{})
	big := make([]byte, eventlog.DataLenMax+1)
	for i := range big {
		big[i] = ' '
	}
	big[0] = '1'
	for _, tc := range []struct {
		name   string
		events []eventlog.Event
	}{
		{"none", nil},
		{"too many", make([]eventlog.Event, eventlog.EventsPerAppendMax+1)},
		{"empty stream", []eventlog.Event{{Type: "t", Data: []byte("{}")}}},
		{"empty type", []eventlog.Event{{Stream: "s", Data: []byte("{}")}}},
		{"NUL in stream", []eventlog.Event{{Stream: "job/\x00", Type: "t", Data: []byte("{}")}}},
		{"long stream", []eventlog.Event{{Stream: string(make([]byte, eventlog.StreamLenMax+1)), Type: "t", Data: []byte("{}")}}},
		{"bad UTF-8 type", []eventlog.Event{{Stream: "s", Type: "\xff", Data: []byte("{}")}}},
		{"not JSON", []eventlog.Event{{Stream: "s", Type: "t", Data: []byte("{")}}},
		{"empty data", []eventlog.Event{{Stream: "s", Type: "t"}}},
		{"oversize data", []eventlog.Event{{Stream: "s", Type: "t", Data: big}}},
		{"one bad among good", []eventlog.Event{Event("job/a", 1), {Stream: "s", Type: "t", Data: []byte("nope")}}},
	} {
		if _, err := l.Append(context.Background(), tc.events...); !errors.Is(err, eventlog.ErrInvalidEvent) {
			t.Errorf("%s: %v, want ErrInvalidEvent", tc.name, err)
		}
	}
	if h := l.Head(); h.Seq != 0 {
		t.Fatalf("rejected appends wrote %d records", h.Seq)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Append(ctx, Event("job/a", 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("append with a cancelled context: %v", err)
	}
}

func testSubscription(t *testing.T, s Store) {
	l := Open(t, s, eventlog.Options{})
	ctx := context.Background()
	if _, err := l.Append(ctx, Event("job/a", 1), Event("job/a", 2)); err != nil {
		t.Fatal(err)
	}
	sub := l.Subscribe(2)
	got, err := sub.Next(ctx, 10)
	if err != nil || len(got) != 1 || got[0].Seq != 2 {
		t.Fatalf("first Next = %v, %v; want seq 2", seqs(got), err)
	}
	// Nothing new: Next must wait, and give up when its context ends.
	short, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := sub.Next(short, 10); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with nothing new and a cancelled context: %v", err)
	}
	type result struct {
		recs []eventlog.Record
		err  error
	}
	ch := make(chan result)
	go func() {
		recs, err := sub.Next(ctx, 2)
		ch <- result{recs, err}
	}()
	if _, err := l.Append(ctx, Event("job/a", 3), Event("job/a", 4), Event("job/a", 5)); err != nil {
		t.Fatal(err)
	}
	res := <-ch
	if res.err != nil || len(res.recs) == 0 || res.recs[0].Seq != 3 || len(res.recs) > 2 {
		t.Fatalf("Next after append = %v, %v; want to start at seq 3, at most 2", seqs(res.recs), res.err)
	}
	all := res.recs
	for len(all) < 3 {
		more, err := sub.Next(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, more...)
	}
	if !slices.Equal(seqs(all), []uint64{3, 4, 5}) {
		t.Fatalf("subscription delivered %v, want 3 4 5", seqs(all))
	}
}

func testCloseDrains(t *testing.T, s Store) {
	l := Open(t, s, eventlog.Options{})
	const n = 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	var acked []uint64
	for i := range n {
		wg.Add(1)
		l.AppendAsync([]eventlog.Event{Event("job/d", i)}, func(r eventlog.Receipt, err error) {
			defer wg.Done()
			if err != nil {
				t.Errorf("append %d accepted before Close failed: %v", i, err)
				return
			}
			mu.Lock()
			acked = append(acked, r.First)
			mu.Unlock()
		})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(acked) != n {
		t.Fatalf("%d of %d appends acknowledged", len(acked), n)
	}
	l = Open(t, s, eventlog.Options{})
	if h := MustVerify(t, l); h.Seq != n {
		t.Fatalf("reopened head %d, want %d", h.Seq, n)
	}
	// Order of AppendAsync calls from one goroutine is seq order.
	for r, err := range l.Range(1, 0) {
		if err != nil {
			t.Fatal(err)
		}
		var v struct{ N int }
		if err := json.Unmarshal(r.Data, &v); err != nil || uint64(v.N+1) != r.Seq {
			t.Fatalf("record %d holds append %d: AppendAsync order not kept", r.Seq, v.N)
		}
	}
}

func testCheckpoints(t *testing.T, s Store) {
	l := Open(t, s, eventlog.Options{})
	if _, err := l.LoadCheckpoint("queue"); !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("load of a missing checkpoint: %v, want ErrNotFound", err)
	}
	if _, err := l.Append(context.Background(), Event("job/c", 1), Event("job/c", 2)); err != nil {
		t.Fatal(err)
	}
	if err := l.SaveCheckpoint("queue", 0, []byte("zero")); err != nil {
		t.Fatal(err)
	}
	if c, err := l.LoadCheckpoint("queue"); err != nil || c.Seq != 0 || c.Hash != eventlog.Genesis {
		t.Fatalf("checkpoint at 0 = %+v, %v", c, err)
	}
	if err := l.SaveCheckpoint("queue", 2, []byte("snapshot@2")); err != nil {
		t.Fatal(err)
	}
	if err := l.SaveCheckpoint("queue", 3, []byte("future")); !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("checkpoint beyond the head: %v, want ErrNotFound", err)
	}
	for _, bad := range []string{"", "Queue", "a/b", string(make([]byte, eventlog.CheckpointNameLenMax+1))} {
		if err := l.SaveCheckpoint(bad, 1, nil); err == nil {
			t.Fatalf("checkpoint name %q accepted", bad)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = Open(t, s, eventlog.Options{})
	c, err := l.LoadCheckpoint("queue")
	if err != nil {
		t.Fatal(err)
	}
	rec2, _ := l.Get(2)
	if c.Seq != 2 || c.Hash != rec2.Hash || string(c.Data) != "snapshot@2" {
		t.Fatalf("reloaded checkpoint %+v, want seq 2 with the newest data", c)
	}
}

// views lists the view table as key=value pairs under prefix, in order or in reverse from start.
func views(v eventlog.Views, prefix, start string, reverse bool) string {
	var out []string
	var from []byte
	if start != "" {
		from = []byte(start)
	}
	v.Scan([]byte(prefix), from, reverse, func(k, val []byte) bool {
		out = append(out, string(k)+"="+string(val))
		return true
	})
	return strings.Join(out, " ")
}

// The view table changes only with a checkpoint, in its batch: a crash leaves both as they were
// or both as saved; its scans keep to their prefix in both directions; ClearViews empties it
// with the checkpoint.
func testViews(t *testing.T, s Store) {
	l := Open(t, s, eventlog.Options{})
	if _, err := l.Append(context.Background(), Event("job/v", 1), Event("job/v", 2)); err != nil {
		t.Fatal(err)
	}
	put := func(k, v string) eventlog.ViewWrite { return eventlog.ViewWrite{Key: []byte(k), Value: []byte(v)} }
	if err := l.SaveCheckpoint("p", 1, []byte("one"), put("a1", "x"), put("a2", "y"), put("b1", "z"), put("a", "")); err != nil {
		t.Fatal(err)
	}
	v := l.Views()
	for _, c := range []struct {
		prefix, start string
		reverse       bool
		want          string
	}{
		{"a", "", false, "a= a1=x a2=y"},
		{"a", "a2", false, "a2=y"},
		{"a", "", true, "a2=y a1=x a="},
		{"a", "a1", true, "a1=x a="},
		{"b", "", true, "b1=z"},
		{"c", "", false, ""},
		{"", "", false, "a= a1=x a2=y b1=z"},
	} {
		if got := views(v, c.prefix, c.start, c.reverse); got != c.want {
			t.Errorf("Scan(%q from %q, reverse %v) = %q, want %q", c.prefix, c.start, c.reverse, got, c.want)
		}
	}
	if val, ok := v.Get([]byte("a2")); !ok || string(val) != "y" {
		t.Fatalf("Get(a2) = %q, %v", val, ok)
	}
	if _, ok := v.Get([]byte("zz")); ok {
		t.Fatal("Get of a missing key found one")
	}
	// A key written twice in one checkpoint ends as its last write says, as in a batch: b1 is
	// deleted and then put again, b2 put and then deleted, and the writes come in no order.
	del := func(k string) eventlog.ViewWrite { return eventlog.ViewWrite{Key: []byte(k), Delete: true} }
	if err := l.SaveCheckpoint("p", 2, []byte("two"), del("b1"), put("b2", "w"), del("a1"), put("a2", "y2"), put("b1", "z"), del("b2")); err != nil {
		t.Fatal(err)
	}
	if got := views(v, "", "", false); got != "a= a2=y2 b1=z" {
		t.Fatalf("after a checkpoint that writes keys twice: %q, want %q", got, "a= a2=y2 b1=z")
	}
	if err := l.SaveCheckpoint("p", 2, nil, eventlog.ViewWrite{}); err == nil {
		t.Fatal("a view write with an empty key was accepted")
	}
	if s.Crash != nil {
		crashed := s.Crash(0, rand.New(rand.NewPCG(1, 2)))
		cl := Open(t, crashed, eventlog.Options{})
		c, err := cl.LoadCheckpoint("p")
		if got := views(cl.Views(), "", "", false); err != nil || c.Seq != 2 || got != "a= a2=y2 b1=z" {
			t.Fatalf("after a crash: checkpoint %d (%v), table %q; want seq 2 with its table", c.Seq, err, got)
		}
		_ = cl.Close()
	}
	if err := l.ClearViews("p"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.LoadCheckpoint("p"); !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("checkpoint after ClearViews: %v", err)
	}
	if got := views(v, "", "", false); got != "" {
		t.Fatalf("table after ClearViews: %q", got)
	}
	if _, err := l.Get(2); err != nil {
		t.Fatalf("ClearViews touched the log: %v", err)
	}
}

func testReadOnly(t *testing.T, s Store) {
	l := Open(t, s, eventlog.Options{})
	if _, err := l.Append(context.Background(), Event("job/r", 1)); err != nil {
		t.Fatal(err)
	}
	if err := l.SaveCheckpoint("c", 1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ro := Open(t, s, eventlog.Options{ReadOnly: true})
	if h := MustVerify(t, ro); h.Seq != 1 {
		t.Fatalf("read-only head %d, want 1", h.Seq)
	}
	if _, err := ro.LoadCheckpoint("c"); err != nil {
		t.Fatal(err)
	}
	if _, err := ro.Append(context.Background(), Event("job/r", 2)); !errors.Is(err, eventlog.ErrReadOnly) {
		t.Fatalf("append to a read-only log: %v", err)
	}
	if err := ro.SaveCheckpoint("c", 1, nil); !errors.Is(err, eventlog.ErrReadOnly) {
		t.Fatalf("checkpoint on a read-only log: %v", err)
	}
	if _, err := eventlog.Open(s.FS.PathJoin(s.Dir, "missing"), eventlog.Options{FS: s.FS, ReadOnly: true}); !errors.Is(err, eventlog.ErrNotTetherLog) {
		t.Fatalf("read-only open of a missing directory: %v", err)
	}
}

func testForeignDirectories(t *testing.T, s Store) {
	// A directory with someone's files in it.
	if err := s.FS.MkdirAll(s.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := s.FS.Create(s.FS.PathJoin(s.Dir, "notes.txt"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.Write([]byte("not a log"))
	_ = f.Close()
	if _, err := eventlog.Open(s.Dir, eventlog.Options{FS: s.FS}); !errors.Is(err, eventlog.ErrNotTetherLog) {
		t.Fatalf("open of a directory of other files: %v, want ErrNotTetherLog", err)
	}
	// A Pebble store that is not a tether log.
	other := s.FS.PathJoin(s.Dir, "other-pebble")
	db, err := pebble.Open(other, &pebble.Options{FS: s.FS})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("hello"), []byte("world"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := eventlog.Open(other, eventlog.Options{FS: s.FS}); !errors.Is(err, eventlog.ErrNotTetherLog) {
		t.Fatalf("open of a foreign Pebble store: %v, want ErrNotTetherLog", err)
	}
}

// fill appends n events to the store's log, one per append, and closes it.
func fill(t *testing.T, s Store, stream string, n int) {
	t.Helper()
	l := Open(t, s, eventlog.Options{})
	for i := range n {
		if _, err := l.Append(context.Background(), Event(stream, i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// tamper opens the closed log's Pebble store directly and replaces the value stored for seq
// with change(value), or deletes it if change returns nil, as an attacker or a bad disk would:
// Pebble's own checksums stay valid.
func tamper(t *testing.T, s Store, seq uint64, change func(stored []byte) []byte) {
	t.Helper()
	db, err := pebble.Open(s.Dir, &pebble.Options{FS: s.FS})
	if err != nil {
		t.Fatal(err)
	}
	v, closer, err := db.Get(logKey(seq))
	if err != nil {
		t.Fatal(err)
	}
	changed := change(bytes.Clone(v))
	_ = closer.Close()
	if changed == nil {
		err = db.Delete(logKey(seq), pebble.Sync)
	} else {
		err = db.Set(logKey(seq), changed, pebble.Sync)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// logKey spells out the documented key layout, "log/" + 8-byte big-endian seq, independently of
// the package, so that a change of the on-disk layout fails here.
func logKey(seq uint64) []byte {
	k := []byte("log/\x00\x00\x00\x00\x00\x00\x00\x00")
	for i := range 8 {
		k[4+i] = byte(seq >> (56 - 8*i))
	}
	return k
}

func testVerifyTampered(t *testing.T, s Store) {
	fill(t, s, "job/v", 10)
	tamper(t, s, 4, func(v []byte) []byte { return bytes.Replace(v, []byte(`"n":3`), []byte(`"n":7`), 1) })
	l := Open(t, s, eventlog.Options{}) // the head still chains: only Verify can tell
	_, err := l.Verify(context.Background())
	var ce *eventlog.ChainError
	if !errors.As(err, &ce) || ce.Seq != 4 {
		t.Fatalf("verify of a log with record 4 rewritten: %v, want a chain error at seq 4", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	tamper(t, s, 7, func([]byte) []byte { return nil })
	l = Open(t, s, eventlog.Options{})
	// Record 4 is still the first bad one; Range from 5 finds the hole at 7.
	for _, err := range l.Range(5, 0) {
		if err != nil {
			if !errors.As(err, &ce) || ce.Seq != 7 {
				t.Fatalf("range over a deleted record: %v, want a chain error at seq 7", err)
			}
			return
		}
	}
	t.Fatal("range over a deleted record reported nothing")
}

func testBrokenHead(t *testing.T, s Store) {
	fill(t, s, "job/h", 3)
	tamper(t, s, 3, func(v []byte) []byte {
		v[len(v)-1] ^= 1 // flip a bit of the stored hash
		return v
	})
	_, err := eventlog.Open(s.Dir, eventlog.Options{FS: s.FS})
	var ce *eventlog.ChainError
	if !errors.As(err, &ce) || ce.Seq != 3 {
		t.Fatalf("open of a log with a broken head: %v, want a chain error at seq 3", err)
	}
}

func testCrash(t *testing.T, s Store) {
	if s.Crash == nil {
		t.Skip("this backend cannot simulate a power cut")
	}
	for seed := range uint64(4) {
		s = CrashRecovery(t, s, seed+1) // each round crashes the history the last one left
	}
}

// testReadersSeeOnlyDurable holds the WAL's fsync open and checks that nothing of the appends
// waiting for it can be read, although Pebble already holds them in its memtable.
func testReadersSeeOnlyDurable(t *testing.T, s Store) {
	var (
		armed   atomicBool
		reached = make(chan struct{}, 1)
		release = make(chan struct{})
	)
	hold := func() {
		if armed.get() {
			select {
			case reached <- struct{}{}:
			default:
			}
			<-release
		}
	}
	held := s.HoldDurable
	if held == nil {
		held = func(gate func()) Store {
			return Store{FS: errorfs.Wrap(s.FS, errorfs.InjectorFunc(func(op errorfs.Op) error {
				isSync := op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo
				if isSync && strings.HasSuffix(op.Path, ".log") {
					gate()
				}
				return nil
			})), Dir: s.Dir}
		}
	}
	l := Open(t, held(hold), eventlog.Options{})
	var releaseOnce sync.Once
	open := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(open) // runs before the log's Close, which would wait for the held fsync
	ctx := context.Background()
	if _, err := l.Append(ctx, Event("job/d", 1)); err != nil {
		t.Fatal(err)
	}
	sub := l.Subscribe(2)
	armed.set(true)
	done := make(chan error, 1)
	l.AppendAsync([]eventlog.Event{Event("job/d", 2), Event("job/d", 3)}, func(_ eventlog.Receipt, err error) { done <- err })
	<-reached // the batch is in Pebble and its fsync has started, but not returned

	if h := l.Head(); h.Seq != 1 {
		t.Fatalf("durable head is %d while the fsync of 2..3 is held", h.Seq)
	}
	if _, err := l.Get(2); !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("Get(2) before its fsync: %v, want ErrNotFound", err)
	}
	if got := Collect(t, l.Range(1, 0)); len(got) != 1 {
		t.Fatalf("Range saw %v before the fsync", seqs(got))
	}
	if got := Collect(t, l.Stream("job/d", 0)); len(got) != 1 {
		t.Fatalf("Stream saw %v before the fsync", seqs(got))
	}
	expired, cancel := context.WithCancel(ctx)
	cancel()
	if recs, err := sub.Next(expired, 10); !errors.Is(err, context.Canceled) {
		t.Fatalf("subscription delivered %v, %v before the fsync", seqs(recs), err)
	}
	select {
	case err := <-done:
		t.Fatalf("append acknowledged (%v) before its fsync returned", err)
	default:
	}

	armed.set(false)
	open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if recs, err := sub.Next(ctx, 10); err != nil || !slices.Equal(seqs(recs), []uint64{2, 3}) {
		t.Fatalf("after the fsync the subscription delivered %v, %v; want 2 3", seqs(recs), err)
	}
}

type atomicBool struct {
	mu sync.Mutex
	v  bool
}

func (b *atomicBool) get() bool  { b.mu.Lock(); defer b.mu.Unlock(); return b.v }
func (b *atomicBool) set(v bool) { b.mu.Lock(); b.v = v; b.mu.Unlock() }
