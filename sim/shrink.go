package sim

import (
	"fmt"
	"strings"
)

// Command is the command line that reruns cfg.
func (c Config) Command() string {
	cmd := fmt.Sprintf("tether sim --seed %d --steps %d", c.Seed, c.Steps)
	if len(c.Off) > 0 {
		names := make([]string, len(c.Off))
		for i, f := range c.Off {
			names[i] = f.String()
		}
		cmd += " --off " + strings.Join(names, ",")
	}
	return cmd
}

// RunTwice runs cfg twice in this process and fails the second result if its trace differs
// from the first: the same seed must do the same thing, step for step.
func RunTwice(cfg Config) (*Result, error) {
	first, err := Run(cfg)
	if err != nil {
		return nil, err
	}
	second, err := Run(cfg)
	if err != nil {
		return nil, err
	}
	if first.Trace != second.Trace && second.Violation == nil {
		second.Violation = &Violation{Invariant: "determinism", Step: min(first.Steps, second.Steps),
			Detail: fmt.Sprintf("two runs of seed %d gave traces %s (%d steps) and %s (%d steps)", cfg.Seed, first.Trace, first.Steps, second.Trace, second.Steps)}
	}
	return second, nil
}

// Shrink makes a failing run smaller while it still fails: it turns off the fault classes one
// at a time, keeping each off that the failure does not need, then halves the safety phase. It
// returns the smallest failing run it found. run is Run, or RunTwice for a failure of
// determinism.
func Shrink(failing *Result, run func(Config) (*Result, error)) (*Result, error) {
	best := failing
	try := func(cfg Config) (bool, error) {
		r, err := run(cfg)
		if err != nil {
			return false, err
		}
		if r.Violation != nil {
			best = r
			return true, nil
		}
		return false, nil
	}
	for f := range faultClasses {
		cfg := best.Config
		if containsFault(cfg.Off, f) {
			continue
		}
		cfg.Off = append(append([]Fault(nil), cfg.Off...), f)
		if _, err := try(cfg); err != nil {
			return nil, err
		}
	}
	for best.Config.Steps > 50 {
		cfg := best.Config
		cfg.Steps /= 2
		ok, err := try(cfg)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
	}
	return best, nil
}

func containsFault(list []Fault, f Fault) bool {
	for _, g := range list {
		if g == f {
			return true
		}
	}
	return false
}
