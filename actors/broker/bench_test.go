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
	"github.com/tetherhq/tether/projections"
)

// serverConfig is the broker as `tether server` opens it by default (cmd/tether/server.go):
// projection checkpoints every 20,000 events, which move the finished jobs to the table on
// disk, a week's retention of finished and dead jobs, and the archive loop running.
func serverConfig() broker.Config {
	return broker.Config{
		Logger:          zap.NewNop(),
		CheckpointEvery: 20_000,
		Retention:       projections.Retention{Done: 7 * 24 * time.Hour, Dead: 7 * 24 * time.Hour, MaxDead: 100_000},
		Archive:         broker.ArchiveConfig{After: 24 * time.Hour},
	}
}

// BenchmarkLifecycle drives no-op jobs through the facade, no network, with the server's
// configuration: 64 submitters each submit one job and wait for its receipt, and 64 workers
// (capacity 1) take each assignment and complete it. A worker does what the WebSocket reader
// does with a worker's frames: it hands the completion over without waiting (WorkerOp) and then
// grants its next credit, the frame the Go worker writes with the completion
// (transport/client), so the next lease may be committed with the completion. An op is one job
// from submit to durable completion.
func BenchmarkLifecycle(b *testing.B) {
	br := open(b, serverConfig())
	defer br.Close()
	const submitters, workers = 64, 64
	var completed atomic.Int64
	all := make(chan struct{})
	// An error ends the run at once: a job that is never completed would leave it waiting on
	// all for ever, a hang that says nothing of why.
	failed := make(chan struct{})
	var failOnce sync.Once
	fail := func(err error) {
		b.Error(err)
		failOnce.Do(func() { close(failed) })
	}
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
				br.WorkerOp(actors.Complete{WorkerID: s.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce}, func(_ int, _ actors.Receipt, err error) {
					if err != nil {
						fail(err)
						return
					}
					if completed.Add(1) == int64(b.N) {
						close(all)
					}
				})
				s.Credit(1)
			}
		}()
	}
	ctx := context.Background()
	payload := json.RawMessage(`{"n":1}`)
	var next atomic.Int64
	before := br.LogStats()
	start := time.Now()
	b.ResetTimer()
	var subs sync.WaitGroup
	for range submitters {
		subs.Add(1)
		go func() {
			defer subs.Done()
			for next.Add(1) <= int64(b.N) {
				if _, _, err := br.Submit(ctx, "acme", "", actors.JobSpec{Queue: "q", Type: "noop", Payload: payload}); err != nil {
					fail(err)
					return
				}
			}
		}()
	}
	subs.Wait()
	select {
	case <-all:
	case <-failed:
	}
	b.StopTimer()
	elapsed := time.Since(start)
	st := br.LogStats()
	syncs := st.SyncSeconds.Count - before.SyncSeconds.Count
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
	b.ReportMetric(float64(st.Events-before.Events)/float64(max(st.Syncs-before.Syncs, 1)), "events/fsync")
	b.ReportMetric((st.SyncSeconds.Sum-before.SyncSeconds.Sum)/float64(max(syncs, 1))*1e6, "µs/fsync")
	b.ReportMetric(0, "ns/op")
	_ = br.Close()
	wg.Wait()
}
