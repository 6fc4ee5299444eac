package eventlog_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tetherhq/tether/eventlog"
)

// AppendPayloadsAsync writes what AppendAsync of the payloads' events (NewEvent of each, in its
// own stream) writes, for one payload (the request's own array) and for several.
func TestAppendPayloadsAsyncWritesTheirEvents(t *testing.T) {
	l, err := eventlog.Open("data", eventlog.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	at := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	appends := [][]eventlog.Payload{
		{eventlog.JobSubmitted{JobID: "01A", Tenant: "acme", Queue: "q", Type: "noop", MaxAttempts: 3}},
		{eventlog.JobFailed{JobID: "01A", LeaseID: "L1", Attempt: 1, ErrorCode: "boom"},
			eventlog.JobRetryScheduled{JobID: "01A", Attempt: 1, BackoffMillis: 10, RunAt: at},
			eventlog.WorkerRevoked{WorkerID: "W1"}},
	}
	var want []eventlog.Event
	for _, payloads := range appends {
		done := make(chan error, 1)
		l.AppendPayloadsAsync(payloads, func(_ eventlog.Receipt, err error) { done <- err })
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		for _, p := range payloads {
			e, err := eventlog.NewEvent(p.Stream(), p)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, e)
		}
	}
	for i, e := range want {
		r, err := l.Get(uint64(i + 1))
		if err != nil {
			t.Fatal(err)
		}
		if r.Stream != e.Stream || r.Type != e.Type || !bytes.Equal(r.Data, e.Data) {
			t.Errorf("record %d is %s %s %s; want %s %s %s", i+1, r.Stream, r.Type, r.Data, e.Stream, e.Type, e.Data)
		}
	}
	if h := l.Head(); h.Seq != uint64(len(want)) {
		t.Errorf("head at seq %d; want %d", h.Seq, len(want))
	}
}
