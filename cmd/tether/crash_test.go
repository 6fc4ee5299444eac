package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// binDir holds the binary the tests build; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// buildBinary builds the tether binary once for the tests that run it.
var buildBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "tether-bin")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "tether")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// server is a running `tether server` process.
type server struct {
	cmd *exec.Cmd
	url string
	log *serverLog
}

// serverLog is what a server has logged so far, line by line.
type serverLog struct {
	mu    sync.Mutex
	lines strings.Builder
}

func (l *serverLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines.WriteString(line + "\n")
}

func (l *serverLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines.String()
}

// startServer runs the binary on dir, with extra flags, and waits until it is ready.
func startServer(t *testing.T, dir string, extra ...string) *server {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"server", "--data", dir, "--addr", "127.0.0.1:0", "--log-format", "json"}, extra...)
	cmd := exec.Command(bin, args...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// The log says where the server listens, then that recovery is done; a server that exits
	// first says why.
	url, ready, exited := make(chan string, 1), make(chan struct{}), make(chan struct{})
	lines := &serverLog{}
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines.add(sc.Text())
			var line struct{ Msg, Dashboard string }
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			if line.Dashboard != "" { // http:// or, with --tls-cert, https://
				url <- strings.TrimSuffix(line.Dashboard, "/")
			}
			if line.Msg == "ready" {
				close(ready)
			}
		}
	}()
	timeout := time.After(60 * time.Second)
	var s *server
	select {
	case u := <-url:
		s = &server{cmd: cmd, url: u, log: lines}
	case <-exited:
		t.Fatalf("the server exited before it listened:\n%s", lines.String())
	case <-timeout:
		t.Fatal("the server did not log its address")
	}
	select {
	case <-ready:
	case <-exited:
		t.Fatalf("the server exited before it was ready:\n%s", lines.String())
	case <-timeout:
		t.Fatal("the server did not become ready")
	}
	// Over https, the server's own certificate, which the test may have made for no client to
	// trust: this asks whether it is ready, not whether it is trusted.
	probe := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := probe.Get(s.url + "/readyz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz after the ready log line: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return s
}

// Every job whose submit was acknowledged survives a kill -9 in the middle of a stream of
// submits, and a worker finishes them all after the restart.
func TestKill9KeepsAcknowledgedJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dir := t.TempDir()
	s := startServer(t, dir)
	c := client.New(s.url, "", nil)
	var (
		mu    sync.Mutex
		acked []string
	)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for p := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				j, err := c.Submit(ctx, wire.SubmitRequest{Queue: "q", Type: "t", Payload: json.RawMessage(fmt.Sprintf(`{"p":%d,"i":%d}`, p, i))})
				if err != nil {
					return // the server died under us: this submit was never acknowledged
				}
				mu.Lock()
				acked = append(acked, j.ID)
				n := len(acked)
				mu.Unlock()
				if n == 500 {
					_ = s.cmd.Process.Signal(syscall.SIGKILL) // mid-stream: other submits are in flight
				}
			}
		}()
	}
	wg.Wait()
	stop()
	_ = s.cmd.Wait()
	mu.Lock()
	ids := append([]string(nil), acked...)
	mu.Unlock()
	if len(ids) < 500 {
		t.Fatalf("only %d submits acknowledged before the kill", len(ids))
	}

	s = startServer(t, dir)
	c = client.New(s.url, "", nil)
	for _, id := range ids {
		if _, err := c.Get(context.Background(), id); err != nil {
			t.Fatalf("acknowledged job %s is gone after kill -9: %v", id, err)
		}
	}
	reg, err := c.RegisterWorker(context.Background(), wire.RegisterRequest{Name: "w", Queues: []string{"q"}, Capacity: 16})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(context.Background())
	defer stopWorker()
	w := &client.Worker{Server: s.url, Token: reg.WorkerToken, Capacity: 16,
		Handler: func(context.Context, *client.Job) (any, error) { return "done", nil }}
	go func() { _ = w.Run(wctx) }()
	wait, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, id := range ids {
		status, err := c.Watch(wait, id, 0, func(wire.Event) error { return nil })
		if err != nil || status != "succeeded" {
			t.Fatalf("job %s ended %q: %v", id, status, err)
		}
	}
	t.Logf("%d acknowledged submits survived kill -9 and ran", len(ids))
}
