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
	results := make([]*sim.Result, last-first+1)
	errs := make([]error, len(results))
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	for range max(*parallel, 1) {
		wg.Go(func() {
			for i := range next {
				cfg := sim.Config{Seed: first + uint64(i), Steps: *steps, Off: faults}
				if *trace && first == last {
					cfg.Trace = os.Stdout
				}
				results[i], errs[i] = run(cfg)
			}
		})
	}
	for i := range results {
		next <- i
	}
	close(next)
	wg.Wait()
	took := time.Since(start)

	failed, totalSteps := 0, 0
	hit := make([]int, len(sim.Probes()))
	for i, r := range results {
		if errs[i] != nil {
			return errs[i]
		}
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
		runs := len(results)
		if *twice {
			runs *= 2
		}
		fmt.Printf("seeds %d..%d: %d passed, %d failed; %d steps in %s (%.0f steps/s, %.0f seeds/min); probes never hit: %s\n",
			first, last, len(results)-failed, failed, totalSteps, took.Round(time.Millisecond),
			float64(totalSteps)/took.Seconds()*float64(runs)/float64(len(results)), float64(runs)/took.Minutes(), orNone(never))
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d seeds broke an invariant", failed, len(results))
	}
	return nil
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
