// Package floor measures what the shape of `tether bench` costs on a machine with nothing but
// the shape: producers that POST one job each and wait for an answer sent after the job's record
// is fsynced; WebSocket workers of capacity 1; a lease record fsynced before each assignment; a
// completion record fsynced before each ack. One goroutine group-commits the records with a
// write and an fdatasync to a prefilled file, as tether's log does. There are no actors, no
// Pebble, no hash chain and no projections, and the frames are canned.
//
// The throughput it reports is an upper bound for any broker that keeps the durability rule
// on this machine; tether's own figure is read against it. Run runs the server in a child
// process, as `tether bench` runs against a separate `tether server`: the binary that calls Run
// (cmd/benchfloor) calls Serve when it is started with --serve FILE.
//
// RunSkew runs the shape of `tether bench --skew`: light tenants at a paced rate, alone and
// then beside a heavy tenant that saturates the machine, each tenant with its own workers, all
// sharing the log. Its light p99 beside the heavy tenant, against alone, is what the target
// of a fair broker is read against; ServerConfig.CPUPerJob makes the floor do a broker's CPU
// work per job, so that it can be compared at the broker's own pace.
package floor

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Run starts the server as a child process (this executable, with --serve), drives it with s,
// and stops it. Its record file is in a temporary directory in dir.
func Run(dir string, srv ServerConfig, s Shape) (Result, error) {
	return withServer(dir, srv, func(addr string) (Result, error) { return generate(addr, s) })
}

// withServer runs the server as a child process while drive runs against its address.
func withServer[R any](dir string, srv ServerConfig, drive func(addr string) (R, error)) (res R, err error) {
	tmp, err := os.MkdirTemp(dir, "tether-floor-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(tmp)
	self, err := os.Executable()
	if err != nil {
		return res, err
	}
	child := exec.Command(self, "--serve", filepath.Join(tmp, "records"), fmt.Sprintf("--fsync=%v", srv.Fsync), fmt.Sprintf("--cpu-per-job=%v", srv.CPUPerJob))
	child.Stderr = os.Stderr
	child.SysProcAttr = childAttr()
	out, err := child.StdoutPipe()
	if err != nil {
		return res, err
	}
	// A SIGINT or SIGTERM stops the child and removes the records before the process exits, as
	// the shell has it (128 + the signal): a deferred call does not run on a signal.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)
	if err := child.Start(); err != nil {
		return res, err
	}
	driven, exiting := make(chan struct{}), make(chan struct{})
	defer close(driven)
	defer func() {
		select {
		case <-exiting:
			// Whatever failed here failed because the child was stopped (the run, or the wait
			// for its address): the handler exits with the signal's status, not the caller.
			select {}
		default:
		}
	}()
	go func() {
		select {
		case sig := <-signals:
			close(exiting)
			_ = child.Process.Kill()
			_ = os.RemoveAll(tmp)
			code := 1
			if s, ok := sig.(syscall.Signal); ok {
				code = 128 + int(s)
			}
			os.Exit(code)
		case <-driven:
		}
	}()
	defer func() {
		_ = child.Process.Kill()
		_ = child.Wait()
	}()
	// The child prints its address once it listens; until then there is nothing to dial.
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return res, fmt.Errorf("server did not start: %w", err)
	}
	return drive(strings.TrimSpace(line))
}

// Write prints r, a run of s, as a table.
func (r Result) Write(w io.Writer, s Shape, srv ServerConfig) {
	fmt.Fprintf(w, "floor: %d jobs, %d producers, %d workers, %s\n", s.Jobs, s.Producers, s.Workers, srv)
	fmt.Fprintf(w, "throughput      %.0f jobs/s (until every completion was acknowledged)\n", r.JobsPerSecond)
	fmt.Fprintf(w, "events/fsync    %.1f (%d events, %d fsyncs)\n", r.eventsPerSync(), r.Records, r.Syncs)
	fmt.Fprintf(w, "cpu per job     server %.0f µs  generator %.0f µs (user + system)\n",
		micros(r.ServerCPU, s.Jobs), micros(r.GeneratorCPU, s.Jobs))
}

func (c ServerConfig) String() string {
	s := fmt.Sprintf("fsync %v", c.Fsync)
	if c.CPUPerJob > 0 {
		s += fmt.Sprintf(", %v of CPU work per job", c.CPUPerJob)
	}
	return s
}

func micros(d time.Duration, jobs int) float64 {
	return float64(d.Microseconds()) / float64(jobs)
}
