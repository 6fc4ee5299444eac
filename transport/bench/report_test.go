package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestWriteTable(t *testing.T) {
	t.Parallel()
	r := Result{Mode: "saturated", ServerMetrics: true, Jobs: 20000, Producers: 8, Workers: 50, Elapsed: 4 * time.Second, JobsPerSecond: 5000,
		Submit:        Latency{P50: 1500 * time.Microsecond, P90: 2 * time.Millisecond, P99: 3250 * time.Microsecond, Max: 9 * time.Millisecond},
		SubmitToStart: Latency{P50: 4 * time.Millisecond, P90: 6 * time.Millisecond, P99: 11 * time.Millisecond, Max: 20 * time.Millisecond},
		Events:        100000, Fsyncs: 2000, EventsPerFsync: 50, ServerCPUPerJob: 180 * time.Microsecond}
	var buf bytes.Buffer
	if err := r.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"5000 jobs/s", "50.0", "(100000 events, 2000 fsyncs)", "180 µs",
		"p50", "p99", "1.50 ms", "3.25 ms", "11.00 ms", "20.00 ms", "submit → start"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	// The percentile columns line up: each p99 figure ends in the same column as its header.
	lines := strings.Split(out, "\n")
	col := func(prefix, cell string) int {
		for _, l := range lines {
			if strings.HasPrefix(strings.TrimSpace(l), prefix) {
				return utf8.RuneCountInString(l[:strings.Index(l, cell)+len(cell)])
			}
		}
		return -1
	}
	if h, a, b := col("latency", "p99"), col("submit (durable", "3.25 ms"), col("submit →", "11.00 ms"); h < 0 || h != a || a != b {
		t.Errorf("p99 column ends at %d, %d, %d:\n%s", h, a, b, out)
	}
}

// A burn-down's table gives both rates and the batches' latency, and no submit → start, which
// the jobs spend waiting for the workers by design; the River peer's names its database.
func TestWriteTableBurnDown(t *testing.T) {
	t.Parallel()
	tether := Result{Mode: "burn-down", ServerMetrics: true, Jobs: 100000, Producers: 8, Workers: 10, Capacity: 100, Batch: 1000,
		Elapsed: 10 * time.Second, JobsPerSecond: 10000, Insert: 2 * time.Second, InsertPerSecond: 50000,
		Submit: Latency{P50: 90 * time.Millisecond, P99: 120 * time.Millisecond, Max: 130 * time.Millisecond}, ServerCPUPerJob: 95 * time.Microsecond}
	river := tether
	river.Mode, river.Workers, river.ServerMetrics = "River burn-down", 1, false
	river.Database = &Database{Version: "15.18", Fsync: "on", SynchronousCommit: "on"}
	for _, tc := range []struct {
		r    Result
		want []string
	}{
		{tether, []string{"10 workers of capacity 100", "batches of 1000", "50000 jobs/s", "10000 jobs/s", "from the first connect", "95 µs", "batch submit (durable answer)", "90.00 ms"}},
		{river, []string{"one client working 100 jobs at once", "fsync on, synchronous_commit on", "10000 jobs/s", "PostgreSQL, if on this machine", "95 µs"}},
	} {
		var buf bytes.Buffer
		if err := tc.r.WriteTable(&buf); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		for _, want := range tc.want {
			if !strings.Contains(out, want) {
				t.Errorf("the table lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "submit → start") {
			t.Errorf("a burn-down's table has submit → start:\n%s", out)
		}
	}
}

func TestProgressBar(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	bar := &ProgressBar{W: &buf, Width: 10, Now: func() time.Time { return now }}
	bar.Update(0, 1000)
	now = now.Add(2 * time.Second)
	buf.Reset()
	bar.Update(500, 1000)
	if got, want := buf.String(), "\r[#####·····]  50%  500/1000 jobs  250 jobs/s  eta 2s\x1b[K"; got != want {
		t.Errorf("halfway: %q, want %q", got, want)
	}
	buf.Reset()
	bar.Update(1000, 1000)
	if got := buf.String(); !strings.Contains(got, "[##########] 100%") || strings.Contains(got, "eta") {
		t.Errorf("done: %q", got)
	}
	buf.Reset()
	bar.Done()
	if buf.String() != "\r\x1b[K" {
		t.Errorf("Done left %q, want the line cleared", buf.String())
	}
}
