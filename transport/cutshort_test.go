package transport_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// A job cut short never reads as succeeded, whatever its handler returns once told to stop:
// the Go SDK over both transports. (`tether worker`'s commands: cmd/tether's
// TestWorkerCommandCutShort.)

// eachTransport runs test over WebSocket and over long-poll, each against a server of its own
// with a worker of capacity registered.
func eachTransport(t *testing.T, capacity int, test func(t *testing.T, h *harness, c *client.Client, reg *wire.Registration, tr string)) {
	t.Parallel()
	for _, tr := range []string{client.TransportWebSocket, client.TransportLongPoll} {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			h := start(t, transport.AuthNone)
			test(t, h, client.New(h.url, "", nil), h.register("", nil, capacity), tr)
		})
	}
}

// lastEvent is the last event in a job's stream.
func lastEvent(t *testing.T, c *client.Client, id string) wire.Event {
	t.Helper()
	evs, err := c.Events(ctx(t), id, 0)
	if err != nil || len(evs.Events) == 0 {
		t.Fatalf("job %s's events: %v", id, err)
	}
	return evs.Events[len(evs.Events)-1]
}

// A handler that returns what it has when its job is cancelled (its context ends) completes
// the job with it; the server takes that as the acknowledgement of the cancel: the job ends
// cancelled, with no output.
func TestACancelledJobNeverSucceeds(t *testing.T) {
	eachTransport(t, 1, func(t *testing.T, h *harness, c *client.Client, reg *wire.Registration, tr string) {
		started := make(chan struct{}, 1)
		w := &client.Worker{Server: h.url, Token: reg.WorkerToken, Transport: tr, Logger: zaptest.NewLogger(t),
			Handler: func(ctx context.Context, _ *client.Job) (any, error) {
				started <- struct{}{}
				<-ctx.Done()
				return map[string]bool{"stopped": true}, nil
			}}
		runUntilTheEnd(t, w)
		j := submit(t, c, `{}`)
		<-started
		if _, err := c.Cancel(ctx(t), j.ID); err != nil {
			t.Fatal(err)
		}
		got := await(t, c, j.ID)
		if got.Status != "cancelled" || string(got.Output) != "null" || got.Error == nil || got.Error.Code != "cancelled" {
			t.Fatalf("the job after its cancel: %s output %s error %+v", got.Status, got.Output, got.Error)
		}
		if !strings.Contains(got.Error.Message, "output") {
			t.Fatalf("the error does not say what became of the output: %q", got.Error.Message)
		}
	})
}

// A worker's stop gives its running jobs the grace to finish: one whose handler returns within
// it completes; one told to stop once the grace ran out is given back unspent, though its
// handler returned an output, and another worker runs it.
func TestAStopCutsAJobShortAndGivesItBack(t *testing.T) {
	eachTransport(t, 2, func(t *testing.T, h *harness, c *client.Client, reg *wire.Registration, tr string) {
		stopping := make(chan struct{})
		var running sync.WaitGroup
		running.Add(2)
		w := &client.Worker{Server: h.url, Token: reg.WorkerToken, Capacity: 2, Transport: tr, Logger: zaptest.NewLogger(t),
			Grace: time.Second,
			Handler: func(ctx context.Context, j *client.Job) (any, error) {
				running.Done()
				if j.Type == "quick" {
					<-stopping // the stop has begun: this one returns within the grace
					return "finished within the grace", nil
				}
				<-ctx.Done()
				return map[string]bool{"stopped": true}, nil
			}}
		run, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(run) }()
		quick, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "quick", MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		cut, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "slow", MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		running.Wait()
		stop()
		close(stopping)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := await(t, c, quick.ID); got.Status != "succeeded" || string(got.Output) != `"finished within the grace"` {
			t.Fatalf("the job that finished within the grace: %s output %s", got.Status, got.Output)
		}
		got, err := c.Get(ctx(t), cut.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != "queued" || got.Attempt != 0 || string(got.Output) != "null" {
			t.Fatalf("the job cut short: %s attempt %d output %s", got.Status, got.Attempt, got.Output)
		}
		if e := lastEvent(t, c, cut.ID); e.Type != "job.lease_released" || !strings.Contains(string(e.Data), `"reason":"worker_stopping"`) {
			t.Fatalf("the history ends %s %s", e.Type, e.Data)
		}
		second := &client.Worker{Server: h.url, Token: reg.WorkerToken, Transport: tr, Logger: zaptest.NewLogger(t),
			Handler: func(context.Context, *client.Job) (any, error) { return "ran again", nil }}
		runUntilTheEnd(t, second)
		if got := await(t, c, cut.ID); got.Status != "succeeded" || string(got.Output) != `"ran again"` || got.Attempt != 1 {
			t.Fatalf("the job given back, run again: %s attempt %d output %s", got.Status, got.Attempt, got.Output)
		}
	})
}

// A handler's Release gives the job back untried with the handler's own reason and message,
// and backs the worker off before it takes another (1 s, halved at most by the jitter), rather
// than take the job back at once and spend an attempt on it in eleven quick releases.
func TestAReleaseBacksTheWorkerOff(t *testing.T) {
	eachTransport(t, 1, func(t *testing.T, h *harness, c *client.Client, reg *wire.Registration, tr string) {
		leased := make(chan time.Time, 16)
		w := &client.Worker{Server: h.url, Token: reg.WorkerToken, Transport: tr, Logger: zaptest.NewLogger(t),
			Handler: func(context.Context, *client.Job) (any, error) {
				leased <- time.Now()
				return nil, &client.Release{Reason: "not_now", Message: "not now"}
			}}
		runUntilTheEnd(t, w)
		j := submit(t, c, `{}`)
		first, second := <-leased, <-leased
		if gap := second.Sub(first); gap < 500*time.Millisecond {
			t.Fatalf("the worker took the job back %v after it released it", gap)
		}
		evs, err := c.Events(ctx(t), j.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Events {
			if e.Type != "job.lease_released" {
				continue
			}
			var rel struct{ Reason, Message string }
			if err := json.Unmarshal(e.Data, &rel); err != nil || rel.Reason != "not_now" || rel.Message != "not now" {
				t.Fatalf("released with %s, want the handler's reason and message", e.Data)
			}
			return
		}
		t.Fatal("no job.lease_released in the job's history")
	})
}
