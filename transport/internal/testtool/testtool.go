// Package testtool finds the programs that some tests drive from outside Go (promtool,
// chromium, chromedriver). They come from Debian packages that `make test` installs
// (.ci/deps). Under `make test` (TETHER_REQUIRE_TOOLS=1) a missing program fails the test; a
// plain `go test` skips it, so the rest of the suite runs on a machine without them.
package testtool

import (
	"os"
	"os/exec"
	"testing"
)

// Find returns the path of program, or ends the test: a failure when tools are required, a skip
// otherwise.
func Find(t testing.TB, program string) string {
	t.Helper()
	path, err := exec.LookPath(program)
	if err == nil {
		return path
	}
	if os.Getenv("TETHER_REQUIRE_TOOLS") == "1" {
		t.Fatalf("%s is not installed; run .ci/deps (make test does): %v", program, err)
	}
	t.Skipf("%s is not installed (.ci/deps installs it); skipped", program)
	return ""
}
