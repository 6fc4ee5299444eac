package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/transporttest"
)

// Every way a user can start the server, with the real binary.
func TestServerStartUpPaths(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	t.Run("a fresh dir under --auth token, as the README says", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		s := startServer(t, dir, "--auth", "token")
		token, err := os.ReadFile(filepath.Join(dir, "admin-token"))
		if err != nil {
			t.Fatal(err)
		}
		if fi, _ := os.Stat(filepath.Join(dir, "admin-token")); fi.Mode().Perm() != 0o600 {
			t.Fatalf("admin-token has mode %v, want 0600", fi.Mode().Perm())
		}
		admin := client.New(s.url, strings.TrimSpace(string(token)), nil)
		key, err := admin.CreateAPIKey(context.Background(), "acme")
		if err != nil {
			t.Fatalf("the admin token in the file does not work: %v", err)
		}
		stop(t, s)
		// An existing dir: the same token, the same key, the same data.
		s = startServer(t, dir, "--auth", "token")
		if _, err := client.New(s.url, key.Key, nil).Quota(context.Background()); err != nil {
			t.Fatalf("after a restart the API key made before does not work: %v", err)
		}
		if again, _ := os.ReadFile(filepath.Join(dir, "admin-token")); string(again) != string(token) {
			t.Fatal("a restart made a new admin token")
		}
		stop(t, s)
	})
	t.Run("a dir with only an admin token", func(t *testing.T) {
		// What a first start under --auth token used to leave behind before refusing the dir.
		dir := t.TempDir()
		const token = "ta_an-admin-token-someone-kept"
		if err := os.WriteFile(filepath.Join(dir, "admin-token"), []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		s := startServer(t, dir, "--auth", "token")
		if _, err := client.New(s.url, token, nil).CreateAPIKey(context.Background(), "acme"); err != nil {
			t.Fatalf("the kept admin token does not work: %v", err)
		}
		stop(t, s)
	})
	t.Run("a dir of something else", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, stderr, code := tether(t, nil, "server", "--data", dir, "--addr", freeAddr(t))
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		mustContain(t, "stderr", stderr, "holds no event log")
	})
	t.Run("a data path under a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(file, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		_, stderr, code := tether(t, nil, "server", "--data", filepath.Join(file, "data"), "--addr", freeAddr(t))
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		mustContain(t, "stderr", stderr, "data directory", "not a directory")
	})
	t.Run("an unwritable dir", func(t *testing.T) {
		dir, err := os.MkdirTemp("", "tether-ro")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		bin, err := buildBinary()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "server", "--data", dir, "--addr", freeAddr(t))
		if os.Getuid() == 0 { // root writes anywhere: run as nobody, who may not write here
			if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		}
		out, err := cmd.CombinedOutput()
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != exitStorage {
			t.Fatalf("exit %v: %v\n%s", cmd.ProcessState, err, out)
		}
		mustContain(t, "output", string(out), "permission denied", "STORAGE_READ_ONLY", dir)
	})
	t.Run("a dir a running server holds", func(t *testing.T) {
		dir := t.TempDir()
		s := startServer(t, dir)
		_, stderr, code := tether(t, nil, "server", "--data", dir, "--addr", freeAddr(t))
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		mustContain(t, "stderr", stderr, "is a tether server running on it?")
		if resp, err := http.Get(s.url + "/readyz"); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("the first server after the second was refused: %v %v", resp, err)
		}
	})
	t.Run("flags refused before anything is made", func(t *testing.T) {
		certs := t.TempDir()
		expired, notYet := filepath.Join(certs, "expired.pem"), filepath.Join(certs, "not-yet.pem")
		transporttest.WriteCert(t, expired, expired+".key", time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		transporttest.WriteCert(t, notYet, notYet+".key", time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2101, 1, 1, 0, 0, 0, 0, time.UTC))
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--auth", "token", "--admin-token", "short"}, "--admin-token is 5 characters"},
			{[]string{"--auth", "tokens"}, `--auth "tokens"`},
			{[]string{"--auth", "none", "--addr", "0.0.0.0:0"}, "loopback"},
			{[]string{"--metrics-addr", "0.0.0.0:9090"}, "--metrics-addr"},
			{[]string{"--auth", "token", "--addr", "0.0.0.0:0"}, "clear text"},
			{[]string{"--tls-cert", "cert.pem"}, "--tls-cert and --tls-key go together"},
			{[]string{"--tls-cert", "/nonexistent/cert.pem", "--tls-key", "/nonexistent/key.pem"}, "--tls-cert"},
			{[]string{"--tls-cert", expired, "--tls-key", expired + ".key"}, "--tls-cert " + expired + " expired at 2026-01-02T03:04:05Z"},
			{[]string{"--tls-cert", notYet, "--tls-key", notYet + ".key"}, "--tls-cert " + notYet + " is not valid before 2100-01-01T00:00:00Z"},
			{[]string{"--worker-token-ttl", "1s"}, "--worker-token-ttl"},
			{[]string{"--retain", "-1h"}, "--retain -1h0m0s"},
			{[]string{"--retain-dead", "1ms"}, "--retain-dead"},
			{[]string{"--max-dead", "-1"}, "--max-dead -1"},
		} {
			dir := filepath.Join(t.TempDir(), "data")
			args := append([]string{"server", "--data", dir}, tc.args...)
			if !strings.Contains(strings.Join(tc.args, " "), "--addr") {
				args = append(args, "--addr", freeAddr(t))
			}
			_, stderr, code := tether(t, nil, args...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, code, stderr, tc.want)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("%v: the data dir was made: %v", tc.args, err)
			}
		}
	})
}

