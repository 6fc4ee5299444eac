package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// A lease the server made and wrote to a worker that never got it (the answer lost on the
// way, a server killed as it wrote) does not outlive a restart. The worker, reconnecting,
// heartbeats at once the leases it holds, and the restarted server puts back, unspent, the one
// it does not name: a job of max_attempts 1 then runs, instead of waiting out the restart's
// lease_ttl of grace and being dead-lettered without ever running.
func TestRestartPutsBackALeaseNoWorkerGot(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	dir := t.TempDir()
	s := startServer(t, dir)
	c := client.New(s.url, "", nil)
	reg, err := c.RegisterWorker(context.Background(), wire.RegisterRequest{Name: "w", Queues: []string{"q"}, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	j, err := c.Submit(context.Background(), wire.SubmitRequest{Queue: "q", Type: "t", MaxAttempts: 1, LeaseTTLSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	// The worker's poll takes the job; its answer is lost on the way.
	req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/worker/lease", strings.NewReader(`{"max":1,"wait_seconds":5}`))
	req.Header.Set("Authorization", "Bearer "+reg.WorkerToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var got wire.Assignments
	_ = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if len(got.Assignments) != 1 || got.Assignments[0].JobID != j.ID {
		t.Fatalf("the poll got %+v", got)
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()

	s = startServer(t, dir)
	c = client.New(s.url, "", nil)
	started := time.Now()
	w := startTether(t, []string{"XDG_STATE_HOME=" + t.TempDir()}, "worker", "--server", s.url, "--token", reg.WorkerToken,
		"--log-format", "json", "--", "sh", "-c", `echo '{"ran":true}'`)
	done := awaitJob(t, c, j.ID) // within 30 s: half the restart's grace
	if done.Status != "succeeded" || done.Attempt != 1 {
		t.Fatalf("the job the worker never got: %s on attempt %d (dead: %q) after %s:\n%s", done.Status, done.Attempt, done.DeadReason,
			time.Since(started).Round(time.Millisecond), w.output())
	}
	evs, err := c.Events(context.Background(), j.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var history []string
	released := false
	for _, e := range evs.Events {
		history = append(history, e.Type)
		released = released || (e.Type == "job.lease_released" && bytes.Contains(e.Data, []byte(`"reason":"unacknowledged"`)))
	}
	if !released {
		t.Fatalf("no job.lease_released (unacknowledged) in the history: %v", history)
	}
	t.Logf("the job ran %s after the restart, its first lease put back unspent: %v", time.Since(started).Round(time.Millisecond), history)
}

// A server stopped for three lease_ttls (SIGSTOP) while 50 jobs run under real workers runs
// none of them twice: its leases run lease_ttl from when it goes on (job.lease_extended,
// stall_grace), and the heartbeats that waited in its sockets, or that the workers send once
// they are back, keep them. A worker killed during the stall loses its leases all the same,
// a lease_ttl after the stall, and its jobs run again elsewhere.
func TestServerStallRunsNoJobTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	const (
		workers  = 5
		capacity = 10
		ttl      = 5 * time.Second
		stall    = 3 * ttl
	)
	s := startServer(t, t.TempDir())
	c := client.New(s.url, "", nil)
	starts := newStarts(t)
	var ws []*process
	for w := range workers {
		// Each job says it started (and its pid, for the cleanup: a killed worker's jobs
		// outlive it) and runs well past the stall.
		ws = append(ws, startTether(t, []string{"XDG_STATE_HOME=" + t.TempDir()}, "worker", "--server", s.url, "--name", fmt.Sprintf("w%d", w),
			"--queue", "q", "--capacity", strconv.Itoa(capacity), "--log-format", "json", "--",
			"sh", "-c", fmt.Sprintf(`echo "$TETHER_JOB_ID %d $$" > %s; exec sleep 30`, w, starts.path)))
	}
	for _, w := range ws {
		w.waitFor(t, `"msg":"connected"`)
	}
	var ids []string
	for range workers * capacity {
		j, err := c.Submit(context.Background(), wire.SubmitRequest{Queue: "q", Type: "t", MaxAttempts: 2, LeaseTTLSeconds: ttl.Seconds()})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	starts.await(t, len(ids), 30*time.Second)

	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	killed := workers - 1 // dies during the stall, its jobs' processes with it
	_ = syscall.Kill(-ws[killed].cmd.Process.Pid, syscall.SIGKILL)
	for _, st := range starts.by(killed) {
		_ = syscall.Kill(st.pid, syscall.SIGKILL)
	}
	<-time.After(stall) // the stall itself: what the test is about
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	statuses := map[string]string{}
	for _, id := range ids {
		status, err := c.Watch(ctx, id, 0, func(wire.Event) error { return nil })
		if err != nil {
			t.Fatalf("job %s: %v", id, err)
		}
		statuses[id] = status
	}
	ranBy := starts.all() // every job has finished: every start was said
	twice, graces := 0, 0
	for _, id := range ids {
		status := statuses[id]
		evs, err := c.Events(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		var history []string
		for _, e := range evs.Events {
			history = append(history, e.Type)
			if e.Type == "job.lease_extended" && bytes.Contains(e.Data, []byte(`"reason":"stall_grace"`)) {
				graces++
			}
		}
		by := ranBy[id]
		switch {
		case slices.Contains(by, killed):
			// Its worker died: the lease runs out, a lease_ttl after the stall, and the job
			// runs again elsewhere.
			if status != "succeeded" || !slices.Contains(history, "job.lease_expired") || len(by) != 2 {
				t.Errorf("job %s of the worker killed in the stall: %s, started by %v, history %v", id, status, by, history)
			}
		case len(by) > 1 || status != "succeeded":
			twice++
			t.Errorf("job %s: %s, started by workers %v, history %v", id, status, by, history)
		}
	}
	t.Logf("SIGSTOP for %s with %d jobs leased: %d jobs of live workers ran twice; %d leases got the stall's grace", stall, len(ids), twice, graces)
}

// jobStarts is what the jobs of a test say as they start, through a FIFO the test reads: a
// start is a signal to wait on, not a file to poll.
type jobStarts struct {
	path string
	said chan jobStart
	seen []jobStart
	stop func() // ends the reading after whatever the jobs said before, and takes it in seen
}

type jobStart struct {
	job         string
	worker, pid int
}

// newStarts makes the FIFO and reads it until the test ends; the cleanup kills every job
// process that said it started.
func newStarts(t *testing.T) *jobStarts {
	t.Helper()
	path := filepath.Join(t.TempDir(), "starts")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	// Read and write: a job's open never blocks, and the read never sees the end of the FIFO.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	const end = "end" // what the test writes itself once it reads no more
	st := &jobStarts{path: path, said: make(chan jobStart, 1024)}
	go func() {
		defer close(st.said)
		sc := bufio.NewScanner(f)
		for sc.Scan() && sc.Text() != end {
			var s jobStart
			if _, err := fmt.Sscan(sc.Text(), &s.job, &s.worker, &s.pid); err == nil {
				st.said <- s
			}
		}
	}()
	st.stop = sync.OnceFunc(func() {
		_, _ = f.WriteString(end + "\n")
		for s := range st.said {
			st.seen = append(st.seen, s)
		}
	})
	t.Cleanup(func() {
		st.stop()
		for _, s := range st.seen {
			_ = syscall.Kill(s.pid, syscall.SIGKILL)
		}
		_ = f.Close()
	})
	return st
}

// await waits until n distinct jobs have said they started, failing the test after d.
func (st *jobStarts) await(t *testing.T, n int, d time.Duration) {
	t.Helper()
	giveUp := time.After(d)
	for jobs := map[string]bool{}; len(jobs) < n; {
		select {
		case s := <-st.said:
			st.seen = append(st.seen, s)
			jobs[s.job] = true
		case <-giveUp:
			t.Fatalf("%d of %d jobs started in %s", len(jobs), n, d)
		}
	}
}

// by returns the starts seen so far of worker w's jobs.
func (st *jobStarts) by(w int) []jobStart {
	var out []jobStart
	for _, s := range st.seen {
		if s.worker == w {
			out = append(out, s)
		}
	}
	return out
}

// all returns, by job, the workers that started it. Call it once every job has finished: a
// start said before that is read before the reading ends.
func (st *jobStarts) all() map[string][]int {
	st.stop()
	out := map[string][]int{}
	for _, s := range st.seen {
		out[s.job] = append(out[s.job], s.worker)
	}
	return out
}
