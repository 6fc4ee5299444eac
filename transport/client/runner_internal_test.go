package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/transport/client/policy"
	"github.com/tetherhq/tether/transport/wire"
)

// The reasons the worker releases a job with are the catalogue's, which the server writes.
func TestReleaseReasonsAreTheCatalogues(t *testing.T) {
	if ReleaseWorkerStopping != eventlog.ReleasedWorkerStopping || ReleaseStartFailed != eventlog.ReleasedStartFailed ||
		ReleaseWorkerRestarted != eventlog.ReleasedWorkerRestarted {
		t.Fatalf("release reasons %q, %q, %q; the catalogue's %q, %q, %q", ReleaseWorkerStopping, ReleaseStartFailed, ReleaseWorkerRestarted,
			eventlog.ReleasedWorkerStopping, eventlog.ReleasedStartFailed, eventlog.ReleasedWorkerRestarted)
	}
}

// Only WebSocket refused by something that answers HTTP counts towards falling back to
// long-polling; a server that is away, restarting, not ready, closing a frame too big, or
// refusing the worker itself does not. A handshake that fails as a failover or a pause leaves
// it (moves on to the next server); a refusal that answered, or the worker's, does not.
func TestWhatCountsAsWebSocketRefused(t *testing.T) {
	for _, tc := range []struct {
		name          string
		err           error
		refused, move bool
	}{
		{"connection refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, false, true},
		{"a handshake cut", fmt.Errorf("%w: %w", errWSCut, io.ErrUnexpectedEOF), true, true},
		{"a handshake unanswered (a paused server)", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, false, true},
		{"an upgrade answered 200", fmt.Errorf("%w: the upgrade was answered 200 OK", errWSRefused), true, false},
		{"a proxy's 400", &Error{Status: 400, Code: "HTTP_400"}, true, false},
		{"a proxy's 403", &Error{Status: 403, Code: "HTTP_403"}, true, false},
		{"a standby", &Error{Status: 503, Code: "STANDBY"}, false, true},
		{"not ready", &Error{Status: 503, Code: "NOT_READY"}, false, true},
		{"a bad gateway", &Error{Status: 502, Code: "HTTP_502"}, false, true},
		{"too many requests", &Error{Status: 429, Code: "HTTP_429"}, false, false},
		{"the worker revoked", &Error{Status: 403, Code: "WORKER_REVOKED"}, false, false},
		{"a frame too big", &websocket.CloseError{Code: websocket.CloseMessageTooBig}, false, true},
		{"the server going away", &websocket.CloseError{Code: websocket.CloseGoingAway}, false, true},
	} {
		if got := wsRefused(tc.err); got != tc.refused {
			t.Errorf("%s: wsRefused = %v, want %v", tc.name, got, tc.refused)
		}
		if got := wsMovesOn(tc.err); got != tc.move {
			t.Errorf("%s: wsMovesOn = %v, want %v", tc.name, got, tc.move)
		}
	}
	if !permanent(&Error{Status: 401, Code: "UNAUTHENTICATED"}) || permanent(&Error{Status: 401, Code: "HTTP_401"}) ||
		!permanent(&websocket.CloseError{Code: wire.CloseWorkerRevoked}) || !permanent(fmt.Errorf("x: %w", errMisconfigured)) {
		t.Error("permanent misjudges a refusal")
	}
}

// A completion refused for what it is becomes a failure that names the reason and carries the
// server's message (the rule itself is policy's, tested there).
func TestRefusedResultBecomesAFailure(t *testing.T) {
	j := &Job{ID: "j", LeaseID: "l"}
	err := fmt.Errorf("sending: %w", &Error{Status: 400, Code: "SIGNATURE_INVALID", Message: "why"})
	var s policy.Sends
	d := s.After(answerOf(err), wire.FrameComplete, time.Now(), time.Now())
	if d.Step != policy.SendFailure {
		t.Fatalf("a refused signature: %+v, want SendFailure", d)
	}
	f := refusalFrame(j, d.Failure, err)
	if f.Type != wire.FrameFail || f.ErrorCode != "signature_invalid" || !*f.Retryable || f.Message != "why" || f.JobID != "j" || f.LeaseID != "l" {
		t.Errorf("%+v", f)
	}
	if a := answerOf(errLinkDown); !a.NoAnswer {
		t.Errorf("a link that went down is %+v, not no answer", a)
	}
}

// What a command prints becomes the output as a client reads it, or a failure that says why.
func TestCommandOutput(t *testing.T) {
	for _, tc := range []struct {
		name, stdout, want, code string
	}{
		{"JSON", ` {"a": 1} ` + "\n", `{"a": 1}`, ""},
		{"text", "hello\n", `"hello"`, ""},
		{"text with CRLF", "hello\r\n", `"hello"`, ""},
		{"text inside lines kept", "a\r\nb\n\n", `"a\r\nb"`, ""},
		{"nothing", "", `""`, ""},
		{"not UTF-8", "caf\xe9", "", "output_not_utf8"},
		{"JSON not UTF-8", "{\"a\": \"caf\xe9\"}", "", "output_not_utf8"},
		{"escaping past the limit", strings.Repeat("\x01", wire.OutputBytesMax/6+1), "", "output_too_large"},
		{"just under the limit once escaped", strings.Repeat("\x01", (wire.OutputBytesMax-2)/6), "", ""},
	} {
		data := []byte(tc.stdout)
		out, err := outputOfCommand(capped{data: data, total: len(data)})
		var fl *Failure
		switch {
		case tc.code != "":
			if !errors.As(err, &fl) || fl.Code != tc.code || fl.Retryable {
				t.Errorf("%s: %v %v, want failure %s", tc.name, out, err, tc.code)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && string(out.(json.RawMessage)) != tc.want:
			t.Errorf("%s: %s, want %s", tc.name, out, tc.want)
		}
	}
	// More than was kept is too large, whatever was kept.
	if _, err := outputOfCommand(capped{data: []byte("{}"), total: 3 << 20}); err == nil || !strings.Contains(err.Error(), "3145728") {
		t.Errorf("an overflow: %v", err)
	}
}

// An output or event data the server would refuse (not UTF-8, a key twice, nested too deep)
// is refused before it is sent: over WebSocket the server closes the connection, and a resend
// after reconnecting would meet the same.
func TestOutputTheServerWouldRefuseIsNotSent(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, tc := range []struct {
		name string
		out  any
		want string
	}{
		{"a key twice", json.RawMessage(`{"a":1,"a":2}`), `the output has the key "a" twice`},
		{"not UTF-8", json.RawMessage("\"\xff\""), "the output is not UTF-8: byte 0xff at offset 1"},
		{"too deep", json.RawMessage(deep(wire.JSONDepthMax)), "the output nests deeper than 511 levels"},
		{"too deep, encoded", []any{json.RawMessage(deep(wire.JSONDepthMax - 1))}, "the output nests deeper than 511 levels"},
		{"as deep as allowed", json.RawMessage(deep(wire.JSONDepthMax - 1)), ""},
	} {
		_, err := outputOf(tc.out)
		if (err == nil) != (tc.want == "") || err != nil && !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	j := &Job{ID: "j", LeaseID: "l"} // no runner: an event that reached it would panic
	if err := j.Event(t.Context(), "progress", json.RawMessage(`{"done":1,"done":2}`)); err == nil || !strings.HasPrefix(err.Error(), `the event's data has the key "done" twice`) {
		t.Errorf("an event's data with a key twice: %v", err)
	}
}

// readCapped keeps the first bytes and counts the rest, reading all of it.
func TestReadCapped(t *testing.T) {
	src := bytes.Repeat([]byte("0123456789"), 10_000)
	r := bytes.NewReader(src)
	c := readCapped(r, 1234)
	if len(c.data) != 1234 || c.total != len(src) || !bytes.Equal(c.data, src[:1234]) || r.Len() != 0 {
		t.Fatalf("kept %d of %d, counted %d, left %d", len(c.data), len(src), c.total, r.Len())
	}
}

// JobEnv passes the runner's environment on without any TETHER_* variable, and adds the job's.
func TestJobEnv(t *testing.T) {
	at := time.Date(2026, 11, 23, 1, 2, 3, 0, time.UTC)
	env := JobEnv([]string{"PATH=/bin", "TETHER_TOKEN=tw_secret", "TETHER_QUEUE=q", "HOME=/root", "TETHERED=yes"},
		&Job{ID: "J", Type: "T", Queue: "Q", Attempt: 2, LeaseID: "L", LeaseExpiresAt: at})
	want := "PATH=/bin HOME=/root TETHERED=yes TETHER_JOB_ID=J TETHER_JOB_TYPE=T TETHER_JOB_QUEUE=Q TETHER_JOB_ATTEMPT=2 " +
		"TETHER_JOB_LEASE_ID=L TETHER_JOB_LEASE_EXPIRES_AT=2026-11-23T01:02:03Z"
	if got := strings.Join(env, " "); got != want {
		t.Fatalf("env %s\nwant %s", got, want)
	}
	// What --env adds replaces the runner's variable of the same name, and may name a TETHER_*
	// variable; the job's own facts still come last.
	env = JobEnv([]string{"PATH=/bin", "HOME=/root", "TETHER_REGION=eu"}, &Job{ID: "J"}, "HOME=/scratch", "TETHER_REGION=eu")
	if got := strings.Join(env[:3], " "); got != "PATH=/bin HOME=/scratch TETHER_REGION=eu" {
		t.Fatalf("env %s", got)
	}
	// The job's trace context replaces any the runner was started in; without one, none is passed.
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	env = JobEnv([]string{"TRACEPARENT=00-11111111111111111111111111111111-2222222222222222-01", "PATH=/bin"}, &Job{ID: "J", Traceparent: tp})
	if got := strings.Join(env, " "); !strings.HasSuffix(got, " TRACEPARENT="+tp) || strings.Count(got, "TRACEPARENT=") != 1 {
		t.Fatalf("env %s, want the job's TRACEPARENT only", got)
	}
	env = JobEnv([]string{"TRACEPARENT=00-11111111111111111111111111111111-2222222222222222-01"}, &Job{ID: "J"})
	if got := strings.Join(env, " "); strings.Contains(got, "TRACEPARENT") {
		t.Fatalf("env %s, want no TRACEPARENT for a job without one", got)
	}
	for _, name := range []string{"TETHER_TOKEN", "TETHER_TOKEN_FILE", "TETHER_JOB_ID", "", "1X", "A-B"} {
		if err := (Command{Args: []string{"true"}, Env: []string{name + "=v"}}).Check(); err == nil {
			t.Errorf("--env %s= was taken", name)
		}
	}
	if err := (Command{Args: []string{"true"}, Env: []string{"CUDA_VISIBLE_DEVICES=0,1"}}).Check(); err != nil {
		t.Error(err)
	}
}

// A deadline that passed before the reader came to read (a loaded machine: the reader was not
// scheduled for drainIdle after the program exited) ends only a wait, never bytes already in
// the pipe; the job used to succeed with output "" then.
func TestDrainKeepsBytesPastTheDeadline(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := w.Write([]byte(`{"i":7}`)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	// As after the program's exit: the deadline is set, and has passed by the time the reader,
	// which looked at exited before it was closed, gets to read.
	if err := r.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(&drainReader{f: r, exited: make(chan struct{})})
	if err != nil || string(got) != `{"i":7}` {
		t.Fatalf("read %q, %v; want the bytes the program wrote", got, err)
	}
}

// A new lease wakes the heartbeat loop only when it needs heartbeats more often than the loop
// already sends them: a worker pays that wake-up per lease that tightens its schedule, not per
// job.
func TestOnlyATighterLeaseWakesTheHeartbeats(t *testing.T) {
	w := &Worker{Capacity: 2, Handler: func(ctx context.Context, _ *Job) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	r := &runner{w: w, log: zap.NewNop(), runCtx: context.Background(), tasks: map[string]*task{}, linkUp: make(chan struct{}),
		freed: make(chan struct{}, 1), tighter: make(chan struct{}, 1), idle: make(chan *task), ended: make(chan struct{})}
	defer close(r.ended)
	r.heartbeatEvery(10 * time.Second) // the loop waits 10 s between heartbeats
	r.start(wire.Frame{Type: wire.FrameAssign, JobID: "j1", LeaseID: "l1", HeartbeatSeconds: 10})
	if len(r.tighter) != 0 {
		t.Error("a lease heartbeaten every 10 s woke a loop that heartbeats every 10 s")
	}
	r.start(wire.Frame{Type: wire.FrameAssign, JobID: "j2", LeaseID: "l2", HeartbeatSeconds: 2})
	if len(r.tighter) != 1 {
		t.Error("a lease heartbeaten every 2 s did not wake a loop that heartbeats every 10 s")
	}
	if got := r.heartbeatEvery(10 * time.Second); got != 2*time.Second {
		t.Errorf("the loop reckons %s, want 2s", got)
	}
	r.stopTask("l1", "lost")
	r.stopTask("l2", "lost")
	if !r.waitIdle(10*time.Second, nil) {
		t.Fatal("the stopped jobs did not end")
	}
}
