package main

import (
	"os"
	goruntime "runtime"
	"testing"
)

func TestServerProcs(t *testing.T) {
	t.Setenv("GOMAXPROCS", "") // restored when the test ends
	_ = os.Unsetenv("GOMAXPROCS")
	if got, want := serverProcs(0), goruntime.GOMAXPROCS(0)+1; got != want {
		t.Fatalf("default: %d, want %d", got, want)
	}
	if got := serverProcs(5); got != 5 {
		t.Fatalf("--procs 5: %d", got)
	}
	t.Setenv("GOMAXPROCS", "2")
	if got := serverProcs(0); got != 0 {
		t.Fatalf("with GOMAXPROCS set: %d, want 0 (left alone)", got)
	}
	if got := serverProcs(4); got != 4 {
		t.Fatalf("--procs 4 with GOMAXPROCS set: %d", got)
	}
}
