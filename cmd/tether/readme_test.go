package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeBlock returns the shell block after the README's <!-- name --> marker.
func readmeBlock(t *testing.T, name string) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "<!-- "+name+" -->\n```sh\n")
	if !ok {
		t.Fatalf("README.md has no %s block", name)
	}
	block, _, _ = strings.Cut(block, "```")
	return block
}

// startReady starts a server command (make run, or a README block that runs the server) in its
// own process group, and waits until its JSON log says it is ready.
func startReady(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	ready, exited := make(chan struct{}), make(chan struct{})
	var log strings.Builder
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			var line struct{ Msg string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "ready" {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-exited:
		t.Fatalf("the server exited before it was ready:\n%s", log.String())
	case <-time.After(2 * time.Minute):
		t.Fatal("the server did not get ready")
	}
}

// runBlock runs a README block with sh -e in dir, with env added, and returns what it printed.
// Whatever it leaves running in the background (a worker) is stopped afterwards.
func runBlock(t *testing.T, dir string, env []string, block string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "sh", "-e", "-c", block)
	sh.Dir, sh.Env = dir, append(os.Environ(), env...)
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the worker it leaves running goes with it
	// A file, not a pipe: the worker the block leaves running in the background holds its
	// output open, and Run must not wait for it.
	outFile, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	sh.Stdout, sh.Stderr = outFile, outFile
	err = sh.Run()
	_ = syscall.Kill(-sh.Process.Pid, syscall.SIGTERM)
	outFile.Close()
	out, _ := os.ReadFile(outFile.Name())
	if err != nil {
		t.Fatalf("the README's block failed: %v\n%s", err, out)
	}
	return string(out)
}

// The README's quick start works verbatim: `make run`, then the block after the quickstart
// marker, run by sh in the repository root.
func TestReadmeQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs make and the binary")
	}
	root, _ := filepath.Abs("../..")
	// make run, on a data dir and port of the test's own (make's variables, not an edit).
	addr := freeAddr(t)
	server := exec.Command("make", "run", "DATA="+t.TempDir(), "ADDR="+addr)
	server.Dir = root
	startReady(t, server)
	// The worker keeps its registration in a state dir of the test's own, not the user's.
	out := runBlock(t, root, []string{"TETHER_SERVER=http://" + addr, "XDG_STATE_HOME=" + t.TempDir()}, readmeBlock(t, "quickstart"))
	t.Logf("quick start output:\n%s", out)
	mustContain(t, "the quick start's output", out, "job.progress", `"working on `, "job.succeeded", `output={"got":{"n":1}}`, "done: succeeded")
}

// The README's --auth token walk-through works verbatim on a fresh directory: the server as it
// says (which makes and keeps the admin token), then the client block in a second shell.
func TestReadmeTokenAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	cwd := t.TempDir() // the user's directory: bin/tether in it, and nothing else
	if err := os.Mkdir(filepath.Join(cwd, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(cwd, "bin", "tether")); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	env := []string{"TETHER_ADDR=" + addr, "TETHER_SERVER=http://" + addr, "TETHER_LOG_FORMAT=json", "XDG_STATE_HOME=" + filepath.Join(cwd, "state")}
	server := exec.Command("sh", "-e", "-c", readmeBlock(t, "token-server"))
	server.Dir, server.Env = cwd, append(os.Environ(), env...)
	startReady(t, server)
	out := runBlock(t, cwd, env, readmeBlock(t, "token-clients"))
	mustContain(t, "the client block's output", out, "job.succeeded", `output={"n":2}`, "done: succeeded")
	if fi, err := os.Stat(filepath.Join(cwd, "tether-secure", "admin-token")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the admin token's file: %v %v", fi, err)
	}
}

// The README's flow example works verbatim against `make run`, in a directory of its own (it
// writes flow.yaml there) that has bin/tether.
func TestReadmeFlow(t *testing.T) {
	if testing.Short() {
		t.Skip("runs make and the binary")
	}
	out := runBlockOnMakeRun(t, "flow")
	t.Logf("flow output:\n%s", out)
	mustContain(t, "the flow example's output", out, "flow.submitted", "report", `"needs"`, "flow.ended", "done: succeeded")
}

func TestReadmeSchedule(t *testing.T) {
	if testing.Short() {
		t.Skip("runs make and the binary")
	}
	out := runBlockOnMakeRun(t, "schedule")
	mustContain(t, "the schedule example's output", out, "nightly-report", "30 2 * * *  (Europe/Paris)", "active", "NEXT")
}

// runBlockOnMakeRun starts `make run`, then runs the README's block named name in a second
// directory, as a reader in a second terminal would, with bin/tether at hand.
func runBlockOnMakeRun(t *testing.T, name string) string {
	t.Helper()
	root, _ := filepath.Abs("../..")
	addr := freeAddr(t)
	server := exec.Command("make", "run", "DATA="+t.TempDir(), "ADDR="+addr)
	server.Dir = root
	startReady(t, server)
	cwd := t.TempDir()
	if err := os.Mkdir(filepath.Join(cwd, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "bin", "tether"), filepath.Join(cwd, "bin", "tether")); err != nil {
		t.Fatal(err)
	}
	return runBlock(t, cwd, []string{"TETHER_SERVER=http://" + addr, "XDG_STATE_HOME=" + t.TempDir()}, readmeBlock(t, name))
}

// The README's Python quick start works verbatim against `make run`, from the repository root,
// with Debian's Python (which .ci/deps gives websockets and PyNaCl).
func TestReadmePython(t *testing.T) {
	if testing.Short() {
		t.Skip("runs make, the binary and Python")
	}
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		if os.Getenv("TETHER_REQUIRE_TOOLS") != "" {
			t.Fatalf("no %s: %v", python, err)
		}
		t.Skip("no " + python)
	}
	root, _ := filepath.Abs("../..")
	addr := freeAddr(t)
	server := exec.Command("make", "run", "DATA="+t.TempDir(), "ADDR="+addr)
	server.Dir = root
	startReady(t, server)
	// Debian's python3 first on PATH.
	env := []string{"TETHER_SERVER=http://" + addr, "PATH=/usr/bin:" + os.Getenv("PATH")}
	out := runBlock(t, root, env, readmeBlock(t, "python"))
	t.Logf("python quick start output:\n%s", out)
	mustContain(t, "the Python quick start's output", out, "job.progress {'step': 1, 'of': 3}", "job.progress {'step': 3, 'of': 3}",
		"job.succeeded", "done: succeeded {'resized': 'cat.png', 'attempt': 1}")
}
