package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/transport/bench"
	"github.com/tetherhq/tether/transport/bench/pgtest"
	"github.com/tetherhq/tether/transport/transporttest"
)

// tether bench --burn-down drains every job it submitted, against the real binary's server,
// and --river-peer runs the same burn-down on River; both report the same fields.
func TestBenchBurnDown(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	decode := func(stdout string) bench.Result {
		t.Helper()
		var res bench.Result
		if err := json.Unmarshal([]byte(stdout), &res); err != nil {
			t.Fatalf("%v: %q", err, stdout)
		}
		// A burn-down does not measure submit → start: its JSON leaves it out, not zeros.
		var keys map[string]any
		if err := json.Unmarshal([]byte(stdout), &keys); err != nil || keys["submit_to_start_latency"] != nil {
			t.Fatalf("submit_to_start_latency in a burn-down's JSON (%v): %s", err, stdout)
		}
		return res
	}
	t.Run("tether", func(t *testing.T) {
		s := startServer(t, filepath.Join(t.TempDir(), "data"))
		defer stop(t, s)
		stdout, stderr, code := tether(t, nil, "bench", "--server", s.url, "--burn-down", "1500", "--workers", "3", "--capacity", "50", "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		res := decode(stdout)
		if res.Mode != "burn-down" || res.Jobs != 1500 || res.Errors != 0 || res.Workers != 3 || res.Capacity != 50 || res.JobsPerSecond <= 0 || res.InsertPerSecond <= 0 {
			t.Fatalf("%+v", res)
		}
	})
	t.Run("River", func(t *testing.T) {
		url := pgtest.Start(t)
		stdout, stderr, code := tether(t, nil, "bench", "--river-peer", url, "--burn-down", "1500", "--workers", "3", "--capacity", "50", "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		res := decode(stdout)
		if res.Jobs != 1500 || res.Errors != 0 || res.Capacity != 150 || res.JobsPerSecond <= 0 || res.Database == nil || res.Database.Fsync != "on" {
			t.Fatalf("%+v", res)
		}
	})
}

// tether bench against a server that takes the connection and never answers fails, naming the
// call, with CLI_UNREACHABLE and exit 1: it used to wait for ever, saying nothing. Ctrl-C ends
// a run with 130, as a shell's tools do.
func TestBenchAgainstASilentServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	addr, _ := transporttest.Silent(t)
	_, stderr, code := tether(t, nil, "bench", "--server", "http://"+addr, "--setup-timeout", "1s", "--json")
	var e struct {
		Error struct{ Code, Message string }
	}
	if code != 1 || json.Unmarshal([]byte(stderr), &e) != nil || e.Error.Code != "CLI_UNREACHABLE" ||
		!strings.Contains(e.Error.Message, "/healthz") || !strings.Contains(e.Error.Message, "no answer within 1s") {
		t.Fatalf("exit %d, stderr %q: want 1 and CLI_UNREACHABLE naming /healthz and 1s", code, stderr)
	}
	addr, accepted := transporttest.Silent(t)
	p := startTether(t, nil, "bench", "--server", "http://"+addr)
	<-accepted // the run is under way: its signal handler is in place
	p.signal(t, syscall.SIGINT)
	if code := p.wait(30 * time.Second); code != 130 {
		t.Fatalf("exit %d after SIGINT, want 130:\n%s", code, p.output())
	}
}
