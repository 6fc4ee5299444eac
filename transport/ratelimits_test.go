package transport_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// Rate limits over the API: set (the burst defaults to the rate rounded up), listed with the
// tokens of their bucket, shown on the job, explained with the next token's time, deleted;
// the admin twin reaches a tenant's; a job naming a limit the tenant has not set is refused
// with RATE_LIMIT_NOT_FOUND, and what is out of range with INVALID_ARGUMENT.
func TestRateLimits(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthToken)
	acme, apiKey := h.tenantKey("acme")
	l, err := acme.SetRateLimit(ctx(t), "", "api", 0.5, 0)
	if err != nil || l.Name != "api" || l.Rate != 0.5 || l.Burst != 1 || l.Tokens != 1 || l.Receipt == nil {
		t.Fatalf("set: %+v %v", l, err)
	}
	if l, err := h.admin.SetRateLimit(ctx(t), "acme", "gpu", 2.5, 0); err != nil || l.Burst != 3 {
		t.Fatalf("the admin's set: %+v %v", l, err)
	}
	_, err = acme.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t", RateLimits: []wire.RateLimitUse{{Name: "apy"}}})
	wantErr(t, err, http.StatusNotFound, "RATE_LIMIT_NOT_FOUND")
	batch, err := acme.SubmitBatch(ctx(t), []wire.SubmitRequest{
		{Queue: "q", Type: "t", RateLimits: []wire.RateLimitUse{{Name: "api", Key: "team 1"}, {Name: "gpu"}}},
		{Queue: "q", Type: "t", RateLimits: []wire.RateLimitUse{{Name: "api", Key: "team 1"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	first, second := batch.Jobs[0], batch.Jobs[1]
	if !slices.Equal(first.RateLimits, []wire.RateLimitUse{{Name: "api", Key: "team 1"}, {Name: "gpu"}}) {
		t.Fatalf("the job's rate limits: %+v", first.RateLimits)
	}
	if j, err := acme.Get(ctx(t), second.ID); err != nil || len(j.RateLimits) != 1 {
		t.Fatalf("GET: %+v %v", j, err)
	}
	reg := h.register("acme", nil, 4)
	w := h.dial(reg.WorkerToken, 4)
	w.send(wire.Frame{Type: wire.FrameCredit, N: 2})
	if a := w.assignment(); a.JobID != first.ID {
		t.Fatalf("assigned %s, want %s", a.JobID, first.ID)
	}
	// The second waits two seconds for team 1's token; explain says so.
	x, err := acme.Explain(ctx(t), second.ID)
	if err != nil || x.Code != "rate_limited" || x.Details.RateLimit != "api" || x.Details.RateLimitKey != "team 1" || x.Details.TokenAt == nil ||
		x.Details.TokenAt.Before(time.Now().Add(time.Second)) || !strings.Contains(x.Message, "rate limit api") {
		t.Fatalf("explain: %+v %v", x, err)
	}
	ls, err := acme.RateLimits(ctx(t), "")
	if err != nil || len(ls.RateLimits) != 2 || ls.RateLimits[0].Name != "api" || ls.RateLimits[0].BucketsBelowFull != 1 ||
		ls.RateLimits[0].Tokens != 1 || ls.RateLimits[1].Tokens >= 3 {
		t.Fatalf("list: %+v %v", ls, err)
	}
	if status, out := h.raw("GET", "/v1/rate-limits/gpu", apiKey, nil); status != http.StatusOK || out["burst"] != 3.0 {
		t.Fatalf("GET one: %d %v", status, out)
	}
	// Deleted, the limit holds nobody back: the second job goes at once.
	if d, err := acme.DeleteRateLimit(ctx(t), "", "api"); err != nil || !d.Deleted || d.Receipt == nil {
		t.Fatalf("delete: %+v %v", d, err)
	}
	if a := w.assignment(); a.JobID != second.ID {
		t.Fatalf("after the delete: assigned %s, want %s", a.JobID, second.ID)
	}
	_, err = acme.DeleteRateLimit(ctx(t), "", "api")
	wantErr(t, err, http.StatusNotFound, "RATE_LIMIT_NOT_FOUND")
	_, err = acme.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t", RateLimits: []wire.RateLimitUse{{Name: "api"}}})
	wantErr(t, err, http.StatusNotFound, "RATE_LIMIT_NOT_FOUND")
	// Another tenant sees none of acme's.
	globex, _ := h.tenantKey("globex")
	if ls, err := globex.RateLimits(ctx(t), ""); err != nil || len(ls.RateLimits) != 0 {
		t.Fatalf("globex's list: %+v %v", ls, err)
	}
	_, err = globex.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t", RateLimits: []wire.RateLimitUse{{Name: "gpu"}}})
	wantErr(t, err, http.StatusNotFound, "RATE_LIMIT_NOT_FOUND")
	// Mistakes.
	for path, body := range map[string]string{
		"/v1/rate-limits/x":      `{"rate":0}`,
		"/v1/rate-limits/y":      `{"rate":-1}`,
		"/v1/rate-limits/z":      `{"rate":1e7}`,
		"/v1/rate-limits/b":      `{"rate":1,"burst":1000001}`,
		"/v1/rate-limits/slow":   `{"rate":0.00002,"burst":1000}`, // a year and more to refill
		"/v1/rate-limits/u":      `{"rate":"1"}`,
		"/v1/rate-limits/k":      `{"rate":1,"extra":1}`,
		"/v1/rate-limits/bad.na": `{"rate":1}`,
	} {
		if status, out := h.raw("PUT", path, apiKey, []byte(body)); status != http.StatusBadRequest || codeOf(out) != "INVALID_ARGUMENT" {
			t.Errorf("PUT %s %s: %d %v", path, body, status, out)
		}
	}
	for _, uses := range [][]wire.RateLimitUse{
		{{Name: "gpu"}, {Name: "gpu"}},
		{{Name: "gpu", Key: strings.Repeat("k", 129)}},
		{{Name: "gpu", Key: "tab\there"}},
		{{Name: ""}},
		slices.Repeat([]wire.RateLimitUse{{Name: "gpu"}}, 9),
	} {
		_, err := acme.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t", RateLimits: uses})
		wantErr(t, err, http.StatusBadRequest, "INVALID_ARGUMENT")
	}
	_, err = acme.SetRateLimit(ctx(t), "globex", "api", 1, 1) // an API key on the admin route
	wantErr(t, err, http.StatusForbidden, "PERMISSION_DENIED")
}

// A rate limit of 5 a second holds over real sockets: 101 jobs naming it, 50 Go workers
// waiting for them, and the jobs start, by the workers' clocks, at 5 a second within 5 %, and
// their leases never begin more often than the bucket (burst 1) allows in any span. The jobs'
// work is instant, so only the limit paces them. It takes the 20 s the limit says.
func TestRateLimitHoldsOverRealSockets(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 20 s")
	}
	t.Parallel()
	h := start(t, transport.AuthNone)
	c := client.New(h.url, "", nil)
	const rate, jobs = 5.0, 101
	if _, err := c.SetRateLimit(ctx(t), "", "partner-api", rate, 1); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var starts []time.Time
	for range 50 {
		reg := h.register("", nil, 1)
		runUntilTheEnd(t, &client.Worker{Server: h.url, Token: reg.WorkerToken, Capacity: 1, Logger: zaptest.NewLogger(t),
			Handler: func(context.Context, *client.Job) (any, error) {
				mu.Lock()
				starts = append(starts, time.Now())
				mu.Unlock()
				return "ok", nil
			}})
	}
	var specs []wire.SubmitRequest
	for range jobs {
		specs = append(specs, wire.SubmitRequest{Queue: "q", Type: "call", RateLimits: []wire.RateLimitUse{{Name: "partner-api"}}})
	}
	batch, err := c.SubmitBatch(ctx(t), specs)
	if err != nil {
		t.Fatal(err)
	}
	var leased []time.Time // by the server's clock: when each lease began
	for _, j := range batch.Jobs {
		j := await(t, c, j.ID)
		if j.Status != "succeeded" || j.StartedAt == nil {
			t.Fatalf("job %s: %s", j.ID, j.Status)
		}
		leased = append(leased, *j.StartedAt)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(starts) != jobs {
		t.Fatalf("%d starts for %d jobs", len(starts), jobs)
	}
	for _, times := range [][]time.Time{starts, leased} {
		slices.SortFunc(times, time.Time.Compare)
	}
	span := starts[len(starts)-1].Sub(starts[0])
	got := float64(jobs-1) / span.Seconds()
	t.Logf("%d jobs started over %s by the workers' clocks: %.3f a second", jobs, span, got)
	if got < rate*0.95 || got > rate*1.05 {
		t.Errorf("the jobs started at %.3f a second, not %v within 5 %%", got, rate)
	}
	// Any span of the leases: at most burst + span*rate, give or take 100 ms between the
	// dispatcher's decision and the lease's record (its fsync).
	const slack = 100 * time.Millisecond
	for i := range leased {
		for j := i + 1; j < len(leased); j++ {
			if allowed := 1 + int((leased[j].Sub(leased[i])+slack).Seconds()*rate); j-i+1 > allowed {
				t.Fatalf("%d leases began within %s (from %s): the bucket allows %d", j-i+1, leased[j].Sub(leased[i]), leased[i].Format(time.StampMilli), allowed)
			}
		}
	}
}
