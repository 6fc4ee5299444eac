package policy

import (
	"slices"
	"testing"
	"time"

	"github.com/tetherhq/tether/transport/wire"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestAfter: given a result's sends so far, when an answer comes, then this step.
func TestAfter(t *testing.T) {
	valid := t0.Add(time.Minute)
	for _, c := range []struct {
		name string
		a    Answer
		kind string
		want Decision
	}{
		{"taken", Answer{}, wire.FrameComplete, Decision{Step: Forget}},
		{"no answer", Answer{NoAnswer: true}, wire.FrameComplete, Decision{Step: SendAgain, Tries: 1}},
		{"unavailable", Answer{Code: "UNAVAILABLE", Status: 503}, wire.FrameFail, Decision{Step: SendAgain, Tries: 1}},
		{"a standby", Answer{Code: wire.CodeStandby, Status: 503}, wire.FrameRelease, Decision{Step: SendAgain, Tries: 1}},
		{"a proxy's 502", Answer{Code: "HTTP_502", Status: 502}, wire.FrameComplete, Decision{Step: SendAgain, Tries: 1}},
		{"a proxy's 404", Answer{Code: "HTTP_404", Status: 404}, wire.FrameComplete, Decision{Step: Forget}},
		{"lease mismatch", Answer{Code: "LEASE_MISMATCH", Status: 409}, wire.FrameComplete, Decision{Step: Forget}},
		{"job not found", Answer{Code: "JOB_NOT_FOUND", Status: 404}, wire.FrameComplete, Decision{Step: Forget}},
		{"too large", Answer{Code: "PAYLOAD_TOO_LARGE", Status: 413}, wire.FrameComplete, Decision{Step: SendFailure, Failure: Refusal{Code: "output_too_large"}}},
		{"invalid", Answer{Code: "INVALID_ARGUMENT", Status: 400}, wire.FrameComplete, Decision{Step: SendFailure, Failure: Refusal{Code: "output_refused"}}},
		{"not JSON", Answer{Code: wire.CodeInvalidJSON, Status: 400}, wire.FrameComplete, Decision{Step: SendFailure, Failure: Refusal{Code: "output_refused"}}},
		{"bad signature", Answer{Code: "SIGNATURE_INVALID", Status: 400}, wire.FrameComplete,
			Decision{Step: SendFailure, Failure: Refusal{Code: "signature_invalid", Retryable: true}}},
		{"a failure refused for what it is", Answer{Code: "INVALID_ARGUMENT", Status: 400}, wire.FrameFail, Decision{Step: Forget}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var s Sends
			if got := s.After(c.a, c.kind, t0, valid); got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestOneMoreSend: a result that may pass is sent again while its lease may be valid, once
// more after that, and then given up.
func TestOneMoreSend(t *testing.T) {
	var s Sends
	lost := Answer{NoAnswer: true}
	valid := t0.Add(time.Minute)
	var steps []Step
	for _, now := range []time.Time{t0, t0.Add(30 * time.Second), valid, valid.Add(time.Second), valid.Add(2 * time.Second)} {
		steps = append(steps, s.After(lost, wire.FrameComplete, now, valid).Step)
	}
	if want := []Step{SendAgain, SendAgain, SendAgain, SendAgain, GiveUp}; !slices.Equal(steps, want) {
		t.Errorf("steps %v, want %v", steps, want)
	}
	// A heartbeat that confirms the lease meanwhile moves the limit on.
	var r Sends
	r.After(lost, wire.FrameComplete, valid.Add(time.Second), valid)
	if d := r.After(lost, wire.FrameComplete, valid.Add(2*time.Second), valid); d.Step != GiveUp {
		t.Errorf("after the one more send: %+v", d)
	}
	var q Sends
	q.After(lost, wire.FrameComplete, t0, valid)
	if d := q.After(Answer{}, wire.FrameComplete, valid.Add(time.Hour), valid); d.Step != Forget {
		t.Errorf("taken at last: %+v", d)
	}
}

func TestBackoff(t *testing.T) {
	none := func(time.Duration) time.Duration { return 0 }
	full := func(d time.Duration) time.Duration { return d }
	for _, c := range []struct {
		n          int
		lo, hi     time.Duration
		least, top time.Duration
	}{
		{1, 200 * time.Millisecond, 10 * time.Second, 100 * time.Millisecond, 200 * time.Millisecond},
		{3, 200 * time.Millisecond, 10 * time.Second, 400 * time.Millisecond, 800 * time.Millisecond},
		{10, 200 * time.Millisecond, 10 * time.Second, 5 * time.Second, 10 * time.Second},
		{64, 200 * time.Millisecond, 10 * time.Second, 5 * time.Second, 10 * time.Second},
	} {
		if lo, hi := Backoff(c.n, c.lo, c.hi, none), Backoff(c.n, c.lo, c.hi, full); lo != c.least || hi != c.top {
			t.Errorf("Backoff(%d): %s..%s, want %s..%s", c.n, lo, hi, c.least, c.top)
		}
	}
}

func TestLease(t *testing.T) {
	later, earlier := t0.Add(20*time.Second), t0.Add(-time.Second)
	if ttl := LeaseTTL(&later, t0); ttl != 20*time.Second {
		t.Errorf("LeaseTTL = %s", ttl)
	}
	if LeaseTTL(&earlier, t0) != LeaseTTLDefault || LeaseTTL(nil, t0) != LeaseTTLDefault {
		t.Error("a lease past or unsaid is not given the default TTL")
	}
	if got := MayBeValid(t0, 20*time.Second); !got.Equal(t0.Add(40 * time.Second)) {
		t.Errorf("MayBeValid = %s", got)
	}
}

func TestHeartbeatEvery(t *testing.T) {
	if got := HeartbeatEvery(10*time.Second, slices.Values([]time.Duration{0, 4 * time.Second, 7 * time.Second})); got != 4*time.Second {
		t.Errorf("HeartbeatEvery = %s", got)
	}
	if got := HeartbeatEvery(10*time.Second, slices.Values([]time.Duration{0, 20 * time.Second})); got != 10*time.Second {
		t.Errorf("HeartbeatEvery with no lease in need = %s", got)
	}
}
