//go:build unix && !linux

package client

import "time"

// identify records nothing here: without Linux's /proc this platform cannot tell, after a
// crash, the job's process from a later one given the same pid, and ends none (endLeftover).
func identify(pid int, killGrace time.Duration) *jobProcess {
	return &jobProcess{PGID: pid, KillGrace: killGrace}
}

// endLeftover ends nothing here (identify).
func endLeftover(*jobProcess, string) int { return 0 }

// canEndLeftovers says whether this platform can tell a job's processes from others.
const canEndLeftovers = false
