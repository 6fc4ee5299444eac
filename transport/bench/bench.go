// Package bench is tether's load generator (tether bench): producers that submit one job per
// HTTP request and wait for the answer, and workers that each hold one WebSocket connection and
// run no-op jobs, against a running server. It measures what a user would: jobs per second
// until the server has acknowledged every completion, and the latency from submit to start.
package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/internal/proc"
	"github.com/tetherhq/tether/transport/wire"
)

// Config is one run.
type Config struct {
	Server      string
	Token       string // API key for submitting (none under --auth none)
	EnrollToken string // registers the workers (none under --auth none)
	// MetricsToken reads /metrics under --auth token (the server's metrics or admin token).
	// Without it such a server's event, fsync and CPU figures are left out.
	MetricsToken string
	Jobs         int // saturated mode: how many jobs
	// BurnDown > 0 selects burn-down mode: BurnDown jobs submitted in batches before any worker
	// connects, then drained by the workers.
	BurnDown  int
	Producers int
	Workers   int
	// Capacity is the jobs each worker runs at once in burn-down mode (0: 1); the other modes
	// run capacity 1.
	Capacity int
	// Rate > 0 selects paced mode: Rate submits per second for Duration, each on schedule
	// whether or not earlier ones were answered.
	Rate     float64
	Duration time.Duration
	// Progress, if set, is called with the jobs completed so far about ten times a second.
	Progress func(done, total int)
	// Stall ends a run in which no job finished for this long (0: StallDefault): a server
	// that died and stays down fails the run rather than hold it for ever, the workers
	// reconnecting in silence.
	Stall time.Duration
	// Setup bounds each call the run makes of the server outside its load (0: SetupDefault):
	// /healthz, the queue's limits, each worker's registration, each read of /metrics, the
	// history's reads. A server that takes the connection and never answers (a paused
	// process) fails the run, naming the call, instead of holding it for ever.
	Setup time.Duration
	// TLS, if set, is the TLS configuration for an https server (a private CA's RootCAs).
	TLS *tls.Config
	// History, after a saturated run (tether bench --fill N), times the reads of a server that
	// now holds a history: Result.History.
	History bool
	// ConcurrencyKeys > 0 spreads the jobs over that many concurrency keys, in turn, and
	// MaxRunningPerKey is then the run's queue's max_running_per_key (0: unlimited).
	ConcurrencyKeys  int
	MaxRunningPerKey int
	// RateLimit > 0 makes every job take a token of a rate limit of that many a second (burst
	// the same), from its concurrency key's bucket when the run has keys.
	RateLimit float64
}

// benchRateLimit is the name of the run's rate limit.
const benchRateLimit = "bench"

// job is the run's ith job in queue, with payload body.
func (cfg *Config) job(queue string, i int64, body []byte) wire.SubmitRequest {
	req := wire.SubmitRequest{Queue: queue, Type: "noop", Payload: body, ConcurrencyKey: cfg.keyOf(i)}
	if cfg.RateLimit > 0 {
		req.RateLimits = []wire.RateLimitUse{{Name: benchRateLimit, Key: req.ConcurrencyKey}}
	}
	return req
}

// keyOf is the concurrency key of the run's ith job: none, or one of cfg.ConcurrencyKeys in turn.
func (cfg *Config) keyOf(i int64) string {
	if cfg.ConcurrencyKeys <= 0 {
		return ""
	}
	return "k" + strconv.FormatInt(i%int64(cfg.ConcurrencyKeys), 10)
}

// setLimits sets the run's queue's max_running_per_key when the run spreads its jobs over keys,
// and its rate limit when it has one.
func setLimits(ctx context.Context, cfg Config, hc *http.Client, queue string) error {
	c := client.New(cfg.Server, cfg.Token, hc)
	if cfg.ConcurrencyKeys > 0 {
		if err := cfg.bounded(ctx, "PUT", "/v1/queues/"+queue+"/limits", func(ctx context.Context) error {
			_, err := c.SetQueueLimits(ctx, "", queue, new(cfg.MaxRunningPerKey))
			return err
		}); err != nil {
			return fmt.Errorf("bench: setting the queue's max_running_per_key: %w", err)
		}
	}
	if cfg.RateLimit > 0 {
		if err := cfg.bounded(ctx, "PUT", "/v1/rate-limits/"+benchRateLimit, func(ctx context.Context) error {
			_, err := c.SetRateLimit(ctx, "", benchRateLimit, cfg.RateLimit, max(1, int(math.Ceil(cfg.RateLimit))))
			return err
		}); err != nil {
			return fmt.Errorf("bench: setting the rate limit: %w", err)
		}
	}
	return nil
}

