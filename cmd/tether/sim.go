package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherhq/tether/sim"
	"github.com/tetherhq/tether/transport/cli"
)

func runSim(args []string) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	seed := fs.Uint64("seed", 1, "the seed of one run")
	seeds := fs.String("seeds", "", "a range of seeds A..B to run instead of one")
	steps := fs.Int("steps", 2000, "steps of the safety phase (faults on); heal and liveness follow")
	all, _ := sim.ParseFaults("all")
	names := make([]string, len(all))
	for i, f := range all {
		names[i] = f.String()
	}
	off := fs.String("off", "", "fault classes to turn off, comma-separated: "+strings.Join(names, ",")+"; all: a run without faults")
	shrink := fs.Bool("shrink", false, "on a failure, turn fault classes off and shorten the run while it still fails")
	twice := fs.Bool("check-determinism", false, "run every seed twice in this process and fail if the traces differ")
	trace := fs.Bool("trace", false, "print every step of a single seed")
	parallel := fs.Int("parallel", runtime.GOMAXPROCS(0), "seeds run at once with --seeds")
	untilBroken := fs.Bool("until-broken", false, "with --seeds, start no more seeds once one breaks an invariant (they start in order: the first that breaks one always runs)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if *steps < 0 || *parallel < 1 {
		return cli.BadFlagf(fs, "--steps is 0 or more, --parallel 1 or more")
	}
	faults, err := sim.ParseFaults(*off)
	if err != nil {
		return err
	}
	first, last := *seed, *seed
	if *seeds != "" {
		if first, last, err = parseSeedRange(*seeds); err != nil {
			return err
		}
	}
	run := sim.Run
	if *twice {
		run = sim.RunTwice
	}
	start := time.Now()
	results, errs := runSeeds(first, last, *parallel, *untilBroken, func(seed uint64) (*sim.Result, error) {
		cfg := sim.Config{Seed: seed, Steps: *steps, Off: faults}
		if *trace && first == last {
			cfg.Trace = os.Stdout
		}
		return run(cfg)
	})
	took := time.Since(start)

	failed, ran, totalSteps := 0, 0, 0
	hit := make([]int, len(sim.Probes()))
	for i, r := range results {
		if errs[i] != nil {
			return errs[i]
		}
		if r == nil {
			continue // not started: an earlier seed broke an invariant (--until-broken)
		}
		ran++
		totalSteps += r.Steps
		for p, n := range r.Probes {
			hit[p] += n
		}
		if r.Violation == nil {
			if len(results) == 1 {
				fmt.Println(r.Summary())
			}
			continue
		}
		failed++
		reportViolation(r)
		if *shrink {
			small, err := sim.Shrink(r, run)
			if err != nil {
				return err
			}
			fmt.Printf("shrunk: %s\n  %s\n  reproduce: %s\n", small.Violation.Error(), small.Summary(), small.Config.Command()+determinismFlag(*twice))
		}
	}
	if len(results) > 1 {
		var never []string
		for p, n := range hit {
			if n == 0 {
				never = append(never, sim.Probe(p).String())
			}
		}
		runs := ran
		if *twice {
			runs *= 2
		}
		fmt.Printf("seeds %d..%d: %d passed, %d failed, %d not run; %d steps in %s (%.0f steps/s, %.0f seeds/min); probes never hit: %s\n",
			first, last, ran-failed, failed, len(results)-ran, totalSteps, took.Round(time.Millisecond),
			float64(totalSteps)/took.Seconds()*float64(runs)/float64(ran), float64(runs)/took.Minutes(), orNone(never))
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d seeds broke an invariant", failed, ran)
	}
	return nil
}

// runSeeds runs seeds first..last, parallel at once, and returns each one's result or error
// by seed. With untilBroken a seed after one that broke an invariant is not run (its result is
// nil), but every seed before it is, so the first seed that breaks one is always found.
func runSeeds(first, last uint64, parallel int, untilBroken bool, run func(seed uint64) (*sim.Result, error)) ([]*sim.Result, []error) {
	results := make([]*sim.Result, last-first+1)
	errs := make([]error, len(results))
	var broken atomic.Int64 // the index of the first seed known to have broken one, or -1
	broken.Store(-1)
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(parallel, 1) {
		wg.Go(func() {
			for i := range next {
				if b := broken.Load(); untilBroken && b >= 0 && int64(i) > b {
					continue
				}
				results[i], errs[i] = run(first + uint64(i))
				if errs[i] == nil && results[i].Violation == nil {
					continue
				}
				for b := broken.Load(); b < 0 || int64(i) < b; b = broken.Load() {
					if broken.CompareAndSwap(b, int64(i)) {
						break
					}
				}
			}
		})
	}
	for i := range results {
		next <- i
	}
	close(next)
	wg.Wait()
	return results, errs
}

func reportViolation(r *sim.Result) {
	v := r.Violation
	fmt.Printf("FAIL seed %d: %s\n", r.Config.Seed, v.Error())
	for _, line := range v.Tail {
		fmt.Printf("    %s\n", line)
	}
	fmt.Printf("  %s\n  reproduce: %s\n", r.Summary(), r.Config.Command())
}

func determinismFlag(on bool) string {
	if on {
		return " --check-determinism"
	}
	return ""
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "none"
	}
	return strings.Join(list, ", ")
}

// parseSeedRange reads "A..B".
func parseSeedRange(s string) (uint64, uint64, error) {
	a, b, ok := strings.Cut(s, "..")
	first, err1 := strconv.ParseUint(a, 10, 64)
	last, err2 := strconv.ParseUint(b, 10, 64)
	if !ok || err1 != nil || err2 != nil || last < first || last-first > 1_000_000 {
		return 0, 0, errors.New("--seeds takes a range A..B of at most a million seeds, A <= B")
	}
	return first, last, nil
}
