package transport_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// TestRetentionOverHTTP: a finished job stays as long as the server's retention or its own
// result TTL says, then answers 410 JOB_EXPIRED to its tenant (and 404 to any other); a client
// deletes a finished job and purges old dead letters.
func TestRetentionOverHTTP(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthToken, func(c *broker.Config) {
		c.Retention = projections.Retention{Done: time.Hour, Dead: 24 * time.Hour}
	})
	key, err := h.admin.CreateAPIKey(ctx(t), "acme")
	if err != nil {
		t.Fatal(err)
	}
	acme, other := client.New(h.url, key.Key, nil), h.tenant("other")
	cancelled := func(req wire.SubmitRequest) *wire.Job {
		t.Helper()
		req.Queue, req.Type = "q", "t"
		j, err := acme.Submit(ctx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		if j, err = acme.Cancel(ctx(t), j.ID); err != nil || j.Status != "cancelled" {
			t.Fatalf("cancel: %+v %v", j, err)
		}
		return j
	}
	short := cancelled(wire.SubmitRequest{ResultTTLSeconds: 60})
	long := cancelled(wire.SubmitRequest{})
	if short.ExpiresAt == nil || !short.ExpiresAt.Equal(short.FinishedAt.Add(time.Minute)) ||
		long.ExpiresAt == nil || !long.ExpiresAt.Equal(long.FinishedAt.Add(time.Hour)) {
		t.Fatalf("expires_at: %v (finished %v) and %v (finished %v)", short.ExpiresAt, short.FinishedAt, long.ExpiresAt, long.FinishedAt)
	}
	if running := submit(t, acme, `{}`); running.ExpiresAt != nil {
		t.Fatalf("a queued job has expires_at %v", running.ExpiresAt)
	} else if _, err := acme.Delete(ctx(t), running.ID); err == nil {
		t.Fatal("a queued job was deleted")
	} else {
		wantErr(t, err, http.StatusConflict, "JOB_NOT_FINISHED")
	}

	h.clock.advance(2 * time.Minute)
	_, err = acme.Get(ctx(t), short.ID)
	wantErr(t, err, http.StatusGone, "JOB_EXPIRED")
	_, err = other.Get(ctx(t), short.ID)
	wantErr(t, err, http.StatusNotFound, "JOB_NOT_FOUND")
	_, err = acme.Retry(ctx(t), short.ID)
	wantErr(t, err, http.StatusGone, "JOB_EXPIRED")
	list, err := acme.List(ctx(t), client.ListOptions{Status: "cancelled"})
	if err != nil || len(list.Jobs) != 1 || list.Jobs[0].ID != long.ID {
		t.Fatalf("the list should hold only the job still retained: %+v %v", list, err)
	}

	_, err = other.Delete(ctx(t), long.ID)
	wantErr(t, err, http.StatusNotFound, "JOB_NOT_FOUND")
	d, err := acme.Delete(ctx(t), long.ID)
	if err != nil || !d.Deleted || d.ID != long.ID || d.Receipt == nil || d.Receipt.Seq == 0 {
		t.Fatalf("delete: %+v %v", d, err)
	}
	_, err = acme.Get(ctx(t), long.ID)
	wantErr(t, err, http.StatusGone, "JOB_EXPIRED")
	_, err = acme.Delete(ctx(t), long.ID)
	wantErr(t, err, http.StatusGone, "JOB_EXPIRED")
	if status, body := h.raw("GET", "/v1/jobs/"+long.ID+"/events", "", nil); status != http.StatusUnauthorized {
		t.Fatalf("events without a key: %d %v", status, body)
	}
	_, err = acme.Events(ctx(t), long.ID, 0)
	wantErr(t, err, http.StatusGone, "JOB_EXPIRED")

	// The idempotency key outlives its job: a repeat is still a hit, on a job that is gone.
	keyed := cancelled(wire.SubmitRequest{IdempotencyKey: "k1"})
	if _, err := acme.Delete(ctx(t), keyed.ID); err != nil {
		t.Fatal(err)
	}
	again, err := acme.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t", IdempotencyKey: "k1"})
	if err != nil || again.ID != keyed.ID || again.IdempotentHit == nil || !*again.IdempotentHit || again.Status != "expired" {
		t.Fatalf("a repeat of an expired job's key: %+v %v", again, err)
	}

	// A dead letter, purged by queue and age.
	reg := h.register("acme", nil, 1)
	w := h.dial(reg.WorkerToken, 1)
	w.send(wire.Frame{Type: wire.FrameCredit, N: 1})
	a := w.assignment() // the queued job from above
	no := false
	if ack := w.ack(wire.Frame{Type: wire.FrameFail, JobID: a.JobID, LeaseID: a.LeaseID, ErrorCode: "boom", Retryable: &no}); !*ack.OK {
		t.Fatalf("fail: %+v", ack)
	}
	if p, err := acme.PurgeDead(ctx(t), "q", time.Minute); err != nil || p.Purged != 0 {
		t.Fatalf("a purge of dead letters a minute old took a fresh one: %+v %v", p, err)
	}
	h.clock.advance(2 * time.Minute)
	if p, err := other.PurgeDead(ctx(t), "", 0); err != nil || p.Purged != 0 {
		t.Fatalf("another tenant's purge: %+v %v", p, err)
	}
	if p, err := acme.PurgeDead(ctx(t), "q", time.Minute); err != nil || p.Purged != 1 || p.More || p.Receipt == nil {
		t.Fatalf("purge: %+v %v", p, err)
	}
	_, err = acme.Get(ctx(t), a.JobID)
	wantErr(t, err, http.StatusGone, "JOB_EXPIRED")

	for _, body := range []string{`{"queue":"q","type":"t","result_ttl_seconds":-1}`, `{"queue":"q","type":"t","result_ttl_seconds":1e12}`, `{"queue":"q","type":"t","result_ttl_seconds":0.5}`} {
		status, resp := h.raw("POST", "/v1/jobs", key.Key, []byte(body))
		if status != http.StatusBadRequest || codeOf(resp) != "INVALID_ARGUMENT" {
			t.Fatalf("%s: %d %v", body, status, resp)
		}
	}
	if status, resp := h.raw("POST", "/v1/dead-letters/purge", key.Key, []byte(`{"older_than_seconds":-5}`)); status != http.StatusBadRequest {
		t.Fatalf("a negative age: %d %v", status, resp)
	}

	req, _ := http.NewRequest(http.MethodGet, h.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`tether_jobs_expired_total{queue="q"} 3`, "\ntether_jobs_retained ", "\ntether_jobs_in_memory "} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
