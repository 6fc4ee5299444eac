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
package floor

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Run starts the server as a child process (this executable, with --serve), drives it with s,
// and stops it. Its record file is in a temporary directory in dir.
func Run(dir string, fsync bool, s Shape) (Result, error) {
	tmp, err := os.MkdirTemp(dir, "tether-floor-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(tmp)
	self, err := os.Executable()
	if err != nil {
		return Result{}, err
	}
	child := exec.Command(self, "--serve", filepath.Join(tmp, "records"), fmt.Sprintf("--fsync=%v", fsync))
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		return Result{}, err
	}
	if err := child.Start(); err != nil {
		return Result{}, err
	}
	defer func() {
		_ = child.Process.Kill()
		_ = child.Wait()
	}()
	// The child prints its address once it listens; until then there is nothing to dial.
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return Result{}, fmt.Errorf("server did not start: %w", err)
	}
	return generate(strings.TrimSpace(line), s)
}

// Write prints r, a run of s, as a table.
func (r Result) Write(w io.Writer, s Shape, fsync bool) {
	fmt.Fprintf(w, "floor: %d jobs, %d producers, %d workers, fsync %v\n", s.Jobs, s.Producers, s.Workers, fsync)
	fmt.Fprintf(w, "throughput      %.0f jobs/s (until every completion was acknowledged)\n", r.JobsPerSecond)
	fmt.Fprintf(w, "events/fsync    %.1f (%d events, %d fsyncs)\n", r.eventsPerSync(), r.Records, r.Syncs)
	fmt.Fprintf(w, "cpu per job     server %.0f µs  generator %.0f µs (user + system)\n",
		micros(r.ServerCPU, s.Jobs), micros(r.GeneratorCPU, s.Jobs))
}

func micros(d time.Duration, jobs int) float64 {
	return float64(d.Microseconds()) / float64(jobs)
}
