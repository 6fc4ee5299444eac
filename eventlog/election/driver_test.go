package election

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock runs timers when the test advances it, in order, never on its own.
type fakeClock struct {
	now    time.Time
	timers []fakeTimer
	seq    int
}

type fakeTimer struct {
	at  time.Time
	seq int
	f   func()
}

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) AfterFunc(d time.Duration, f func()) {
	c.seq++
	c.timers = append(c.timers, fakeTimer{at: c.now.Add(d), seq: c.seq, f: f})
}

// advance moves the clock d on, running each timer that falls due at its time.
func (c *fakeClock) advance(d time.Duration) {
	until := c.now.Add(d)
	for {
		i := -1
		for j, t := range c.timers {
			if !t.at.After(until) && (i < 0 || t.at.Before(c.timers[i].at) || t.at.Equal(c.timers[i].at) && t.seq < c.timers[i].seq) {
				i = j
			}
		}
		if i < 0 {
			break
		}
		t := c.timers[i]
		c.timers = slices.Delete(c.timers, i, i+1)
		c.now = t.at
		t.f()
	}
	c.now = until
}

// fakeBucket holds each request until the test answers it.
type fakeBucket struct {
	asked []fakeRequest
}

type fakeRequest struct {
	a    Action
	done func(Outcome)
}

func (b *fakeBucket) Do(a Action, done func(Outcome)) {
	b.asked = append(b.asked, fakeRequest{a, done})
}

// world is a Driver on a fake clock and a fake bucket, with what it told its server.
type world struct {
	t       *testing.T
	clock   *fakeClock
	bucket  *fakeBucket
	checks  []fakeRequest
	won     []uint64
	deposed []string
	last    Outcome
	d       *Driver
}

func start(t *testing.T, value string) *world {
	w := &world{t: t, clock: &fakeClock{now: t0}, bucket: &fakeBucket{}}
	w.d = Start(Config{
		TTL: time.Second, Value: []byte(value), Clock: w.clock, Bucket: w.bucket,
		Check: func(v []byte, done func(Outcome)) {
			w.checks = append(w.checks, fakeRequest{Action{Kind: Check, Value: v}, done})
		},
		Won: func(rev uint64) { w.won = append(w.won, rev) },
		Deposed: func(reason string, last Outcome) {
			w.deposed, w.last = append(w.deposed, reason), last
		},
	})
	return w
}

// answer answers the oldest request, which must be of kind, with o.
func (w *world) answer(kind Kind, o Outcome) {
	w.t.Helper()
	if len(w.bucket.asked) == 0 {
		w.t.Fatalf("no request to the bucket; want a %d", kind)
	}
	r := w.bucket.asked[0]
	w.bucket.asked = w.bucket.asked[1:]
	if r.a.Kind != kind {
		w.t.Fatalf("request %+v, want a %d", r.a, kind)
	}
	r.done(o)
}

// idle checks that nothing waits for an answer.
func (w *world) idle() {
	w.t.Helper()
	if len(w.bucket.asked) > 0 || len(w.checks) > 0 {
		w.t.Fatalf("requests in flight: %+v, checks %d", w.bucket.asked, len(w.checks))
	}
}

// win takes a free key at revision rev.
func (w *world) win(rev uint64) {
	w.t.Helper()
	w.answer(Read, Outcome{Kind: Absent})
	w.answer(Create, Outcome{Kind: Created, Rev: rev})
	if !slices.Equal(w.won, []uint64{rev}) {
		w.t.Fatalf("won %v, want [%d]", w.won, rev)
	}
	w.idle()
}

// A standby looks at the key at once and takes it when it is free and no one led; its renewals
// start with the lead, at the revision it created.
func TestDriverCampaignsForAFreeKey(t *testing.T) {
	w := start(t, "a")
	w.win(4)
	w.clock.advance(249 * time.Millisecond)
	w.idle()
	w.clock.advance(time.Millisecond)
	if r := w.bucket.asked; len(r) != 1 || r[0].a.Kind != Renew || r[0].a.Rev != 4 {
		t.Fatalf("requests %+v, want a renewal at revision 4", r)
	}
	w.answer(Renew, Outcome{Kind: Updated, Rev: 5})
	if !w.d.Healthy() {
		t.Fatal("a leader whose renewal landed is not healthy")
	}
}

