package eventlog

import (
	"encoding/hex"
	"testing"
)

// TestHashStringAllocatesOnce: a receipt's hash, turned to hex once per acknowledged append,
// costs the string and no buffer besides.
func TestHashStringAllocatesOnce(t *testing.T) {
	h := Genesis
	if got, want := h.String(), hex.EncodeToString(h[:]); got != want {
		t.Fatalf("Hash.String() = %s, want %s", got, want)
	}
	if n := testing.AllocsPerRun(100, func() { _ = h.String() }); n > 1 {
		t.Fatalf("Hash.String makes %v allocations; want 1", n)
	}
}
