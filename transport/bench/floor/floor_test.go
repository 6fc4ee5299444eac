package floor

import (
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"
)

// The instrument must count what it claims: three durable records per job (submit, lease,
// completion), every completion acked, and CPU on both sides.
func TestFloorRunsTheShape(t *testing.T) {
	for _, fsync := range []bool{true, false} {
		const jobs = 300
		res, err := generate(serve(t, fsync), Shape{Jobs: jobs, Producers: 4, Workers: 3})
		if err != nil {
			t.Fatal(err)
		}
		if res.Records != 3*jobs {
			t.Errorf("fsync=%v: %d records for %d jobs, want %d", fsync, res.Records, jobs, 3*jobs)
		}
		if res.Syncs < 1 || res.Syncs > res.Records || res.JobsPerSecond <= 0 || res.GeneratorCPU <= 0 {
			t.Errorf("fsync=%v: implausible result %+v", fsync, res)
		}
	}
}

// serve serves the floor in the test's process until it ends and returns its address.
func serve(t *testing.T, fsync bool) string {
	l, err := openGroupLog(filepath.Join(t.TempDir(), "records"), fsync)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler(l, work{})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func TestFloorRefusesAnEmptyShape(t *testing.T) {
	if _, err := generate("127.0.0.1:1", Shape{Jobs: 0, Producers: 1, Workers: 1}); err == nil {
		t.Fatal("a run of no jobs was accepted")
	}
}

// A skew run measures every light job it submits, alone and beside the heavy tenant, and the
// heavy tenant's jobs go to its own workers only: a light worker that got a heavy job's canned
// assign would have no stamp to measure and the run would never end.
func TestFloorSkewMeasuresEveryLightJob(t *testing.T) {
	s := SkewShape{Lights: 2, LightRate: 100, Duration: 200 * time.Millisecond, HeavyProducers: 2, HeavyWorkers: 3}
	res, err := generateSkew(serve(t, false), s)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []Latency{res.Alone, res.Beside} {
		if l.N != 20 || l.P50 <= 0 || l.P99 < l.P50 || l.Max < l.P99 {
			t.Errorf("light latency %+v, want 20 jobs measured in order", l)
		}
	}
	if res.HeavyPerSecond <= 0 {
		t.Errorf("heavy tenant ran at %v jobs/s", res.HeavyPerSecond)
	}
}

func TestStampOf(t *testing.T) {
	for body, want := range map[string]int64{
		`{"payload":{"sent":42}}`:                42,
		`{"type":"assign","payload":{"sent":7}}`: 7,
		submitBody:                               0, // the canned stamp is none
		`{"payload":{}}`:                         0,
		string(assignFrame):                      0,
		`{"payload":{"sent":12`:                  12,
	} {
		if got := stampOf([]byte(body)); got != want {
			t.Errorf("stampOf(%s) = %d, want %d", body, got, want)
		}
	}
}
