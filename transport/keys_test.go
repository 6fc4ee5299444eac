package transport_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// Concurrency keys over the API: the tenant's default max_running_per_key holds a key's jobs
// back while other keys and jobs without one go past them; a queue's own limit (set and
// cleared by the tenant, or by the admin) wins over the default; /v1/queues, /v1/quota and the
// job show them; and what is out of range is refused with INVALID_ARGUMENT.
func TestConcurrencyKeys(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthToken)
	acme, apiKey := h.tenantKey("acme")
	if q, err := h.admin.SetLimits(ctx(t), "acme", wire.QuotaRequest{MaxRunningPerKey: new(1)}); err != nil || q.MaxRunningPerKey != 1 {
		t.Fatalf("default limit: %+v %v", q, err)
	}
	tok, err := h.admin.CreateEnrollToken(ctx(t), "acme", 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := client.New(h.url, tok.Token, nil).RegisterWorker(ctx(t), wire.RegisterRequest{Name: "w", Queues: []string{"q"}, Capacity: 8})
	if err != nil {
		t.Fatal(err)
	}
	// Two jobs of key cust first in line, then one without a key: with credit for two, the
	// second cust job must wait and the keyless one go.
	batch, err := acme.SubmitBatch(ctx(t), []wire.SubmitRequest{
		{Queue: "q", Type: "t", Priority: 9, ConcurrencyKey: "cust 1"},
		{Queue: "q", Type: "t", Priority: 9, ConcurrencyKey: "cust 1"},
		{Queue: "q", Type: "t"},
	})
	if err != nil {
		t.Fatal(err)
	}
	first, second, keyless := batch.Jobs[0], batch.Jobs[1], batch.Jobs[2]
	if first.ConcurrencyKey != "cust 1" || keyless.ConcurrencyKey != "" {
		t.Fatalf("the batch's answer: key %q and %q", first.ConcurrencyKey, keyless.ConcurrencyKey)
	}
	if j, err := acme.Get(ctx(t), second.ID); err != nil || j.ConcurrencyKey != "cust 1" {
		t.Fatalf("GET: %+v %v", j, err)
	}
	w := h.dial(reg.WorkerToken, 8)
	w.send(wire.Frame{Type: wire.FrameCredit, N: 2})
	got := map[string]bool{w.assignment().JobID: true, w.assignment().JobID: true}
	if !got[first.ID] || !got[keyless.ID] {
		t.Fatalf("assigned %v; want the first cust job %s and the keyless %s, the second cust job waiting", got, first.ID, keyless.ID)
	}
	// The queue's own limit of 2 lets the second go at once.
	w.send(wire.Frame{Type: wire.FrameCredit, N: 2})
	ql, err := acme.SetQueueLimits(ctx(t), "", "q", new(2))
	if err != nil || ql.MaxRunningPerKey != 2 || !ql.OwnKeyLimit || ql.Receipt == nil {
		t.Fatalf("queue limit: %+v %v", ql, err)
	}
	if a := w.assignment(); a.JobID != second.ID {
		t.Fatalf("after the raise: assigned %s, want %s", a.JobID, second.ID)
	}
	qs, err := acme.Queues(ctx(t))
	if err != nil || len(qs.Queues) != 1 || qs.Queues[0].MaxRunningPerKey != 2 || !qs.Queues[0].OwnKeyLimit {
		t.Fatalf("queues: %+v %v", qs, err)
	}
	// Cleared by the admin, the tenant's default applies again.
	if ql, err := h.admin.SetQueueLimits(ctx(t), "acme", "q", nil); err != nil || ql.MaxRunningPerKey != 1 || ql.OwnKeyLimit {
		t.Fatalf("cleared: %+v %v", ql, err)
	}
	if q, err := acme.Quota(ctx(t)); err != nil || q.MaxRunningPerKey != 1 {
		t.Fatalf("quota: %+v %v", q, err)
	}
	// Mistakes.
	for _, body := range []string{`{"max_running_per_key":-1}`, `{"max_running_per_key":1000001}`, `{"max_running_per_key":"2"}`, `{"max":1}`} {
		if status, out := h.raw("PUT", "/v1/queues/q/limits", apiKey, []byte(body)); status != http.StatusBadRequest || codeOf(out) != "INVALID_ARGUMENT" {
			t.Errorf("PUT limits %s: %d %v", body, status, out)
		}
	}
	_, err = acme.SetQueueLimits(ctx(t), "", "no/such", new(1))
	wantErr(t, err, http.StatusBadRequest, "INVALID_ARGUMENT")
	_, err = acme.SetQueueLimits(ctx(t), "globex", "q", new(1)) // an API key on the admin route
	wantErr(t, err, http.StatusForbidden, "PERMISSION_DENIED")
	_, err = h.admin.SetLimits(ctx(t), "acme", wire.QuotaRequest{MaxRunningPerKey: new(-1)})
	wantErr(t, err, http.StatusBadRequest, "INVALID_ARGUMENT")
	// A refused key limit leaves the quota it came with unchanged too.
	_, err = h.admin.SetLimits(ctx(t), "acme", wire.QuotaRequest{MaxRunning: new(5), MaxRunningPerKey: new(2_000_000)})
	wantErr(t, err, http.StatusBadRequest, "INVALID_ARGUMENT")
	if q, err := acme.Quota(ctx(t)); err != nil || q.MaxRunning != 0 || q.MaxRunningPerKey != 1 {
		t.Fatalf("after a refused PATCH: %+v %v", q, err)
	}
	for _, key := range []string{strings.Repeat("k", 129), "tab\there", "nul\x00"} {
		_, err := acme.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t", ConcurrencyKey: key})
		wantErr(t, err, http.StatusBadRequest, "INVALID_ARGUMENT")
	}
	if j, err := acme.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t", ConcurrencyKey: strings.Repeat("é", 64)}); err != nil || j.ConcurrencyKey != strings.Repeat("é", 64) {
		t.Fatalf("a key of 128 bytes: %+v %v", j, err)
	}
}

