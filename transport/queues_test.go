package transport_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// A paused queue takes submits and assigns nothing; other queues go on; a resume assigns what
// waited. A tenant pauses only its own queues; the admin pauses any tenant's. /v1/queues and
// /metrics show the pause.
func TestPauseAndResumeQueue(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthToken)
	acme, globex := h.tenant("acme"), h.tenant("globex")
	tok, err := h.admin.CreateEnrollToken(ctx(t), "acme", 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := client.New(h.url, tok.Token, nil).RegisterWorker(ctx(t), wire.RegisterRequest{Name: "w", Queues: []string{"q", "r"}, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	st, err := acme.PauseQueue(ctx(t), "", "q", true)
	if err != nil || !st.Paused || st.PausedSince == nil || st.Receipt == nil || st.Receipt.Seq == 0 {
		t.Fatalf("pause: %+v %v", st, err)
	}
	if again, err := acme.PauseQueue(ctx(t), "", "q", true); err != nil || again.Receipt == nil || again.Receipt.Seq != st.Receipt.Seq {
		t.Fatalf("pausing again: %+v %v, want the first pause's receipt", again, err)
	}
	// globex's queue q is its own: pausing and resuming it leaves acme's paused.
	if _, err := globex.PauseQueue(ctx(t), "", "q", false); err != nil {
		t.Fatal(err)
	}
	paused := submit(t, acme, `{}`)
	w := h.dial(reg.WorkerToken, 1)
	other, err := acme.Submit(ctx(t), wire.SubmitRequest{Queue: "r", Type: "t"})
	if err != nil {
		t.Fatal(err)
	}
	w.send(wire.Frame{Type: wire.FrameCredit, N: 1})
	// The job of r, submitted later, comes first: q's waits while q is paused.
	if a := w.assignment(); a.JobID != other.ID {
		t.Fatalf("assigned %s of the paused queue, want %s of queue r", a.JobID, other.ID)
	} else {
		w.ack(wire.Frame{Type: wire.FrameComplete, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: []byte(`1`)})
		w.send(wire.Frame{Type: wire.FrameCredit, N: 1})
	}
	qs, err := acme.Queues(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs.Queues {
		if want := q.Name == "q"; q.Paused != want || (q.PausedSince != nil) != want {
			t.Fatalf("queue %s: paused %v since %v", q.Name, q.Paused, q.PausedSince)
		}
		if q.Name == "q" && q.Depth != 1 {
			t.Fatalf("paused queue q holds %d ready jobs, want 1", q.Depth)
		}
	}
	if m := h.metrics(); !strings.Contains(m, `tether_queue_paused{tenant="acme",queue="q"} 1`) ||
		!strings.Contains(m, `tether_queue_paused{tenant="acme",queue="r"} 0`) {
		t.Fatalf("metrics do not show the pause:\n%s", m)
	}
	// The admin resumes acme's q, and the job that waited is assigned.
	if st, err := h.admin.PauseQueue(ctx(t), "acme", "q", false); err != nil || st.Paused || st.Receipt == nil {
		t.Fatalf("admin resume: %+v %v", st, err)
	}
	if a := w.assignment(); a.JobID != paused.ID {
		t.Fatalf("after resume: assigned %s, want %s", a.JobID, paused.ID)
	}
	// Mistakes.
	_, err = acme.PauseQueue(ctx(t), "", "no/such", true)
	wantErr(t, err, http.StatusBadRequest, "INVALID_ARGUMENT")
	_, err = acme.PauseQueue(ctx(t), "", strings.Repeat("x", 65), true)
	wantErr(t, err, http.StatusBadRequest, "INVALID_ARGUMENT")
	_, err = acme.PauseQueue(ctx(t), "globex", "q", true) // an API key on the admin route
	wantErr(t, err, http.StatusForbidden, "PERMISSION_DENIED")
}

// metrics reads /metrics with the admin token.
func (h *harness) metrics() string {
	h.t.Helper()
	req, _ := http.NewRequest("GET", h.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
