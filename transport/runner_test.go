package transport_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// The worker runner, client.Command, with real programs: what `tether worker` runs.

// runCommand runs a command worker of capacity 1 on its own server until the test ends, and
// returns a client of that server.
func runCommand(t *testing.T, cmd client.Command) (*harness, *client.Client) {
	t.Helper()
	h := start(t, transport.AuthNone)
	reg := h.register("", nil, 1)
	w := &client.Worker{Server: h.url, Token: reg.WorkerToken, Logger: zaptest.NewLogger(t), Handler: cmd.Handler()}
	runUntilTheEnd(t, w)
	return h, client.New(h.url, "", nil)
}

func sh(script string) client.Command {
	return client.Command{Args: []string{"sh", "-c", script}, KillGrace: 2 * time.Second}
}

// runJob submits one job and waits until it is terminal.
func runJob(t *testing.T, c *client.Client, maxAttempts int) *wire.Job {
	t.Helper()
	j, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t", MaxAttempts: maxAttempts})
	if err != nil {
		t.Fatal(err)
	}
	return await(t, c, j.ID)
}

func wantFailed(t *testing.T, j *wire.Job, code, deadReason string) {
	t.Helper()
	if j.Status != "failed" || j.Error == nil || j.Error.Code != code || j.DeadReason != deadReason {
		t.Fatalf("job %s dead %q error %+v, want failed %s with %s", j.Status, j.DeadReason, j.Error, deadReason, code)
	}
}

// A program that floods stdout does not grow the worker with it: what is read past the output
// limit is counted and thrown away, and the job fails for good, saying why. What the runner
// allocates is measured in a process of its own (this test binary run again, for this test
// alone), where no other test running in parallel adds to the figure.
func TestCommandOutputFloodIsCapped(t *testing.T) {
	if report := os.Getenv(floodReportEnv); report != "" {
		floodAndReport(t, report)
		return
	}
	t.Parallel()
	report := filepath.Join(t.TempDir(), "allocated")
	cmd := exec.Command(os.Args[0], "-test.run=^TestCommandOutputFloodIsCapped$", "-test.count=1")
	cmd.Env = append(os.Environ(), floodReportEnv+"="+report)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the flood's own process: %v\n%s", err, out)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	grew, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the flood's process allocated %d MB", grew>>20)
	// 300 MB went through the pipe; the process (server included) allocated a fraction.
	if grew > 100<<20 {
		t.Fatalf("the process allocated %d MB while the program printed 300 MB", grew>>20)
	}
}

// floodReportEnv names the file the flood's own process writes the bytes it allocated to.
const floodReportEnv = "TETHER_TEST_FLOOD_REPORT"

