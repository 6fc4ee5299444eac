package natstest

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// TestHold starts a cluster of NATSTEST_HOLD nodes and keeps it up while the file
// NATSTEST_HOLD_FILE exists, for benchmarks and manual runs against real streams:
//
//	touch /tmp/hold; NATSTEST_HOLD=3 NATSTEST_HOLD_FILE=/tmp/hold go test ./eventlog/jetstream/natstest -run TestHold -v -timeout 0
func TestHold(t *testing.T) {
	n := 0
	if _, err := fmt.Sscan(os.Getenv("NATSTEST_HOLD"), &n); err != nil || n < 1 {
		t.Skip("NATSTEST_HOLD is not set")
	}
	c := Start(t, n)
	fmt.Println("NATS up:", c.Hosts())
	for {
		if _, err := os.Stat(os.Getenv("NATSTEST_HOLD_FILE")); err != nil {
			return
		}
		time.Sleep(200 * time.Millisecond) // polls the file another process removes
	}
}
