package eventlog_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/eventlog/eventlogtest"
)

func openOn(t *testing.T, up eventlog.Upstream, fs vfs.FS, dir string, lead bool) *eventlog.Log {
	t.Helper()
	l, err := eventlog.Open(dir, eventlog.Options{FS: fs, Upstream: up, Lead: lead})
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// A follower copies what the leader appends; a new leader fences the old one, whose next
// append is refused and fails its log; the follower then copies the new leader's appends too.
func TestUpstreamLeaderFollowerFence(t *testing.T) {
	ctx := context.Background()
	up := eventlog.NewMemUpstream()
	fs := vfs.NewMem()
	old := openOn(t, up, fs, "/a", true)
	for i := range 5 {
		if _, err := old.Append(ctx, eventlogtest.Event("job/x", i)); err != nil {
			t.Fatal(err)
		}
	}
	follower := openOn(t, up, fs, "/b", false)
	if h := follower.Head(); h != old.Head() {
		t.Fatalf("follower opened at %+v, leader is at %+v", h, old.Head())
	}
	if _, err := follower.Append(ctx, eventlogtest.Event("job/x", 9)); !errors.Is(err, eventlog.ErrFollower) {
		t.Fatalf("append to a follower: %v, want ErrFollower", err)
	}
	followed := make(chan error, 1)
	fctx, stop := context.WithCancel(ctx)
	go func() { followed <- follower.Follow(fctx) }()
	sub := follower.Subscribe(6)

	if _, err := old.Append(ctx, eventlogtest.Event("job/x", 5)); err != nil {
		t.Fatal(err)
	}
	if recs, err := sub.Next(ctx, 10); err != nil || len(recs) != 1 || recs[0].Seq != 6 {
		t.Fatalf("the follower delivered %v, %v; want seq 6", recs, err)
	}

	// Another server takes the lead from a copy that is behind: it catches up, then fences.
	next := openOn(t, up, fs, "/c", true)
	if h := next.Head(); h != old.Head() {
		t.Fatalf("new leader opened at %+v, old leader is at %+v", h, old.Head())
	}
	if _, err := old.Append(ctx, eventlogtest.Event("job/x", 6)); !errors.Is(err, eventlog.ErrFenced) || !errors.Is(err, eventlog.ErrFailed) {
		t.Fatalf("append by the deposed leader: %v, want ErrFenced and ErrFailed", err)
	}
	select {
	case <-old.Failed():
	default:
		t.Fatal("the deposed leader's log has not failed")
	}
	r, err := next.Append(ctx, eventlogtest.Event("job/x", 7))
	if err != nil || r.First != 7 {
		t.Fatalf("the new leader's append: %+v, %v; want seq 7", r, err)
	}
	if recs, err := sub.Next(ctx, 10); err != nil || len(recs) != 1 || recs[0].Seq != 7 || recs[0].Hash != r.Hash {
		t.Fatalf("the follower delivered %v, %v; want the new leader's seq 7", recs, err)
	}
	eventlogtest.MustVerify(t, follower)
	stop()
	if err := <-followed; err != nil {
		t.Fatalf("Follow: %v", err)
	}
}

// A copy that holds records the upstream does not is refused; one that lost its store is made
// again from the upstream.
func TestUpstreamCopyMustBeAPrefix(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	up := eventlog.NewMemUpstream()
	l := openOn(t, up, fs, "/a", true)
	if _, err := l.Append(ctx, eventlogtest.Event("job/x", 1), eventlogtest.Event("job/x", 2)); err != nil {
		t.Fatal(err)
	}
	head := l.Head()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := eventlog.Open("/a", eventlog.Options{FS: fs, Upstream: eventlog.NewMemUpstream()}); !errors.Is(err, eventlog.ErrDiverged) {
		t.Fatalf("open of a copy on another upstream: %v, want ErrDiverged", err)
	}
	plain := openOn(t, nil, fs, "/plain", false)
	if _, err := plain.Append(ctx, eventlogtest.Event("job/x", 1)); err != nil {
		t.Fatal(err)
	}
	_ = plain.Close()
	if _, err := eventlog.Open("/plain", eventlog.Options{FS: fs, Upstream: up}); !errors.Is(err, eventlog.ErrDiverged) {
		t.Fatalf("open of a log that never had an upstream: %v, want ErrDiverged", err)
	}
	fresh := openOn(t, up, fs, "/fresh", false)
	if h := fresh.Head(); h != head {
		t.Fatalf("a fresh copy opened at %+v, want %+v", h, head)
	}
	eventlogtest.MustVerify(t, fresh)
}

// flaky loses the answer to a publish that landed, then fails a publish outright, once each:
// what a NATS server going away does to the publishes in flight.
type flaky struct {
	*eventlog.MemUpstream
	publishes int
}

var errLinkDown = errors.New("nats: server is disconnected")

func (f *flaky) Publish(prev uint64, payload []byte) func() (uint64, error) {
	f.publishes++
	switch f.publishes {
	case 2: // lands, but its acknowledgement is lost
		f.MemUpstream.Publish(prev, payload)()
		return func() (uint64, error) { return 0, errLinkDown }
	case 3: // never lands
		return func() (uint64, error) { return 0, errLinkDown }
	}
	return f.MemUpstream.Publish(prev, payload)
}

// A leader whose publish failed reads the message back: one that landed is not published
// twice, one that did not is published again, and both appends are acknowledged in order.
func TestUpstreamPublishSettles(t *testing.T) {
	ctx := context.Background()
	up := &flaky{MemUpstream: eventlog.NewMemUpstream()}
	l := openOn(t, up, vfs.NewMem(), "/a", true) // publish 1 is the fence
	for i := range 3 {
		r, err := l.Append(ctx, eventlogtest.Event("job/x", i))
		if err != nil || r.First != uint64(i+1) {
			t.Fatalf("append %d: %+v, %v", i, r, err)
		}
	}
	if last, _ := up.Last(ctx); last != 4 {
		t.Fatalf("the upstream holds %d messages, want the fence and 3 appends", last)
	}
	eventlogtest.MustVerify(t, openOn(t, up, vfs.NewMem(), "/b", false))
}

// No interleaving of a deposed leader's in-flight and retried publishes with a new leader's
// fence and appends puts a message into the upstream that does not continue the chain.
func TestUpstreamDeposedWriter(t *testing.T) {
	eventlogtest.DeposedWriter(t, func(*testing.T) eventlog.Upstream { return eventlog.NewMemUpstream() })
}

// electing fails its first reads as a stream electing a raft leader does.
type electing struct {
	*eventlog.MemUpstream
	failReads int
}

func (e *electing) Get(ctx context.Context, seq uint64) ([]byte, error) {
	if e.failReads > 0 {
		e.failReads--
		return nil, context.DeadlineExceeded
	}
	return e.MemUpstream.Get(ctx, seq)
}

func (e *electing) Last(ctx context.Context) (uint64, error) {
	if e.failReads > 0 {
		e.failReads--
		return 0, context.DeadlineExceeded
	}
	return e.MemUpstream.Last(ctx)
}

// A copy opens while the upstream does not answer for a while (a NATS node was lost and the
// stream elects a leader): it tries again instead of giving up at the first read.
func TestUpstreamOpenWaitsForAnElection(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	up := &electing{MemUpstream: eventlog.NewMemUpstream()}
	l := openOn(t, up, fs, "/a", true)
	if _, err := l.Append(ctx, eventlogtest.Event("job/x", 1)); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	up.failReads = 5
	var slept int
	again, err := eventlog.Open("/a", eventlog.Options{FS: fs, Upstream: up, Sleep: func(time.Duration) { slept++ }})
	if err != nil {
		t.Fatalf("open while the upstream elects: %v", err)
	}
	defer again.Close()
	if up.failReads != 0 || slept != 5 {
		t.Fatalf("%d reads left to fail, %d waits; want every failed read waited for and tried again", up.failReads, slept)
	}
}

// Lead may come before the Follow a standby started has begun (its goroutine not yet run):
// Follow then ends at once without an error, and the promoted log takes appends.
func TestUpstreamLeadBeforeFollow(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	up := eventlog.NewMemUpstream()
	old := openOn(t, up, fs, "/a", true)
	if _, err := old.Append(ctx, eventlogtest.Event("job/x", 1)); err != nil {
		t.Fatal(err)
	}
	follower := openOn(t, up, fs, "/b", false)
	if err := follower.Lead(ctx); err != nil {
		t.Fatal(err)
	}
	if err := follower.Follow(ctx); err != nil {
		t.Fatalf("Follow after Lead: %v, want nil", err)
	}
	if r, err := follower.Append(ctx, eventlogtest.Event("job/x", 2)); err != nil || r.First != 2 {
		t.Fatalf("an append to the promoted log: %+v %v", r, err)
	}
	if err := follower.Lead(ctx); err == nil {
		t.Fatal("a second Lead succeeded")
	}
}

// silent answers nothing to its first calls (a read of the last message's number, of a
// message, or a consumer's next message), as a stream whose leader was paused or whose NATS
// server was black-holed: each blocks until its context ends.
type silent struct {
	*eventlog.MemUpstream
	mu                  sync.Mutex
	silentLasts, reads  int
	silentReads, stalls int
}

func (s *silent) Patience() time.Duration { return 20 * time.Millisecond }

func (s *silent) Last(ctx context.Context) (uint64, error) {
	s.mu.Lock()
	hang := s.silentLasts > 0
	s.silentLasts--
	s.mu.Unlock()
	if hang {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return s.MemUpstream.Last(ctx)
}

func (s *silent) Read(ctx context.Context, from uint64, visit func(uint64, []byte) error) error {
	s.mu.Lock()
	hang := s.silentReads > 0
	s.silentReads--
	s.reads++
	s.mu.Unlock()
	if hang {
		// It delivers the first message and then nothing more.
		stalled := func(seq uint64, payload []byte) error {
			if seq > from {
				<-ctx.Done()
				s.mu.Lock()
				s.stalls++
				s.mu.Unlock()
				return ctx.Err()
			}
			return visit(seq, payload)
		}
		return s.MemUpstream.Read(ctx, from, stalled)
	}
	return s.MemUpstream.Read(ctx, from, visit)
}

// A standby's takeover asks again, rather than waits on, an upstream request that goes
// unanswered: a read of the last message's number, and a catch-up whose next message does not
// come, each cut short after the upstream's Patience.
func TestUpstreamTakeoverAsksAgainWhatGoesUnanswered(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	up := &silent{MemUpstream: eventlog.NewMemUpstream()}
	old := openOn(t, up, fs, "/a", true)
	if _, err := old.Append(ctx, eventlogtest.Event("job/x", 1)); err != nil {
		t.Fatal(err)
	}
	follower := openOn(t, up, fs, "/b", false)
	for i := range 5 {
		if _, err := old.Append(ctx, eventlogtest.Event("job/y", i)); err != nil {
			t.Fatal(err)
		}
	}
	head := old.Head()
	up.mu.Lock()
	up.silentLasts, up.silentReads, up.reads = 2, 2, 0
	up.mu.Unlock()
	// Far longer than the retries take, far shorter than waiting for ever.
	deadline, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := follower.Lead(deadline); err != nil || deadline.Err() != nil {
		t.Fatalf("the takeover: %v; it waited on unanswered calls until its context ended: %v", err, deadline.Err())
	}
	if follower.Head() != head {
		t.Fatalf("the new leader caught up to %d, the upstream holds %d", follower.Head().Seq, head.Seq)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if up.stalls != 2 || up.reads != 3 {
		t.Fatalf("%d stalled catch-ups cut short in %d reads; want 2 in 3", up.stalls, up.reads)
	}
}

// A copy that has not followed the upstream says how far behind it is: in records, and in the
// time between its newest record and the upstream's; behind a fence too (a takeover), whose
// time is that of the records before it.
func TestUpstreamLag(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	up := eventlog.NewMemUpstream()
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	leader, err := eventlog.Open("/a", eventlog.Options{FS: fs, Upstream: up, Lead: true, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leader.Append(ctx, eventlogtest.Event("job/x", 1)); err != nil {
		t.Fatal(err)
	}
	copied := openOn(t, up, fs, "/b", false)
	if lag, err := copied.UpstreamLag(ctx); err != nil || lag != (eventlog.Lag{}) {
		t.Fatalf("a copy that holds everything: %+v %v", lag, err)
	}
	for i := range 3 {
		now = now.Add(2 * time.Second)
		if _, err := leader.Append(ctx, eventlogtest.Event("job/x", i), eventlogtest.Event("job/y", i)); err != nil {
			t.Fatal(err)
		}
	}
	want := eventlog.Lag{Records: 6, Behind: 6 * time.Second}
	if lag, err := copied.UpstreamLag(ctx); err != nil || lag != want {
		t.Fatalf("lag %+v %v, want %+v", lag, err, want)
	}
	_ = leader.Close()
	openOn(t, up, fs, "/c", true) // a takeover: its fence is the last message
	if lag, err := copied.UpstreamLag(ctx); err != nil || lag != want {
		t.Fatalf("behind a fence: lag %+v %v, want %+v", lag, err, want)
	}
}

// flakyReads is an upstream whose first reads fail after copying at most one message, as a
// JetStream read does when its connection drops or its process was paused past a deadline.
type flakyReads struct {
	*eventlog.MemUpstream
	mu    sync.Mutex
	fails int
}

func (u *flakyReads) Read(ctx context.Context, from uint64, visit func(uint64, []byte) error) error {
	u.mu.Lock()
	fail := u.fails > 0
	u.fails--
	u.mu.Unlock()
	if !fail {
		return u.MemUpstream.Read(ctx, from, visit)
	}
	if m, err := u.MemUpstream.Get(ctx, from); err == nil {
		if err := visit(from, m); err != nil {
			return err
		}
	}
	return context.DeadlineExceeded
}

// A follower whose upstream reads fail goes on reading from its next message: a lost
// connection or a paused process does not end a standby (it once stopped the server).
func TestFollowReadsAgainAfterTheUpstreamFails(t *testing.T) {
	ctx := context.Background()
	up := &flakyReads{MemUpstream: eventlog.NewMemUpstream()}
	fs := vfs.NewMem()
	leader := openOn(t, up.MemUpstream, fs, "/a", true)
	follower := openOn(t, up, fs, "/b", false)
	for i := range 4 {
		if _, err := leader.Append(ctx, eventlogtest.Event("job/x", i)); err != nil {
			t.Fatal(err)
		}
	}
	up.fails = 3
	fctx, stop := context.WithCancel(ctx)
	followed := make(chan error, 1)
	go func() { followed <- follower.Follow(fctx) }()
	sub := follower.Subscribe(1)
	var seqs []uint64
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for len(seqs) < 4 {
		recs, err := sub.Next(wait, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			seqs = append(seqs, r.Seq)
		}
	}
	if h := follower.Head(); h != leader.Head() {
		t.Fatalf("the follower is at %+v after failed reads, the leader at %+v", h, leader.Head())
	}
	eventlogtest.MustVerify(t, follower)
	stop()
	if err := <-followed; err != nil {
		t.Fatalf("Follow: %v", err)
	}
}

// A message the copy cannot take still ends Follow: that is the copy's failure, not the
// upstream's read, and reading it again would not help.
func TestFollowStopsAtABrokenChain(t *testing.T) {
	ctx := context.Background()
	up := eventlog.NewMemUpstream()
	fs := vfs.NewMem()
	leader := openOn(t, up, fs, "/a", true)
	if _, err := leader.Append(ctx, eventlogtest.Event("job/x", 1)); err != nil {
		t.Fatal(err)
	}
	follower := openOn(t, up, fs, "/b", false)
	raw, err := up.Get(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), raw...)
	bad[len(bad)-1] ^= 1
	if _, err := up.Publish(2, bad)(); err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithTimeout(ctx, time.Minute) // a Follow that read again for ever returns nil here
	defer cancel()
	if err := follower.Follow(fctx); err == nil || fctx.Err() != nil {
		t.Fatalf("Follow over a damaged message: %v, want its error at once", err)
	} else {
		t.Logf("Follow: %v", err)
	}
}
