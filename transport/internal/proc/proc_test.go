package proc

import (
	"crypto/sha256"
	"testing"
)

func TestCPUGrowsWithWork(t *testing.T) {
	before, ok := CPU()
	if !ok {
		t.Skip("this platform does not report CPU time")
	}
	sum := [32]byte{}
	for range 200_000 { // about 50 ms of hashing
		sum = sha256.Sum256(sum[:])
	}
	after, _ := CPU()
	if after <= before {
		t.Fatalf("CPU time went from %v to %v across a busy loop", before, after)
	}
}
