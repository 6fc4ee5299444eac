package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// What a user mistypes is refused, once, with the reason; nothing is taken silently.
func TestCommandLineMistakes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	dir := t.TempDir()
	s := startServer(t, dir)
	c := client.New(s.url, "", nil)
	if _, err := c.Submit(context.Background(), wire.SubmitRequest{Queue: "q", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	srv := "--server=" + strings.TrimPrefix(s.url, "http://") // host:port, no scheme: http:// is meant
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"job", "ls", srv, "--limit", "0"}, "--limit 0: want 1..1000"},
		{[]string{"job", "ls", srv, "--limit", "-1"}, "--limit -1: want 1..1000"},
		{[]string{"job", "ls", srv, "--cursor", "garbage"}, "cursor \"garbage\" is not a next_cursor"},
		{[]string{"worker", srv, "--transport", "carrier-pigeon", "--", "cat"}, `--transport "carrier-pigeon"`},
		{[]string{"worker", srv, "--timeout", "-5s", "--", "cat"}, "--timeout"},
		{[]string{"worker", srv, "--capacity", "0", "--", "cat"}, "--capacity 0"},
		{[]string{"worker", srv}, "no command given"},
		{[]string{"admin", "enroll-token", srv, "--tenant", "default", "--uses", "0"}, "--uses 0"},
		{[]string{"admin", "quota", srv, "--max-active", "3"}, "--tenant is required"},
		{[]string{"admin", "quota", srv, "--tenant", "default"}, "nothing to change"},
		{[]string{"sim", "--steps", "-1"}, "--steps"},
		{[]string{"job", "ls", "--server", "ftp://example.com"}, "is not a server URL"},
		{[]string{"bench", srv, "--workers", "0"}, "--producers and --workers"},
	} {
		stdout, stderr, code := tether(t, []string{"XDG_STATE_HOME=" + t.TempDir()}, tc.args...)
		if code != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("tether %v: exit %d, stderr %q, want %q (stdout %q)", tc.args, code, stderr, tc.want, stdout)
		}
	}
	// The server now is a stopped server's dir for replay.
	stop(t, s)
	out := filepath.Join(t.TempDir(), "part.jsonl")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--from", "5", "--to", "3"}, "--to comes before --from"},
		{[]string{"--from", "1000"}, "past the log's head"},
		{[]string{"--to", "1000"}, "past the log's head"},
	} {
		args := append([]string{"replay", "export", "--data", dir, "--out", out}, tc.args...)
		if _, stderr, code := tether(t, nil, args...); code != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("tether %v: exit %d, stderr %q, want %q", args, code, stderr, tc.want)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("tether %v made the file anyway", args)
		}
	}
}

// A bad flag is said once, with where to look, not with the whole usage and the error twice;
// --help prints the usage and is no error. Every command's --help works, which also proves no
// flag reads the jobs' own TETHER_JOB_* variables (parseFlags refuses such a flag).
func TestFlagErrorsAndHelp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	_, stderr, code := tether(t, nil, "job", "ls", "--bogus")
	if code != 1 || strings.Count(stderr, "flag provided but not defined: -bogus") != 1 || strings.Contains(stderr, "Usage") ||
		!strings.Contains(stderr, "see tether job ls --help") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	for _, args := range [][]string{
		{"server"}, {"worker"}, {"worker", "register"}, {"worker", "keygen"}, {"job", "submit"}, {"job", "get"}, {"job", "ls"},
		{"job", "cancel"}, {"job", "retry"}, {"job", "watch"}, {"admin", "apikey"}, {"admin", "enroll-token"}, {"admin", "quota"},
		{"bench"}, {"replay", "verify"}, {"replay", "history"}, {"replay", "state"}, {"replay", "export"}, {"replay", "receipt"}, {"sim"},
	} {
		_, stderr, code := tether(t, nil, append(args, "--help")...)
		if code != 0 || !strings.Contains(stderr, "usage of tether") {
			t.Errorf("tether %v --help: exit %d\n%s", args, code, stderr)
		}
	}
}

// `admin quota` changes only the limits it is given.
func TestAdminQuotaIsPartial(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	s := startServer(t, t.TempDir())
	for _, args := range [][]string{{"--max-active", "10"}, {"--max-running", "2"}} {
		if _, stderr, code := tether(t, nil, append([]string{"admin", "quota", "--server", s.url, "--tenant", "default"}, args...)...); code != 0 {
			t.Fatalf("admin quota %v: exit %d\n%s", args, code, stderr)
		}
	}
	q, err := client.New(s.url, "", nil).Quota(context.Background())
	if err != nil || q.MaxActive != 10 || q.MaxRunning != 2 {
		t.Fatalf("quota %+v (%v), want max_active 10 and max_running 2", q, err)
	}
}
