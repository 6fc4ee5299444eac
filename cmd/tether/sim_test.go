package main

import (
	"slices"
	"sync"
	"testing"

	"github.com/tetherhq/tether/sim"
)

// With --until-broken no seed runs after the first that breaks an invariant once that is
// known, and every seed before it runs, however many run at once: the first seed that breaks
// one is always found (make sim-mutants reports it). Without it every seed runs.
func TestRunSeedsUntilBroken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		parallel    int
		untilBroken bool
	}{{1, true}, {4, true}, {4, false}} {
		var mu sync.Mutex
		var ran []uint64
		results, _ := runSeeds(1, 40, tc.parallel, tc.untilBroken, func(seed uint64) (*sim.Result, error) {
			mu.Lock()
			ran = append(ran, seed)
			mu.Unlock()
			r := &sim.Result{Config: sim.Config{Seed: seed}}
			if seed == 5 || seed == 9 {
				r.Violation = &sim.Violation{Invariant: "stand-in"}
			}
			return r, nil
		})
		slices.Sort(ran)
		for seed := uint64(1); seed <= 5; seed++ {
			if r := results[seed-1]; r == nil || r.Config.Seed != seed {
				t.Fatalf("%+v: seed %d, at or before the first that broke an invariant, did not run: %v", tc, seed, ran)
			}
		}
		switch {
		case tc.parallel == 1 && tc.untilBroken && !slices.Equal(ran, []uint64{1, 2, 3, 4, 5}):
			t.Errorf("%+v: seeds %v ran, want 1..5", tc, ran)
		case !tc.untilBroken && len(ran) != 40:
			t.Errorf("%+v: %d seeds ran, want all 40", tc, len(ran))
		}
	}
}
