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

// A bulk cancel takes the live jobs its filter matches, a page at a time: waiting ones at once,
// a leased one by request, and none of another queue, label or tenant.
func TestBulkCancel(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	c := client.New(h.url, "", nil)
	w, _, leased, _ := h.leased(c) // a job of queue q, leased
	var want []string
	for i := range 5 {
		j, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t", Labels: map[string]string{"batch": "7"}, DelaySeconds: float64(i % 2 * 60)})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, j.ID)
	}
	other, _ := c.Submit(ctx(t), wire.SubmitRequest{Queue: "other", Type: "t", Labels: map[string]string{"batch": "7"}})
	unlabelled, _ := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t"})

	req := wire.BulkRequest{Queue: "q", Label: "batch=7", Limit: 2}
	total, pages := 0, 0
	var last *wire.Receipt
	for {
		r, err := c.CancelMatching(ctx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		total += r.Cancelled
		if r.CancelRequested != 0 || r.Matched > 2 {
			t.Fatalf("page %d: %+v", pages, r)
		}
		if r.Receipt != nil {
			last = r.Receipt
		}
		if r.NextCursor == "" {
			break
		}
		req.Cursor = r.NextCursor
	}
	if total != 5 || pages != 3 || last == nil || last.Seq == 0 {
		t.Fatalf("cancelled %d in %d pages (receipt %+v), want 5 in 3", total, pages, last)
	}
	for _, id := range want {
		if j, _ := c.Get(ctx(t), id); j.Status != "cancelled" {
			t.Fatalf("job %s is %s", id, j.Status)
		}
	}
	for _, id := range []string{other.ID, unlabelled.ID} {
		if j, _ := c.Get(ctx(t), id); j.Status != "queued" {
			t.Fatalf("job %s, outside the filter, is %s", id, j.Status)
		}
	}
	// Without a label: the rest of q, the leased job only asked to stop.
	r, err := c.CancelMatching(ctx(t), wire.BulkRequest{Queue: "q"})
	if err != nil || r.Matched != 2 || r.Cancelled != 1 || r.CancelRequested != 1 || r.NextCursor != "" {
		t.Fatalf("cancel of queue q: %+v %v", r, err)
	}
	if c := w.next(); c.Type != wire.FrameCancel || c.JobID != leased.ID {
		t.Fatalf("the worker was told %+v, want a cancel of %s", c, leased.ID)
	}
	// Mistakes.
	_, err = c.CancelMatching(ctx(t), wire.BulkRequest{Status: "succeeded"})
	wantErr(t, err, http.StatusBadRequest, "INVALID_ARGUMENT")
	_, err = c.CancelMatching(ctx(t), wire.BulkRequest{Limit: 1001})
	wantErr(t, err, http.StatusBadRequest, "INVALID_ARGUMENT")
	_, err = c.CancelMatching(ctx(t), wire.BulkRequest{Label: "novalue"})
	wantErr(t, err, http.StatusBadRequest, "INVALID_ARGUMENT")
	_, err = c.CancelMatching(ctx(t), wire.BulkRequest{Cursor: "nope"})
	wantErr(t, err, http.StatusBadRequest, "INVALID_ARGUMENT")
	if st, b := h.raw("POST", "/v1/jobs/cancel", "", []byte(`{"queue":"q","bogus":1}`)); st != http.StatusBadRequest {
		t.Fatalf("an unknown field: %d %v", st, b)
	}
}

// A bulk re-drive takes dead letters against the quota: the ones over it are skipped as
// QUOTA_EXCEEDED, and the cursor comes back to them once there is room.
func TestBulkRedriveStopsAtTheQuota(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthToken)
	c := h.tenant("acme")
	tok, _ := h.admin.CreateEnrollToken(ctx(t), "acme", 1, time.Hour)
	reg, err := client.New(h.url, tok.Token, nil).RegisterWorker(ctx(t), wire.RegisterRequest{Name: "w", Queues: []string{"q"}, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	w := h.dial(reg.WorkerToken, 1)
	no := false
	for range 3 {
		j := submit(t, c, `{}`)
		w.send(wire.Frame{Type: wire.FrameCredit, N: 1})
		a := w.assignment()
		if ack := w.ack(wire.Frame{Type: wire.FrameFail, JobID: j.ID, LeaseID: a.LeaseID, ErrorCode: "boom", Retryable: &no}); !*ack.OK {
			t.Fatalf("fail: %+v", ack)
		}
	}
	submit(t, c, `{}`) // one live job; with max_active 3, room for two re-drives
	if _, err := h.admin.SetQuota(ctx(t), "acme", new(3), nil); err != nil {
		t.Fatal(err)
	}
	r, err := c.RedriveMatching(ctx(t), wire.BulkRequest{Queue: "q"})
	if err != nil || r.Matched != 3 || r.Redriven != 2 || r.Skipped["QUOTA_EXCEEDED"] != 1 || r.NextCursor == "" || r.Receipt == nil {
		t.Fatalf("re-drive at the quota: %+v %v", r, err)
	}
	// With no room at all, the cursor stays where the call began.
	held, err := c.RedriveMatching(ctx(t), wire.BulkRequest{Queue: "q", Cursor: r.NextCursor})
	if err != nil || held.Redriven != 0 || held.NextCursor != r.NextCursor || held.Skipped["QUOTA_EXCEEDED"] != 1 {
		t.Fatalf("re-drive with no room: %+v %v, want the cursor %s back", held, err, r.NextCursor)
	}
	if first, err := c.RedriveMatching(ctx(t), wire.BulkRequest{Queue: "q"}); err != nil || first.NextCursor != "00000000000000000000000000" {
		t.Fatalf("re-drive with no room and no cursor: %+v %v, want the first cursor", first, err)
	}
	if _, err := h.admin.SetQuota(ctx(t), "acme", new(0), nil); err != nil {
		t.Fatal(err)
	}
	r, err = c.RedriveMatching(ctx(t), wire.BulkRequest{Queue: "q", Cursor: r.NextCursor})
	if err != nil || r.Redriven != 1 || r.NextCursor != "" {
		t.Fatalf("re-drive resumed: %+v %v", r, err)
	}
	if l, _ := c.List(ctx(t), client.ListOptions{Status: "failed"}); len(l.Jobs) != 0 {
		t.Fatalf("%d dead letters left", len(l.Jobs))
	}
	_, err = c.RedriveMatching(ctx(t), wire.BulkRequest{Status: "queued"})
	wantErr(t, err, http.StatusBadRequest, "INVALID_ARGUMENT")
}

// A bulk action whose body narrows nothing, and a purge with no age, act only when the body
// says all: true; refused, they change nothing.
func TestBulkActionsNeedAScope(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	c := client.New(h.url, "", nil)
	w, _, leased, a := h.leased(c)
	no := false
	if ack := w.ack(wire.Frame{Type: wire.FrameFail, JobID: leased.ID, LeaseID: a.LeaseID, ErrorCode: "boom", Retryable: &no}); !*ack.OK {
		t.Fatalf("fail: %+v", ack)
	}
	live := submit(t, c, `{}`)
	for _, r := range []struct{ path, body string }{
		{"/v1/jobs/cancel", `{}`},
		{"/v1/jobs/cancel", `{"limit":10,"cursor":"00000000000000000000000000"}`},
		{"/v1/jobs/retry", `{}`},
		{"/v1/jobs/retry", `{"status":"failed"}`},                        // every dead letter is failed: no narrowing
		{"/v1/jobs/cancel", `{"created_before":"2999-01-01T00:00:00Z"}`}, // every job so far
		{"/v1/jobs/retry", `{"created_before":"2999-01-01T00:00:00Z"}`},
		{"/v1/dead-letters/purge", `{}`},
		{"/v1/dead-letters/purge", `{"queue":"q"}`},
	} {
		st, b := h.raw("POST", r.path, "", []byte(r.body))
		if st != http.StatusBadRequest || codeOf(b) != "INVALID_ARGUMENT" || !strings.Contains(messageOf(b), `"all": true`) {
			t.Errorf("%s %s: %d %v, want 400 INVALID_ARGUMENT", r.path, r.body, st, b)
		}
	}
	if j, _ := c.Get(ctx(t), live.ID); j.Status != "queued" {
		t.Fatalf("the live job is %s after refused bulk actions", j.Status)
	}
	if j, _ := c.Get(ctx(t), leased.ID); j.Status != "failed" {
		t.Fatalf("the dead letter is %s after refused bulk actions", j.Status)
	}
	// Told all: true, each acts on every job it may.
	if r, err := c.CancelMatching(ctx(t), wire.BulkRequest{All: true}); err != nil || r.Cancelled != 1 {
		t.Fatalf("cancel all: %+v %v", r, err)
	}
	if r, err := c.RedriveMatching(ctx(t), wire.BulkRequest{All: true}); err != nil || r.Redriven != 1 {
		t.Fatalf("re-drive all: %+v %v", r, err)
	}
	w.send(wire.Frame{Type: wire.FrameCredit, N: 1})
	a = w.assignment()
	if ack := w.ack(wire.Frame{Type: wire.FrameFail, JobID: leased.ID, LeaseID: a.LeaseID, ErrorCode: "boom", Retryable: &no}); !*ack.OK {
		t.Fatalf("fail again: %+v", ack)
	}
	if st, b := h.raw("POST", "/v1/dead-letters/purge", "", []byte(`{"all":true}`)); st != http.StatusOK || b["purged"] != float64(1) {
		t.Fatalf("purge all: %d %v", st, b)
	}
	if st, b := h.raw("POST", "/v1/dead-letters/purge", "", []byte(`{"older_than_seconds":0}`)); st != http.StatusOK {
		t.Fatalf("purge of any age: %d %v", st, b)
	}
}
