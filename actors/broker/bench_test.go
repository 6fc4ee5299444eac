package broker_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
)

// BenchmarkLifecycle drives no-op jobs through the facade, no network: 64 submitters each submit
// one job and wait for its receipt, and 64 workers (capacity 1) take each assignment, complete
// it and grant one credit more. An op is one job from submit to durable completion.
func BenchmarkLifecycle(b *testing.B) {
	br := open(b, broker.Config{Logger: zap.NewNop()})
	defer br.Close()
	const submitters, workers = 64, 64
	ctx := context.Background()
	var completed atomic.Int64
	all := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		s := worker(b, br, 1)
		s.Credit(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range s.Frames {
				a, ok := f.(actors.Assignment)
				if !ok {
					continue
				}
				if _, err := br.Complete(ctx, actors.Complete{WorkerID: s.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce}); err != nil {
					b.Error(err)
					return
				}
				s.Credit(1)
				if completed.Add(1) == int64(b.N) {
					close(all)
				}
			}
		}()
	}
	payload := json.RawMessage(`{"n":1}`)
	var next atomic.Int64
	start := time.Now()
	b.ResetTimer()
	var subs sync.WaitGroup
	for range submitters {
		subs.Add(1)
		go func() {
			defer subs.Done()
			for next.Add(1) <= int64(b.N) {
				if _, _, err := br.Submit(ctx, "acme", "", actors.JobSpec{Queue: "q", Type: "noop", Payload: payload}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	subs.Wait()
	<-all
	b.StopTimer()
	elapsed := time.Since(start)
	st := br.LogStats()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
	b.ReportMetric(float64(st.Events)/float64(max(st.Syncs, 1)), "events/fsync")
	b.ReportMetric(0, "ns/op")
	_ = br.Close()
	wg.Wait()
}
