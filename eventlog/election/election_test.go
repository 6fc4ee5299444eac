package election

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func want(t *testing.T, got Action, kind Kind) {
	t.Helper()
	if got.Kind != kind {
		t.Fatalf("action %+v, want kind %d", got, kind)
	}
}

// A renewal whose answer was lost landed: the next one is refused, the key read back holds this
// leader's own value, and it goes on at the key's revision.
func TestHolderKeepsTheLeadThroughALostAnswer(t *testing.T) {
	h := NewHolder(t0, time.Second, []byte("a"), 5)
	want(t, h.Tick(at(250)), Renew)
	want(t, h.Done(at(260), Outcome{Kind: Unanswered}), Probe) // the answer was lost
	want(t, h.Done(at(270), Outcome{Kind: Answered, At: at(270)}), None)
	a := h.Tick(at(500))
	if a.Kind != Renew || a.Rev != 5 {
		t.Fatalf("%+v, want a renewal at revision 5", a)
	}
	want(t, h.Done(at(510), Outcome{Kind: Refused}), Read)
	want(t, h.Done(at(520), Outcome{Kind: Found, Value: []byte("a"), Rev: 6}), None)
	if a := h.Tick(at(750)); a.Kind != Renew || a.Rev != 6 {
		t.Fatalf("%+v, want a renewal at revision 6", a)
	}
}

// A bucket that does not answer, while the stream does, stops nobody; a key that expired meanwhile
// is taken back; another server's key stops the leader.
func TestHolderThroughAnUnavailableBucket(t *testing.T) {
	h := NewHolder(t0, time.Second, []byte("a"), 5)
	for ms := 250; ms <= 5000; ms += 250 {
		want(t, h.Tick(at(ms)), Renew)
		want(t, h.Done(at(ms+100), Outcome{Kind: Unanswered}), Probe)
		want(t, h.Done(at(ms+110), Outcome{Kind: Answered, At: at(ms + 110)}), None)
		if !h.Healthy(at(ms + 120)) {
			t.Fatalf("unhealthy at %dms while the stream answers", ms)
		}
	}
	want(t, h.Tick(at(5250)), Renew)
	want(t, h.Done(at(5260), Outcome{Kind: Refused}), Read)
	want(t, h.Done(at(5270), Outcome{Kind: Absent}), Create)
	want(t, h.Done(at(5280), Outcome{Kind: Created, Rev: 9}), None)
	if a := h.Tick(at(5500)); a.Rev != 9 {
		t.Fatalf("%+v, want a renewal at revision 9", a)
	}
	want(t, h.Done(at(5510), Outcome{Kind: Refused}), Read)
	if a := h.Done(at(5520), Outcome{Kind: Found, Value: []byte("b"), Rev: 10}); a.Kind != Stop || a.Reason != ReasonTaken {
		t.Fatalf("%+v, want a stop: another server holds the key", a)
	}
}

// While JetStream elects leaders of its own, nothing of it answers but the NATS server does: the
// leader waits, healthy, for Patience, and stops only then.
func TestHolderWaitsForJetStream(t *testing.T) {
	h := NewHolder(t0, time.Second, []byte("a"), 5)
	ms := 250
	for ; time.Duration(ms)*time.Millisecond <= Patience; ms += 250 {
		want(t, h.Tick(at(ms)), Renew)
		want(t, h.Done(at(ms+10), Outcome{Kind: Unanswered}), Probe)
		want(t, h.Done(at(ms+20), Outcome{Kind: Answered, At: t0}), None) // the stream last answered at 0
		if !h.Healthy(at(ms + 30)) {
			t.Fatalf("unhealthy at %dms while its NATS server answers", ms)
		}
	}
	if a := h.Tick(at(ms)); a.Kind != Stop || a.Reason != ReasonUnanswered {
		t.Fatalf("%+v, want a stop: JetStream did not answer", a)
	}
}

// A leader that its NATS server does not answer stops after a TTL, and says it is unhealthy
// after half, even when each unanswered request takes its whole timeout, and ticks come late.
func TestHolderCutOff(t *testing.T) {
	h := NewHolder(t0, time.Second, []byte("a"), 5)
	ms := 250
	for ; ms <= 1000; ms += 501 { // each round takes two timeouts; the next tick comes at once
		want(t, h.Tick(at(ms)), Renew)
		want(t, h.Done(at(ms+250), Outcome{Kind: Unanswered}), Probe)
		want(t, h.Done(at(ms+500), Outcome{Kind: Unanswered}), None)
	}
	if h.Healthy(at(600)) {
		t.Fatal("healthy after half a TTL without an answer")
	}
	if a := h.Tick(at(ms)); a.Kind != Stop || a.Reason != ReasonCutOff {
		t.Fatalf("%+v, want a stop: cut off", a)
	}
}

