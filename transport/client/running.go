package client

import (
	"bytes"
	"encoding/json"
	"errors"
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
	Process *jobProcess `json:"-"`
}

// jobProcess is a job's process group, and what tells its leader from a process given the same
// pid later: the leader's start time (clock ticks since boot) and the boot's id.
type jobProcess struct {
	PGID      int           `json:"pgid"`
	Started   uint64        `json:"started"`
	BootID    string        `json:"boot_id"`
	KillGrace time.Duration `json:"kill_grace"` // between SIGTERM and SIGKILL
}

// A running job's file is a line of its runningJob, and a line of its jobProcess once its
// handler started one. The file is made, and the line appended, in place: never written over,
// which a file system may make wait for the disk (ext4's auto_da_alloc does, on a rename or a
// truncation over a file), and not synced: it matters if the worker process dies, when what it
// wrote is in the page cache; a machine that goes down ends the job's processes too, and its
// lease expires as it did before.
const runningSuffix = ".running.json"

func (s resultStore) runningPath(lease string) string {
	return strings.TrimSuffix(s.path(lease), resultSuffix) + runningSuffix
}

// track records a job that starts running.
func (s resultStore) track(j runningJob) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	return s.writeLine(j.LeaseID, os.O_CREATE|os.O_TRUNC, j)
}

// trackProcess adds the process group a running job's handler started to its record.
func (s resultStore) trackProcess(lease string, p *jobProcess) error {
	return s.writeLine(lease, os.O_APPEND, p)
}

func (s resultStore) writeLine(lease string, flag int, v any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(s.runningPath(lease), os.O_WRONLY|flag, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(line, '\n'))
	return errors.Join(err, f.Close())
}

// untrack forgets the running job of lease.
func (s resultStore) untrack(lease string) error { return removeKept(s.runningPath(lease)) }

// running returns the jobs a worker left running when it died.
func (s resultStore) running() ([]runningJob, []error) {
	return readKept(s.dir, runningSuffix, func(data []byte) (j runningJob, err error) {
		job, process, _ := bytes.Cut(data, []byte("\n"))
		if err = json.Unmarshal(job, &j); err == nil {
			err = namesALease(j.JobID, j.LeaseID)
		}
		// A process line cut short by the worker's death never names a process that ran.
		var p jobProcess
		if err == nil && json.Unmarshal(bytes.TrimSpace(process), &p) == nil && p.PGID > 0 {
			j.Process = &p
		}
		return j, err
	})
}
