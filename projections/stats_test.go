package projections_test

import (
	"testing"
	"time"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// The assign latency and the throughput are folds of record times: a lease 3 s after submit
// lands in the 5 s bucket, and a completion counts in its own minute, in its tenant's queue
// only, and survives a checkpoint.
func TestAssignLatencyAndThroughput(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 22, 9, 0, 30, 0, time.UTC)
	s := projections.New()
	seq := uint64(0)
	apply := func(at time.Time, p eventlog.Payload) {
		t.Helper()
		seq++
		if err := s.Apply(seq, at, p); err != nil {
			t.Fatal(err)
		}
	}
	apply(t0, eventlog.JobSubmitted{JobID: "j1", Tenant: "acme", Queue: "q", Type: "t", MaxAttempts: 3})
	apply(t0.Add(3*time.Second), eventlog.JobLeased{JobID: "j1", LeaseID: "l1", WorkerID: "w", Attempt: 1, ExpiresAt: t0.Add(time.Hour)})
	apply(t0.Add(70*time.Second), eventlog.JobSucceeded{JobID: "j1", LeaseID: "l1", Attempt: 1})

	h := s.Counters()["q"].AssignLatency
	five := 0
	for i, b := range projections.AssignLatencyBounds {
		if b == 5 {
			five = i
		}
	}
	if h.Count != 1 || h.SumNanos != uint64(3*time.Second) || h.Buckets[five] != 1 {
		t.Fatalf("assign latency %+v, want one 3 s wait in the 5 s bucket (%d)", h, five)
	}
	now := t0.Add(2 * time.Minute)
	per := s.QueueThroughput("acme", "q", now)
	if len(per) != projections.ThroughputWindow {
		t.Fatalf("%d minutes, want %d", len(per), projections.ThroughputWindow)
	}
	total := 0
	for _, m := range per {
		total += m.Succeeded
	}
	if got := per[len(per)-2]; got.Succeeded != 1 || total != 1 || got.Minute != t0.Add(70*time.Second).Unix()/60 {
		t.Fatalf("throughput %+v (total %d), want 1 in the minute before now's", per[len(per)-3:], total)
	}
	if other := s.QueueThroughput("other", "q", now); other[len(other)-2].Succeeded != 0 {
		t.Fatal("another tenant sees acme's throughput")
	}
	if later := s.QueueThroughput("acme", "q", now.Add(time.Hour)); later[len(later)-1].Succeeded+later[0].Succeeded != 0 {
		t.Fatal("a completion an hour old is still in the window")
	}
	if qs := s.Queues("acme", now); len(qs) != 1 || qs[0].Queue != "q" {
		t.Fatalf("queues %+v, want q, which finished a job within the hour", qs)
	}
	if qs := s.Queues("acme", now.Add(time.Hour)); len(qs) != 0 {
		t.Fatalf("queues an hour later %+v, want none: q holds no job and finished none within the hour", qs)
	}
	data, err := s.MarshalCheckpoint()
	if err != nil {
		t.Fatal(err)
	}
	back, err := projections.UnmarshalCheckpoint(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := back.MarshalCheckpoint(); string(again) != string(data) || back.QueueThroughput("acme", "q", now)[len(per)-2].Succeeded != 1 {
		t.Fatal("the checkpoint lost the throughput or the latency")
	}
}