// A standby takes a free key at once if no one led, asks the last leader first otherwise, and
// holds off while that leader says it still leads.
func TestCandidate(t *testing.T) {
	c := NewCandidate(t0, time.Second, []byte("b"))
	want(t, c.Tick(at(0)), Read)
	want(t, c.Done(at(1), Outcome{Kind: Absent}), Create)
	want(t, c.Done(at(2), Outcome{Kind: Exists}), Read)
	want(t, c.Done(at(3), Outcome{Kind: Found, Value: []byte("a")}), None)
	if string(c.Leader(at(4))) != "a" {
		t.Fatalf("leader %q", c.Leader(at(4)))
	}
	a := c.Done(at(5), Outcome{Kind: Absent})
	if a.Kind != Check || string(a.Value) != "a" {
		t.Fatalf("%+v, want a check of a", a)
	}
	if l := c.Leader(at(5)); l != nil {
		t.Fatalf("names %q while the key is absent", l)
	}
	want(t, c.Done(at(6), Outcome{Kind: Leads}), None)
	want(t, c.Done(at(7), Outcome{Kind: Absent}), Check)
	want(t, c.Done(at(8), Outcome{Kind: NotLeading}), Create)
	if a := c.Done(at(9), Outcome{Kind: Created, Rev: 3}); a.Kind != Lead || a.Rev != 3 {
		t.Fatalf("%+v, want to lead at revision 3", a)
	}
}

// A standby that was paused names no leader, from the moment it goes on (before its first tick
// runs) until it has read the key again: the leader it last saw may have died meanwhile. An
// answer that comes out of the pause answered a read sent before it, and does not count.
func TestCandidateNamesNoOneAfterAPause(t *testing.T) {
	c := NewCandidate(t0, time.Second, []byte("b"))
	want(t, c.Tick(at(100)), Read)
	want(t, c.Done(at(101), Outcome{Kind: Found, Value: []byte("a")}), None)
	want(t, c.Tick(at(200)), Read) // paused with this read in flight, for three seconds
	if l := c.Leader(at(3200)); l != nil {
		t.Fatalf("names %q on going on, before any tick", l)
	}
	want(t, c.Done(at(3201), Outcome{Kind: Found, Value: []byte("a")}), None) // the read sent before the pause
	if l := c.Leader(at(3202)); l != nil {
		t.Fatalf("names %q from a read sent before the pause", l)
	}
	want(t, c.Tick(at(3210)), Read)
	if l := c.Leader(at(3211)); l != nil {
		t.Fatalf("names %q before the key was read again", l)
	}
	want(t, c.Done(at(3212), Outcome{Kind: Found, Value: []byte("c")}), None)
	if l := c.Leader(at(3213)); string(l) != "c" {
		t.Fatalf("names %q, want the leader the key holds now, c", l)
	}
}

// A leader that was paused does not say it leads (Healthy) from the moment it goes on, before
// its first tick, until the bucket, asked after the pause, says the key is its own: not while
// its renewal is in flight, not on an answer to a request sent before the pause, not on a
// refusal. If another server took the key, it never says it leads again.
func TestHolderUnsureAfterAPause(t *testing.T) {
	for _, taken := range []bool{false, true} {
		h := NewHolder(t0, time.Second, []byte("a"), 5)
		want(t, h.Tick(at(250)), Renew)
		want(t, h.Done(at(260), Outcome{Kind: Updated, Rev: 6}), None)
		want(t, h.Tick(at(500)), Renew) // paused for three seconds with this renewal in flight
		if h.Healthy(at(3500)) {
			t.Fatal("healthy on going on, before any tick")
		}
		want(t, h.Done(at(3501), Outcome{Kind: Updated, Rev: 7}), None) // written before the pause
		if h.Healthy(at(3502)) {
			t.Fatal("healthy on an answer to a renewal sent before the pause")
		}
		want(t, h.Tick(at(3510)), Renew)
		if h.Healthy(at(3511)) {
			t.Fatal("healthy while its first renewal after the pause is in flight")
		}
		if !taken {
			want(t, h.Done(at(3520), Outcome{Kind: Updated, Rev: 8}), None)
			if !h.Healthy(at(3521)) {
				t.Fatal("unhealthy after a renewal after the pause")
			}
			continue
		}
		want(t, h.Done(at(3520), Outcome{Kind: Refused}), Read)
		if h.Healthy(at(3521)) {
			t.Fatal("healthy after its renewal was refused")
		}
		if a := h.Done(at(3530), Outcome{Kind: Found, Value: []byte("b"), Rev: 9}); a.Kind != Stop {
			t.Fatalf("%+v, want a stop", a)
		}
	}
}

