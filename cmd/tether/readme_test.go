package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The README's quick start works verbatim: `make run`, then the block after the quickstart
// marker, run by sh in the repository root.
func TestReadmeQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs make and the binary")
	}
	root, _ := filepath.Abs("../..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "<!-- quickstart -->\n```sh\n")
	if !ok {
		t.Fatal("README.md has no quickstart block")
	}
	block, _, _ = strings.Cut(block, "```")

	// make run, on a data dir and port of the test's own (make's variables, not an edit).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	server := exec.Command("make", "run", "DATA="+t.TempDir(), "ADDR="+addr)
	server.Dir = root
	server.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, _ := server.StderrPipe()
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-server.Process.Pid, syscall.SIGKILL); _ = server.Wait() })
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct{ Msg string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "ready" {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(2 * time.Minute):
		t.Fatal("make run did not get ready")
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "sh", "-e", "-c", block)
	sh.Dir = root
	sh.Env = append(os.Environ(), "TETHER_SERVER=http://"+addr)
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the worker it starts in the background goes with it
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
		t.Fatalf("the quick start failed: %v\n%s", err, string(out))
	}
	t.Logf("quick start output:\n%s", out)
	for _, want := range []string{"job.progress", `"working on `, "job.succeeded", `output={"got":{"n":1}}`, "done: succeeded"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("the quick start's output lacks %q:\n%s", want, string(out))
		}
	}
}
