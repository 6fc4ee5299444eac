package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/tetherhq/tether/transport/internal/proc"
)

// RiverConfig is a burn-down on River (riverqueue.com) over PostgreSQL, the peer of tether
// bench --burn-down: Jobs no-op jobs inserted with InsertMany in batches of BatchJobs,
// Producers batches at once, before a River client starts; then one client whose queue runs
// Concurrency jobs at once (the tether run's workers times their capacity) works them. River's
// other settings are its defaults, as a user would have them; so is the connection pool's.
type RiverConfig struct {
	URL         string // postgres://...
	Jobs        int
	Producers   int
	Concurrency int
	// Stall ends a run in which no job completed, or no batch was answered, for this long
	// (0: StallDefault), as Config.Stall ends tether's; Setup bounds each call before and after
	// the drain (0: SetupDefault), as Config.Setup does.
	Stall, Setup time.Duration
}

// Database is what the River peer's PostgreSQL says of its durability, with SHOW.
type Database struct {
	Version           string `json:"version"`
	Fsync             string `json:"fsync"`
	SynchronousCommit string `json:"synchronous_commit"`
}

// riverNoop is the peer's job: it does nothing.
type riverNoop struct{}

func (riverNoop) Kind() string { return "tether_bench_noop" }

// RunRiver migrates River's schema into the database (a no-op where it is there), runs the
// burn-down on a queue of its own, and deletes that queue's jobs at the end. It refuses a
// database that runs with fsync or synchronous_commit off: its commits would not be durable
// when acknowledged, as tether's are. The drain is timed from the client's start to the last
// completion River reports, which its completer sends once the completion is committed.
// ServerCPUPerJob is PostgreSQL's, where it runs on this machine (GeneratorCPUPerJob is this
// process's: River's client and its workers).
func RunRiver(ctx context.Context, cfg RiverConfig) (Result, error) {
	if cfg.Jobs <= 0 || cfg.Producers <= 0 || cfg.Concurrency <= 0 {
		return Result{}, errors.New("bench: the River peer needs jobs, producers and concurrency of 1 or more")
	}
	pool, err := pgxpool.New(ctx, cfg.URL)
	if err != nil {
		return Result{}, fmt.Errorf("bench: River peer: %w", err)
	}
	defer pool.Close()
	// Every call outside the drain has cfg.Setup to answer: a PostgreSQL that took the
	// connection and is paused fails the run rather than hold it.
	where := pool.Config().ConnConfig.Host + ":" + strconv.Itoa(int(pool.Config().ConnConfig.Port))
	setup := func(ctx context.Context, what string, call func(context.Context) error) error {
		return answerWithin(ctx, cmp.Or(cfg.Setup, SetupDefault), what, "postgres://"+where, call)
	}
	stall := cmp.Or(cfg.Stall, StallDefault)
	var db Database
	if err := setup(ctx, "SELECT current_setting", func(ctx context.Context) error {
		return pool.QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('fsync'), current_setting('synchronous_commit')").
			Scan(&db.Version, &db.Fsync, &db.SynchronousCommit)
	}); err != nil {
		return Result{}, fmt.Errorf("bench: River peer: %w", err)
	}
	if db.Fsync != "on" || db.SynchronousCommit == "off" {
		return Result{}, fmt.Errorf("bench: the River peer's PostgreSQL runs with fsync %s and synchronous_commit %s: its commits are not durable when acknowledged, so it is no peer of tether's; turn both on", db.Fsync, db.SynchronousCommit)
	}
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return Result{}, err
	}
	if err := setup(ctx, "migrating River's schema on", func(ctx context.Context) error {
		_, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
		return err
	}); err != nil {
		return Result{}, fmt.Errorf("bench: migrating River's schema: %w", err)
	}

	queue := newQueue()
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[riverNoop]) error { return nil }))
	rc, err := river.NewClient(driver, &river.Config{
		Queues:  map[string]river.QueueConfig{queue: {MaxWorkers: cfg.Concurrency}},
		Workers: workers,
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return Result{}, err
	}
	defer func() {
		_ = setup(context.WithoutCancel(ctx), "DELETE FROM river_job", func(ctx context.Context) error {
			_, err := pool.Exec(ctx, "DELETE FROM river_job WHERE queue = $1", queue)
			return err
		})
	}()

	batches, insert, err := insertBatches(ctx, cfg.Jobs, cfg.Producers, stall, "postgres://"+where, func(ctx context.Context, n int) error {
		params := make([]river.InsertManyParams, n)
		for i := range params {
			params[i] = river.InsertManyParams{Args: riverNoop{}, InsertOpts: &river.InsertOpts{Queue: queue}}
		}
		res, err := rc.InsertMany(ctx, params)
		if err == nil && len(res) != n {
			err = fmt.Errorf("bench: InsertMany of %d jobs answered %d", n, len(res))
		}
		return err
	})
	if err != nil {
		return Result{}, err
	}

	// Every completion is an event; a buffer for all of them, as River drops what overflows.
	events, unsubscribe := rc.SubscribeConfig(&river.SubscribeConfig{ChanSize: cfg.Jobs,
		Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled, river.EventKindJobSnoozed}})
	defer unsubscribe()
	var pgBefore, pgAfter time.Duration
	var pgKnown bool
	_ = setup(ctx, "reading PostgreSQL's CPU on", func(ctx context.Context) error {
		pgBefore, pgKnown = postgresCPU(ctx, pool)
		return nil
	})
	cpuBefore, cpuKnown := proc.CPU()
	began := time.Now()
	if err := rc.Start(ctx); err != nil { // not bounded: its context is the client's life
		return Result{}, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = rc.Stop(stopCtx)
	}()
	// The drain is under the stall check of tether's runs: a PostgreSQL paused mid-run fails it.
	var done, completed, failed atomic.Int64
	all := make(chan struct{})
	drainCtx, stopDrain := context.WithCancel(ctx)
	defer stopDrain()
	go func() {
		for {
			select {
			case e := <-events:
				if e.Kind == river.EventKindJobCompleted {
					completed.Add(1)
				} else {
					failed.Add(1)
				}
				if done.Add(1) == int64(cfg.Jobs) {
					close(all)
					return
				}
			case <-drainCtx.Done():
				return
			}
		}
	}()
	if err := waitAll(ctx, Config{Stall: stall}, all, &done, &completed, cfg.Jobs, nil); err != nil {
		return Result{}, fmt.Errorf("bench: River peer: %d of %d jobs completed: %w", completed.Load(), cfg.Jobs, err)
	}
	elapsed := time.Since(began)
	cpuAfter, _ := proc.CPU()
	_ = setup(ctx, "reading PostgreSQL's CPU on", func(ctx context.Context) error {
		var ok bool
		pgAfter, ok = postgresCPU(ctx, pool)
		pgKnown = pgKnown && ok
		return nil
	})
	res := Result{Mode: "River burn-down", Queue: queue, Jobs: cfg.Jobs, Producers: cfg.Producers, Workers: 1, Capacity: cfg.Concurrency,
		Elapsed: elapsed, JobsPerSecond: float64(cfg.Jobs) / elapsed.Seconds(), Errors: int(failed.Load()),
		Insert: insert, InsertPerSecond: float64(cfg.Jobs) / insert.Seconds(), Batch: BatchJobs, Submit: latencyOf(batches), Database: &db}
	if cpuKnown {
		res.GeneratorCPUPerJob = (cpuAfter - cpuBefore) / time.Duration(cfg.Jobs)
	}
	if pgKnown {
		res.ServerCPUPerJob = (pgAfter - pgBefore) / time.Duration(cfg.Jobs)
	}
	return res, nil
}
