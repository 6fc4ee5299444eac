package bench

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/internal/proc"
	"github.com/tetherhq/tether/transport/wire"
)

// BatchJobs is the burn-down's batch: the most jobs one POST /v1/jobs/batch takes. The River
// peer inserts in batches of the same size.
const BatchJobs = actors.BatchJobsMax

// burnDown runs burn-down mode: cfg.BurnDown no-op jobs submitted in batches of BatchJobs by
// cfg.Producers at once, before any worker connects; then cfg.Workers workers of capacity
// cfg.Capacity drain them. The drain is timed from the first worker's connect to the server's
// acknowledgement of the last completion, and the server's figures are taken over it alone.
func burnDown(ctx context.Context, cfg Config, hc *http.Client, queue string) (Result, error) {
	total, capacity := cfg.BurnDown, max(cfg.Capacity, 1)
	// Registering is not connecting, and it is no part of either figure.
	regs, err := register(ctx, cfg, hc, queue, capacity)
	if err != nil {
		return Result{}, err
	}
	var keyed atomic.Int64
	batches, insert, err := insertBatches(ctx, total, cfg.Producers, cmp.Or(cfg.Stall, StallDefault), cfg.Server, func(ctx context.Context, n int) error {
		jobs := make([]wire.SubmitRequest, n)
		for i := range jobs {
			jobs[i] = cfg.job(queue, keyed.Add(1), nil)
		}
		resp, err := client.New(cfg.Server, cfg.Token, hc).SubmitBatch(ctx, jobs)
		if err == nil && len(resp.Jobs) != n {
			err = fmt.Errorf("bench: a batch of %d jobs answered %d", n, len(resp.Jobs))
		}
		return err
	})
	if err != nil {
		return Result{}, err
	}

	var (
		done, completed, failed atomic.Int64
		all                     = make(chan struct{})
		last                    time.Time // the last completion's acknowledgement
	)
	onResult := func(_ *client.Job, report string, err error) {
		if err != nil || report != "complete" {
			failed.Add(1)
		} else {
			completed.Add(1)
		}
		if done.Add(1) == int64(total) {
			last = time.Now()
			close(all)
		}
	}
	before, err := scrape(ctx, hc, cfg)
	if err != nil {
		return Result{}, err
	}
	cpuBefore, cpuKnown := proc.CPU()
	ws := startWorkers(ctx, cfg, hc, regs, capacity, func(context.Context, *client.Job) (any, error) { return nil, nil }, onResult)
	defer ws.stop()
	if err := waitAll(ctx, cfg, all, &done, &completed, total, ws.stopped); err != nil {
		return Result{}, err
	}
	first := time.Unix(0, ws.first.Load())
	after, cpuAfter, err := endRun(ctx, cfg, hc, total, before, ws)
	if err != nil {
		return Result{}, err
	}
	elapsed := last.Sub(first)
	res := Result{Mode: "burn-down", Queue: queue, Jobs: total, Producers: cfg.Producers, Workers: cfg.Workers, Capacity: capacity,
		ConcurrencyKeys: cfg.ConcurrencyKeys, MaxRunningPerKey: cfg.MaxRunningPerKey, RateLimit: cfg.RateLimit,
		Elapsed: elapsed, JobsPerSecond: float64(total) / elapsed.Seconds(), Errors: int(failed.Load()),
		Insert: insert, InsertPerSecond: float64(total) / insert.Seconds(), Batch: BatchJobs, Submit: latencyOf(batches)}
	res.measured(before, after, cpuAfter-cpuBefore, cpuKnown)
	return res, nil
}

// insertBatches submits total jobs in batches of at most BatchJobs, producers batches at once,
// with submit(ctx, n) for a batch of n. It returns each batch's latency and how long it took
// in all; the first batch that fails stops it with its reason.
func insertBatches(ctx context.Context, total, producers int, stall time.Duration, target string, submit func(context.Context, int) error) ([]time.Duration, time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, (total+BatchJobs-1)/BatchJobs)
		next      atomic.Int64 // jobs claimed
		wg        sync.WaitGroup
	)
	began := time.Now()
	for range max(producers, 1) {
		wg.Go(func() {
			for ctx.Err() == nil {
				to := next.Add(BatchJobs)
				n := min(int64(total), to) - (to - BatchJobs)
				if n <= 0 {
					return
				}
				sent := time.Now()
				if err := answerWithin(ctx, stall, fmt.Sprintf("a batch of %d jobs to", n), target, func(ctx context.Context) error { return submit(ctx, int(n)) }); err != nil {
					cancel(fmt.Errorf("bench: a batch submit failed, so the run stopped: %w", err))
					return
				}
				d := time.Since(sent)
				mu.Lock()
				latencies = append(latencies, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, 0, err
	}
	return latencies, time.Since(began), nil
}

// register registers cfg.Workers workers on queue, each of capacity jobs at once.
func register(ctx context.Context, cfg Config, hc *http.Client, queue string, capacity int) ([]wire.Registration, error) {
	enroll := client.New(cfg.Server, cfg.EnrollToken, hc)
	regs := make([]wire.Registration, cfg.Workers)
	for i := range regs {
		if err := cfg.bounded(ctx, "POST", "/v1/workers/register", func(ctx context.Context) error {
			reg, err := enroll.RegisterWorker(ctx, wire.RegisterRequest{Name: fmt.Sprintf("bench-%d", i), Queues: []string{queue}, Capacity: capacity})
			if err == nil {
				regs[i] = *reg
			}
			return err
		}); err != nil {
			return nil, fmt.Errorf("bench: registering worker %d: %w", i, err)
		}
	}
	return regs, nil
}

// workers are the run's workers, each on one WebSocket connection of its own.
type workers struct {
	connected chan struct{} // a send for each worker's first connect
	first     atomic.Int64  // the first connect of any, in Unix nanoseconds
	stopped   chan error    // a worker that gave up (its token refused, say)
	stop      func()        // stops them and waits for them; a second call does nothing
}

func startWorkers(ctx context.Context, cfg Config, hc *http.Client, regs []wire.Registration, capacity int,
	handler client.Handler, onResult func(*client.Job, string, error)) *workers {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	ws := &workers{connected: make(chan struct{}, len(regs)), stopped: make(chan error, len(regs))}
	ws.stop = sync.OnceFunc(func() {
		cancel()
		wg.Wait()
	})
	for _, reg := range regs {
		w := &client.Worker{Server: cfg.Server, Token: reg.WorkerToken, Capacity: capacity, Transport: "websocket", HTTPClient: hc, TLSConfig: cfg.TLS,
			OnConnect: func(string) {
				ws.first.CompareAndSwap(0, time.Now().UnixNano())
				select {
				case ws.connected <- struct{}{}:
				default: // a reconnect: the run counts the first connect of each
				}
			},
			Handler: handler, OnResult: onResult}
		wg.Go(func() {
			if err := w.Run(ctx); err != nil {
				ws.stopped <- err
			}
		})
	}
	return ws
}
