package transport_test

import (
	"iter"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/client"
)

// logAhead is a broker whose log holds one record more than its projections have folded, as
// the real one does between making a commit durable and folding it.
type logAhead struct {
	*broker.Broker
}

// unfolded is the record the log has and the projections do not yet.
func (b logAhead) unfolded() eventlog.Record {
	var seq uint64
	b.Read(func(s *projections.Set) { seq = s.Seq() })
	return eventlog.Record{Seq: seq + 1, Time: time.Now(), Type: "job.lease_expired", Data: []byte(`{}`)}
}

func (b logAhead) JobStream(jobID string, from uint64) iter.Seq2[eventlog.Record, error] {
	return func(yield func(eventlog.Record, error) bool) {
		for rec, err := range b.Broker.JobStream(jobID, from) {
			if !yield(rec, err) {
				return
			}
		}
		yield(b.unfolded(), nil)
	}
}

func (b logAhead) FlowEvents(f *projections.Flow, from uint64, perStream int) ([]eventlog.Record, error) {
	recs, err := b.Broker.FlowEvents(f, from, perStream)
	return append(recs, b.unfolded()), err
}

// A job's and a flow's events never run ahead of what a read of the job shows: a watcher that
// saw a lease expire and then read the job found it still leased (the CI's failure of
// TestWorkerTokenExpiredAndRevoked).
func TestEventsStopAtTheProjections(t *testing.T) {
	t.Parallel()
	b, err := broker.Open(broker.Config{Dir: t.TempDir(), Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	api, err := transport.NewServer(transport.Config{Auth: transport.AuthNone, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	api.Attach(logAhead{b})
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		api.Shutdown()
		srv.Close()
		_ = b.Close()
	})
	c := client.New(srv.URL, "", nil)
	job := submit(t, c, `{}`)
	evs, err := c.Events(ctx(t), job.ID, 0)
	if err != nil || len(evs.Events) != 1 || evs.Events[0].Type != "job.submitted" {
		t.Fatalf("a queued job's events: %+v %v", evs, err)
	}
	f, err := c.SubmitFlow(ctx(t), "ahead", []byte("flow:\n  defaults: {queue: nobody-serves}\n  steps: {a: {}}\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	fevs, err := c.FlowEvents(ctx(t), f.ID, 0)
	if err != nil || len(fevs.Events) == 0 {
		t.Fatalf("a flow's events: %+v %v", fevs, err)
	}
	for _, e := range fevs.Events {
		if e.Type == "job.lease_expired" {
			t.Fatalf("a flow's events hold a record the projections have not folded: %+v", fevs.Events)
		}
	}
}
