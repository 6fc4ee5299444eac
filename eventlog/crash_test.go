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
	t.Parallel()
	first, n := uint64(1), uint64(*crashSeeds)
	if *crashSeed != 0 {
		first, n = *crashSeed, 1
	}
	for seed := first; seed < first+n; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			eventlogtest.CrashRecovery(t, crashableStore(), seed)
		})
	}
}

// TestCrashRecoveryPrefilledWAL is TestCrashRecovery with the WAL prefilled in 4 KiB fills, so
// crashes find zeros, synced and not, past the last record of the newest WAL.
func TestCrashRecoveryPrefilledWAL(t *testing.T) {
	t.Parallel()
	first, n := uint64(1), uint64(*crashSeeds)/4
	if *crashSeed != 0 {
		first, n = *crashSeed, 1
	}
	for seed := first; seed < first+n; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			eventlogtest.CrashRecovery(t, eventlogtest.CrashableMemPrefilled(4<<10), seed)
		})
	}
}

// TestCrashRecoveryUpstream is TestCrashRecovery on a copy of an upstream in memory.
func TestCrashRecoveryUpstream(t *testing.T) {
	t.Parallel()
	first, n := uint64(1), uint64(*crashSeeds)/4
	if *crashSeed != 0 {
		first, n = *crashSeed, 1
	}
	for seed := first; seed < first+n; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			eventlogtest.CrashRecovery(t, eventlogtest.MemUpstream(), seed)
		})
	}
}
