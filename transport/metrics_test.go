package transport_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/internal/testtool"
	"github.com/tetherhq/tether/transport/wire"
)

// scrapeMetrics returns /metrics's body and its samples by series ("name{labels}").
func scrapeMetrics(t *testing.T, url string) ([]byte, map[string]float64) {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("/metrics Content-Type %q", ct)
	}
	samples := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		samples[line[:i]] = v
	}
	return body, samples
}

// TestMetricsAfterWork runs jobs to success and to the dead-letter queue, then checks that
// promtool accepts /metrics and that the figures say what happened.
func TestMetricsAfterWork(t *testing.T) {
	t.Parallel()
	promtool := testtool.Find(t, "promtool")
	h := start(t, transport.AuthNone)
	c := client.New(h.url, "", nil)
	w, _, ok, a := h.leased(c)
	if ack := w.ack(wire.Frame{Type: wire.FrameComplete, JobID: ok.ID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: json.RawMessage(`1`)}); !*ack.OK {
		t.Fatalf("complete: %+v", ack)
	}
	w.send(wire.Frame{Type: wire.FrameCredit, N: 1})
	dead := submit(t, c, `{}`)
	a = w.assignment()
	no := false
	if ack := w.ack(wire.Frame{Type: wire.FrameFail, JobID: dead.ID, LeaseID: a.LeaseID, ErrorCode: "boom", Retryable: &no}); !*ack.OK {
		t.Fatalf("fail: %+v", ack)
	}
	if j := await(t, c, dead.ID); j.Status != "failed" {
		t.Fatalf("job %+v, want it dead-lettered", j)
	}
	queued := submit(t, c, `{}`) // left queued: the worker has no credit

	// The dashboard's views of the same work: throughput per minute, and jobs newest first.
	qs, err := c.Queues(ctx(t))
	if err != nil || len(qs.Queues) != 1 {
		t.Fatalf("queues %+v %v", qs, err)
	}
	sum := func(xs []int) (n int) {
		for _, x := range xs {
			n += x
		}
		return n
	}
	if q := qs.Queues[0]; len(q.SucceededPerMinute) != 60 || sum(q.SucceededPerMinute) != 1 || sum(q.FailedPerMinute) != 1 {
		t.Fatalf("queue throughput %+v, want one success and one failure in the last 60 minutes", q)
	}
	if st, body := h.raw("GET", "/v1/jobs?order=newest&limit=1", "", nil); st != http.StatusOK || body["jobs"].([]any)[0].(map[string]any)["id"] != queued.ID {
		t.Fatalf("newest first: %d %v, want %s", st, body, queued.ID)
	}
	if st, body := h.raw("GET", "/v1/jobs?order=sideways", "", nil); st != http.StatusBadRequest || codeOf(body) != "INVALID_ARGUMENT" {
		t.Fatalf("a bad order: %d %v", st, body)
	}

	body, got := scrapeMetrics(t, h.url)
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s\n--- exposition:\n%s", err, out, body)
	}
	for series, want := range map[string]float64{
		`tether_jobs_submitted_total{queue="q"}`:                    3,
		`tether_jobs_succeeded_total{queue="q"}`:                    1,
		`tether_jobs_failed_total{queue="q"}`:                       1,
		`tether_jobs_dead_lettered_total{queue="q"}`:                1,
		`tether_jobs_cancelled_total{queue="q"}`:                    0,
		`tether_queue_depth{tenant="default",queue="q"}`:            1,
		`tether_queue_dead{tenant="default",queue="q"}`:             1,
		`tether_dlq_size`:                                           1,
		`tether_leases_active`:                                      0,
		`tether_workers_connected{transport="websocket"}`:           1,
		`tether_workers_connected{transport="longpoll"}`:            0,
		`tether_assign_latency_seconds_count{queue="q"}`:            2,
		`tether_assign_latency_seconds_bucket{queue="q",le="+Inf"}`: 2,
		`tether_role{role="single"}`:                                1,
	} {
		if v, ok := got[series]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}
	for _, h := range []string{"tether_log_append_seconds", "tether_log_batch_events", "tether_log_fsync_seconds"} {
		if got[h+"_count"] < 1 || got[h+`_bucket{le="+Inf"}`] != got[h+"_count"] {
			t.Errorf("%s: count %v, +Inf bucket %v", h, got[h+"_count"], got[h+`_bucket{le="+Inf"}`])
		}
	}
	// A fresh log: every event in it was committed by this process, in some batch.
	if got["tether_log_batch_events_sum"] != got["tether_log_head_seq"] {
		t.Errorf("events in batches %v, head seq %v", got["tether_log_batch_events_sum"], got["tether_log_head_seq"])
	}
	if got["tether_log_size_bytes"] <= 0 || got["tether_log_head_seq"] < 8 {
		t.Errorf("log size %v, head %v", got["tether_log_size_bytes"], got["tether_log_head_seq"])
	}
	if _, ok := got["tether_checkpoint_seq"]; !ok {
		t.Error("no tether_checkpoint_seq")
	}
	// Pebble's own figures: the WAL took the events, and every level has its series.
	if got["tether_pebble_wal_bytes_written_total"] < got["tether_pebble_wal_bytes_in_total"] || got["tether_pebble_wal_bytes_in_total"] <= 0 {
		t.Errorf("WAL bytes in %v, written %v", got["tether_pebble_wal_bytes_in_total"], got["tether_pebble_wal_bytes_written_total"])
	}
	for _, name := range []string{"tether_pebble_compaction_bytes_written_total", "tether_pebble_flush_bytes_total", "tether_pebble_ingested_bytes_total", "tether_pebble_level_tables", "tether_pebble_level_bytes"} {
		for level := range 7 {
			if _, ok := got[fmt.Sprintf(`%s{level="%d"}`, name, level)]; !ok {
				t.Errorf("no %s for level %d", name, level)
			}
		}
	}
	for _, name := range []string{"tether_pebble_read_amp", "tether_pebble_compactions_total", "tether_pebble_flushes_total", "tether_pebble_ingestions_total", "tether_pebble_compaction_debt_bytes"} {
		if _, ok := got[name]; !ok {
			t.Errorf("no %s", name)
		}
	}
	checkKEDAExample(t, got)
}

