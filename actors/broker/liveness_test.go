package broker_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
)

// ended waits until the session's last frame has come.
func ended(t *testing.T, s *broker.Conn) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case _, ok := <-s.Frames:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the session did not end within 30 s")
		}
	}
}

// A fleet that churns leaves nothing in the broker's liveness: a worker that connected, was
// heard from and went is forgotten when its session ends; one that went while holding a lease
// its heartbeats extended is kept (its lease's expiry is known from it) until it reports the
// job's end. (Every worker ever heard from stayed, for ever.)
func TestLivenessForgetsWorkersGone(t *testing.T) {
	t.Parallel()
	b := open(t, broker.Config{})
	defer b.Close()
	for range 20 {
		s := worker(t, b, 1)
		if _, err := s.Heartbeat(ctx(t), nil); err != nil {
			t.Fatal(err)
		}
		if n := b.LivenessEntries(); n != 1 {
			t.Fatalf("%d entries with one worker connected", n)
		}
		s.Close()
		ended(t, s)
	}
	if n := b.LivenessEntries(); n != 0 {
		t.Fatalf("%d entries once every worker went, want 0", n)
	}

	if _, _, err := b.Submit(ctx(t), "acme", "", actors.JobSpec{Queue: "q", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	s := worker(t, b, 1)
	s.Credit(1)
	a := next(t, s)
	if _, err := s.Heartbeat(ctx(t), []string{a.LeaseID}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	ended(t, s)
	if n := b.LivenessEntries(); n != 1 {
		t.Fatalf("%d entries for a worker gone with a lease its heartbeat extended, want 1", n)
	}
	if _, err := b.Report(ctx(t), actors.Complete{WorkerID: s.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	if n := b.LivenessEntries(); n != 0 {
		t.Fatalf("%d entries once the worker's last job is done, want 0", n)
	}
}
