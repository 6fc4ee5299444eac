package broker_test

import (
	"testing"
)

// lifecycleAllocsMax bounds the heap allocations of one job in BenchmarkLifecycle, from submit
// to durable completion: 91 to 92 before issue 55, 51 to 52 after its first allocation work,
// 37 to 38 after its second (a persist's one Commit, carved from chunks, holding the log's
// request and its notice; job streams named without a string; submissions carved from chunks;
// Submit's answer returned as it came; the job's copy of its projection kept in its actor),
// with one of headroom for the noise of the log's and Pebble's
// own goroutines (the count has held to the unit over runs of 10,000 and 20,000 jobs). Lower
// it when a change cuts more; a change that needs more must say why.
const lifecycleAllocsMax = 39

// TestLifecycleAllocations runs BenchmarkLifecycle for the usual benchmark time and fails if a
// job costs more allocations than lifecycleAllocsMax. It checks a count, not a time.
func TestLifecycleAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the lifecycle benchmark")
	}
	if raceEnabled {
		t.Skip("the race detector's allocations are not the server's")
	}
	r := testing.Benchmark(BenchmarkLifecycle)
	if r.N == 0 {
		t.Fatal("BenchmarkLifecycle failed")
	}
	if a := r.AllocsPerOp(); a > lifecycleAllocsMax {
		t.Fatalf("a job of BenchmarkLifecycle makes %d allocations (%d bytes) over %d jobs; the bound is %d", a, r.AllocedBytesPerOp(), r.N, lifecycleAllocsMax)
	}
	t.Logf("%d allocations, %d bytes a job over %d jobs", r.AllocsPerOp(), r.AllocedBytesPerOp(), r.N)
}
