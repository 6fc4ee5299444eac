package audit_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/audit"
)

var verifyEvents = flag.Int("verify-events", 1_000_000, "events in BenchmarkVerify's log")

// buildBenchLog writes a log of about n events shaped like the server's under `tether bench`:
// a worker, then jobs submitted, leased and completed, with checkpoints that move finished jobs
// to the view table as the server's do, the last at the head, as a server leaves on shutdown.
func buildBenchLog(b *testing.B, dir string, n int) {
	b.Helper()
	now := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	l, err := eventlog.Open(dir, eventlog.Options{Clock: func() time.Time { now = now.Add(50 * time.Microsecond); return now }})
	if err != nil {
		b.Fatal(err)
	}
	ev := func(p eventlog.Payload) eventlog.Event {
		e, err := eventlog.NewEvent(p.Stream(), p)
		if err != nil {
			b.Fatal(err)
		}
		return e
	}
	set := projections.NewOn(l.Views())
	apply := func(events []eventlog.Event, r eventlog.Receipt) {
		for i, e := range events {
			p, err := eventlog.Decode(e.Type, e.Data)
			if err != nil {
				b.Fatal(err)
			}
			if err := set.Apply(r.First+uint64(i), r.Time, p); err != nil {
				b.Fatal(err)
			}
		}
	}
	worker := "01KAR7ZQ6J3N6WQH1V9X8Y7Z6W"
	first := []eventlog.Event{ev(eventlog.WorkerRegistered{WorkerID: worker, Tenant: "default", Name: "bench", Queues: []string{"bench"}, Capacity: 50, TokenHash: "00", ExpiresAt: now.Add(time.Hour)})}
	r, err := l.Append(context.Background(), first...)
	if err != nil {
		b.Fatal(err)
	}
	apply(first, r)
	const jobsPerAppend = 3000
	for job := 0; 3*job < n; {
		batch := make([]eventlog.Event, 0, 3*jobsPerAppend)
		for range jobsPerAppend {
			id := fmt.Sprintf("01KAR7ZQ6J3N6WQH1V%08d", job)
			lease := fmt.Sprintf("01KAR7ZQ6J3N6WQH1L%08d", job)
			batch = append(batch,
				ev(eventlog.JobSubmitted{JobID: id, Tenant: "default", Queue: "bench", Type: "noop", Payload: json.RawMessage(`{"sent":1763772000000000000}`), MaxAttempts: 3, LeaseTTLMillis: 30000}),
				ev(eventlog.JobLeased{JobID: id, LeaseID: lease, WorkerID: worker, SessionID: "s_0123456789abcdef", Nonce: "0123456789abcdef0123456789abcdef", Attempt: 1, ExpiresAt: now.Add(30 * time.Second)}),
				ev(eventlog.JobSucceeded{JobID: id, LeaseID: lease, Attempt: 1, Output: json.RawMessage(`null`), OutputHash: "74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b"}))
			job++
		}
		r, err := l.Append(context.Background(), batch...)
		if err != nil {
			b.Fatal(err)
		}
		apply(batch, r)
		if job%(10*jobsPerAppend) == 0 || 3*job >= n {
			if err := set.BeginFlush().Save(l, set); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkVerify is `tether replay verify` on a log of -verify-events events: the chain, the
// index, the fold of every record and the comparison with the checkpoint.
func BenchmarkVerify(b *testing.B) {
	dir := b.TempDir()
	buildBenchLog(b, dir, *verifyEvents)
	l, err := audit.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.ResetTimer()
	var records uint64
	for b.Loop() {
		sum, err := audit.Verify(context.Background(), l, nil)
		if err != nil {
			b.Fatal(err)
		}
		if sum.CheckpointSeq != sum.HeadSeq {
			b.Fatalf("checkpoint at %d, head %d", sum.CheckpointSeq, sum.HeadSeq)
		}
		records += sum.Records
	}
	b.ReportMetric(float64(records)/b.Elapsed().Seconds(), "events/s")
}
