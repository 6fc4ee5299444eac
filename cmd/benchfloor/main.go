// Command benchfloor measures what the shape of `tether bench` costs on a machine with nothing but
// the shape: producers that POST one job each and wait for an answer sent after the job's record
// is fsynced; WebSocket workers of capacity 1; a lease record fsynced before each assignment; a
// completion record fsynced before each ack. One goroutine group-commits the records with a
// write and an fdatasync to a prefilled file, as tether's log does. There are no actors, no
// Pebble, no hash chain and no projections, and the frames are canned.
//
// The throughput it reports is an upper bound for any broker that keeps the durability rule
// on this machine; tether's own figure is read against it. It runs the server in a child
// process, as `tether bench` runs against a separate `tether server`:
//
//	go run ./cmd/benchfloor --jobs 20000 --producers 8 --workers 50
//	go run ./cmd/benchfloor --fsync=false   # the same shape without the disk
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	serveFile := flag.String("serve", "", "internal: serve on a loopback port, logging to this file")
	jobs := flag.Int("jobs", 20000, "jobs to run")
	producers := flag.Int("producers", 8, "producers, each with one request in flight")
	workers := flag.Int("workers", 50, "WebSocket workers of capacity 1")
	fsync := flag.Bool("fsync", true, "fdatasync every batch of records")
	dir := flag.String("dir", os.TempDir(), "directory for the record file (put it on the disk you measure)")
	flag.Parse()

	if *serveFile != "" {
		if err := serveChild(*serveFile, *fsync); err != nil {
			fmt.Fprintln(os.Stderr, "floor:", err)
			os.Exit(1)
		}
		return
	}
	res, err := run(*dir, *fsync, shape{Jobs: *jobs, Producers: *producers, Workers: *workers})
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
	fmt.Printf("floor: %d jobs, %d producers, %d workers, fsync %v\n", *jobs, *producers, *workers, *fsync)
	fmt.Printf("throughput      %.0f jobs/s (until every completion was acknowledged)\n", res.JobsPerSecond)
	fmt.Printf("events/fsync    %.1f (%d events, %d fsyncs)\n", res.eventsPerSync(), res.Records, res.Syncs)
	fmt.Printf("cpu per job     server %.0f µs  generator %.0f µs (user + system)\n",
		micros(res.ServerCPU, *jobs), micros(res.GeneratorCPU, *jobs))
}

// run starts the server as a child process, drives it, and stops it.
func run(dir string, fsync bool, s shape) (result, error) {
	tmp, err := os.MkdirTemp(dir, "tether-floor-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(tmp)
	self, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	child := exec.Command(self, "--serve", filepath.Join(tmp, "records"), fmt.Sprintf("--fsync=%v", fsync))
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		return result{}, err
	}
	if err := child.Start(); err != nil {
		return result{}, err
	}
	defer func() {
		_ = child.Process.Kill()
		_ = child.Wait()
	}()
	// The child prints its address once it listens; until then there is nothing to dial.
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return result{}, fmt.Errorf("server did not start: %w", err)
	}
	return generate(strings.TrimSpace(line), s)
}

func micros(d time.Duration, jobs int) float64 {
	return float64(d.Microseconds()) / float64(jobs)
}
