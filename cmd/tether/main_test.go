package main

import (
	"flag"
	"io"
	"os"
	goruntime "runtime"
	"testing"
)

// A flag on the command line beats its TETHER_* twin, which beats the default.
func TestParseFlagsEnvironmentTwins(t *testing.T) {
	t.Setenv("TETHER_DATA", "/from/env")
	t.Setenv("TETHER_LOG_LEVEL", "debug")
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	data := fs.String("data", "default-data", "")
	addr := fs.String("addr", "default-addr", "")
	level := fs.String("log-level", "info", "")
	if err := parseFlags(fs, []string{"--data", "/from/flag"}); err != nil {
		t.Fatal(err)
	}
	if *data != "/from/flag" || *level != "debug" || *addr != "default-addr" {
		t.Fatalf("data=%q log-level=%q addr=%q; want the flag, the env twin, the default", *data, *level, *addr)
	}
}

func TestParseFlagsRejectsBadEnvironment(t *testing.T) {
	t.Setenv("TETHER_WORKERS", "many")
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Int("workers", 1, "")
	if err := parseFlags(fs, nil); err == nil {
		t.Fatal("TETHER_WORKERS=many accepted for an int flag")
	}
}

func TestLoggerFlags(t *testing.T) {
	for _, tc := range []struct {
		format, level string
		ok            bool
	}{
		{"json", "info", true},
		{"text", "debug", true},
		{"auto", "warn", true},
		{"xml", "info", false},
		{"json", "loud", false},
	} {
		_, err := (&logFlags{format: tc.format, level: tc.level}).logger()
		if (err == nil) != tc.ok {
			t.Errorf("--log-format=%s --log-level=%s: err=%v, want ok=%v", tc.format, tc.level, err, tc.ok)
		}
	}
}

func TestServerProcs(t *testing.T) {
	t.Setenv("GOMAXPROCS", "") // restored when the test ends
	_ = os.Unsetenv("GOMAXPROCS")
	if got, want := serverProcs(0), goruntime.GOMAXPROCS(0)+1; got != want {
		t.Fatalf("default: %d, want %d", got, want)
	}
	if got := serverProcs(5); got != 5 {
		t.Fatalf("--procs 5: %d", got)
	}
	t.Setenv("GOMAXPROCS", "2")
	if got := serverProcs(0); got != 0 {
		t.Fatalf("with GOMAXPROCS set: %d, want 0 (left alone)", got)
	}
	if got := serverProcs(4); got != 4 {
		t.Fatalf("--procs 4 with GOMAXPROCS set: %d", got)
	}
}

// No flag may read the TETHER_JOB_* variables a worker gives each job's program: a flag named
// job-* is refused as soon as its command parses.
func TestNoFlagReadsTheJobsVariables(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("job-id", "", "")
	defer func() {
		if recover() == nil {
			t.Fatal("a flag in the jobs' namespace was accepted")
		}
	}()
	_ = parseFlags(fs, []string{"--help"})
}
