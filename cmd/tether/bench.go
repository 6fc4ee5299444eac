package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"time"

	"github.com/tetherhq/tether/transport/bench"
	"github.com/tetherhq/tether/transport/cli"
	"github.com/tetherhq/tether/transport/client"
)

// benchJobsMax caps a run's jobs: the bench keeps a latency for each, and a typo of a few
// digits more must be refused, not fail allocating.
const benchJobsMax = bench.JobsMax

// benchInterrupted is the exit status of a run stopped by Ctrl-C, as a shell has it: 128 + SIGINT.
const benchInterrupted = 130

func runBench(args []string) (err error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var cfg bench.Config
	cli.ServerVar(fs, &cfg.Server)
	fs.StringVar(&cfg.Token, "token", "", "API key to submit with (none under --auth none)")
	fs.StringVar(&cfg.EnrollToken, "enroll-token", "", "enroll token for the workers, with --workers uses (none under --auth none)")
	fs.StringVar(&cfg.MetricsToken, "metrics-token", "", "reads /metrics under --auth token (the server's --metrics-token, or its admin token); without it the server's figures are left out")
	fs.IntVar(&cfg.Jobs, "jobs", 20000, "saturated mode: jobs to run")
	fs.IntVar(&cfg.BurnDown, "burn-down", 0, "burn-down mode: submit this many jobs in batches before any worker connects, then time the workers' drain")
	fill := fs.Int("fill", 0, "history mode: run this many jobs (saturated), then time the list pages and queue stats a dashboard reads and report the server's memory and log size")
	fs.IntVar(&cfg.Producers, "producers", 8, "producers, each submitting one job per request and waiting for the answer")
	fs.IntVar(&cfg.Workers, "workers", 50, "workers, each its own WebSocket connection")
	fs.IntVar(&cfg.Capacity, "capacity", 1, "with --burn-down: jobs each worker runs at once (the other modes run 1)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "paced mode: submits per second (with --duration)")
	fs.DurationVar(&cfg.Duration, "duration", 5*time.Second, "paced mode: how long to submit")
	fs.DurationVar(&cfg.Setup, "setup-timeout", bench.SetupDefault, "how long each call outside the load (/healthz, a worker's registration, /metrics; the River peer's queries) waits for an answer before the run fails")
	fs.IntVar(&cfg.ConcurrencyKeys, "concurrency-keys", 0, "spread the jobs over this many concurrency keys, in turn (0: none)")
	fs.IntVar(&cfg.MaxRunningPerKey, "max-running-per-key", 1, "with --concurrency-keys: the run's queue's max_running_per_key (0: unlimited)")
	fs.Float64Var(&cfg.RateLimit, "rate-limit", 0, "every job takes a token of a rate limit of this many a second, burst the same (per concurrency key with --concurrency-keys; 0: none)")
	tenants := fs.Int("tenants", 0, "with --skew: the tenants of a fairness run, one heavy and the rest light (2 or more)")
	skew := fs.Bool("skew", false, "fairness run: the light tenants' submit→start latency alone, then beside a heavy tenant that saturates the server (needs --tenants and --admin-token, a server under --auth token)")
	adminToken := fs.String("admin-token", "", "with --skew: the server's admin token, to make each tenant's API key and enroll token")
	lightRate := fs.Float64("light-rate", 50, "with --skew: submits a second of each light tenant (for --duration, alone and then beside the heavy one; 50 a second for 10 s gives 500 latencies a tenant, so p99 is not just the slowest)")
	var ca cli.CACert
	ca.Register(fs)
	peer := fs.String("nats-peer", "", "instead of a tether server, run the NATS JetStream work-queue peer of the same shape on these NATS servers (nats://host:4222[,host:4222...]): every submit and completion an acked publish")
	peerReplicas := fs.Int("nats-replicas", 1, "with --nats-peer: the replicas of the peer's streams")
	riverPeer := fs.String("river-peer", "", "with --burn-down: instead of a tether server, run the same burn-down on River over this PostgreSQL (postgres://...; fsync and synchronous_commit on), its queue running --workers times --capacity jobs at once")
	asJSON := fs.Bool("json", false, "print the result as JSON instead of a table (a progress bar is drawn on stderr when it is a terminal)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case cfg.Producers < 1 || cfg.Workers < 1 || cfg.Capacity < 1:
		return cli.BadFlagf(fs, "--producers, --workers and --capacity are 1 or more")
	case !(cfg.Rate >= 0) || math.IsInf(cfg.Rate, 0):
		return cli.BadFlagf(fs, "--rate is a number of submits a second, 0 or more")
	case cfg.Duration < 0 || cfg.Jobs < 0 || *fill < 0 || cfg.BurnDown < 0 || cfg.Setup < 0:
		return cli.BadFlagf(fs, "--jobs, --fill, --burn-down, --duration and --setup-timeout are not negative")
	case max(cfg.Jobs, *fill, cfg.BurnDown) > benchJobsMax:
		return cli.BadFlagf(fs, "--jobs, --fill and --burn-down are at most %d: a run keeps a latency for every job", benchJobsMax)
	case cfg.Rate*cfg.Duration.Seconds() > benchJobsMax:
		return cli.BadFlagf(fs, "--rate times --duration is at most %d jobs: a run keeps a latency for every job", benchJobsMax)
	case cfg.Rate > 0 && set["jobs"]:
		return cli.BadFlagf(fs, "--rate times --duration is the jobs to run; it does not go with --jobs")
	case set["fill"] && *fill == 0:
		return cli.BadFlagf(fs, "--fill 0 fills nothing: give it the jobs to run")
	case *peer != "" && (*fill > 0 || cfg.Rate > 0):
		return cli.BadFlagf(fs, "--nats-peer runs saturated: it does not go with --fill or --rate")
	case set["burn-down"] && cfg.BurnDown == 0:
		return cli.BadFlagf(fs, "--burn-down 0 drains nothing: give it the jobs to submit")
	case cfg.BurnDown > 0 && set["jobs"]:
		return cli.BadFlagf(fs, "--burn-down N is the jobs to run; it does not go with --jobs")
	case cfg.BurnDown > 0 && (*fill > 0 || cfg.Rate > 0 || *peer != ""):
		return cli.BadFlagf(fs, "--burn-down does not go with --fill, --rate or --nats-peer")
	case *riverPeer != "" && cfg.BurnDown == 0:
		return cli.BadFlagf(fs, "--river-peer runs a burn-down: give --burn-down N")
	case cfg.Capacity > 1 && cfg.BurnDown == 0:
		return cli.BadFlagf(fs, "--capacity goes with --burn-down")
	case *fill > 0 && cfg.Rate > 0:
		return cli.BadFlagf(fs, "--fill runs saturated; it does not go with --rate")
	case cfg.ConcurrencyKeys < 0 || cfg.MaxRunningPerKey < 0:
		return cli.BadFlagf(fs, "--concurrency-keys and --max-running-per-key are not negative")
	case set["max-running-per-key"] && cfg.ConcurrencyKeys == 0:
		return cli.BadFlagf(fs, "--max-running-per-key goes with --concurrency-keys")
	case cfg.ConcurrencyKeys > 0 && (*riverPeer != "" || *peer != ""):
		return cli.BadFlagf(fs, "--concurrency-keys is tether's: it does not go with --river-peer or --nats-peer")
	case !(cfg.RateLimit >= 0) || cfg.RateLimit > 1e6:
		return cli.BadFlagf(fs, "--rate-limit is 0 (none) to 1000000 a second")
	case cfg.RateLimit > 0 && (*riverPeer != "" || *peer != ""):
		return cli.BadFlagf(fs, "--rate-limit is tether's: it does not go with --river-peer or --nats-peer")
	}
	switch {
	case *skew && (*tenants < 2 || *adminToken == ""):
		return cli.BadFlagf(fs, "--skew needs --tenants 2 or more and --admin-token")
	case *skew && !(*lightRate > 0 && *lightRate <= 10000):
		return cli.BadFlagf(fs, "--light-rate is above 0 and at most 10000 a second")
	case *skew && (set["jobs"] || cfg.BurnDown > 0 || *fill > 0 || cfg.Rate > 0 || *peer != "" || *riverPeer != "" ||
		cfg.RateLimit > 0 || cfg.ConcurrencyKeys > 0):
		return cli.BadFlagf(fs, "--skew runs its own loads: it does not go with --jobs, --burn-down, --fill, --rate, --rate-limit, --concurrency-keys or a peer")
	case *skew && cfg.Duration <= 0:
		return cli.BadFlagf(fs, "--skew needs a --duration above 0")
	case !*skew && (set["tenants"] || set["admin-token"] || set["light-rate"]):
		return cli.BadFlagf(fs, "--tenants, --admin-token and --light-rate go with --skew")
	}
	if *fill > 0 {
		cfg.Jobs, cfg.History = *fill, true
	}
	cfg.TLS = ca.TLS
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	defer func() {
		if ctx.Err() != nil { // Ctrl-C, whatever the run was doing then
			fmt.Fprintln(os.Stderr, "tether bench: interrupted")
			err = &cli.ExitError{Err: context.Cause(ctx), Status: benchInterrupted}
		}
	}()
	if *riverPeer != "" {
		res, err := bench.RunRiver(ctx, bench.RiverConfig{URL: *riverPeer, Jobs: cfg.BurnDown, Producers: cfg.Producers, Concurrency: cfg.Workers * cfg.Capacity,
			Stall: cfg.Stall, Setup: cfg.Setup})
		if err != nil {
			return err
		}
		return printResult(res, *asJSON)
	}
	if *peer != "" {
		res, err := bench.RunPeer(ctx, bench.PeerConfig{URL: *peer, Replicas: *peerReplicas, Jobs: cfg.Jobs, Producers: cfg.Producers, Workers: cfg.Workers})
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(os.Stdout).Encode(res)
		}
		fmt.Printf("NATS JetStream work-queue peer: %d jobs, R%d, %d producers, %d workers, %.2f s\n\nthroughput  %.0f jobs/s\n",
			res.Jobs, res.Replicas, cfg.Producers, cfg.Workers, res.Elapsed.Seconds(), res.JobsPerSecond)
		return nil
	}
	if *skew {
		res, err := bench.Skew(ctx, bench.SkewConfig{Base: cfg, AdminToken: *adminToken, Tenants: *tenants, LightRate: *lightRate, Duration: cfg.Duration})
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(res)
		}
		bench.PrintSkew(os.Stdout, res)
		return nil
	}
	var bar *bench.ProgressBar
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		bar = &bench.ProgressBar{W: os.Stderr}
		cfg.Progress = bar.Update
	}
	res, err := bench.Run(ctx, cfg)
	if bar != nil {
		bar.Done()
	}
	var refused *client.Error
	if errors.As(err, &refused) && refused.Code == "UNAUTHENTICATED" && (cfg.Token == "" || cfg.EnrollToken == "") {
		return fmt.Errorf("%w: the server runs --auth token; give --token (an API key) and --enroll-token (one of %d uses or more, for the workers)", err, cfg.Workers)
	}
	if err != nil {
		return err
	}
	return printResult(res, *asJSON)
}

func printResult(res bench.Result, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	return res.WriteTable(os.Stdout)
}
