package eventlog_test

import (
	"flag"
	"fmt"
	"testing"

	"github.com/tetherhq/tether/eventlog/eventlogtest"
)

var (
	crashSeeds = flag.Int("crash.seeds", 200, "number of seeds TestCrashRecovery runs")
	crashSeed  = flag.Uint64("crash.seed", 0, "run TestCrashRecovery for this one seed only")
)

// TestCrashRecovery runs eventlogtest.CrashRecovery on the crashable in-memory filesystem over
// many seeds. Reproduce one with: go test ./eventlog -run TestCrashRecovery -crash.seed=N
func TestCrashRecovery(t *testing.T) {
	crashSeries(t, *crashSeeds, eventlogtest.CrashableMem)
}

// TestCrashRecoveryPrefilledWAL is TestCrashRecovery with the WAL prefilled in 4 KiB fills, so
// crashes find zeros, synced and not, past the last record of the newest WAL.
func TestCrashRecoveryPrefilledWAL(t *testing.T) {
	crashSeries(t, *crashSeeds/4, func() eventlogtest.Store { return eventlogtest.CrashableMemPrefilled(4 << 10) })
}

// TestCrashRecoveryUpstream is TestCrashRecovery on a copy of an upstream in memory: the copy
// crashes, the upstream survives.
func TestCrashRecoveryUpstream(t *testing.T) {
	crashSeries(t, *crashSeeds/4, eventlogtest.MemUpstream)
}

// crashSeries runs CrashRecovery on a fresh store for seeds 1..n, or for -crash.seed alone.
func crashSeries(t *testing.T, n int, newStore func() eventlogtest.Store) {
	t.Parallel()
	first, last := uint64(1), uint64(n)
	if *crashSeed != 0 {
		first, last = *crashSeed, *crashSeed
	}
	for seed := first; seed <= last; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			eventlogtest.CrashRecovery(t, newStore(), seed)
		})
	}
}
