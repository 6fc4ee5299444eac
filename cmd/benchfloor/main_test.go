package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A SIGTERM or SIGINT to benchfloor stops its --serve child and removes the child's records:
// they used to outlive it (the child with ppid 1, a 64 MB tether-floor-* dir).
func TestASignalStopsTheServerAndRemovesItsRecords(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := filepath.Join(t.TempDir(), "benchfloor")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(bin, "--jobs", "100000000", "--fsync=false", "--dir", dir)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			child := waitFor(t, "the --serve child", func() string {
				tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "task", "*", "children"))
				for _, task := range tasks { // the thread that forked it lists it
					if b, _ := os.ReadFile(task); len(strings.Fields(string(b))) > 0 {
						return strings.Fields(string(b))[0]
					}
				}
				return ""
			})
			waitFor(t, "the records", func() string {
				m, _ := filepath.Glob(filepath.Join(dir, "tether-floor-*", "records"))
				return strings.Join(m, " ")
			})
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != 128+int(sig) {
				t.Errorf("exit %d (%v), want %d", code, err, 128+int(sig))
			}
			waitFor(t, "the child gone", func() string {
				if b, err := os.ReadFile(filepath.Join("/proc", child, "stat")); err == nil && !strings.Contains(string(b), ") Z") {
					return ""
				}
				return "gone"
			})
			if left, _ := filepath.Glob(filepath.Join(dir, "tether-floor-*")); len(left) != 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

// waitFor polls get until it says something, for 30 s at most, and returns what it said.
func waitFor(t *testing.T, what string, get func() string) string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if s := get(); s != "" {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30 s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling another process
	}
}