// checkKEDAExample checks that every series the README's KEDA example queries exists in a
// scrape, with the labels it selects on: metric{label="value"} there is metric{...,label=...}
// here, whatever the value.
func checkKEDAExample(t *testing.T, scraped map[string]float64) {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "<!-- keda -->\n```yaml\n")
	if !ok {
		t.Fatal("README.md has no keda block")
	}
	block, _, _ = strings.Cut(block, "```")
	selectors := regexp.MustCompile(`(tether_[a-z_]+)\{([a-z_]+)="`).FindAllStringSubmatch(block, -1)
	if len(selectors) < 3 {
		t.Fatalf("the keda block queries %d series", len(selectors))
	}
	for _, sel := range selectors {
		found := false
		for series := range scraped {
			if strings.HasPrefix(series, sel[1]+"{") && strings.Contains(series, sel[2]+"=") {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("the README's KEDA example queries %s{%s=...}, which /metrics does not have", sel[1], sel[2])
		}
	}
}

// A hot standby serves /metrics of its own, under the same credential as the leader's: that it
// is a standby, how far its copy is behind the replicated log, and the process; promtool takes
// it. It answered 503 STANDBY before, so Prometheus could not see its lag.
func TestStandbyMetrics(t *testing.T) {
	t.Parallel()
	promtool := testtool.Find(t, "promtool")
	const metricsToken = "a-metrics-token-of-its-own-0123"
	s, err := transport.NewServer(transport.Config{Auth: transport.AuthToken, AdminToken: "an-admin-token-0123456789abcdef", MetricsToken: metricsToken})
	if err != nil {
		t.Fatal(err)
	}
	s.SetStandby(func() transport.Standby {
		return transport.Standby{Leader: "http://leader:8080", HeadSeq: 41, Lag: func(context.Context) (eventlog.Lag, error) {
			return eventlog.Lag{Records: 9, Behind: 1500 * time.Millisecond}, nil
		}}
	})
	srv := httptest.NewServer(s)
	defer srv.Close()
	scrape := func(token string) (int, []byte) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	if st, body := scrape(""); st != http.StatusUnauthorized {
		t.Fatalf("a standby's /metrics without a credential: %d %s", st, body)
	}
	if st, body := scrape("not-the-token"); st != http.StatusForbidden {
		t.Fatalf("a standby's /metrics with a wrong credential: %d %s", st, body)
	}
	st, body := scrape(metricsToken)
	if st != http.StatusOK {
		t.Fatalf("a standby's /metrics: %d %s", st, body)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s\n--- exposition:\n%s", err, out, body)
	}
	for _, want := range []string{
		"tether_role{role=\"standby\"} 1\n", "tether_standby_head_seq 41\n", "tether_standby_lag_records 9\n",
		"tether_standby_lag_seconds 1.5\n", "process_start_time_seconds ", "go_goroutines ",
	} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("a standby's /metrics lacks %q:\n%s", want, body)
		}
	}
	if bytes.Contains(body, []byte("tether_jobs_")) {
		t.Errorf("a standby gives job figures, which are the leader's:\n%s", body)
	}
}
