package sim_test

import (
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/tetherhq/tether/sim"
)

// Seeds run by the tests, twice each; make sim runs a thousand. Rare paths are looked for in
// up to probeSeeds, once each.
const (
	testSeeds  = 30
	probeSeeds = 150
)

// Every seed keeps every invariant, and the same seed gives the same trace in one process.
// The paths that give leases back are reached: assignments that never reached their worker,
// and workers that stop cleanly; so are the expiries and deletes of finished jobs. A rare path
// is looked for past testSeeds, in single runs, until it is hit.
func TestSeedsKeepTheInvariants(t *testing.T) {
	probes := make([]int, len(sim.Probes()))
	rare := []sim.Probe{sim.ProbeUndeliveredReturned, sim.ProbeCleanStopReleased, sim.ProbeExpired, sim.ProbeDeleted}
	missing := func() bool { return slices.ContainsFunc(rare, func(p sim.Probe) bool { return probes[p] == 0 }) }
	for seed := uint64(1); seed <= testSeeds || (seed <= probeSeeds && missing()); seed++ {
		run := sim.RunTwice
		if seed > testSeeds {
			run = sim.Run
		}
		r, err := run(sim.Config{Seed: seed, Steps: 1500})
		if err != nil {
			t.Fatal(err)
		}
		if r.Violation != nil {
			t.Fatalf("seed %d: %v\nreproduce: %s --check-determinism\n%s", seed, r.Violation, r.Config.Command(), strings.Join(r.Violation.Tail, "\n"))
		}
		for p, n := range r.Probes {
			probes[p] += n
		}
	}
	for _, p := range rare {
		if probes[p] == 0 {
			t.Errorf("probe %s never hit in seeds 1..%d", p, probeSeeds)
		}
	}
}

// In runs with every fault class off, the invariants that hold only without faults are
// checked on every record: no attempt is spent on a lease whose assignment never reached its
// worker, and no lease expires under a worker that is alive, connected and heartbeating.
func TestFaultFreeSeedsKeepTheirStricterInvariants(t *testing.T) {
	all, err := sim.ParseFaults("all")
	if err != nil {
		t.Fatal(err)
	}
	stops := 0
	for seed := uint64(1); seed <= testSeeds; seed++ {
		r, err := sim.Run(sim.Config{Seed: seed, Steps: 1500, Off: all})
		if err != nil {
			t.Fatal(err)
		}
		if r.Violation != nil {
			t.Fatalf("seed %d: %v\nreproduce: %s\n%s", seed, r.Violation, r.Config.Command(), strings.Join(r.Violation.Tail, "\n"))
		}
		for f, n := range r.Faults {
			if n != 0 {
				t.Fatalf("seed %d: %d faults of class %s with every class off", seed, n, sim.Fault(f))
			}
		}
		stops += r.Probes[sim.ProbeCleanStopReleased]
	}
	if stops == 0 {
		t.Error("no worker stopped cleanly in a fault-free run")
	}
}

// A fault class turned off never strikes, and the run is another run without it.
func TestAFaultClassTurnedOffNeverStrikes(t *testing.T) {
	all, err := sim.Run(sim.Config{Seed: 3, Steps: 1500})
	if err != nil {
		t.Fatal(err)
	}
	noDrop, err := sim.Run(sim.Config{Seed: 3, Steps: 1500, Off: []sim.Fault{sim.FaultDrop}})
	if err != nil {
		t.Fatal(err)
	}
	if noDrop.Faults[sim.FaultDrop] != 0 {
		t.Fatalf("drop is off but %d drops were injected", noDrop.Faults[sim.FaultDrop])
	}
	if all.Faults[sim.FaultDrop] == 0 || all.Trace == noDrop.Trace {
		t.Fatalf("seed 3 should drop messages when drop is on (%d) and differ without them", all.Faults[sim.FaultDrop])
	}
}

// Shrink turns off every fault class the failure does not need and halves the run while it
// still fails. The failure here is a stand-in that needs drops and at least 300 steps.
func TestShrinkKeepsTheFailure(t *testing.T) {
	fails := func(cfg sim.Config) (*sim.Result, error) {
		r := &sim.Result{Config: cfg}
		if !slices.Contains(cfg.Off, sim.FaultDrop) && cfg.Steps >= 300 {
			r.Violation = &sim.Violation{Invariant: "stand-in"}
		}
		return r, nil
	}
	start, _ := fails(sim.Config{Seed: 9, Steps: 2000})
	small, err := sim.Shrink(start, fails)
	if err != nil {
		t.Fatal(err)
	}
	got := small.Config.Command()
	want := "tether sim --seed 9 --steps 500 --off delay,reorder,dup,partition,worker-crash,pause,misbehave,crash,disk,clock,archive,leader,checkpoint,stall"
	if got != want || small.Violation == nil {
		t.Fatalf("shrunk to %q (violation %v), want %q", got, small.Violation, want)
	}
}

func TestParseFaults(t *testing.T) {
	faults, err := sim.ParseFaults("clock, disk")
	if err != nil || !slices.Equal(faults, []sim.Fault{sim.FaultClock, sim.FaultDisk}) {
		t.Fatalf("ParseFaults: %v %v", faults, err)
	}
	if _, err := sim.ParseFaults("gremlins"); err == nil {
		t.Fatal("an unknown fault class was accepted")
	}
}

// A result keeps nothing of its run: tether sim keeps every seed's result until it ends, and a
// result that held on to its run kept a thousand worlds (their in-memory disks, views and
// oracles) alive, gigabytes.
func TestAResultKeepsNothingOfItsRun(t *testing.T) {
	const runs = 8
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	if _, err := sim.Run(sim.Config{Seed: runs + 1, Steps: 200}); err != nil { // what is made once per process
		t.Fatal(err)
	}
	before := heap()
	kept := make([]*sim.Result, 0, runs)
	for seed := uint64(1); seed <= runs; seed++ {
		r, err := sim.Run(sim.Config{Seed: seed, Steps: 200})
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, r)
	}
	grew := int64(heap()) - int64(before)
	runtime.KeepAlive(kept)
	t.Logf("the heap grew %d KiB keeping %d results", grew>>10, runs)
	if grew > runs*128<<10 { // a run kept is about 850 KiB, a result alone tens
		t.Fatalf("the heap grew %d KiB keeping %d results: they keep their runs", grew>>10, runs)
	}
}
