package eventlog_test

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tetherhq/tether/eventlog"
)

// AppendPayloadsAsync writes what AppendAsync of the payloads' events (NewEvent of each, in its
// own stream) writes, for one payload (the request's own array) and for several: the same
// records, chained to the same hashes, in the same streams' indexes, though it names a job's
// stream by its job without building the name (and a job event without a job by its name).
func TestAppendPayloadsAsyncWritesTheirEvents(t *testing.T) {
	at := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	opts := eventlog.Options{FS: vfs.NewMem(), Clock: func() time.Time { return at }}
	l, err := eventlog.Open("data", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	appends := [][]eventlog.Payload{
		{eventlog.JobSubmitted{JobID: "01A", Tenant: "acme", Queue: "q", Type: "noop", MaxAttempts: 3}},
		{eventlog.JobFailed{JobID: "01A", LeaseID: "L1", Attempt: 1, ErrorCode: "boom"},
			eventlog.JobRetryScheduled{JobID: "01A", Attempt: 1, BackoffMillis: 10, RunAt: at},
			eventlog.WorkerRevoked{WorkerID: "W1"}},
		{eventlog.JobSucceeded{JobID: "", LeaseID: "L2", Attempt: 2}},
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
	for stream, seqs := range map[string][]uint64{"job/01A": {1, 2, 3}, "worker/W1": {4}, "job/": {5}} {
		var got []uint64
		for r, err := range l.Stream(stream, 1) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, r.Seq)
		}
		if !slices.Equal(got, seqs) {
			t.Errorf("stream %s holds seqs %v; want %v", stream, got, seqs)
		}
	}
	opts.FS = vfs.NewMem()
	events, err := eventlog.Open("data", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()
	if _, err := events.Append(context.Background(), want...); err != nil {
		t.Fatal(err)
	}
	if got, want := l.Head(), events.Head(); got != want {
		t.Errorf("head %d %s; AppendAsync of the same events at the same time makes %d %s", got.Seq, got.Hash, want.Seq, want.Hash)
	}
}
