package transport_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// TestLogsCarryCodesAndNoSecrets runs a server at debug level through every credential (admin
// token, API key, enroll token, worker token), a refused key, a job, and then a failed fsync. No
// log line may carry a credential, every error line must carry a stable code, and the failure
// must be logged with the tenant it reached.
func TestLogsCarryCodesAndNoSecrets(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(core)
	var failing atomic.Bool
	fault := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failing.Load() && strings.HasSuffix(op.Path, ".log") && (op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo) {
			return errorfs.ErrInjected
		}
		return nil
	})
	b, err := broker.Open(broker.Config{Dir: "/data", FS: errorfs.Wrap(vfs.NewMem(), fault), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	api, err := transport.NewServer(transport.Config{Auth: transport.AuthToken, AdminToken: adminToken, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	api.Attach(b)
	srv := httptest.NewServer(api)
	defer func() { api.Shutdown(); srv.Close(); _ = b.Close() }()

	admin := client.New(srv.URL, adminToken, nil)
	key, err := admin.CreateAPIKey(ctx(t), "acme")
	if err != nil {
		t.Fatal(err)
	}
	enroll, err := admin.CreateEnrollToken(ctx(t), "acme", 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := client.New(srv.URL, enroll.Token, nil).RegisterWorker(ctx(t), wire.RegisterRequest{Name: "w", Queues: []string{"q"}, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, url: srv.URL}
	w := h.dial(reg.WorkerToken, 1)
	w.send(wire.Frame{Type: wire.FrameCredit, N: 1})
	acme := client.New(srv.URL, key.Key, nil)
	job := submit(t, acme, `{}`)
	a := w.assignment()
	if ack := w.ack(wire.Frame{Type: wire.FrameComplete, JobID: job.ID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: json.RawMessage(`1`)}); !*ack.OK {
		t.Fatalf("complete: %+v", ack)
	}
	wrongKey := key.Key[:len(key.Key)-4] + "AAAA"
	if _, err := client.New(srv.URL, wrongKey, nil).Get(ctx(t), job.ID); err == nil {
		t.Fatal("a wrong API key was accepted")
	}

	failing.Store(true)
	if _, err := acme.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t"}); err == nil {
		t.Fatal("a submit was acknowledged after its fsync failed")
	} else if e, ok := err.(*client.Error); !ok || e.Status != http.StatusServiceUnavailable {
		t.Fatalf("submit after a failed fsync: %v, want 503", err)
	}

	secrets := map[string]string{"admin token": adminToken, "API key": key.Key, "wrong API key": wrongKey,
		"enroll token": enroll.Token, "worker token": reg.WorkerToken}
	codes := map[string]bool{}
	for _, e := range logs.All() {
		line := e.Message
		if b, err := json.Marshal(e.ContextMap()); err == nil {
			line += " " + string(b)
		}
		for what, s := range secrets {
			if strings.Contains(line, s) {
				t.Errorf("a log line carries the %s: %s", what, line)
			}
		}
		if e.Level >= zapcore.ErrorLevel {
			code, _ := e.ContextMap()["code"].(string)
			if code == "" {
				t.Errorf("an error log line without a code: %s", line)
			}
			codes[code] = true
			if code == "UNAVAILABLE" && e.ContextMap()["tenant"] != "acme" {
				t.Errorf("the failed request's log line does not name its tenant: %s", line)
			}
		}
	}
	for _, want := range []string{"EVENT_LOG_FAILED", "UNAVAILABLE"} {
		if !codes[want] {
			t.Errorf("no error logged with code %s; logged codes %v", want, codes)
		}
	}
}

// Every answer carries an X-Request-Id: the caller's when it is sane, a fresh one otherwise.
// An error body and the log lines about the request carry the same id, so a user's report
// finds its line in the log.
func TestRequestIDs(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	b, err := broker.Open(broker.Config{Dir: "/data", FS: vfs.NewMem(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	api, err := transport.NewServer(transport.Config{Auth: transport.AuthToken, AdminToken: adminToken, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	api.Attach(b)
	srv := httptest.NewServer(api)
	defer func() { api.Shutdown(); srv.Close(); _ = b.Close() }()

	get := func(path, id string) (*http.Response, wire.Error) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if id != "" {
			req.Header.Set("X-Request-Id", id)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e wire.Error
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return resp, e
	}
	resp, e := get("/v1/jobs/nope", "trace-7f3a.1")
	if got := resp.Header.Get("X-Request-Id"); got != "trace-7f3a.1" || e.Error.RequestID != got || e.Error.Code != "UNAUTHENTICATED" {
		t.Fatalf("a sane id: header %q, body %+v", got, e)
	}
	if n := logs.FilterField(zap.String("request_id", "trace-7f3a.1")).Len(); n != 1 {
		t.Fatalf("%d log lines carry the request's id, want 1: %v", n, logs.All())
	}
	seen := map[string]bool{}
	for _, id := range []string{"", "with space", strings.Repeat("x", 129), "line\u2028break"} {
		resp, e := get("/v1/nothing", id)
		got := resp.Header.Get("X-Request-Id")
		if got == "" || got == id || e.Error.RequestID != got || seen[got] {
			t.Fatalf("sent %q: header %q, body id %q (seen before: %v)", id, got, e.Error.RequestID, seen[got])
		}
		seen[got] = true
	}
	if resp, _ := get("/healthz", ""); resp.Header.Get("X-Request-Id") == "" {
		t.Fatal("a success carries no request id")
	}
}
