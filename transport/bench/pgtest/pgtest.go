// Package pgtest starts throwaway PostgreSQL clusters for tests: Debian's PostgreSQL (the
// postgresql package, which .ci/deps installs), a cluster of its own in a temporary directory,
// reached over a Unix socket there (no port), with the server's defaults: fsync and
// synchronous_commit on. PostgreSQL refuses to run as root; as root (CI) the cluster runs as
// nobody. Under `make test` (TETHER_REQUIRE_TOOLS=1) a missing PostgreSQL fails the test; a
// plain `go test` skips it.
package pgtest

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// Start starts a cluster that lives until the test ends, and returns its URL, whose superuser
// is bench.
func Start(t testing.TB) string {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(bins, func(a, b string) int { return version(b) - version(a) }) // the newest first
	if len(bins) == 0 {
		if os.Getenv("TETHER_REQUIRE_TOOLS") == "1" {
			t.Fatal("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin); run .ci/deps (make test does)")
		}
		t.Skip("PostgreSQL is not installed (.ci/deps installs it); skipped")
	}
	bin := bins[0]
	// Not t.TempDir: its parents are root's alone, and the cluster may run as nobody.
	dir, err := os.MkdirTemp("", "tether-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var as []string // the command line's prefix that runs a program as the cluster's user
	if os.Geteuid() == 0 {
		nobody, err := user.Lookup("nobody")
		if err != nil {
			t.Fatalf("PostgreSQL refuses to run as root, and there is no user nobody to run it as: %v", err)
		}
		uid, _ := strconv.Atoi(nobody.Uid)
		gid, _ := strconv.Atoi(nobody.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		runuser, err := exec.LookPath("runuser")
		if err != nil {
			t.Fatalf("PostgreSQL refuses to run as root, and runuser (util-linux) is missing: %v", err)
		}
		as = []string{runuser, "-u", "nobody", "--"}
	}
	data := filepath.Join(dir, "data")
	run := func(args ...string) {
		t.Helper()
		args = append(slices.Clone(as), args...)
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			logged, _ := os.ReadFile(filepath.Join(dir, "log"))
			t.Fatalf("%v: %v\n%s\n%s", args, err, out, logged)
		}
	}
	// --no-sync spares initdb's own syncing of the files it writes; the server it makes runs
	// with fsync on, as every default cluster does.
	run(filepath.Join(bin, "initdb"), "--no-sync", "-D", data, "-U", "bench", "--auth=trust")
	// -w: pg_ctl returns once the server takes connections.
	run(filepath.Join(bin, "pg_ctl"), "-D", data, "-l", filepath.Join(dir, "log"), "-w", "-o", "-k "+dir+" -c listen_addresses=''", "start")
	t.Cleanup(func() { run(filepath.Join(bin, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop") })
	return "postgres://bench@/postgres?host=" + dir
}

// version is the major version a /usr/lib/postgresql/VERSION/bin directory is of.
func version(bin string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(bin)))
	return v
}
