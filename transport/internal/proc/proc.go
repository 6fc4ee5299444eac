// Package proc reads what this process has used of the machine, for the server's
// process_cpu_seconds_total and process_resident_memory_bytes, and the load generator's own CPU
// per job.
package proc

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// CPU returns the user and system CPU time the process has used, and false where the platform
// does not say.
func CPU() (time.Duration, bool) { return cpu() }

// RSS returns the process's resident memory in bytes, and false where the platform does not
// say (it reads /proc/self/statm, so Linux only).
func RSS() (uint64, bool) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * uint64(os.Getpagesize()), true
}
