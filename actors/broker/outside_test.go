package broker_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/projections"
)

// stallingTable is a table on a disk that stalls: while stalled, the first read waits until
// resume, after saying it began.
type stallingTable struct {
	projections.Store
	mu      sync.Mutex
	stalled bool
	began   chan struct{}
	resume  chan struct{}
}

func (s *stallingTable) stall() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalled, s.began, s.resume = true, make(chan struct{}), make(chan struct{})
}

func (s *stallingTable) wait() {
	s.mu.Lock()
	stalled, began, resume := s.stalled, s.began, s.resume
	s.stalled = false
	s.mu.Unlock()
	if stalled {
		close(began)
		<-resume
	}
}

func (s *stallingTable) Get(key []byte) ([]byte, bool) {
	s.wait()
	return s.Store.Get(key)
}

func (s *stallingTable) Scan(prefix, start []byte, reverse bool, fn func(key, value []byte) bool) {
	s.wait()
	s.Store.Scan(prefix, start, reverse, fn)
}

// TestTableReadsDoNotHoldUpCommits stalls the disk under a client's list, under a read of a
// finished job and under a repeat of its submit (an idempotent hit), and submits meanwhile: the submit is acknowledged while the read waits, because
// nothing holds the projections' lock across the table's reads. (They did: every commit waited
// for the slowest list.)
func TestTableReadsDoNotHoldUpCommits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := open(t, broker.Config{Dir: dir})
	keyed := actors.JobSpec{Queue: "q", Type: "t", IdempotencyKey: "k"}
	res, _, err := b.Submit(ctx(t), "acme", "", keyed)
	if err != nil {
		t.Fatal(err)
	}
	s := worker(t, b, 1)
	s.Credit(1)
	a := next(t, s)
	if _, err := b.Complete(ctx(t), actors.Complete{WorkerID: s.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil { // its checkpoint moves the finished job to the table
		t.Fatal(err)
	}
	table := &stallingTable{}
	b, err = broker.OpenWithTable(broker.Config{Dir: dir, Logger: zaptest.NewLogger(t)}, func(s projections.Store) projections.Store {
		table.Store = s
		return table
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	id := res[0].Job.ID
	reads := []struct {
		name string
		read func() bool
	}{
		{"a list that skips every job", func() bool {
			page, _ := b.List(projections.JobFilter{Tenant: "acme", Status: projections.StatusSucceeded, Queue: "elsewhere"})
			return len(page) == 0
		}},
		{"a finished job", func() bool {
			j, ok := b.Get("acme", id)
			return ok && j.Status == projections.StatusSucceeded
		}},
		{"a finished job's submit repeated with its idempotency key", func() bool {
			again, _, err := b.Submit(ctx(t), "acme", "", keyed)
			return err == nil && again[0].IdempotentHit && again[0].Job.ID == id && again[0].Job.Status == projections.StatusSucceeded
		}},
	}
	for _, r := range reads {
		table.stall()
		answered := make(chan bool, 1)
		go func() { answered <- r.read() }()
		<-table.began
		submitted := make(chan error, 1)
		go func() {
			_, _, err := b.Submit(context.Background(), "acme", "", actors.JobSpec{Queue: "q", Type: "t"})
			submitted <- err
		}()
		select {
		case err := <-submitted:
			if err != nil {
				t.Fatalf("%s: a submit while the read waits on the disk: %v", r.name, err)
			}
		case <-time.After(30 * time.Second):
			close(table.resume)
			t.Fatalf("%s: a submit waited 30 s for a read that waits on the disk", r.name)
		}
		select {
		case <-answered:
			t.Fatalf("%s: answered before the disk did", r.name)
		default:
		}
		close(table.resume)
		select {
		case ok := <-answered:
			if !ok {
				t.Fatalf("%s: a wrong answer", r.name)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no answer once the disk resumed", r.name)
		}
	}
}
