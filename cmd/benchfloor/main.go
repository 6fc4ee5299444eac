// Command benchfloor measures what the shape of `tether bench` costs on a machine with nothing
// but the shape (package transport/bench/floor says how), the upper bound tether's own figure is
// read against:
//
//	go run ./cmd/benchfloor --jobs 20000 --producers 8 --workers 50
//	go run ./cmd/benchfloor --fsync=false   # the same shape without the disk
//	go run ./cmd/benchfloor --skew          # the shape of tether bench --skew --tenants 4
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/tetherhq/tether/transport/bench/floor"
)

func main() {
	serveFile := flag.String("serve", "", "internal: serve on a loopback port, logging to this file")
	jobs := flag.Int("jobs", 20000, "jobs to run")
	producers := flag.Int("producers", 8, "producers, each with one request in flight")
	workers := flag.Int("workers", 50, "WebSocket workers of capacity 1")
	fsync := flag.Bool("fsync", true, "fdatasync every batch of records")
	skew := flag.Bool("skew", false, "a fairness run, as tether bench --skew: light tenants' latency alone and beside a heavy one (--producers and --workers are the heavy tenant's)")
	lights := flag.Int("lights", 3, "light tenants of a skew run")
	lightRate := flag.Float64("light-rate", 50, "submits a second of each light tenant in a skew run")
	duration := flag.Duration("duration", 10*time.Second, "how long the light tenants submit, alone and then beside the heavy one")
	cpuPerJob := flag.Duration("cpu-per-job", 0, "CPU work the server does per job besides the shape's own, half at its submit and half at its completion (a stand-in for a broker's)")
	dir := flag.String("dir", os.TempDir(), "directory for the record file (put it on the disk you measure)")
	flag.Parse()

	srv := floor.ServerConfig{Fsync: *fsync, CPUPerJob: *cpuPerJob}
	run := func() error { return floor.Serve(*serveFile, srv) } // the child floor.Run starts
	switch {
	case *serveFile != "":
	case *skew:
		run = func() error {
			s := floor.SkewShape{Lights: *lights, LightRate: *lightRate, Duration: *duration, HeavyProducers: *producers, HeavyWorkers: *workers}
			res, err := floor.RunSkew(*dir, srv, s)
			if err == nil {
				res.WriteSkew(os.Stdout, s, srv)
			}
			return err
		}
	default:
		run = func() error {
			s := floor.Shape{Jobs: *jobs, Producers: *producers, Workers: *workers}
			res, err := floor.Run(*dir, srv, s)
			if err == nil {
				res.Write(os.Stdout, s, srv)
			}
			return err
		}
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}
