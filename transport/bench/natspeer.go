package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PeerConfig is a run of the NATS JetStream work-queue peer: the same shape as a saturated
// tether bench, on JetStream alone. A producer publishes each job to a work-queue stream and
// waits for its acknowledgement; a worker takes one job at a time from a shared pull consumer,
// publishes its completion to a second stream, waits for that acknowledgement, then acks the
// job and waits for the ack to be confirmed. Every submit and every completion is an acked
// publish, synced by servers that run with sync_interval: always.
type PeerConfig struct {
	URL       string // nats://host:port[,host:port...]
	Replicas  int
	Jobs      int
	Producers int
	Workers   int
}

// PeerResult is what a peer run measured.
type PeerResult struct {
	Jobs          int           `json:"jobs"` // completed and acknowledged
	Replicas      int           `json:"replicas"`
	Elapsed       time.Duration `json:"elapsed_ns"`
	JobsPerSecond float64       `json:"jobs_per_second"`
}

// RunPeer runs the peer on fresh streams, which it deletes at the end.
func RunPeer(ctx context.Context, cfg PeerConfig) (PeerResult, error) {
	nc, err := nats.Connect(strings.ReplaceAll(cfg.URL, "nats://", ""), nats.Name("tether bench peer"))
	if err != nil {
		return PeerResult{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return PeerResult{}, err
	}
	suffix := fmt.Sprint(time.Now().UnixNano())
	work, done := "PEER_WORK_"+suffix, "PEER_DONE_"+suffix
	for _, sc := range []jetstream.StreamConfig{
		{Name: work, Subjects: []string{"peer.work." + suffix}, Retention: jetstream.WorkQueuePolicy},
		{Name: done, Subjects: []string{"peer.done." + suffix}},
	} {
		sc.Storage, sc.Replicas = jetstream.FileStorage, cfg.Replicas
		if _, err := js.CreateStream(ctx, sc); err != nil {
			return PeerResult{}, fmt.Errorf("stream %s: %w", sc.Name, err)
		}
		defer func() { _ = js.DeleteStream(context.Background(), sc.Name) }()
	}
	cons, err := js.CreateConsumer(ctx, work, jetstream.ConsumerConfig{Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy,
		MaxAckPending: -1, AckWait: time.Minute})
	if err != nil {
		return PeerResult{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		submitted, completed atomic.Int64
		firstErr             error
		errOnce              sync.Once
		wg                   sync.WaitGroup
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel() })
	}
	start := time.Now()
	for range cfg.Producers {
		wg.Go(func() {
			for submitted.Add(1) <= int64(cfg.Jobs) {
				if _, err := js.Publish(ctx, "peer.work."+suffix, []byte(`{"queue":"bench","type":"noop","payload":{"n":1}}`)); err != nil {
					fail(fmt.Errorf("submit: %w", err))
					return
				}
			}
		})
	}
	for range cfg.Workers {
		wg.Go(func() {
			for completed.Load() < int64(cfg.Jobs) && ctx.Err() == nil {
				batch, err := cons.Fetch(1, jetstream.FetchMaxWait(200*time.Millisecond))
				if err != nil {
					fail(fmt.Errorf("fetch: %w", err))
					return
				}
				for m := range batch.Messages() {
					if _, err := js.Publish(ctx, "peer.done."+suffix, []byte(`{"output":{"ok":true}}`)); err != nil {
						fail(fmt.Errorf("complete: %w", err))
						return
					}
					if err := m.DoubleAck(ctx); err != nil {
						fail(fmt.Errorf("ack: %w", err))
						return
					}
					if completed.Add(1) == int64(cfg.Jobs) {
						cancel()
					}
				}
				if err := batch.Error(); err != nil && !errors.Is(err, context.Canceled) {
					fail(fmt.Errorf("fetch: %w", err))
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	finished := int(completed.Load())
	switch {
	case finished < cfg.Jobs && firstErr != nil:
		return PeerResult{}, firstErr
	case finished < cfg.Jobs:
		return PeerResult{}, fmt.Errorf("%d of %d jobs completed: %w", finished, cfg.Jobs, ctx.Err())
	}
	return PeerResult{Jobs: finished, Replicas: cfg.Replicas, Elapsed: elapsed, JobsPerSecond: float64(finished) / elapsed.Seconds()}, nil
}
