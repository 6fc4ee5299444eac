// Command benchfloor measures what the shape of `tether bench` costs on a machine with nothing
// but the shape (package transport/bench/floor says how), the upper bound tether's own figure is
// read against:
//
//	go run ./cmd/benchfloor --jobs 20000 --producers 8 --workers 50
//	go run ./cmd/benchfloor --fsync=false   # the same shape without the disk
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/tetherhq/tether/transport/bench/floor"
)

func main() {
	serveFile := flag.String("serve", "", "internal: serve on a loopback port, logging to this file")
	jobs := flag.Int("jobs", 20000, "jobs to run")
	producers := flag.Int("producers", 8, "producers, each with one request in flight")
	workers := flag.Int("workers", 50, "WebSocket workers of capacity 1")
	fsync := flag.Bool("fsync", true, "fdatasync every batch of records")
	dir := flag.String("dir", os.TempDir(), "directory for the record file (put it on the disk you measure)")
	flag.Parse()

	run := func() error { return floor.Serve(*serveFile, *fsync) } // the child floor.Run starts
	if *serveFile == "" {
		run = func() error {
			s := floor.Shape{Jobs: *jobs, Producers: *producers, Workers: *workers}
			res, err := floor.Run(*dir, *fsync, s)
			if err == nil {
				res.Write(os.Stdout, s, *fsync)
			}
			return err
		}
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}
