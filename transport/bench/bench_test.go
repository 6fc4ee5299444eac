package bench_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/bench"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/internal/proc"
	"github.com/tetherhq/tether/transport/transporttest"
	"github.com/tetherhq/tether/transport/wire"
)

const metricsToken = "metrics-token-for-the-bench-test"

// server starts a real broker behind a real HTTP server, with token auth.
func server(t testing.TB) (url, apiKey, enroll string) {
	t.Helper()
	b, err := broker.Open(broker.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	_, url = transporttest.Serve(t, b, transport.Config{Auth: transport.AuthToken, AdminToken: "admin-token-for-the-bench-test", MetricsToken: metricsToken})
	ctx := context.Background()
	key, err := b.CreateAPIKey(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := b.CreateEnrollToken(ctx, "acme", 1000, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return url, key.Key, tok.Token
}

// runCtx bounds a run: a bench that waits for completions that never come fails, not hangs.
func runCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestSaturatedRunsEveryJob(t *testing.T) {
	url, key, enroll := server(t)
	res, err := bench.Run(runCtx(t), bench.Config{Server: url, Token: key, EnrollToken: enroll, MetricsToken: metricsToken, Jobs: 300, Producers: 3, Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	if res.Jobs != 300 || res.Errors != 0 || res.JobsPerSecond <= 0 {
		t.Fatalf("%+v", res)
	}
	// Each job is submitted, leased and completed: three events, at least.
	if res.Events < 900 || res.Fsyncs <= 0 || res.Submit.P50 <= 0 || res.SubmitToStart.P99 < res.SubmitToStart.P50 {
		t.Fatalf("%+v", res)
	}
	if _, ok := proc.CPU(); ok && (res.ServerCPUPerJob <= 0 || res.GeneratorCPUPerJob <= 0) {
		t.Fatalf("no CPU per job: %+v", res)
	}
}

// With --concurrency-keys the jobs go out under the keys in turn, and the run's queue has the
// limit asked for: every job runs, each key's jobs under it; with --rate-limit each job takes a
// token of the run's limit from its key's bucket.
func TestKeyedRunsEveryJobUnderItsKeys(t *testing.T) {
	url, key, enroll := server(t)
	for _, mode := range []bench.Config{{Jobs: 60}, {BurnDown: 60, Capacity: 5}} {
		cfg := mode
		cfg.Server, cfg.Token, cfg.EnrollToken, cfg.Producers, cfg.Workers = url, key, enroll, 2, 3
		cfg.ConcurrencyKeys, cfg.MaxRunningPerKey, cfg.RateLimit = 4, 1, 1000
		res, err := bench.Run(runCtx(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Jobs != 60 || res.Errors != 0 || res.ConcurrencyKeys != 4 || res.MaxRunningPerKey != 1 || res.RateLimit != 1000 {
			t.Fatalf("%s: %+v", res.Mode, res)
		}
		c := client.New(url, key, nil)
		qs, err := c.Queues(runCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(qs.Queues, func(q wire.Queue) bool { return q.Name == res.Queue })
		if i < 0 || qs.Queues[i].MaxRunningPerKey != 1 || !qs.Queues[i].OwnKeyLimit {
			t.Fatalf("%s: the run's queue %s: %+v", res.Mode, res.Queue, qs.Queues)
		}
		keys := map[string]int{}
		page, err := c.List(runCtx(t), client.ListOptions{Queue: res.Queue, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			keys[j.ConcurrencyKey]++
			if len(j.RateLimits) != 1 || j.RateLimits[0] != (wire.RateLimitUse{Name: "bench", Key: j.ConcurrencyKey}) {
				t.Fatalf("%s: job %s takes tokens from %+v, want the run's limit in its key's bucket", res.Mode, j.ID, j.RateLimits)
			}
		}
		if len(page.Jobs) != 60 || len(keys) != 4 || keys["k0"] != 15 {
			t.Fatalf("%s: %d jobs over keys %v, want 60 over k0..k3", res.Mode, len(page.Jobs), keys)
		}
	}
}

// A fill runs its jobs, then times every read a dashboard makes and reports the server's size.
func TestFillMeasuresTheHistory(t *testing.T) {
	url, key, enroll := server(t)
	res, err := bench.Run(runCtx(t), bench.Config{Server: url, Token: key, EnrollToken: enroll, MetricsToken: metricsToken, Jobs: 200, Producers: 2, Workers: 2, History: true})
	if err != nil {
		t.Fatal(err)
	}
	h := res.History
	if h == nil || len(h.Reads) != 7 || h.Retained != 200 || h.LogBytes <= 0 {
		t.Fatalf("history %+v", h)
	}
	if _, ok := proc.RSS(); ok && h.ServerRSS <= 0 {
		t.Fatalf("no server RSS: %+v", h)
	}
	for _, r := range h.Reads {
		if r.Latency.P50 <= 0 || r.Latency.P99 < r.Latency.P50 {
			t.Fatalf("read %+v", r)
		}
	}
	var table strings.Builder
	if err := res.WriteTable(&table); err != nil || !strings.Contains(table.String(), "GET /v1/jobs?limit=50&status=queued") ||
		!strings.Contains(table.String(), "200 finished jobs retained") {
		t.Fatalf("the table:\n%s", table.String())
	}
}

func TestPacedRunsEveryJob(t *testing.T) {
	url, key, enroll := server(t)
	res, err := bench.Run(runCtx(t), bench.Config{Server: url, Token: key, EnrollToken: enroll, Rate: 200, Duration: 500 * time.Millisecond, Producers: 2, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != "paced" || res.Jobs != 100 || res.Errors != 0 {
		t.Fatalf("%+v", res)
	}
}

// Without the metrics token a run still runs every job; what only /metrics tells is left out,
// and the table says how to get it.
func TestRunWithoutMetricsToken(t *testing.T) {
	url, key, enroll := server(t)
	res, err := bench.Run(runCtx(t), bench.Config{Server: url, Token: key, EnrollToken: enroll, Jobs: 20, Producers: 1, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Jobs != 20 || res.Errors != 0 || res.ServerMetrics || res.Events != 0 || res.ServerCPUPerJob != 0 {
		t.Fatalf("%+v", res)
	}
	var table strings.Builder
	if err := res.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "--metrics-token") {
		t.Fatalf("the table does not say how to get the server's figures:\n%s", table.String())
	}
}

// Every way a run can go wrong before its jobs run returns promptly, with the reason: a worker
// that cannot register (an enroll token with too few uses), and one whose token is refused
// once registered. Each used to hang until killed.
func TestFailingWorkersEndTheRunPromptly(t *testing.T) {
	url, key, _ := server(t)
	admin := client.New(url, "admin-token-for-the-bench-test", nil)
	tok, err := admin.CreateEnrollToken(context.Background(), "acme", 2, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // far beyond prompt; the hang was forever
	defer cancel()
	_, err = bench.Run(ctx, bench.Config{Server: url, Token: key, EnrollToken: tok.Token, Jobs: 10, Producers: 1, Workers: 3})
	if err == nil || !strings.Contains(err.Error(), "registering worker 2") || !strings.Contains(err.Error(), "ENROLL_TOKEN_USED_UP") {
		t.Fatalf("err = %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the run did not return before its context ended")
	}
}

// A paced run whose context ends while it waits for the next submit's turn returns at once.
func TestPacedRunStopsWithItsContext(t *testing.T) {
	url, key, enroll := server(t)
	ctx, cancel := context.WithCancel(context.Background())
	stop := time.AfterFunc(time.Second, cancel) // a second into a run paced over an hour
	defer stop.Stop()
	_, err := bench.Run(ctx, bench.Config{Server: url, Token: key, EnrollToken: enroll, Rate: 1, Duration: time.Hour, Producers: 1, Workers: 1})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want the context's", err)
	}
}

func TestRefusedSubmitsAreReportedWithTheirCode(t *testing.T) {
	url, _, enroll := server(t)
	_, err := bench.Run(runCtx(t), bench.Config{Server: url, Token: "tk_not-a-key", EnrollToken: enroll, Jobs: 5, Producers: 1, Workers: 1})
	if err == nil || !strings.Contains(err.Error(), "a submit failed") || !strings.Contains(err.Error(), "UNAUTHENTICATED") {
		t.Fatalf("err = %v", err)
	}
}

// openAPI is a server's API over a broker of its own, open until the test ends.
func openAPI(t *testing.T) *transport.Server {
	t.Helper()
	b, err := broker.Open(broker.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	api, err := transport.NewServer(transport.Config{Auth: transport.AuthNone})
	if err != nil {
		t.Fatal(err)
	}
	api.Attach(b)
	t.Cleanup(func() { api.Shutdown(); _ = b.Close() })
	return api
}

// A server that restarts under a run (it answers 503 while it recovers, then refuses
// connections while it is down) ends the run with the reason. The failed submits' errors are of
// different types, which used to panic the generator (an atomic.Value holds one type).
func TestAServerRestartEndsTheRunWithTheReason(t *testing.T) {
	api := openAPI(t)
	var submits atomic.Int64
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/jobs" || submits.Add(1) <= 20 {
			api.ServeHTTP(w, r)
			return
		}
		// Going down: this answer, then no more connections.
		_ = srv.Listener.Close()
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"code":"NOT_READY","message":"recovering","details":{}}}`))
	}))
	t.Cleanup(srv.Close)
	_, err := bench.Run(runCtx(t), bench.Config{Server: srv.URL, Jobs: 100, Producers: 1, Workers: 2})
	if err == nil || !strings.Contains(err.Error(), "NOT_READY") || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("err = %v", err)
	}
}

// BenchmarkSaturated runs the load generator against a server in the same process: an op is a
// job from submit to acknowledged completion, over real loopback HTTP and WebSocket. Its
// allocations per op (-benchmem) are the server's and the generator's together; jobs/s shares
// two cores between them and the test binary, so it compares builds, not products.
func BenchmarkSaturated(b *testing.B) {
	url, key, enroll := server(b)
	b.ResetTimer()
	res, err := bench.Run(runCtx(b), bench.Config{Server: url, Token: key, EnrollToken: enroll, MetricsToken: metricsToken, Jobs: b.N, Producers: 8, Workers: 50})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(res.JobsPerSecond, "jobs/s")
	b.ReportMetric(0, "ns/op")
}

// Given the servers of a replicated log, the bench runs against the one that leads: a server
// that is gone, a standby and a silent one (paused: it takes connections and never answers)
// are passed over.
func TestRunsAgainstTheLeaderOfAList(t *testing.T) {
	url, key, enroll := server(t)
	release := make(chan struct{})
	silent := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	defer silent.Close()
	defer close(release) // before Close, which waits for the handlers
	standby := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"code":"STANDBY","message":"a standby","details":{}}}`))
	}))
	defer standby.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	res, err := bench.Run(runCtx(t), bench.Config{Server: silent.URL + "," + gone.URL + "," + standby.URL + "," + url, Token: key, EnrollToken: enroll,
		MetricsToken: metricsToken, Jobs: 50, Producers: 2, Workers: 2})
	if err != nil || res.Jobs != 50 || res.Errors != 0 {
		t.Fatalf("%+v %v", res, err)
	}
}

// A server that restarts after the submits, while the results come in, is two processes whose
// figures cannot be put together: the run fails saying so, instead of reporting them.
func TestARestartAfterTheSubmitsFailsTheRun(t *testing.T) {
	api := openAPI(t)
	var scrapes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" || scrapes.Add(1) == 1 {
			api.ServeHTTP(w, r)
			return
		}
		// The second scrape, after the run: as a process started since would answer.
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, r)
		body := regexp.MustCompile(`(?m)^process_start_time_seconds .*$`).ReplaceAllString(rec.Body.String(), "process_start_time_seconds 4102444800")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	_, err := bench.Run(runCtx(t), bench.Config{Server: srv.URL, Jobs: 50, Producers: 1, Workers: 2})
	if err == nil || !strings.Contains(err.Error(), "restarted") {
		t.Fatalf("err = %v", err)
	}
}

// A burn-down submits every job in batches before a worker connects, then drains them all:
// the server's own queue stats say each one succeeded and none is left.
func TestBurnDownRunsEveryJob(t *testing.T) {
	url, key, enroll := server(t)
	ctx := runCtx(t)
	const jobs = 2500 // three batches, the last one short
	res, err := bench.Run(ctx, bench.Config{Server: url, Token: key, EnrollToken: enroll, MetricsToken: metricsToken,
		BurnDown: jobs, Producers: 2, Workers: 3, Capacity: 20})
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != "burn-down" || res.Jobs != jobs || res.Errors != 0 || res.JobsPerSecond <= 0 || res.InsertPerSecond <= 0 ||
		res.Capacity != 20 || res.Batch != bench.BatchJobs || res.Submit.P50 <= 0 {
		t.Fatalf("%+v", res)
	}
	// The drain is measured alone: a lease and a completion a job at least, no submits.
	if res.Events < 2*jobs || res.Events >= 3*jobs || res.Fsyncs <= 0 {
		t.Fatalf("events over the drain: %+v", res)
	}
	qs, err := client.New(url, key, nil).Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs.Queues {
		if q.Name != res.Queue {
			continue
		}
		succeeded := 0
		for _, n := range q.SucceededPerMinute {
			succeeded += n
		}
		if succeeded != jobs || q.Depth != 0 || q.Leased != 0 || q.Dead != 0 {
			t.Fatalf("queue %+v: %d succeeded", q, succeeded)
		}
		return
	}
	t.Fatalf("no queue %s in %+v", res.Queue, qs.Queues)
}

// A run in which no job finishes for Config.Stall fails, saying so: a server that died and
// stays down used to hold a run for ever, its workers reconnecting in silence.
func TestARunThatStallsFails(t *testing.T) {
	var done, completed atomic.Int64
	done.Store(7)
	completed.Store(7)
	err := bench.WaitAll(runCtx(t), bench.Config{Stall: 300 * time.Millisecond}, make(chan struct{}), &done, &completed, 10, nil)
	if err == nil || !strings.Contains(err.Error(), "no job finished for 300ms (7 of 10 done)") {
		t.Fatalf("err = %v, want the stall named", err)
	}
}

// Results the server did not take (a paused server's workers losing their connections) are
// no progress: they used to restart the stall's clock, and a paused server's run failed only
// long after Config.Stall.
func TestFailedResultsDoNotHoldOffTheStall(t *testing.T) {
	var done, completed atomic.Int64
	ctx, cancel := context.WithCancel(runCtx(t))
	defer cancel()
	go func() { // a failed result every 20 ms, none completed
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for done.Load() < 1_000_000 {
			select {
			case <-tick.C:
				done.Add(1)
			case <-ctx.Done():
				return
			}
		}
	}()
	err := bench.WaitAll(ctx, bench.Config{Stall: 300 * time.Millisecond}, make(chan struct{}), &done, &completed, 1_000_000, nil)
	if err == nil || !strings.Contains(err.Error(), "no job finished for 300ms") {
		t.Fatalf("err = %v, want the stall named", err)
	}
}

// A fairness run makes its tenants, runs the light ones alone and then beside the heavy one,
// and reports both latencies and the heavy tenant's pace.
func TestSkewMeasuresTheLightTenants(t *testing.T) {
	url, _, _ := server(t)
	// A proxy in front of the server counts the run's API keys made and revoked.
	target, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	var made, revoked atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/admin/api-keys":
			made.Add(1)
		case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/v1/admin/api-keys/"):
			revoked.Add(1)
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	res, err := bench.Skew(runCtx(t), bench.SkewConfig{
		Base:       bench.Config{Server: front.URL, MetricsToken: metricsToken, Producers: 2, Workers: 2},
		AdminToken: "admin-token-for-the-bench-test", Tenants: 3, LightRate: 20, Duration: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Tenants != 3 || res.Alone.P99 <= 0 || res.Skewed.P99 <= 0 || res.HeavyJobs <= 0 || res.P99Ratio <= 0 {
		t.Fatalf("%+v", res)
	}
	var b strings.Builder
	bench.PrintSkew(&b, res)
	if !strings.Contains(b.String(), "p99 beside / alone") {
		t.Fatalf("table: %s", b.String())
	}
	if made.Load() != 3 || revoked.Load() != 3 {
		t.Fatalf("the run made %d API keys and revoked %d; want its 3 made and revoked", made.Load(), revoked.Load())
	}
}

// Under --auth none every API key is tenant default's, so a skew run would measure one tenant
// against itself: it is refused, not reported.
func TestSkewRefusesAServerWithoutTenants(t *testing.T) {
	b, err := broker.Open(broker.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	_, url := transporttest.Serve(t, b, transport.Config{Auth: transport.AuthNone, AdminToken: "admin-token-for-the-bench-test"})
	_, err = bench.Skew(runCtx(t), bench.SkewConfig{Base: bench.Config{Server: url, Producers: 1, Workers: 1},
		AdminToken: "admin-token-for-the-bench-test", Tenants: 2, LightRate: 5, Duration: time.Second})
	if err == nil || !strings.Contains(err.Error(), "--auth token") {
		t.Fatalf("a skew run against --auth none: %v", err)
	}
}

// noAnswer checks that err says the server did not answer call within 500ms, as a request to a
// server that cannot be reached (the command line's CLI_UNREACHABLE).
func noAnswer(t *testing.T, err error, call string) {
	t.Helper()
	var unreachable *neturl.Error
	if err == nil || !errors.As(err, &unreachable) || !strings.Contains(err.Error(), call) || !strings.Contains(err.Error(), "no answer within 500ms") {
		t.Fatalf("err = %v, want %s named as not answering within 500ms, a *url.Error", err, call)
	}
}

// A server that takes the connection and never answers fails the run at its first call: the
// run used to wait for its /healthz for ever, saying nothing.
func TestAServerThatDoesNotAnswerFailsTheRun(t *testing.T) {
	_, err := bench.Run(runCtx(t), bench.Config{Server: silentURL(t), Jobs: 10, Producers: 1, Workers: 1, Setup: 500 * time.Millisecond})
	noAnswer(t, err, "/healthz")
}

// A server whose /healthz answers and whose other calls do not fails the run at the worker's
// registration, and a /metrics that does not answer fails its read.
func TestEverySetupCallIsBounded(t *testing.T) {
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			<-release
		}
	}))
	defer hung.Close()
	defer close(release)
	cfg := bench.Config{Server: hung.URL, Jobs: 10, Producers: 1, Workers: 1, Setup: 500 * time.Millisecond}
	_, err := bench.Run(runCtx(t), cfg)
	noAnswer(t, err, "/v1/workers/register")
	_, err = bench.Scrape(runCtx(t), http.DefaultClient, cfg)
	noAnswer(t, err, "/metrics")
}

// silentURL is the URL of a server that takes connections and never answers.
func silentURL(t *testing.T) string {
	addr, _ := transporttest.Silent(t)
	return "http://" + addr
}
