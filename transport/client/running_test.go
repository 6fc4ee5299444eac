package client

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/transport/wire"
)

// A running job's record reads back as written: the job alone, the job and its process, and a
// process line the worker's death cut short, which names no process.
func TestRunningJobsReadBack(t *testing.T) {
	s := resultStore{dir: t.TempDir()}
	heard := time.Date(2026, 11, 29, 1, 2, 3, 0, time.UTC)
	p := &jobProcess{PGID: 4242, Started: 99, BootID: "b", KillGrace: 2 * time.Second}
	for lease, process := range map[string]string{"L-alone": "", "L-process": "whole", "L-torn": "torn"} {
		if err := s.track(runningJob{JobID: "j" + lease, LeaseID: lease, LeaseTTL: time.Minute, Heard: heard}); err != nil {
			t.Fatal(err)
		}
		switch process {
		case "whole":
			if err := s.trackProcess(lease, p); err != nil {
				t.Fatal(err)
			}
		case "torn":
			f, err := os.OpenFile(s.runningPath(lease), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = f.WriteString(`{"pgid":42`)
			f.Close()
		}
	}
	if err := s.save(pendingResult{Frame: wire.Frame{Type: wire.FrameComplete, JobID: "jL-alone", LeaseID: "L-alone"}}); err != nil { // a result beside: not a running job
		t.Fatal(err)
	}
	jobs, errs := s.running()
	if len(errs) != 0 || len(jobs) != 3 {
		t.Fatalf("read %d jobs, errors %v", len(jobs), errs)
	}
	slices.SortFunc(jobs, func(a, b runningJob) int { return strings.Compare(a.LeaseID, b.LeaseID) })
	for i, want := range []struct {
		lease   string
		process *jobProcess
	}{{"L-alone", nil}, {"L-process", p}, {"L-torn", nil}} {
		j := jobs[i]
		if j.LeaseID != want.lease || j.JobID != "j"+want.lease || j.LeaseTTL != time.Minute || !j.Heard.Equal(heard) {
			t.Fatalf("job %d: %+v", i, j)
		}
		if (j.Process == nil) != (want.process == nil) || (j.Process != nil && *j.Process != *want.process) {
			t.Fatalf("%s's process: %+v, want %+v", j.LeaseID, j.Process, want.process)
		}
	}
	if err := s.untrack("L-process"); err != nil {
		t.Fatal(err)
	}
	if jobs, _ = s.running(); len(jobs) != 2 {
		t.Fatalf("%d running jobs after one was forgotten", len(jobs))
	}
}
