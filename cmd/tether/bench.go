package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/tetherhq/tether/transport/bench"
)

func runBench(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var cfg bench.Config
	fs.StringVar(&cfg.Server, "server", "http://127.0.0.1:8080", "the server's URL")
	fs.StringVar(&cfg.Token, "token", "", "API key to submit with (none under --auth none)")
	fs.StringVar(&cfg.EnrollToken, "enroll-token", "", "enroll token for the workers, with --workers uses (none under --auth none)")
	fs.IntVar(&cfg.Jobs, "jobs", 20000, "saturated mode: jobs to run")
	fs.IntVar(&cfg.Producers, "producers", 8, "producers, each submitting one job per request and waiting for the answer")
	fs.IntVar(&cfg.Workers, "workers", 50, "workers, each its own WebSocket connection with capacity 1")
	fs.Float64Var(&cfg.Rate, "rate", 0, "paced mode: submits per second (with --duration)")
	fs.DurationVar(&cfg.Duration, "duration", 5*time.Second, "paced mode: how long to submit")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	res, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
	fmt.Printf("mode %s: %d jobs, %d producers, %d workers, %.2f s\n", res.Mode, res.Jobs, res.Producers, res.Workers, res.Elapsed.Seconds())
	fmt.Printf("throughput      %.0f jobs/s (until every completion was acknowledged)\n", res.JobsPerSecond)
	fmt.Printf("submit          p50 %s  p90 %s  p99 %s  max %s\n", ms(res.Submit.P50), ms(res.Submit.P90), ms(res.Submit.P99), ms(res.Submit.Max))
	fmt.Printf("submit→start    p50 %s  p90 %s  p99 %s  max %s\n", ms(res.SubmitToStart.P50), ms(res.SubmitToStart.P90), ms(res.SubmitToStart.P99), ms(res.SubmitToStart.Max))
	fmt.Printf("events/fsync    %.1f (%.0f events, %.0f fsyncs)\n", res.EventsPerFsync, res.Events, res.Fsyncs)
	if res.ServerCPUPerJob > 0 || res.GeneratorCPUPerJob > 0 {
		us := func(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }
		fmt.Printf("cpu per job     server %s  generator %s (user + system)\n", us(res.ServerCPUPerJob), us(res.GeneratorCPUPerJob))
	}
	if res.Errors > 0 {
		fmt.Printf("errors          %d\n", res.Errors)
	}
	return nil
}