// Result is what a run measured.
type Result struct {
	Mode      string `json:"mode"`
	Jobs      int    `json:"jobs"`
	Producers int    `json:"producers"`
	Workers   int    `json:"workers"`
	Capacity  int    `json:"capacity"` // jobs each worker runs at once
	// ConcurrencyKeys and MaxRunningPerKey are the run's keys and their limit (Config's).
	ConcurrencyKeys  int           `json:"concurrency_keys,omitempty"`
	MaxRunningPerKey int           `json:"max_running_per_key,omitempty"`
	RateLimit        float64       `json:"rate_limit,omitempty"` // tokens a second of the limit every job takes from`
	Elapsed          time.Duration `json:"elapsed_ns"`
	JobsPerSecond    float64       `json:"jobs_per_second"` // burn-down mode: the drain's rate
	// Burn-down mode: how long the batched submits took, and their rate; the batch size.
	Insert          time.Duration `json:"insert_ns,omitempty"`
	InsertPerSecond float64       `json:"insert_jobs_per_second,omitempty"`
	Batch           int           `json:"batch,omitempty"`
	// Database is the River peer's PostgreSQL, as its settings say.
	Database       *Database `json:"database,omitempty"`
	Submit         Latency   `json:"submit_latency"`                   // request → answer (durable); burn-down mode: of a batch
	SubmitToStart  Latency   `json:"submit_to_start_latency,omitzero"` // request sent → handler called; a burn-down does not measure it (none in its JSON)
	Errors         int       `json:"errors"`                           // results not taken as a completion; a failed submit ends the run instead
	Events         float64   `json:"events"`
	Fsyncs         float64   `json:"fsyncs"`
	EventsPerFsync float64   `json:"events_per_fsync"`
	// ServerMetrics says the server's /metrics could be read: without it (--auth token and no
	// metrics token) Events, Fsyncs and ServerCPUPerJob are unknown, not zero.
	ServerMetrics bool `json:"server_metrics"`
	// CPU per job, user and system: the server's from its process_cpu_seconds_total, the
	// generator's its own. On a shared or noisy machine these compare builds better than
	// jobs/s, which also moves with latency. Zero where a side does not report it.
	ServerCPUPerJob    time.Duration `json:"server_cpu_per_job_ns"`
	GeneratorCPUPerJob time.Duration `json:"generator_cpu_per_job_ns"`
	// Queue is the run's own queue.
	Queue   string   `json:"queue"`
	History *History `json:"history,omitempty"`
}

