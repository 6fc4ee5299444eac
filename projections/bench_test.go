package projections_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// BenchmarkCheckpoint measures saving and restoring the projections of 100,000 finished jobs,
// what start-up and the periodic checkpoint pay.
func BenchmarkCheckpoint(b *testing.B) {
	s := projections.New()
	at := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	seq := uint64(0)
	apply := func(p eventlog.Payload) {
		seq++
		if err := s.Apply(seq, at, p); err != nil {
			b.Fatal(err)
		}
	}
	const jobs = 100_000
	for i := range jobs {
		id := fmt.Sprintf("01JOB%021d", i)
		apply(eventlog.JobSubmitted{JobID: id, Tenant: "acme", Queue: "q", Type: "t", Payload: json.RawMessage(`{"n":1}`), MaxAttempts: 5, LeaseTTLMillis: 30000})
		apply(eventlog.JobLeased{JobID: id, LeaseID: "L" + id, WorkerID: "w", Nonce: "n", Attempt: 1, ExpiresAt: at})
		apply(eventlog.JobSucceeded{JobID: id, LeaseID: "L" + id, Attempt: 1, Output: json.RawMessage(`null`), OutputHash: "h"})
	}
	var data []byte
	b.Run("marshal", func(b *testing.B) {
		for b.Loop() {
			data, _ = s.MarshalCheckpoint()
		}
		b.ReportMetric(float64(len(data))/jobs, "bytes/job")
	})
	b.Run("clone", func(b *testing.B) {
		for b.Loop() {
			s.Clone()
		}
	})
	b.Run("unmarshal", func(b *testing.B) {
		for b.Loop() {
			if _, err := projections.UnmarshalCheckpoint(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
