package bench_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/actors/runtime"
	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/bench"
	"github.com/tetherhq/tether/transport/internal/proc"
	"github.com/tetherhq/tether/transport/transporttest"
)

// server starts a real broker behind a real HTTP server, with token auth.
func server(t testing.TB) (url, apiKey, enroll string) {
	t.Helper()
	b, err := runtime.Open(runtime.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	_, url = transporttest.Serve(t, b, transport.Config{Auth: transport.AuthToken, AdminToken: "admin-token-for-the-bench-test"})
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
	res, err := bench.Run(runCtx(t), bench.Config{Server: url, Token: key, EnrollToken: enroll, Jobs: 300, Producers: 3, Workers: 4})
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

func TestRefusedSubmitsAreReportedWithTheirCode(t *testing.T) {
	url, _, enroll := server(t)
	_, err := bench.Run(runCtx(t), bench.Config{Server: url, Token: "tk_not-a-key", EnrollToken: enroll, Jobs: 5, Producers: 1, Workers: 1})
	if err == nil || !strings.Contains(err.Error(), "5 submits failed") || !strings.Contains(err.Error(), "UNAUTHENTICATED") {
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
	res, err := bench.Run(runCtx(b), bench.Config{Server: url, Token: key, EnrollToken: enroll, Jobs: b.N, Producers: 8, Workers: 50})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(res.JobsPerSecond, "jobs/s")
	b.ReportMetric(0, "ns/op")
}
