package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/projections"
)

func open(t testing.TB, cfg broker.Config) *broker.Broker {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.Logger == nil {
		if tt, ok := t.(*testing.T); ok {
			cfg.Logger = zaptest.NewLogger(tt)
		}
	}
	b, err := broker.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// worker registers and connects a worker of tenant "acme" serving queue "q".
func worker(t testing.TB, b *broker.Broker, capacity int) *broker.Conn {
	t.Helper()
	reg, err := b.RegisterWorker(ctx(t), "acme", broker.WorkerSpec{Name: "w", Queues: []string{"q"}, Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.Connect(ctx(t), reg.WorkerID, "websocket", 0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func next(t testing.TB, s *broker.Conn) actors.Assignment {
	t.Helper()
	for {
		select {
		case f, ok := <-s.Frames:
			if !ok {
				t.Fatal("session ended")
			}
			if a, ok := f.(actors.Assignment); ok {
				return a
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no assignment within 30 s")
		}
	}
}

func TestSubmitLeaseComplete(t *testing.T) {
	t.Parallel()
	b := open(t, broker.Config{})
	defer b.Close()
	res, rc, err := b.Submit(ctx(t), "acme", "", actors.JobSpec{Queue: "q", Type: "t", Payload: json.RawMessage(`{"n":1}`), IdempotencyKey: "k1"})
	if err != nil || rc.Seq == 0 || len(rc.Hash) != 64 || res[0].Job.Status != projections.StatusQueued {
		t.Fatalf("submit: %+v %+v %v", res, rc, err)
	}
	again, rc2, err := b.Submit(ctx(t), "acme", "", actors.JobSpec{Queue: "q", Type: "t", Payload: json.RawMessage(`{ "n": 1 }`), IdempotencyKey: "k1"})
	if err != nil || !again[0].IdempotentHit || again[0].Job.ID != res[0].Job.ID || rc2 != rc {
		t.Fatalf("idempotent resubmit: %+v %+v %v (first receipt %+v)", again, rc2, err, rc)
	}
	reg, err := b.RegisterWorker(ctx(t), "acme", broker.WorkerSpec{Name: "w", Queues: []string{"q"}, Capacity: 2})
	if err != nil {
		t.Fatal(err)
	}
	if w, ok := b.WorkerByToken(reg.Token); !ok || w.ID != reg.WorkerID || w.TokenHash == reg.Token {
		t.Fatalf("the token does not find its worker, or is stored in the clear: %+v", w)
	}
	if _, ok := b.WorkerByToken(reg.Token + "x"); ok {
		t.Fatal("a wrong token finds a worker")
	}
	s, err := b.Connect(ctx(t), reg.WorkerID, "websocket", 0)
	if err != nil {
		t.Fatal(err)
	}
	s.Credit(2)
	a := next(t, s)
	if a.JobID != res[0].Job.ID || a.Attempt != 1 {
		t.Fatalf("assignment %+v", a)
	}
	if _, err := b.Complete(ctx(t), actors.Complete{WorkerID: s.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: json.RawMessage(`"done"`)}); err != nil {
		t.Fatal(err)
	}
	j, ok := b.Get("acme", a.JobID)
	if !ok || j.Status != projections.StatusSucceeded || string(j.Output) != `"done"` {
		t.Fatalf("job %+v", j)
	}
	if _, ok := b.Get("other", a.JobID); ok {
		t.Fatal("another tenant sees the job")
	}
	_, err = b.Complete(ctx(t), actors.Complete{WorkerID: s.WorkerID, JobID: a.JobID, LeaseID: "stale", Nonce: a.Nonce, Output: json.RawMessage(`"done"`)})
	if r, ok := err.(*actors.Rejection); !ok || r.Code != actors.CodeLeaseMismatch {
		t.Fatalf("stale lease: %v", err)
	}
}

// TestRestart runs a workload, stops the broker cleanly, opens it again, and checks that every
// job and quota is as it was and that the open lease got its grace.
func TestRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := open(t, broker.Config{Dir: dir, CheckpointEvery: 7})
	if _, err := b.SetQuota(ctx(t), "acme", new(50), new(0)); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := b.Reserve(ctx(t), "acme", time.Hour); err != nil {
		t.Fatal(err)
	}
	var specs []actors.JobSpec
	for i := range 20 {
		specs = append(specs, actors.JobSpec{Queue: "q", Type: "t", Payload: json.RawMessage(fmt.Sprint(i))})
	}
	if _, _, err := b.Submit(ctx(t), "acme", "", specs...); err != nil {
		t.Fatal(err)
	}
	s := worker(t, b, 5)
	s.Credit(5)
	for i := range 5 {
		a := next(t, s)
		switch i {
		case 0, 1, 2:
			if _, err := b.Complete(ctx(t), actors.Complete{WorkerID: s.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce}); err != nil {
				t.Fatal(err)
			}
		case 3:
			if _, err := b.Fail(ctx(t), actors.Fail{WorkerID: s.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Code: "boom", Retryable: false}); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := snapshot(t, b)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b2 := open(t, broker.Config{Dir: dir})
	defer b2.Close()
	after := snapshot(t, b2)
	// The lease still open got a grace extension and its session ended: those two events, and
	// nothing else, differ.
	if after.quota.Active != before.quota.Active || after.quota.Running != 1 || len(after.quota.Reservations) != 1 || after.quota.MaxActive != 50 {
		t.Fatalf("quota before %+v, after %+v", before.quota, after.quota)
	}
	for id, st := range before.status {
		if after.status[id] != st {
			t.Fatalf("job %s was %s, is %s", id, st, after.status[id])
		}
	}
	if n := count(after.status, projections.StatusSucceeded); n != 3 {
		t.Fatalf("%d succeeded, want 3", n)
	}
	var leased *projections.Job
	b2.Read(func(s *projections.Set) { leased = s.Leases()[0] })
	if time.Until(leased.Lease.ExpiresAt) < 25*time.Second {
		t.Fatalf("the open lease got no grace: expires %s", leased.Lease.ExpiresAt)
	}
}

type snap struct {
	status map[string]projections.Status
	quota  projections.Tenant
}

func snapshot(t *testing.T, b *broker.Broker) snap {
	t.Helper()
	jobs, _ := b.List(projections.JobFilter{Tenant: "acme"})
	s := snap{status: map[string]projections.Status{}, quota: b.Quota("acme")}
	for _, j := range jobs {
		s.status[j.ID] = j.Status
	}
	return s
}

func count(m map[string]projections.Status, st projections.Status) int {
	n := 0
	for _, v := range m {
		if v == st {
			n++
		}
	}
	return n
}

func TestTenantNamesAreChecked(t *testing.T) {
	t.Parallel()
	b := open(t, broker.Config{})
	defer b.Close()
	for _, name := range []string{"", "a/b", "a b", string(make([]byte, 65))} {
		_, _, err := b.Submit(ctx(t), name, "", actors.JobSpec{Queue: "q", Type: "t"})
		if r, ok := err.(*actors.Rejection); !ok || r.Code != actors.CodeInvalidArgument {
			t.Fatalf("tenant %q: %v", name, err)
		}
	}
	if _, _, err := b.Submit(ctx(t), "team-1.prod_x", "", actors.JobSpec{Queue: "q", Type: "t"}); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentWorkload runs submitters, workers and cancellers at once (under -race in
// `make race`), then checks that every job reached a terminal state exactly as its events say
// and that the live projections equal a replay of the log.
func TestConcurrentWorkload(t *testing.T) {
	t.Parallel()
	cfg := broker.Config{Dir: t.TempDir(), CheckpointEvery: 50}
	b := open(t, cfg)
	defer b.Close()
	const jobs, workers = 300, 8
	var sessions []*broker.Conn
	for range workers {
		s := worker(t, b, 2)
		s.Credit(2)
		sessions = append(sessions, s)
	}
	done := make(chan struct{})
	handled := make(chan struct{}, jobs) // a worker finished with a job: time to look again
	var wg sync.WaitGroup
	for i, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				case f := <-s.Frames:
					a, ok := f.(actors.Assignment)
					if !ok {
						continue
					}
					var err error
					if (i+a.Attempt)%3 == 0 {
						_, err = b.Fail(context.Background(), actors.Fail{WorkerID: s.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Code: "flaky", Retryable: false})
					} else {
						_, err = b.Complete(context.Background(), actors.Complete{WorkerID: s.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: json.RawMessage(`{"ok":true}`)})
					}
					if r, ok := err.(*actors.Rejection); err != nil && (!ok || r.Code != actors.CodeLeaseMismatch) {
						t.Error(err) // a lease mismatch is a cancel that won the race
					}
					handled <- struct{}{}
					s.Credit(1)
				}
			}
		}()
	}
	var ids []string
	var mu sync.Mutex
	var subs sync.WaitGroup
	for g := range 4 {
		subs.Add(1)
		go func() {
			defer subs.Done()
			for i := range jobs / 4 {
				res, _, err := b.Submit(context.Background(), "acme", "", actors.JobSpec{Queue: "q", Type: "t", Priority: i % 3})
				if err != nil {
					t.Error(err)
					return
				}
				if i%10 == g {
					_, _ = b.Cancel(context.Background(), "acme", "", res[0].Job.ID)
				}
				mu.Lock()
				ids = append(ids, res[0].Job.ID)
				mu.Unlock()
			}
		}()
	}
	subs.Wait()
	// Every job is terminal once the workers have finished with the last one still open: look
	// again each time a worker reports.
	for {
		pending := 0
		for _, id := range ids {
			if j, _ := b.Get("acme", id); !j.Status.Terminal() {
				pending++
			}
		}
		if pending == 0 {
			break
		}
		select {
		case <-handled:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d jobs are not terminal 30 s after a worker last finished one", pending)
		}
	}
	close(done)
	wg.Wait()
	q := b.Quota("acme")
	if q.Active != 0 || q.Running != 0 {
		t.Fatalf("quota after the workload: %+v", q)
	}
	assertLiveEqualsReplay(t, b, cfg)
}

// countsResults counts the results that reach the behaviour it wraps.
type countsResults struct {
	actors.Behaviour
	n *atomic.Int32
}

func (c countsResults) Receive(env actors.Env, msg any) {
	switch msg.(type) {
	case actors.Complete, actors.Fail, actors.Progress:
		c.n.Add(1)
	}
	c.Behaviour.Receive(env, msg)
}

// A worker's result for a job in flight goes to the job's actor without passing the
// dispatcher; one for a job with no actor running is answered by the dispatcher, as before.
func TestResultsGoStraightToTheJobsActor(t *testing.T) {
	t.Parallel()
	var atDispatcher atomic.Int32
	b := open(t, broker.Config{Decorate: func(ref actors.Ref, b actors.Behaviour) actors.Behaviour {
		if ref.Kind == actors.RefDispatcher {
			return countsResults{b, &atDispatcher}
		}
		return b
	}})
	defer b.Close()
	if _, _, err := b.Submit(ctx(t), "acme", "", actors.JobSpec{Queue: "q", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	s := worker(t, b, 1)
	s.Credit(1)
	a := next(t, s)
	if n, _, err := b.Event(ctx(t), actors.Progress{WorkerID: s.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Kind: "log"}); err != nil || n != 3 {
		t.Fatalf("progress: %d, %v", n, err)
	}
	_, err := b.Complete(ctx(t), actors.Complete{WorkerID: s.WorkerID, JobID: a.JobID, LeaseID: "stale", Nonce: a.Nonce})
	reject(t, err, actors.CodeLeaseMismatch)
	rc, err := b.Complete(ctx(t), actors.Complete{WorkerID: s.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce})
	if err != nil {
		t.Fatal(err)
	}
	if n := atDispatcher.Load(); n != 0 {
		t.Fatalf("%d results for a job in flight passed through the dispatcher", n)
	}
	_, err = b.Complete(ctx(t), actors.Complete{WorkerID: s.WorkerID, JobID: "01KNOSUCHJOB000000000000000", LeaseID: "l", Nonce: "n"})
	reject(t, err, actors.CodeJobNotFound)
	if n := atDispatcher.Load(); n != 1 {
		t.Fatalf("a result for a job with no actor reached the dispatcher %d times, want 1", n)
	}
	// The completion sent again, whether the job's actor has stopped yet or not, is the same one.
	again, err := b.Complete(ctx(t), actors.Complete{WorkerID: s.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce})
	if err != nil || again.Seq != rc.Seq {
		t.Fatalf("a repeated completion: %+v, %v; the first had %+v", again, err, rc)
	}
}

// TestSubmitAnswersWithTheDurableJob checks that the job a submit answers with, which the
// tenant makes from the append (no read of the projections), is the job the projections hold
// once the submit is durable: queued, delayed, labelled, and an idempotent hit in one batch.
func TestSubmitAnswersWithTheDurableJob(t *testing.T) {
	t.Parallel()
	b := open(t, broker.Config{})
	defer b.Close()
	specs := []actors.JobSpec{
		{Queue: "q", Type: "plain", Payload: json.RawMessage(`{"n":1}`), Priority: 3},
		{Queue: "q", Type: "later", Delay: time.Hour, Labels: map[string]string{"team": "x"}, IdempotencyKey: "k1"},
		{Queue: "q", Type: "later", Delay: time.Hour, Labels: map[string]string{"team": "x"}, IdempotencyKey: "k1"},
	}
	res, rc, err := b.Submit(ctx(t), "acme", "", specs...)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 || !res[2].IdempotentHit || res[2].Job.ID != res[1].Job.ID {
		t.Fatalf("results %+v", res)
	}
	if res[1].Job.Status != projections.StatusScheduled || res[1].Job.LastSeq != rc.Seq {
		t.Fatalf("the delayed job is %s at seq %d; want scheduled at the receipt's seq %d", res[1].Job.Status, res[1].Job.LastSeq, rc.Seq)
	}
	for i, r := range res {
		j, ok := b.Get("acme", r.Job.ID)
		if !ok {
			t.Fatalf("job %d is not in the views", i)
		}
		if !reflect.DeepEqual(r.Job, j) {
			t.Fatalf("job %d answered\n%+v\nthe projections hold\n%+v", i, r.Job, j)
		}
	}
}
