package transport_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// GET /v1/jobs/{id}/explain answers each reason a job has for not running, from the
// dispatcher's own state, and whom a leased job runs on and how a finished one ended; another
// tenant's job, or none, is JOB_NOT_FOUND.
func TestExplainSaysWhyAJobWaits(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthToken)
	acme := h.tenant("acme")
	explain := func(id, code string) *wire.Explanation {
		t.Helper()
		x, err := acme.Explain(ctx(t), id)
		if err != nil {
			t.Fatalf("explain %s: %v", id, err)
		}
		if x.Code != code || x.JobID != id || x.Message == "" {
			t.Fatalf("explain %s: %+v, want %s", id, x, code)
		}
		return x
	}
	submit := func(req wire.SubmitRequest) *wire.Job {
		t.Helper()
		j, err := acme.Submit(ctx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}

	later := submit(wire.SubmitRequest{Queue: "q", Type: "t", DelaySeconds: 3600})
	if x := explain(later.ID, "scheduled"); x.Details.RunAt == nil || time.Until(*x.Details.RunAt) < 59*time.Minute {
		t.Fatalf("scheduled: %+v", x.Details)
	}
	first := submit(wire.SubmitRequest{Queue: "q", Type: "t", ConcurrencyKey: "c"})
	explain(first.ID, "no_worker_for_queue")

	tok, err := h.admin.CreateEnrollToken(ctx(t), "acme", 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := client.New(h.url, tok.Token, nil).RegisterWorker(ctx(t), wire.RegisterRequest{Name: "w", Queues: []string{"q"}, Capacity: 2})
	if err != nil {
		t.Fatal(err)
	}
	w := h.dial(reg.WorkerToken, 2)
	if x := explain(first.ID, "workers_busy"); *x.Details.Sessions != 1 || *x.Details.Capacity != 2 || *x.Details.Leased != 0 {
		t.Fatalf("a worker without credit: %+v", x.Details)
	}
	w.send(wire.Frame{Type: wire.FrameCredit, N: 1})
	a := w.assignment()
	if x := explain(a.JobID, "leased"); x.Details.WorkerID != reg.WorkerID || x.Details.LeaseID != a.LeaseID || x.Details.LeaseExpiresAt == nil {
		t.Fatalf("leased: %+v", x.Details)
	}
	// The key of the leased job holds back the next of its key while the worker has room.
	if _, err := acme.SetQueueLimits(ctx(t), "", "q", new(1)); err != nil {
		t.Fatal(err)
	}
	second := submit(wire.SubmitRequest{Queue: "q", Type: "t", ConcurrencyKey: "c"})
	w.send(wire.Frame{Type: wire.FrameCredit, N: 1})
	if x := explain(second.ID, "concurrency_key"); x.Details.ConcurrencyKey != "c" || x.Details.MaxRunningPerKey != 1 ||
		len(x.Details.HeldBy) != 1 || x.Details.HeldBy[0] != first.ID {
		t.Fatalf("concurrency_key: %+v", x.Details)
	}
	if m := h.metrics(); !strings.Contains(m, `tether_jobs_waiting{tenant="acme",queue="q",reason="concurrency_key"} 1`) ||
		!strings.Contains(m, `tether_jobs_waiting{tenant="acme",queue="q",reason="scheduled"} 1`) ||
		!strings.Contains(m, `tether_concurrency_keys_at_limit{tenant="acme"} 1`) {
		t.Fatalf("/metrics does not count the waiting jobs by their reasons:\n%s", m)
	}
	// The tenant's max_running comes before the key.
	if _, err := h.admin.SetQuota(ctx(t), "acme", nil, new(1)); err != nil {
		t.Fatal(err)
	}
	if x := explain(second.ID, "tenant_quota"); x.Details.MaxRunning != 1 || x.Details.Running != 1 {
		t.Fatalf("tenant_quota: %+v", x.Details)
	}
	// A paused queue comes before both.
	if _, err := acme.PauseQueue(ctx(t), "", "q", true); err != nil {
		t.Fatal(err)
	}
	if x := explain(second.ID, "queue_paused"); x.Details.PausedSince == nil {
		t.Fatalf("queue_paused: %+v", x.Details)
	}
	// Finished, the first job says how it ended; the second then goes.
	if _, err := acme.PauseQueue(ctx(t), "", "q", false); err != nil {
		t.Fatal(err)
	}
	w.send(wire.Frame{Type: wire.FrameComplete, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: []byte(`1`)})
	if b := w.assignment(); b.JobID != second.ID { // it leaves with the fsync of the result
		t.Fatalf("assigned %s, want %s", b.JobID, second.ID)
	}
	if x := explain(first.ID, "finished"); x.Status != "succeeded" || x.Details.FinishedAt == nil {
		t.Fatalf("finished: %+v", x)
	}
	if x := explain(second.ID, "leased"); !*x.Details.WorkerConnected || x.Details.Attempt != 1 {
		t.Fatalf("leased: %+v", x.Details)
	}
	// Two jobs waiting for a worker with room say their places in line: priority first.
	if _, err := h.admin.SetQuota(ctx(t), "acme", nil, new(0)); err != nil {
		t.Fatal(err)
	}
	lo := submit(wire.SubmitRequest{Queue: "q", Type: "t"})
	hi := submit(wire.SubmitRequest{Queue: "q", Type: "t", Priority: 5})
	if x := explain(hi.ID, "workers_busy"); *x.Details.Ahead != 0 {
		t.Fatalf("the first in line: %+v", x.Details)
	}
	if x := explain(lo.ID, "workers_busy"); *x.Details.Ahead != 1 {
		t.Fatalf("the second in line: %+v", x.Details)
	}

	// Its worker gone, the job is still under its lease, and the answer says the worker is not
	// connected. The session ends on the server's own goroutines: ask until it has.
	w.conn.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		x := explain(second.ID, "leased")
		if !*x.Details.WorkerConnected {
			if !strings.Contains(x.Message, "not connected") {
				t.Fatalf("a lease of a worker gone: %s", x.Message)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the closed connection's session did not end")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, id := range []string{"01NOSUCHJOB00000000000000", later.ID} {
		other := h.tenant("globex")
		_, err := other.Explain(ctx(t), id)
		wantErr(t, err, http.StatusNotFound, "JOB_NOT_FOUND")
	}
}
