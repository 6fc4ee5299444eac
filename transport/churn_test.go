package transport_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/transport"
)

// A fleet that churns leaves nothing in the long-poll endpoints: workers that polled, heartbeat
// and went are forgotten once their sessions end (three heartbeat intervals of silence), and so
// is one revoked while it polled. (Every worker that ever polled kept an entry, for ever.)
func TestLongPollWorkersGoneLeaveNothing(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	for range 10 {
		reg := h.register("", nil, 1)
		if st, _ := h.raw("POST", "/v1/worker/lease", reg.WorkerToken, []byte(`{"max":1,"wait_seconds":0}`)); st != http.StatusNoContent {
			t.Fatalf("a poll with nothing to lease: %d", st)
		}
		if st, body := h.raw("POST", "/v1/worker/heartbeat", reg.WorkerToken, []byte(`{"leases":[]}`)); st != http.StatusOK {
			t.Fatalf("a heartbeat: %d %v", st, body)
		}
	}
	if n := h.api.PollSessions(); n != 10 {
		t.Fatalf("%d entries with 10 workers polling, want 10", n)
	}
	h.clock.elapse(actors.HeartbeatInterval*actors.HeartbeatMissesMax + time.Second)
	waitFor(t, "every silent worker's entry to go", func() bool { return h.api.PollSessions() == 0 })

	reg := h.register("", nil, 1)
	polled := make(chan int, 1)
	go func() {
		st, _ := h.raw("POST", "/v1/worker/lease", reg.WorkerToken, []byte(`{"max":1,"wait_seconds":30}`))
		polled <- st
	}()
	waitFor(t, "the poll to wait", func() bool { return h.api.PollSessions() == 1 })
	if st, body := h.raw("DELETE", "/v1/workers/"+reg.WorkerID, "", nil); st != http.StatusOK {
		t.Fatalf("revoke: %d %v", st, body)
	}
	<-polled
	waitFor(t, "the revoked worker's entry to go", func() bool { return h.api.PollSessions() == 0 })
}

// waitFor polls cond until it holds, or fails the test after 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