// tenantKey makes an API key for a tenant and returns a client that uses it, and the key.
func (h *harness) tenantKey(name string) (*client.Client, string) {
	h.t.Helper()
	k, err := h.admin.CreateAPIKey(ctx(h.t), name)
	if err != nil {
		h.t.Fatal(err)
	}
	return client.New(h.url, k.Key, nil), k.Key
}

// A concurrency key of 1 runs its jobs strictly one at a time, however many workers have room:
// 100 jobs of one key through four Go workers of capacity 4 over real sockets, each job
// checking on its worker that no other job of the key runs, while jobs of other keys run
// beside them.
func TestConcurrencyKeyOfOneIsSerial(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	c := client.New(h.url, "", nil)
	if _, err := c.SetQueueLimits(ctx(t), "", "q", new(1)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	running := map[string]int{}
	most := map[string]int{}
	var overlaps []string
	handler := func(_ context.Context, j *client.Job) (any, error) {
		var p struct{ Key string }
		if err := json.Unmarshal(j.Payload, &p); err != nil {
			return nil, err
		}
		mu.Lock()
		running[p.Key]++
		most[p.Key] = max(most[p.Key], running[p.Key])
		if p.Key == "serial" && running[p.Key] > 1 {
			overlaps = append(overlaps, fmt.Sprintf("%s started at %s with %d of its key running", j.ID, time.Now().Format(time.RFC3339Nano), running[p.Key]-1))
		}
		mu.Unlock()
		time.Sleep(time.Millisecond) // the job's work: room for another of its key to start, were it allowed
		mu.Lock()
		running[p.Key]--
		mu.Unlock()
		return "ok", nil
	}
	for range 4 {
		reg := h.register("", nil, 4)
		runUntilTheEnd(t, &client.Worker{Server: h.url, Token: reg.WorkerToken, Capacity: 4, Logger: zaptest.NewLogger(t), Handler: handler})
	}
	var jobs []wire.SubmitRequest
	for i := range 100 {
		jobs = append(jobs, wire.SubmitRequest{Queue: "q", Type: "t", ConcurrencyKey: "serial", Payload: json.RawMessage(`{"key":"serial"}`)},
			wire.SubmitRequest{Queue: "q", Type: "t", ConcurrencyKey: fmt.Sprintf("free-%d", i%10), Payload: json.RawMessage(`{"key":"free"}`)})
	}
	batch, err := c.SubmitBatch(ctx(t), jobs)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range batch.Jobs {
		if j := await(t, c, j.ID); j.Status != "succeeded" {
			t.Fatalf("job %s: %s", j.ID, j.Status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(overlaps) > 0 || most["serial"] != 1 {
		t.Fatalf("the key of limit 1 ran %d jobs at once, %d times; the first: %v", most["serial"], len(overlaps), overlaps[:min(3, len(overlaps))])
	}
	if most["free"] < 2 {
		t.Errorf("jobs of other keys never ran side by side (at most %d): the limit held back more than its key", most["free"])
	}
}