// floodAndReport runs the flooding job and writes to report how many bytes this process
// allocated meanwhile.
func floodAndReport(t *testing.T, report string) {
	_, c := runCommand(t, sh(`yes 'a line of output' | head -c 300000000`))
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	j := runJob(t, c, 3)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	wantFailed(t, j, "output_too_large", "non_retryable")
	if !strings.Contains(j.Error.Message, "300000000") {
		t.Fatalf("the failure does not say how much there was: %s", j.Error.Message)
	}
	if err := os.WriteFile(report, []byte(strconv.FormatUint(after.TotalAlloc-before.TotalAlloc, 10)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Output under the raw cap can still exceed the limit once JSON-escaped; the runner measures it
// as the frame will carry it and fails the job at once: no frame too big for the WebSocket, no
// fall back to long-polling, no result dropped to the lease's expiry.
func TestCommandOutputTooLargeOnceEncoded(t *testing.T) {
	t.Parallel()
	for name, script := range map[string]string{
		"control bytes": `head -c 200000 /dev/zero | tr '\0' '\1'`,
		"short lines":   `yes hello | head -c 1000000`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, c := runCommand(t, sh(script))
			wantFailed(t, runJob(t, c, 3), "output_too_large", "non_retryable")
		})
	}
}

// Plain-text output loses its trailing line break, CRLF included; output that is neither JSON
// nor UTF-8 is refused by name instead of being altered.
func TestCommandTextOutput(t *testing.T) {
	t.Parallel()
	_, c := runCommand(t, sh(`read -r p; case "$p" in *crlf*) printf 'windows\r\n';; *bytes*) printf 'caf\351\n';; esac`))
	submitPayload := func(p string) *wire.Job {
		j, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t", MaxAttempts: 1, Payload: json.RawMessage(p)})
		if err != nil {
			t.Fatal(err)
		}
		return await(t, c, j.ID)
	}
	if j := submitPayload(`"crlf"`); j.Status != "succeeded" || string(j.Output) != `"windows"` {
		t.Fatalf("crlf: %s %s", j.Status, j.Output)
	}
	j := submitPayload(`"bytes"`)
	wantFailed(t, j, "output_not_utf8", "non_retryable")
	if !strings.Contains(j.Error.Message, "offset 3") {
		t.Fatalf("the failure does not say where: %s", j.Error.Message)
	}
}

// A job that leaves a child in the background succeeds or fails by its own exit status, as soon
// as it exits; the child is ended with the job's process group.
func TestCommandThatLeavesAChildBehind(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "child")
	_, c := runCommand(t, sh(`sh -c 'echo $$ > `+pidFile+`.new; mv `+pidFile+`.new `+pidFile+`; exec sleep 60' &
while [ ! -e `+pidFile+` ]; do :; done
echo '{"forked":true}'`))
	started := time.Now()
	j := runJob(t, c, 1)
	if j.Status != "succeeded" || string(j.Output) != `{"forked":true}` {
		t.Fatalf("job %s output %s error %+v", j.Status, j.Output, j.Error)
	}
	if took := time.Since(started); took > 30*time.Second {
		t.Fatalf("the job took %s: it waited for its child", took)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(pid, 0) == nil; {
		if time.Now().After(deadline) {
			t.Fatalf("the child %d still runs after its job ended", pid)
		}
		time.Sleep(10 * time.Millisecond) // waiting for a process this test is not the parent of
	}
}

// A program that cannot be started is not the job's fault: the job goes back to the queue with
// no attempt spent, its history says why, and the worker takes no job for a while.
func TestCommandThatCannotStartGivesTheJobBack(t *testing.T) {
	t.Parallel()
	script := filepath.Join(t.TempDir(), "job.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho ok\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := client.Command{Args: []string{script}}
	if err := cmd.Check(); err != nil {
		t.Fatalf("Check of a runnable script: %v", err)
	}
	if err := os.Chmod(script, 0o644); err != nil { // no longer executable, by anyone
		t.Fatal(err)
	}
	h, c := runCommand(t, cmd)
	j, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	var released wire.Event
	_, _ = c.Watch(ctx(t), j.ID, 0, func(e wire.Event) error {
		if e.Type == "job.lease_released" {
			released = e
			return errors.New("seen")
		}
		return nil
	})
	if !strings.Contains(string(released.Data), `"reason":"start_failed"`) || !strings.Contains(string(released.Data), "permission denied") {
		t.Fatalf("the release says %s", released.Data)
	}
	got, _ := c.Get(ctx(t), j.ID)
	if got.Status == "failed" || got.DeadReason != "" || got.Attempt > 1 {
		t.Fatalf("the job was charged for the worker's fault: %+v", got)
	}
	_ = h
	// The worker backs off: with nothing changed it would take the job straight back.
	missing := client.Command{Args: []string{filepath.Join(t.TempDir(), "does-not-exist")}}
	if err := missing.Check(); err == nil || !strings.Contains(err.Error(), "does-not-exist") {
		t.Fatalf("Check of a missing program: %v", err)
	}
}

// A job's program gets the job's facts in TETHER_JOB_*, and none of the runner's own
// configuration: a tether command inside a job is not steered into the worker's queue, nor
// handed its token.
func TestCommandEnvironmentIsTheJobsOwn(t *testing.T) {
	t.Setenv("TETHER_QUEUE", "the-workers-queue")
	t.Setenv("TETHER_TOKEN", "tw_the-workers-secret")
	t.Setenv("TETHER_SERVER", "http://10.0.0.1:8080")
	_, c := runCommand(t, sh(`env | grep '^TETHER_' | sort | cut -d= -f1 | tr '\n' ' '`))
	j := runJob(t, c, 1)
	var got string
	_ = json.Unmarshal(j.Output, &got)
	want := "TETHER_JOB_ATTEMPT TETHER_JOB_ID TETHER_JOB_LEASE_EXPIRES_AT TETHER_JOB_LEASE_ID TETHER_JOB_QUEUE TETHER_JOB_TYPE"
	if strings.TrimSpace(got) != want {
		t.Fatalf("the job saw %q, want %q", got, want)
	}
}

// A worker registered with a public key but run without its private key would have every
// result refused: it says so and stops at once, leaving the jobs to workers that can sign.
func TestWorkerWithoutItsKeyRefusesToRun(t *testing.T) {
	t.Parallel()
	for _, tr := range []string{client.TransportWebSocket, client.TransportLongPoll} {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			h := start(t, transport.AuthNone)
			pub, _, _ := ed25519.GenerateKey(nil)
			_, other, _ := ed25519.GenerateKey(nil)
			reg := h.register("", pub, 1)
			for _, key := range []ed25519.PrivateKey{nil, other} {
				w := &client.Worker{Server: h.url, Token: reg.WorkerToken, Transport: tr, Key: key, Logger: zaptest.NewLogger(t),
					Handler: func(context.Context, *client.Job) (any, error) { return nil, nil }}
				rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := w.Run(rctx)
				timedOut := rctx.Err() != nil
				cancel()
				if err == nil || !strings.Contains(err.Error(), "key") || timedOut {
					t.Fatalf("key %v: Run returned %v", key != nil, err)
				}
			}
		})
	}
}
