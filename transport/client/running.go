package client

import (
	"encoding/json"
	"os"
	"strings"
	"time"
)

// runningJob is a job the worker is running, on disk in ResultsDir from its assignment until it
// ends: what the next start of a worker that died without a clean stop (kill -9, the OOM killer)
// needs to end what the job left running and give its lease back at once (leftovers), instead
// of leaving its processes to run on and its lease to fill the worker's capacity until it
// expires.
type runningJob struct {
	JobID   string `json:"job_id"`
	LeaseID string `json:"lease_id"`
	// LeaseTTL and Heard say how long the lease may be valid (policy.MayBeValid).
	LeaseTTL time.Duration `json:"lease_ttl"`
	Heard    time.Time     `json:"heard"`
	// Process is the process group the job's handler started, if it started one (Command).
	Process *jobProcess `json:"process,omitempty"`
}

// jobProcess is a job's process group, and what tells its leader from a process given the same
// pid later: the leader's start time (clock ticks since boot) and the boot's id.
type jobProcess struct {
	PGID      int           `json:"pgid"`
	Started   uint64        `json:"started"`
	BootID    string        `json:"boot_id"`
	KillGrace time.Duration `json:"kill_grace"` // between SIGTERM and SIGKILL
}

const runningSuffix = ".running.json"

func (s resultStore) runningPath(lease string) string {
	return strings.TrimSuffix(s.path(lease), resultSuffix) + runningSuffix
}

// track writes what a start after a crash needs of a running job. It is not synced: it matters
// if the worker process dies, when what it wrote is in the page cache; a machine that goes down
// ends the job's processes too, and its lease expires as it did before.
func (s resultStore) track(j runningJob) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(j)
	if err != nil {
		return err
	}
	path := s.runningPath(j.LeaseID)
	if err := os.WriteFile(path+".tmp", data, 0o600); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// untrack forgets the running job of lease.
func (s resultStore) untrack(lease string) error { return removeKept(s.runningPath(lease)) }

// running returns the jobs a worker left running when it died.
func (s resultStore) running() ([]runningJob, []error) {
	return readKept(s.dir, runningSuffix, func(j runningJob) (string, string) { return j.JobID, j.LeaseID })
}
