package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/transporttest"
	"github.com/tetherhq/tether/transport/wire"
)

// refusing is a real server behind a proxy that answers a job's completion 503 UNAVAILABLE, as
// a server whose log is failing over does, while refuse is set.
type refusing struct {
	url     string
	refuse  atomic.Bool
	refused atomic.Int32
	refusal chan struct{} // one per refusal, as many as it holds
}

func serveRefusing(t *testing.T) *refusing {
	t.Helper()
	log := zaptest.NewLogger(t)
	b, err := broker.Open(broker.Config{Dir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	_, real := transporttest.Serve(t, b, transport.Config{Auth: transport.AuthNone, Logger: log})
	target, _ := url.Parse(real)
	proxy := httputil.NewSingleHostReverseProxy(target)
	r := &refusing{refusal: make(chan struct{}, 16)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.refuse.Load() && strings.HasSuffix(req.URL.Path, "/complete") {
			r.refused.Add(1)
			select {
			case r.refusal <- struct{}{}:
			default:
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(wire.Error{Error: wire.ErrorDetail{Code: "UNAVAILABLE", Message: "the event log failed"}})
			return
		}
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

func registerWorker(t *testing.T, c *client.Client) string {
	t.Helper()
	reg, err := c.RegisterWorker(ctx(t), wire.RegisterRequest{Name: "w", Queues: []string{"q"}, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	return reg.WorkerToken
}

func waitStatus(t *testing.T, c *client.Client, id, status string) *wire.Job {
	t.Helper()
	s, err := c.Watch(ctx(t), id, 0, func(wire.Event) error { return nil })
	if err != nil || s != status {
		t.Fatalf("job %s ended %q (%v), want %s", id, s, err, status)
	}
	j, err := c.Get(ctx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// A result the server could not take (503 UNAVAILABLE) is sent again until it is taken: the job
// succeeds on its first attempt, and its handler ran once.
func TestWorkerSendsAResultAgainUntilTaken(t *testing.T) {
	t.Parallel()
	s := serveRefusing(t)
	c := client.New(s.url, "", nil)
	job, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t"})
	if err != nil {
		t.Fatal(err)
	}
	s.refuse.Store(true)
	var runs atomic.Int32
	runCtx, stop := context.WithCancel(ctx(t))
	defer stop()
	w := &client.Worker{Server: s.url, Token: registerWorker(t, c), Transport: client.TransportLongPoll, Logger: zaptest.NewLogger(t),
		Handler: func(context.Context, *client.Job) (any, error) {
			if runs.Add(1) == 1 {
				go func() {
					<-s.refusal
					<-s.refusal
					s.refuse.Store(false)
				}()
			}
			return map[string]bool{"ok": true}, nil
		}}
	go func() { _ = w.Run(runCtx) }()
	j := waitStatus(t, c, job.ID, "succeeded")
	if j.Attempt != 1 || runs.Load() != 1 || s.refused.Load() < 2 {
		t.Fatalf("attempt %d, %d runs, %d refusals; want the first attempt, one run, two refusals", j.Attempt, runs.Load(), s.refused.Load())
	}
}

// A worker that stops before the server took a result keeps it on disk, and a worker started on
// the same directory sends it: the job succeeds without running again.
func TestWorkerKeepsAResultAcrossARestart(t *testing.T) {
	t.Parallel()
	s := serveRefusing(t)
	c := client.New(s.url, "", nil)
	job, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t"})
	if err != nil {
		t.Fatal(err)
	}
	s.refuse.Store(true)
	dir := t.TempDir()
	token := registerWorker(t, c)
	ran := make(chan struct{})
	runCtx, stop := context.WithCancel(ctx(t))
	// Stopped (and hurried, a second signal) with its result refused for now: it does not wait
	// for the result it keeps, whatever its grace and DrainTimeout.
	hurry := make(chan struct{})
	first := &client.Worker{Server: s.url, Token: token, Transport: client.TransportLongPoll, Logger: zaptest.NewLogger(t), ResultsDir: dir,
		Grace: time.Hour, DrainTimeout: time.Hour, Hurry: hurry, Handler: func(context.Context, *client.Job) (any, error) {
			close(ran)
			return map[string]int{"n": 42}, nil
		}}
	done := make(chan error, 1)
	go func() { done <- first.Run(runCtx) }()
	<-ran
	<-s.refusal
	stop()
	close(hurry)
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// The result, and the record of the job it ran, which a start must not take for a job
	// its worker died running: the job finished, and its result is what is sent.
	if results, _ := filepath.Glob(filepath.Join(dir, "*.result.json")); len(results) != 1 {
		t.Fatalf("%d results kept, want the one", len(results))
	}
	if running, _ := filepath.Glob(filepath.Join(dir, "*.running.json")); len(running) != 1 {
		t.Fatalf("%d running jobs recorded, want the one", len(running))
	}

	s.refuse.Store(false)
	runCtx, stop = context.WithCancel(ctx(t))
	defer stop()
	answered := make(chan error, 1)
	second := &client.Worker{Server: s.url, Token: token, Transport: client.TransportLongPoll, Logger: zaptest.NewLogger(t), ResultsDir: dir,
		Handler: func(context.Context, *client.Job) (any, error) {
			t.Error("the job ran again")
			return nil, nil
		},
		OnResult: func(_ *client.Job, _ string, err error) { answered <- err }}
	go func() { _ = second.Run(runCtx) }()
	j := waitStatus(t, c, job.ID, "succeeded")
	if j.Attempt != 1 || string(j.Output) != `{"n":42}` {
		t.Fatalf("attempt %d, output %s", j.Attempt, j.Output)
	}
	if err := <-answered; err != nil {
		t.Fatalf("the kept result was answered %v", err)
	}
	evs, err := c.Events(ctx(t), job.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Events {
		if e.Type == "job.lease_released" {
			t.Fatalf("the finished job's lease was given back: %s", e.Data)
		}
	}
	if files, _ := os.ReadDir(dir); len(files) != 0 {
		t.Fatalf("%d files left once the server took the result", len(files))
	}
}