// Latency percentiles.
type Latency struct {
	P50 time.Duration `json:"p50_ns"`
	P90 time.Duration `json:"p90_ns"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
}

func latencyOf(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return Latency{P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: ds[len(ds)-1]}
}

// payload carries the moment its submit was sent, for the submit→start latency.
type payload struct {
	Sent int64 `json:"sent"`
}

// appendPayload appends the payload of a job submitted at sent (Unix nanoseconds), as
// json.Marshal writes a payload.
func appendPayload(dst []byte, sent int64) []byte {
	return append(strconv.AppendInt(append(dst, `{"sent":`...), sent, 10), '}')
}

// sentOf reads when a job was submitted from its payload, as appendPayload wrote it (without
// encoding/json: the handler runs on the generator's CPU) or as any JSON says it.
func sentOf(raw []byte) (int64, bool) {
	if digits, ok := bytes.CutPrefix(raw, []byte(`{"sent":`)); ok {
		if digits, ok = bytes.CutSuffix(digits, []byte("}")); ok {
			if sent, err := strconv.ParseInt(string(digits), 10, 64); err == nil && sent > 0 {
				return sent, true
			}
		}
	}
	var p payload
	if json.Unmarshal(raw, &p) != nil || p.Sent <= 0 {
		return 0, false
	}
	return p.Sent, true
}

// JobsMax caps a run's jobs, however they are given (paced: its rate times its duration):
// a run keeps a latency for each.
const JobsMax = 100_000_000

// Run runs the benchmark and returns what it measured.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Producers <= 0 || cfg.Workers <= 0 {
		return Result{}, errors.New("bench: producers and workers must be at least 1")
	}
	paced := cfg.Rate > 0
	total := cfg.Jobs
	switch {
	case cfg.BurnDown > 0 && paced:
		return Result{}, errors.New("bench: a burn-down is not paced")
	case cfg.BurnDown > 0:
		total = cfg.BurnDown
	case paced:
		jobs := cfg.Rate * cfg.Duration.Seconds()
		if !(jobs <= JobsMax) || math.IsInf(cfg.Rate, 0) {
			return Result{}, fmt.Errorf("bench: a paced run of %g submits a second for %s is more than %d jobs", cfg.Rate, cfg.Duration, JobsMax)
		}
		total = int(jobs)
	}
	if total > JobsMax {
		return Result{}, fmt.Errorf("bench: %d jobs is more than %d", total, JobsMax)
	}
	if total <= 0 {
		return Result{}, errors.New("bench: nothing to do: give --jobs, or --rate and --duration")
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute, TLSClientConfig: cfg.TLS}}
	if strings.Contains(cfg.Server, ",") {
		leader, err := leaderOf(ctx, hc, client.SplitServers(cfg.Server))
		if err != nil {
			return Result{}, err
		}
		cfg.Server = leader
	}
	if _, err := newProducer(cfg.Server, cfg.Token, cfg.TLS); err != nil {
		return Result{}, err
	}
	queue := newQueue()
	if err := healthy(ctx, hc, cfg); err != nil { // a server that is there, before workers register
		return Result{}, err
	}
	if err := setLimits(ctx, cfg, hc, queue); err != nil {
		return Result{}, err
	}
	if cfg.BurnDown > 0 {
		return burnDown(ctx, cfg, hc, queue)
	}
	// Workers: one registration and one WebSocket each, capacity 1, no-op jobs.
	var (
		startMu   sync.Mutex
		starts    = make([]time.Duration, 0, min(total, preallocated))
		done      atomic.Int64
		completed atomic.Int64
		failed    atomic.Int64
		all       = make(chan struct{})
	)
	handler := func(_ context.Context, j *client.Job) (any, error) {
		if sent, ok := sentOf(j.Payload); ok {
			d := time.Since(time.Unix(0, sent))
			startMu.Lock()
			starts = append(starts, d)
			startMu.Unlock()
		}
		return nil, nil
	}
	onResult := func(_ *client.Job, report string, err error) {
		if err != nil || report != "complete" {
			failed.Add(1)
		} else {
			completed.Add(1)
		}
		if n := done.Add(1); n == int64(total) {
			close(all)
		}
	}
	regs, err := register(ctx, cfg, hc, queue, 1)
	if err != nil {
		return Result{}, err
	}
	ws := startWorkers(ctx, cfg, hc, regs, 1, handler, onResult)
	defer ws.stop() // every way out stops the workers, then waits for them
	connectBy := time.NewTimer(connectWait)
	defer connectBy.Stop()
	for range cfg.Workers {
		select {
		case <-ws.connected:
		case err := <-ws.stopped:
			return Result{}, fmt.Errorf("bench: a worker stopped before it connected: %w", err)
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-connectBy.C:
			return Result{}, fmt.Errorf("bench: the workers did not all connect within %s", connectWait)
		}
	}

	// Producers. The first submit that fails stops the run with its reason (a server that
	// restarts, a refused key): figures with a hole in them measure nothing.
	runCtx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	var (
		submitMu  sync.Mutex
		submits   = make([]time.Duration, 0, min(total, preallocated))
		next      atomic.Int64
		keyed     atomic.Int64 // submits made: the next one's key
		producers sync.WaitGroup
	)
	submitOne := func(p *producer, scheduled time.Time) {
		sent := time.Now()
		if scheduled.IsZero() {
			scheduled = sent
		}
		p.payload = appendPayload(p.payload[:0], scheduled.UnixNano())
		err := p.submit(runCtx, cfg.job(queue, keyed.Add(1), p.payload))
		d := time.Since(sent)
		if err != nil {
			if runCtx.Err() == nil {
				stopRun(fmt.Errorf("bench: a submit failed, so the run stopped: %w", err))
			}
			return
		}
		submitMu.Lock()
		submits = append(submits, d)
		submitMu.Unlock()
	}
	// What the server counts from here on is the run's: the workers are registered and connected.
	before, err := scrape(ctx, hc, cfg)
	if err != nil {
		return Result{}, err
	}
	cpuBefore, cpuKnown := proc.CPU()
	began := time.Now()
	if paced {
		// Each submit leaves on its schedule; a slow answer does not delay the next one
		// (no coordinated omission). Producers bounds the requests in flight.
		sem := make(chan struct{}, max(cfg.Producers, 1)*64)
		idle := make(chan *producer, cap(sem)) // connections not in use
		defer func() {
			for len(idle) > 0 {
				(<-idle).close()
			}
		}()
		interval := time.Duration(float64(time.Second) / cfg.Rate)
		for i := range total {
			at := began.Add(time.Duration(i) * interval)
			if d := time.Until(at); d > 0 { // pacing the load generator, not waiting for a result
				select {
				case <-time.After(d):
				case <-runCtx.Done():
					return Result{}, context.Cause(runCtx)
				}
			}
			sem <- struct{}{}
			producers.Add(1)
			go func() {
				defer producers.Done()
				defer func() { <-sem }()
				var p *producer
				select {
				case p = <-idle:
				default:
					p, _ = newProducer(cfg.Server, cfg.Token, cfg.TLS) // checked above
				}
				submitOne(p, at)
				idle <- p // never blocks: at most cap(sem) are made
			}()
		}
	} else {
		for range cfg.Producers {
			producers.Add(1)
			p, _ := newProducer(cfg.Server, cfg.Token, cfg.TLS) // checked above
			go func() {
				defer producers.Done()
				defer p.close()
				for next.Add(1) <= int64(total) && runCtx.Err() == nil {
					submitOne(p, time.Time{})
				}
			}()
		}
	}
	if err := waitAll(runCtx, cfg, all, &done, &completed, total, nil); err != nil {
		return Result{}, err
	}
	elapsed := time.Since(began)
	producers.Wait()
	after, cpuAfter, err := endRun(ctx, cfg, hc, total, before, ws)
	if err != nil {
		return Result{}, err
	}
	res := Result{Mode: "saturated", Queue: queue, Jobs: total, Producers: cfg.Producers, Workers: cfg.Workers, Capacity: 1, Elapsed: elapsed,
		ConcurrencyKeys: cfg.ConcurrencyKeys, MaxRunningPerKey: cfg.MaxRunningPerKey, RateLimit: cfg.RateLimit,
		JobsPerSecond: float64(total) / elapsed.Seconds(), Submit: latencyOf(submits), SubmitToStart: latencyOf(starts),
		Errors: int(failed.Load())}
	if paced {
		res.Mode = "paced"
	}
	res.measured(before, after, cpuAfter-cpuBefore, cpuKnown)
	if cfg.History && !paced {
		if res.History, err = measureHistory(ctx, hc, cfg, queue); err != nil {
			return res, err
		}
	}
	return res, nil
}

// preallocated bounds the latencies a run makes room for at its start: a long run's grow as
// they come, not all at once before the first job.
const preallocated = 1 << 20

// StallDefault is Config.Stall's default: longer than a lease's default TTL and the backoff of
// a retry, so that a lost lease or a server's restart does not end a run.
const StallDefault = 2 * time.Minute

// waitAll waits for all to close, drawing the progress of done out of total, or for ctx to end
// (its cause) or a worker to stop (stopped: nil if a run goes on without it), whichever is first;
// a run in which no job completed (completed did not move) for cfg.Stall fails. A result the
// server did not take (its connection lost) counts in done but is no progress: a paused server
// makes many.
func waitAll(ctx context.Context, cfg Config, all <-chan struct{}, done, completed *atomic.Int64, total int, stopped <-chan error) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	stall := cmp.Or(cfg.Stall, StallDefault)
	last, moved := completed.Load(), time.Now()
	for {
		select {
		case <-all:
			return nil
		case err := <-stopped:
			return fmt.Errorf("bench: a worker stopped: %w", err)
		case now := <-tick.C:
			n := done.Load()
			if cfg.Progress != nil {
				cfg.Progress(int(n), total)
			}
			if c := completed.Load(); c != last {
				last, moved = c, now
			} else if now.Sub(moved) >= stall {
				return fmt.Errorf("bench: no job finished for %s (%d of %d done): is the server up?", stall, n, total)
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// endRun ends a run once its last completion is in: the last progress, the generator's CPU and
// the server's figures, then the workers stopped. A server that restarted meanwhile fails it.
func endRun(ctx context.Context, cfg Config, hc *http.Client, total int, before map[string]float64, ws *workers) (map[string]float64, time.Duration, error) {
	if cfg.Progress != nil {
		cfg.Progress(total, total)
	}
	cpu, _ := proc.CPU()
	after, err := scrape(ctx, hc, cfg)
	if err != nil {
		return nil, 0, err
	}
	ws.stop()
	if restarted(before, after) {
		return nil, 0, errors.New("bench: the server restarted during the run (its process_start_time_seconds changed): the figures would mix two processes, so there are none")
	}
	return after, cpu, nil
}

// measured fills in what the server's /metrics (before and after the run) and the generator's
// own CPU (cpu, if known) say, per job of the run.
func (r *Result) measured(before, after map[string]float64, cpu time.Duration, cpuKnown bool) {
	r.ServerMetrics = after != nil
	r.Events = after["tether_log_events_total"] - before["tether_log_events_total"]
	r.Fsyncs = after["tether_log_fsync_seconds_count"] - before["tether_log_fsync_seconds_count"]
	if r.Fsyncs > 0 {
		r.EventsPerFsync = r.Events / r.Fsyncs
	}
	perJob := func(d time.Duration) time.Duration { return d / time.Duration(r.Jobs) }
	if cpuKnown {
		r.GeneratorCPUPerJob = perJob(cpu)
	}
	if s, ok := after["process_cpu_seconds_total"]; ok {
		r.ServerCPUPerJob = perJob(time.Duration((s - before["process_cpu_seconds_total"]) * float64(time.Second)))
	}
}

// newQueue names a run's own queue: jobs of earlier runs do not count.
func newQueue() string {
	var tag [6]byte
	_, _ = rand.Read(tag[:])
	return "bench-" + hex.EncodeToString(tag[:])
}

// connectWait bounds how long the workers have to connect before a run gives up.
const connectWait = 30 * time.Second

// leaderOf finds, among the servers of a replicated log, the one that leads: the one whose
// /readyz answers 200, asked of them all at once, so that a paused one costs a second, not
// the run. The load goes to it alone, as a benchmark of one broker.
func leaderOf(ctx context.Context, hc *http.Client, servers []string) (string, error) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		if s := client.FindLeader(ctx, hc, servers, time.Second); s != "" {
			return s, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("bench: none of %s leads (no /readyz answered 200 for 15 s)", strings.Join(servers, ", "))
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(250 * time.Millisecond): // a failover may be under way
		}
	}
}

// SetupDefault is Config.Setup's default: far longer than a server that runs, even a loaded
// one, takes to answer any of the calls it bounds.
const SetupDefault = 30 * time.Second

// bounded makes call, a request to the server outside the run's load, giving it cfg.Setup to
// answer; op and path name it.
func (cfg *Config) bounded(ctx context.Context, op, path string, call func(context.Context) error) error {
	return answerWithin(ctx, cmp.Or(cfg.Setup, SetupDefault), op, strings.TrimRight(cfg.Server, "/")+path, call)
}

// answerWithin makes call, a request of target, with wait to answer. One that runs out of it
// fails as a request to a server that cannot be reached fails, a *url.Error (the command
// line's CLI_UNREACHABLE), that names the request and how long it waited.
func answerWithin(ctx context.Context, wait time.Duration, op, target string, call func(context.Context) error) error {
	callCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	err := call(callCtx)
	if err != nil && ctx.Err() == nil && callCtx.Err() != nil {
		return &url.Error{Op: op, URL: target, Err: fmt.Errorf("no answer within %s (a paused server, or another program on its port?)", wait)}
	}
	return err
}

// healthy checks that a tether server answers at cfg.Server.
func healthy(ctx context.Context, hc *http.Client, cfg Config) error {
	if err := cfg.bounded(ctx, "GET", "/healthz", func(ctx context.Context) error {
		return get(ctx, hc, strings.TrimRight(cfg.Server, "/")+"/healthz", "")
	}); err != nil {
		return fmt.Errorf("bench: the server at %s: %w", cfg.Server, err)
	}
	return nil
}

// get asks for target and reads the whole answer, which must be 200.
func get(ctx context.Context, hc *http.Client, target, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s answered %s", target, resp.Status)
	}
	return nil
}

// restarted reports whether two scrapes of /metrics are of two processes.
func restarted(before, after map[string]float64) bool {
	b, okB := before["process_start_time_seconds"]
	a, okA := after["process_start_time_seconds"]
	return okA && okB && a != b || after != nil && after["tether_log_events_total"] < before["tether_log_events_total"]
}

// scrape reads the unlabelled samples of the server's /metrics, or returns nil if the server
// wants a credential the run was not given; the server has cfg.Setup to answer.
func scrape(ctx context.Context, hc *http.Client, cfg Config) (m map[string]float64, err error) {
	err = cfg.bounded(ctx, "GET", "/metrics", func(ctx context.Context) error {
		m, err = scrapeOnce(ctx, hc, cfg.Server, cfg.MetricsToken)
		return err
	})
	return m, err
}

func scrapeOnce(ctx context.Context, hc *http.Client, server, token string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(server, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("bench: the server at %s: %w", server, err)
	}
	defer resp.Body.Close()
	switch {
	case (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) && token == "":
		return nil, nil
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("bench: %s/metrics answered %s", server, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}
