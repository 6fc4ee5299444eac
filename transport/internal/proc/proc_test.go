package proc

import (
	"crypto/sha256"
	"testing"
)

func TestRSSGrowsWithAHeldSlice(t *testing.T) {
	before, ok := RSS()
	if !ok {
		t.Skip("this platform does not report resident memory")
	}
	held := make([]byte, 64<<20)
	for i := range held { // touched, so resident
		held[i] = byte(i)
	}
	after, _ := RSS()
	if after < before+32<<20 {
		t.Fatalf("RSS went from %d to %d while 64 MiB were touched", before, after)
	}
	_ = held[len(held)-1]
}

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
