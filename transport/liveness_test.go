package transport_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/wire"
)

// last_seen moves with every heartbeat, frame and poll; a job's lease shows the expiry its last
// heartbeat gave it; a job shows when its last attempt started and finished and whose it was;
// the worker list leaves out workers gone for a day, and revoked ones, unless all=true.
func TestLivenessPeopleCanTrust(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthToken)
	acme := h.tenant("acme")
	reg := h.register("acme", nil, 1)
	w := h.dial(reg.WorkerToken, 1)
	listed := func(all bool) map[string]wire.Worker {
		t.Helper()
		list := acme.Workers
		if all {
			list = acme.AllWorkers
		}
		ws, err := list(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]wire.Worker{}
		for _, w := range ws.Workers {
			m[w.ID] = w
		}
		return m
	}

	// A heartbeat an hour later moves last_seen by an hour.
	h.clock.advance(time.Hour)
	w.ack(wire.Frame{Type: wire.FrameHeartbeat})
	if seen := listed(false)[reg.WorkerID].LastSeen; h.clock.now().Sub(seen) > time.Minute {
		t.Fatalf("last_seen %s, an hour behind the heartbeat at %s", seen, h.clock.now())
	}

	// A heartbeat extends the lease the job shows; the job says who ran it, and when.
	w.send(wire.Frame{Type: wire.FrameCredit, N: 1})
	job := submit(t, acme, `{}`)
	a := w.assignment()
	leased, _ := acme.Get(ctx(t), job.ID)
	if leased.StartedAt == nil || leased.WorkerID == nil || *leased.WorkerID != reg.WorkerID || leased.FinishedAt != nil || leased.Lease == nil {
		t.Fatalf("a leased job: %+v", leased)
	}
	h.clock.advance(20 * time.Second)
	w.ack(wire.Frame{Type: wire.FrameHeartbeat, Leases: []string{a.LeaseID}})
	extended, _ := acme.Get(ctx(t), job.ID)
	if want := h.clock.now().Add(30 * time.Second); extended.Lease.ExpiresAt.Before(leased.Lease.ExpiresAt.Add(19*time.Second)) || extended.Lease.ExpiresAt.After(want) {
		t.Fatalf("lease expires_at %s after a heartbeat, was %s (now %s)", extended.Lease.ExpiresAt, leased.Lease.ExpiresAt, h.clock.now())
	}
	if ack := w.ack(wire.Frame{Type: wire.FrameComplete, JobID: job.ID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: []byte(`1`)}); !*ack.OK {
		t.Fatalf("complete: %+v", ack)
	}
	done, _ := acme.Get(ctx(t), job.ID)
	if done.Lease != nil || done.FinishedAt == nil || done.WorkerID == nil || *done.WorkerID != reg.WorkerID || !done.StartedAt.Equal(*leased.StartedAt) {
		t.Fatalf("a finished job: %+v", done)
	}

	// A long-poll worker's polls move its last_seen too.
	poller := h.register("acme", nil, 1)
	h.clock.advance(time.Hour)
	if st, b := h.raw("POST", "/v1/worker/lease", poller.WorkerToken, []byte(`{"max":1,"wait_seconds":0}`)); st != http.StatusNoContent {
		t.Fatalf("poll: %d %v", st, b)
	}
	if seen := listed(false)[poller.WorkerID].LastSeen; h.clock.now().Sub(seen) > time.Minute {
		t.Fatalf("a poller's last_seen %s, now %s", seen, h.clock.now())
	}

	// Gone for more than a day: listed only with all=true. Revoked: the same, at once.
	revoked := h.register("acme", nil, 1)
	if err := acme.RevokeWorker(ctx(t), revoked.WorkerID); err != nil {
		t.Fatal(err)
	}
	w.conn.Close()
	for deadline := time.Now().Add(10 * time.Second); listed(false)[reg.WorkerID].Status != "offline"; {
		if time.Now().After(deadline) {
			t.Fatal("the closed connection's session did not end")
		}
		time.Sleep(5 * time.Millisecond) // the session ends on the server's own goroutines
	}
	h.clock.advance(25 * time.Hour)
	h.raw("POST", "/v1/worker/heartbeat", poller.WorkerToken, []byte(`{"leases":[]}`)) // the poller is still about
	if got := listed(false); len(got) != 1 || got[poller.WorkerID].ID == "" {
		t.Fatalf("listed without all: %+v", got)
	}
	if got := listed(true); len(got) != 3 || got[revoked.WorkerID].Status != "revoked" || got[reg.WorkerID].Status != "offline" {
		t.Fatalf("listed with all: %+v", got)
	}
	key, err := h.admin.CreateAPIKey(ctx(t), "acme")
	if err != nil {
		t.Fatal(err)
	}
	if st, b := h.raw("GET", "/v1/workers?all=maybe", key.Key, nil); st != http.StatusBadRequest {
		t.Fatalf("all=maybe: %d %v", st, b)
	}
}