// A standby that saw a leader asks it, once the key expired, whether it still leads, and holds
// off while it says so; it takes the key once that leader does not answer that it leads.
func TestDriverWaitsForTheLastLeader(t *testing.T) {
	w := start(t, "b")
	w.answer(Read, Outcome{Kind: Found, Value: []byte("a"), Rev: 3})
	w.idle()
	if string(w.d.Leader()) != "a" {
		t.Fatalf("leader %q, want a", w.d.Leader())
	}
	w.clock.advance(Every)
	w.answer(Read, Outcome{Kind: Absent})
	if len(w.checks) != 1 || string(w.checks[0].a.Value) != "a" {
		t.Fatalf("checks %+v, want one of a", w.checks)
	}
	// The check is slow: the ticks that come meanwhile ask nothing more.
	w.clock.advance(3 * Every)
	w.idle0()
	w.checks[0].done(Outcome{Kind: Leads})
	w.checks = nil
	w.idle()
	if len(w.won) > 0 {
		t.Fatal("took the key while its last leader says it leads")
	}
	w.clock.advance(Every)
	w.answer(Read, Outcome{Kind: Absent})
	w.checks[0].done(Outcome{Kind: NotLeading})
	w.checks = nil
	w.answer(Create, Outcome{Kind: Created, Rev: 7})
	if !slices.Equal(w.won, []uint64{7}) {
		t.Fatalf("won %v, want [7]", w.won)
	}
}

// idle0 checks that only the one check is in flight.
func (w *world) idle0() {
	w.t.Helper()
	if len(w.bucket.asked) > 0 || len(w.checks) != 1 {
		w.t.Fatalf("requests in flight: %+v, checks %d; want only the check", w.bucket.asked, len(w.checks))
	}
}

// A renewal that landed and whose answer was lost: the bucket refuses the next, the key read
// back holds this leader's claim, and it goes on leading at the key's revision.
func TestDriverKeepsLeadingThroughALostRenewalAnswer(t *testing.T) {
	w := start(t, "a")
	unrenewed := 0
	w.d.cfg.Unrenewed = func() { unrenewed++ }
	w.win(5)
	w.clock.advance(250 * time.Millisecond)
	w.answer(Renew, Outcome{Kind: Unanswered}) // it landed, at revision 6; the answer was lost
	w.answer(Probe, Outcome{Kind: Answered, At: w.clock.Now()})
	w.idle()
	if unrenewed != 1 {
		t.Fatalf("Unrenewed called %d times, want once", unrenewed)
	}
	w.clock.advance(250 * time.Millisecond)
	w.answer(Renew, Outcome{Kind: Refused})
	w.answer(Read, Outcome{Kind: Found, Value: []byte("a"), Rev: 6})
	w.idle()
	w.clock.advance(250 * time.Millisecond)
	if r := w.bucket.asked; len(r) != 1 || r[0].a.Rev != 6 {
		t.Fatalf("requests %+v, want a renewal at revision 6", r)
	}
	w.answer(Renew, Outcome{Kind: Updated, Rev: 7})
	if len(w.deposed) > 0 || !w.d.Healthy() {
		t.Fatalf("deposed %v, healthy %v; want a healthy leader", w.deposed, w.d.Healthy())
	}
}

// A bucket that answers nothing for many TTLs, while the stream does, deposes nobody.
func TestDriverKeepsLeadingThroughAnUnavailableBucket(t *testing.T) {
	w := start(t, "a")
	w.win(5)
	for range 40 { // ten TTLs
		w.clock.advance(250 * time.Millisecond)
		w.answer(Renew, Outcome{Kind: Unanswered})
		w.answer(Probe, Outcome{Kind: Answered, At: w.clock.Now()})
		w.idle()
		if !w.d.Healthy() {
			t.Fatalf("unhealthy at %s while the stream answers", w.clock.Now().Sub(t0))
		}
	}
	if len(w.deposed) > 0 {
		t.Fatalf("deposed: %v", w.deposed)
	}
	if rev, held := w.d.Close(); !held || rev != 5 {
		t.Fatalf("Close: %d, %v; want the key held at revision 5", rev, held)
	}
}

