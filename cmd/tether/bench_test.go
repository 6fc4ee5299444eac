package main

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/tetherhq/tether/transport/bench"
	"github.com/tetherhq/tether/transport/bench/pgtest"
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