// A leader that was not paused goes on saying it leads through what the bucket's own election
// looks like (renewals unanswered while NATS answers, a renewal refused whose answer was lost,
// read back as its own): a standby that asks holds off, and the lead does not move.
func TestHolderSaysItLeadsThroughTheBucketsElection(t *testing.T) {
	h := NewHolder(t0, time.Second, []byte("a"), 5)
	ms := 250
	for ; ms <= 2000; ms += 250 {
		want(t, h.Tick(at(ms)), Renew)
		want(t, h.Done(at(ms+200), Outcome{Kind: Unanswered}), Probe)
		want(t, h.Done(at(ms+210), Outcome{Kind: Answered, At: at(ms + 210)}), None)
		if !h.Healthy(at(ms + 220)) {
			t.Fatalf("unhealthy at %dms while NATS answers", ms)
		}
	}
	want(t, h.Tick(at(ms)), Renew)
	want(t, h.Done(at(ms+10), Outcome{Kind: Refused}), Read)
	if !h.Healthy(at(ms + 11)) {
		t.Fatal("unhealthy after a refused renewal, before the key says whose it is")
	}
	want(t, h.Done(at(ms+20), Outcome{Kind: Found, Value: []byte("a"), Rev: 9}), None)
	if !h.Healthy(at(ms + 21)) {
		t.Fatal("unhealthy after it read its own claim")
	}
}

// A leader whose key expired while it was paused stops rather than take the key back: a server
// that took over meanwhile may have let its own key lapse too (its bucket requests lost), and
// would go on saying it leads beside it. One that was not paused takes an expired key back.
func TestHolderStopsWhenItsKeyLapsedInAPause(t *testing.T) {
	h := NewHolder(t0, time.Second, []byte("a"), 5)
	want(t, h.Tick(at(250)), Renew)
	want(t, h.Done(at(260), Outcome{Kind: Updated, Rev: 6}), None)
	want(t, h.Tick(at(3000)), Renew) // paused
	want(t, h.Done(at(3010), Outcome{Kind: Refused}), Read)
	if a := h.Done(at(3020), Outcome{Kind: Absent}); a.Kind != Stop || a.Reason != ReasonLapsed {
		t.Fatalf("%+v, want a stop: the key lapsed in the pause", a)
	}
	h = NewHolder(t0, time.Second, []byte("a"), 5)
	want(t, h.Tick(at(250)), Renew)
	want(t, h.Done(at(260), Outcome{Kind: Refused}), Read)
	want(t, h.Done(at(270), Outcome{Kind: Absent}), Create)
	want(t, h.Done(at(280), Outcome{Kind: Created, Rev: 7}), None)
	if !h.Healthy(at(281)) {
		t.Fatal("unhealthy after it took its expired key back, unpaused")
	}
}

// A leader paused past its TTL asks before it judges: its first tick after the pause renews,
// and the key it reads back says whether another server took over.
func TestHolderAfterAPause(t *testing.T) {
	h := NewHolder(t0, time.Second, []byte("a"), 5)
	want(t, h.Tick(at(250)), Renew)
	want(t, h.Done(at(260), Outcome{Kind: Updated, Rev: 6}), None)
	want(t, h.Tick(at(3500)), Renew) // paused for three seconds
	want(t, h.Done(at(3510), Outcome{Kind: Updated, Rev: 7}), None)
	want(t, h.Tick(at(7000)), Renew) // and again; meanwhile another server took the key
	want(t, h.Done(at(7010), Outcome{Kind: Refused}), Read)
	if a := h.Done(at(7020), Outcome{Kind: Found, Value: []byte("b"), Rev: 9}); a.Kind != Stop || a.Reason != ReasonTaken {
		t.Fatalf("%+v, want a stop: another server holds the key", a)
	}
}

// Reads and refusals, which a bucket's leader that lost its quorum goes on answering for a
// while, do not count as JetStream answering: only writes and a stream with its quorum do.
func TestHolderCountsOnlyWritesAsJetStream(t *testing.T) {
	h := NewHolder(t0, time.Second, []byte("a"), 5)
	ms := 250
	for ; time.Duration(ms)*time.Millisecond <= Patience; ms += 250 {
		want(t, h.Tick(at(ms)), Renew)
		want(t, h.Done(at(ms+10), Outcome{Kind: Refused}), Read)
		want(t, h.Done(at(ms+20), Outcome{Kind: Absent}), Create)
		want(t, h.Done(at(ms+30), Outcome{Kind: Unanswered}), Probe)
		want(t, h.Done(at(ms+40), Outcome{Kind: Answered, At: t0}), None)
	}
	if a := h.Tick(at(ms)); a.Kind != Stop || a.Reason != ReasonUnanswered {
		t.Fatalf("%+v, want a stop: JetStream took no write", a)
	}
}