// A leader stops once the key holds another server's claim, says whose, and asks nothing more.
func TestDriverStopsWhenAnotherHoldsTheKey(t *testing.T) {
	w := start(t, "a")
	w.win(5)
	w.clock.advance(250 * time.Millisecond)
	w.answer(Renew, Outcome{Kind: Refused})
	w.answer(Read, Outcome{Kind: Found, Value: []byte("b"), Rev: 8})
	if !slices.Equal(w.deposed, []string{ReasonTaken}) || string(w.last.Value) != "b" {
		t.Fatalf("deposed %v (last %+v), want once, for %q, seeing b", w.deposed, w.last, ReasonTaken)
	}
	w.clock.advance(10 * time.Second)
	w.idle()
	if w.d.Healthy() {
		t.Fatal("a deposed leader says it is healthy")
	}
	if _, held := w.d.Close(); held {
		t.Fatal("a deposed leader would resign another's key")
	}
}

// A leader whose append the stream refused stops, once, even with a renewal in flight; the
// renewal's answer, when it comes, changes nothing.
func TestDriverStopsWhenTheStreamRefusesAnAppend(t *testing.T) {
	w := start(t, "a")
	w.win(5)
	w.clock.advance(250 * time.Millisecond)
	w.d.StreamRefused()
	w.d.StreamRefused()
	if !slices.Equal(w.deposed, []string{ReasonFenced}) {
		t.Fatalf("deposed %v, want once, for %q", w.deposed, ReasonFenced)
	}
	w.answer(Renew, Outcome{Kind: Refused})
	w.clock.advance(10 * time.Second)
	w.idle()
	if len(w.deposed) != 1 {
		t.Fatalf("deposed %v, want once", w.deposed)
	}
	if _, held := w.d.Close(); held {
		t.Fatal("a fenced leader would resign the key")
	}
}

// A standby that is closed asks nothing more, and an answer that comes after changes nothing.
func TestDriverClose(t *testing.T) {
	w := start(t, "a")
	if _, held := w.d.Close(); held {
		t.Fatal("a standby holds nothing")
	}
	w.answer(Read, Outcome{Kind: Absent})
	w.clock.advance(time.Second)
	w.idle()
	if len(w.won) > 0 {
		t.Fatal("a closed standby took the key")
	}
}

// raceClock fires its timers when the test says, each on a goroutine of its own, as
// time.AfterFunc does.
type raceClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []func()
	wg     sync.WaitGroup
}

func (c *raceClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *raceClock) AfterFunc(_ time.Duration, f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timers = append(c.timers, f)
}

// fire moves the clock d on and runs every timer set so far, concurrently.
func (c *raceClock) fire(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	due := c.timers
	c.timers = nil
	c.mu.Unlock()
	for _, f := range due {
		c.wg.Go(f)
	}
}

// raceBucket answers on a goroutine of its own, as the server's does: the key is free, and
// every write lands.
type raceBucket struct {
	wg  *sync.WaitGroup
	rev atomic.Uint64
}

func (b *raceBucket) Do(a Action, done func(Outcome)) {
	b.wg.Go(func() {
		switch a.Kind {
		case Read:
			done(Outcome{Kind: Absent})
		case Create:
			done(Outcome{Kind: Created, Rev: b.rev.Add(1)})
		case Renew:
			done(Outcome{Kind: Updated, Rev: b.rev.Add(1)})
		default:
			done(Outcome{Kind: Unanswered})
		}
	})
}

// The callbacks come on goroutines of their own, as they do in the server, while its /readyz
// asks whether it is healthy: run with -race.
func TestDriverOnGoroutines(t *testing.T) {
	clock := &raceClock{now: t0}
	var won, deposed atomic.Int32
	d := Start(Config{
		TTL: time.Second, Value: []byte("a"), Clock: clock, Bucket: &raceBucket{wg: &clock.wg},
		Check:   func(_ []byte, done func(Outcome)) { done(Outcome{Kind: NotLeading}) },
		Won:     func(uint64) { won.Add(1) },
		Deposed: func(string, Outcome) { deposed.Add(1) },
	})
	for range 50 {
		clock.fire(100 * time.Millisecond)
		_, _ = d.Healthy(), d.Leader()
		clock.wg.Wait()
	}
	if won.Load() != 1 || deposed.Load() != 0 || !d.Healthy() {
		t.Fatalf("won %d times, deposed %d, healthy %v; want a healthy leader that won once", won.Load(), deposed.Load(), d.Healthy())
	}
	if _, held := d.Close(); !held {
		t.Fatal("the leader does not hold the key")
	}
}
