package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherhq/tether/transport/client"
)

// SkewConfig is a fairness run (tether bench --tenants N --skew): N-1 light tenants submit at
// LightRate jobs a second each for Duration, first alone, then beside a heavy tenant that
// submits as fast as Base's producers can and runs on Base's workers. Each tenant has its own
// API key, enroll token and workers, made with the admin token; a worker serves one tenant, so
// what the heavy tenant can take from the light ones is the broker itself: its dispatcher, its
// log and its CPU.
type SkewConfig struct {
	Base       Config // the server, TLS, metrics token, and the heavy tenant's producers and workers
	AdminToken string
	Tenants    int     // the heavy one and Tenants-1 light ones
	LightRate  float64 // submits a second of each light tenant
	Duration   time.Duration
}

// SkewResult is what a fairness run measured: the light tenants' submit→start latency alone
// and beside the heavy tenant (the worst light tenant's, each), and the heavy tenant's pace.
type SkewResult struct {
	Tenants        int     `json:"tenants"`
	LightRate      float64 `json:"light_rate"`
	Alone          Latency `json:"light_alone"`
	Skewed         Latency `json:"light_beside_heavy"`
	P99Ratio       float64 `json:"p99_ratio"` // Skewed.P99 / Alone.P99: the target is 2 at most
	HeavyJobs      int64   `json:"heavy_jobs"`
	HeavyPerSecond float64 `json:"heavy_jobs_per_second"`
}

// Skew runs a fairness run.
func Skew(ctx context.Context, cfg SkewConfig) (SkewResult, error) {
	if cfg.Tenants < 2 || cfg.LightRate <= 0 || cfg.Duration <= 0 || cfg.AdminToken == "" {
		return SkewResult{}, errors.New("bench: a skew run needs 2 tenants or more, a light rate, a duration and the admin token")
	}
	admin := client.New(cfg.Base.Server, cfg.AdminToken, nil)
	tag := newQueue()[len("bench-"):]
	// The run's API keys are revoked when it ends, however it ends: its tenants' jobs stay, as
	// any run's do, but nothing can submit as them any more.
	var keys []string
	defer func() {
		revokeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		for _, id := range keys {
			_ = admin.RevokeAPIKey(revokeCtx, id)
		}
	}()
	tenant := func(name string, workers int) (Config, error) {
		c := cfg.Base
		key, err := admin.CreateAPIKey(ctx, name)
		if err != nil {
			return c, fmt.Errorf("bench: an API key for tenant %s: %w", name, err)
		}
		keys = append(keys, key.ID)
		tok, err := admin.CreateEnrollToken(ctx, name, workers, time.Hour)
		if err != nil {
			return c, fmt.Errorf("bench: an enroll token for tenant %s: %w", name, err)
		}
		c.Token, c.EnrollToken, c.Progress = key.Key, tok.Token, nil
		return c, nil
	}
	var lights []Config
	for i := 1; i < cfg.Tenants; i++ {
		c, err := tenant(fmt.Sprintf("bench-light-%s-%d", tag, i), 4) // two runs of 2 workers
		if err != nil {
			return SkewResult{}, err
		}
		c.Jobs, c.Rate, c.Duration, c.Producers, c.Workers = 0, cfg.LightRate, cfg.Duration, 1, 2
		lights = append(lights, c)
	}
	heavy, err := tenant("bench-heavy-"+tag, cfg.Base.Workers)
	if err != nil {
		return SkewResult{}, err
	}
	// Under --auth none every key is tenant default's: there would be one tenant, not N.
	if q, err := client.New(cfg.Base.Server, heavy.Token, nil).Quota(ctx); err != nil {
		return SkewResult{}, err
	} else if q.Tenant != "bench-heavy-"+tag {
		return SkewResult{}, fmt.Errorf("bench: the server took the heavy tenant's API key as tenant %q: a skew run needs a server under --auth token, whose API keys each name a tenant", q.Tenant)
	}
	out := SkewResult{Tenants: cfg.Tenants, LightRate: cfg.LightRate}
	if out.Alone, err = runLights(ctx, lights); err != nil {
		return out, err
	}
	// The heavy tenant saturates the broker from before the light tenants start until they end.
	heavy.Jobs = benchHeavyJobs
	var heavyDone atomic.Int64
	started := make(chan struct{})
	var once sync.Once
	heavy.Progress = func(done, _ int) {
		heavyDone.Store(int64(done))
		if done > 0 {
			once.Do(func() { close(started) })
		}
	}
	heavyCtx, stopHeavy := context.WithCancel(ctx)
	defer stopHeavy()
	heavyErr := make(chan error, 1)
	go func() {
		_, err := Run(heavyCtx, heavy)
		heavyErr <- err
	}()
	select {
	case <-started:
	case err := <-heavyErr:
		return out, fmt.Errorf("bench: the heavy tenant's run ended before the light ones started: %w", err)
	case <-ctx.Done():
		return out, ctx.Err()
	}
	began, from := time.Now(), heavyDone.Load()
	out.Skewed, err = runLights(ctx, lights)
	out.HeavyJobs = heavyDone.Load() - from
	out.HeavyPerSecond = float64(out.HeavyJobs) / time.Since(began).Seconds()
	stopHeavy()
	<-heavyErr // cancelled: its figures are the ones above
	if err != nil {
		return out, err
	}
	if out.Alone.P99 > 0 {
		out.P99Ratio = float64(out.Skewed.P99) / float64(out.Alone.P99)
	}
	return out, nil
}

// benchHeavyJobs is more than a heavy tenant runs while the light ones do: it is stopped then.
const benchHeavyJobs = 5_000_000

// runLights runs the light tenants' paced loads side by side and returns the latency of the
// worst of them (the highest p99).
func runLights(ctx context.Context, lights []Config) (Latency, error) {
	results := make([]Result, len(lights))
	errs := make([]error, len(lights))
	var wg sync.WaitGroup
	for i, c := range lights {
		wg.Go(func() { results[i], errs[i] = Run(ctx, c) })
	}
	wg.Wait()
	var worst Latency
	for i, r := range results {
		if errs[i] != nil {
			return worst, errs[i]
		}
		if r.SubmitToStart.P99 >= worst.P99 {
			worst = r.SubmitToStart
		}
	}
	return worst, nil
}

// PrintSkew writes a fairness run's result as a table.
func PrintSkew(w io.Writer, r SkewResult) {
	fmt.Fprintf(w, "%d light tenants at %v jobs/s each, beside one heavy tenant (%d jobs, %.0f jobs/s)\n", r.Tenants-1, r.LightRate,
		r.HeavyJobs, r.HeavyPerSecond)
	fmt.Fprintf(w, "light submit→start   p50 %8s  p99 %8s  max %8s   alone\n", r.Alone.P50.Round(time.Microsecond*100), r.Alone.P99.Round(time.Microsecond*100), r.Alone.Max.Round(time.Microsecond*100))
	fmt.Fprintf(w, "                     p50 %8s  p99 %8s  max %8s   beside the heavy tenant\n", r.Skewed.P50.Round(time.Microsecond*100), r.Skewed.P99.Round(time.Microsecond*100), r.Skewed.Max.Round(time.Microsecond*100))
	fmt.Fprintf(w, "p99 beside / alone: %.2f (target: 2 at most)\n", r.P99Ratio)
}