// stop stops a server with SIGTERM, as a service manager does, and checks it exits cleanly.
func stop(t *testing.T, s *server) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the server exited with %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not stop within 30 s of SIGTERM")
	}
}

// checkFailedLine checks that a server that failed to start said why under --log-format json as
// it says everything, in JSON, ending with one SERVER_FAILED line.
func checkFailedLine(t *testing.T, stderr string) {
	t.Helper()
	lines := jsonLog(t, stderr)
	if len(lines) == 0 || lines[len(lines)-1].Code != "SERVER_FAILED" || lines[len(lines)-1].Error == "" {
		t.Errorf("the last line is not a SERVER_FAILED line with the error: %q", stderr)
	}
}

// An address in use is found before anything is made on disk: the start fails (exit 1, only
// the bind can tell) and leaves no data dir and no admin token behind.
func TestServerStartThatFailsLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, args := range [][]string{
		{"--addr", taken.Addr().String()},
		{"--addr", "127.0.0.1:0", "--metrics-addr", taken.Addr().String()},
	} {
		data := filepath.Join(t.TempDir(), "data")
		_, stderr, code := tether(t, nil, append([]string{"server", "--data", data, "--auth", "token", "--log-format", "json"}, args...)...)
		if code != 1 || !strings.Contains(stderr, "address already in use") {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
		checkFailedLine(t, stderr)
		if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%v: the data dir was made: %v", args, err)
		}
	}
	// NATS unreachable is found after the data dir is made: the start takes away what it made,
	// the dir if it was new, else the admin token it wrote there.
	unreachable := "nats://" + taken.Addr().String() + "/S" // a TCP port that speaks no NATS
	existing := t.TempDir()
	for _, data := range []string{filepath.Join(t.TempDir(), "data"), existing} {
		_, stderr, code := tether(t, nil, "server", "--data", data, "--auth", "token", "--addr", "127.0.0.1:0", "--log", unreachable, "--log-format", "json")
		if code != 1 || !strings.Contains(stderr, "NATS") {
			t.Errorf("%s: exit %d, stderr %q", data, code, stderr)
		}
		checkFailedLine(t, stderr) // the NATS connect error was plain text once
		if data == existing {
			if entries, err := os.ReadDir(data); err != nil || len(entries) != 0 {
				t.Errorf("left in the data dir: %v %v", entries, err)
			}
		} else if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the data dir was left: %v", err)
		}
	}
}
