package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/eventlog/eventlogtest"
	"github.com/tetherhq/tether/projections"
)

// panicky makes a behaviour panic on a marked message, as a bug would, or on the Persisted
// that follows a completion of output "panic".
type panicky struct {
	actors.Behaviour
	armed *bool
}

func (p panicky) Receive(env actors.Env, msg any) {
	switch m := msg.(type) {
	case actors.Complete:
		*p.armed = string(m.Output) == `"panic"`
	case *actors.Persisted:
		if *p.armed {
			*p.armed = false
			panic("planted bug after a completion") // its reply and notices are never sent
		}
	case actors.Submit:
		if m.Jobs[0].Type == "panic" {
			panic("planted bug in the tenant")
		}
	case actors.Progress:
		if m.Kind == "panic" {
			panic("planted bug in the job")
		}
	}
	p.Behaviour.Receive(env, msg)
}

// dispatcherPanics makes the dispatcher panic only on a marked cancel.
type dispatcherPanics struct{ actors.Behaviour }

func (p dispatcherPanics) Receive(env actors.Env, msg any) {
	if m, ok := msg.(actors.Cancel); ok && m.APIKeyID == "panic" {
		panic("planted bug in the dispatcher")
	}
	p.Behaviour.Receive(env, msg)
}

func reject(t *testing.T, err error, code actors.Code) {
	t.Helper()
	var r *actors.Rejection
	if !errors.As(err, &r) || r.Code != code {
		t.Fatalf("got %v, want %s", err, code)
	}
}

// A tenant and a job actor that panic are restarted by their supervisors and rebuild their
// state from the log before they take another message.
func TestPanickedBehaviourRebuildsFromTheLog(t *testing.T) {
	t.Parallel()
	b := open(t, broker.Config{Decorate: func(ref actors.Ref, b actors.Behaviour) actors.Behaviour {
		if ref.Kind == actors.RefDispatcher {
			return dispatcherPanics{b}
		}
		return panicky{b, new(bool)}
	}})
	defer b.Close()
	if _, err := b.SetQuota(ctx(t), "acme", new(3), new(0)); err != nil {
		t.Fatal(err)
	}
	resID, _, _, err := b.Reserve(ctx(t), "acme", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Submit(ctx(t), "acme", "", actors.JobSpec{Queue: "q", Type: "t", IdempotencyKey: "k"}); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, _, err := b.Submit(short, "acme", "", actors.JobSpec{Queue: "q", Type: "panic"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the message that panicked got an answer: %v", err)
	}
	// The restarted tenant knows the quota, the reservation, the job and its idempotency key.
	res, _, err := b.Submit(ctx(t), "acme", "", actors.JobSpec{Queue: "q", Type: "t", IdempotencyKey: "k"})
	if err != nil || !res[0].IdempotentHit {
		t.Fatalf("resubmit after the restart: %+v, %v", res, err)
	}
	if _, _, err := b.Submit(ctx(t), "acme", "", actors.JobSpec{Queue: "q", Type: "t"}, actors.JobSpec{Queue: "q", Type: "t"}); err == nil {
		t.Fatal("the restarted tenant forgot its usage: 1 job + 1 reservation + 2 > 3")
	} else {
		reject(t, err, actors.CodeQuotaExceeded)
	}
	if _, err := b.Release(ctx(t), "acme", resID); err != nil {
		t.Fatalf("the restarted tenant forgot its reservation: %v", err)
	}

	s := worker(t, b, 1)
	s.Credit(1)
	a := next(t, s)
	if _, _, err := b.Event(short, actors.Progress{WorkerID: s.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Kind: "panic", Data: nil}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the message that panicked got an answer: %v", err)
	}
	// The restarted job actor still holds the lease, now with a fresh grace logged.
	n, _, err := b.Event(ctx(t), actors.Progress{WorkerID: s.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Kind: "log", Data: json.RawMessage(`"after"`)})
	if err != nil || n != 4 { // submitted, leased, lease_extended, this
		t.Fatalf("progress after the restart: %d, %v", n, err)
	}
	// The dispatcher panics too: rebuilt from the projections, it still knows the queued job,
	// the lease and the session's free capacity.
	queued, _, err := b.Submit(ctx(t), "acme", "", actors.JobSpec{Queue: "q", Type: "t"})
	if err != nil {
		t.Fatal(err)
	}
	short2, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	if _, err := b.Cancel(short2, "acme", "panic", queued[0].Job.ID); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the message that panicked got an answer: %v", err)
	}
	if _, err := b.Complete(ctx(t), actors.Complete{WorkerID: s.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce}); err != nil {
		t.Fatal(err)
	}
	s.Credit(1)
	a2 := next(t, s)
	if a2.JobID != queued[0].Job.ID {
		t.Fatalf("after the dispatcher's restart the worker got %+v", a2)
	}

	// A job actor that panics right after its completion is durable: the notice that the lease
	// ended is sent again on recovery, so the worker's slot frees and the next job comes.
	third, _, err := b.Submit(ctx(t), "acme", "", actors.JobSpec{Queue: "q", Type: "t"})
	if err != nil {
		t.Fatal(err)
	}
	short3, cancel3 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel3()
	_, _ = b.Complete(short3, actors.Complete{WorkerID: s.WorkerID, JobID: a2.JobID, LeaseID: a2.LeaseID, Nonce: a2.Nonce, Output: json.RawMessage(`"panic"`)})
	if j, _ := b.Get("acme", a2.JobID); j.Status != projections.StatusSucceeded {
		t.Fatalf("the completion is not durable: %s", j.Status)
	}
	s.Credit(1)
	if a3 := next(t, s); a3.JobID != third[0].Job.ID {
		t.Fatalf("after the job actor's restart the worker got %+v", a3)
	}
}

// TestAbandonedBrokerRecovers cuts the power under a running broker (an in-memory filesystem
// crash-cloned with part of its unsynced writes), opens the clone, and checks that everything
// acknowledged is there and that the projections equal a replay of what survived. Checkpoints
// come every few events, each moving finished jobs to the table, so the cut falls before,
// during or after one.
func TestAbandonedBrokerRecovers(t *testing.T) {
	t.Parallel()
	tables := 0
	for seed := uint64(1); seed <= 5; seed++ {
		store := eventlogtest.CrashableMem()
		b := open(t, broker.Config{FS: store.FS, Dir: store.Dir, CheckpointEvery: 10})
		acked := map[string]projections.Status{}
		s := worker(t, b, 2)
		s.Credit(2)
		for i := range 60 {
			res, _, err := b.Submit(ctx(t), "acme", "", actors.JobSpec{Queue: "q", Type: "t", Payload: json.RawMessage(`1`)})
			if err != nil {
				t.Fatal(err)
			}
			acked[res[0].Job.ID] = projections.StatusQueued
			if i%5 != 0 {
				a := next(t, s)
				if _, err := b.Complete(ctx(t), actors.Complete{WorkerID: s.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce}); err != nil {
					t.Fatal(err)
				}
				acked[a.JobID] = projections.StatusSucceeded
				s.Credit(1)
			}
		}
		crashed := store.Crash(50, rand.New(rand.NewPCG(seed, seed)))
		_ = b.Close()

		if l, err := eventlog.Open(crashed.Dir, eventlog.Options{FS: crashed.FS, ReadOnly: true}); err == nil {
			if n, err := projections.CheckTable(l.Views()); err == nil && n > 0 {
				tables++
			}
			_ = l.Close()
		}
		b2 := open(t, broker.Config{FS: crashed.FS, Dir: crashed.Dir})
		for id, st := range acked {
			j, ok := b2.Get("acme", id)
			if !ok {
				t.Fatalf("seed %d: acknowledged job %s is lost", seed, id)
			}
			if st == projections.StatusSucceeded && j.Status != st {
				t.Fatalf("seed %d: acknowledged completion of %s is lost: %s", seed, id, j.Status)
			}
		}
		assertLiveEqualsReplay(t, b2, broker.Config{FS: crashed.FS, Dir: crashed.Dir})
	}
	if tables == 0 {
		t.Fatal("no crash left a table of finished jobs: the checkpoints never moved any")
	}
}

// assertLiveEqualsReplay closes the broker, opened with cfg, then folds its whole log into a
// fresh Set and compares that with the broker's projections as the close left them: their live
// state in memory, and the checkpoint and finished jobs' table the close saved.
func assertLiveEqualsReplay(t *testing.T, b *broker.Broker, cfg broker.Config) {
	t.Helper()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	var live []byte
	b.Read(func(s *projections.Set) { live, _ = s.MarshalCheckpoint() })
	l, err := eventlog.Open(cfg.Dir, eventlog.Options{FS: cfg.FS, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fresh := projections.New()
	for r, err := range l.Range(1, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if err := fresh.ApplyRecord(r); err != nil {
			t.Fatal(err)
		}
	}
	want, _ := fresh.MarshalCheckpoint()
	if !bytes.Equal(live, want) {
		t.Fatalf("live projections at seq %d differ from a replay of the log", fresh.Seq())
	}
	saved, _, err := projections.Rebuild(l, func(err error) { t.Fatalf("the checkpoint the close saved is unusable: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	got, _ := saved.MarshalFold()
	if want, _ := fresh.MarshalFold(); saved.Seq() != fresh.Seq() || !bytes.Equal(got, want) {
		t.Fatalf("the checkpoint and table the close saved differ from a replay of the log at seq %d", fresh.Seq())
	}
}

func TestLiveEqualsReplayThroughTheRuntime(t *testing.T) {
	t.Parallel()
	cfg := broker.Config{Dir: t.TempDir()}
	b := open(t, cfg)
	defer b.Close()
	s := worker(t, b, 3)
	s.Credit(3)
	for i := range 9 {
		if _, _, err := b.Submit(ctx(t), "acme", "", actors.JobSpec{Queue: "q", Type: "t", MaxAttempts: 1}); err != nil {
			t.Fatal(err)
		}
		a := next(t, s)
		if i%2 == 0 {
			_, err := b.Fail(ctx(t), actors.Fail{WorkerID: s.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Code: "x"})
			if err != nil {
				t.Fatal(err)
			}
		} else if _, err := b.Complete(ctx(t), actors.Complete{WorkerID: s.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: json.RawMessage(`{"i":1}`)}); err != nil {
			t.Fatal(err)
		}
		s.Credit(1)
	}
	if _, err := b.Retry(ctx(t), "acme", "", b.Quota("acme").Name); err == nil {
		t.Fatal("a retry of no job succeeded")
	}
	assertLiveEqualsReplay(t, b, cfg)
}

// A flow goes on across a crash: a step that ended just before it, whether or not the start of
// the next step was durable (or decided at all: half the runs have a tenant deaf to step ends),
// is taken up by the tenant the restart resumes, and no step starts twice.
func TestFlowGoesOnAcrossACrash(t *testing.T) {
	t.Parallel()
	restarted := 0
	for seed := uint64(1); seed <= 4; seed++ {
		store := eventlogtest.CrashableMem()
		cfg := broker.Config{FS: store.FS, Dir: store.Dir}
		if seed%2 == 0 { // the tenant never hears that a ended, as if the notice died with a crash
			cfg.Decorate = func(ref actors.Ref, b actors.Behaviour) actors.Behaviour {
				if ref.Kind == actors.RefTenant {
					return deaf{b}
				}
				return b
			}
		}
		b := open(t, cfg)
		steps := []actors.FlowStepSpec{
			{Name: "a", Job: actors.JobSpec{Queue: "q", Type: "a"}},
			{Name: "b", Job: actors.JobSpec{Queue: "q", Type: "b"}, Needs: []string{"a"}},
		}
		id, _, _, err := b.SubmitFlow(ctx(t), actors.SubmitFlow{Tenant: "acme", Name: "f", Steps: steps})
		if err != nil {
			t.Fatal(err)
		}
		s := worker(t, b, 1)
		s.Credit(1)
		a := next(t, s)
		if _, err := b.Complete(ctx(t), actors.Complete{WorkerID: s.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: json.RawMessage(`"A"`)}); err != nil {
			t.Fatal(err)
		}
		b.Read(func(s *projections.Set) {
			if f, _ := s.Flow(id); f.State["b"].JobID == "" {
				restarted++ // b is not started: the restart must start it
			}
		})
		crashed := store.Crash(50, rand.New(rand.NewPCG(seed, seed)))
		_ = b.Close()

		b2 := open(t, broker.Config{FS: crashed.FS, Dir: crashed.Dir})
		s2 := worker(t, b2, 1)
		s2.Credit(1)
		bj := next(t, s2)
		if bj.JobType != "b" || string(bj.Payload) != `{"needs":{"a":"A"}}` {
			t.Fatalf("seed %d: after the crash, assigned %s with %s", seed, bj.JobType, bj.Payload)
		}
		if _, err := b2.Complete(ctx(t), actors.Complete{WorkerID: s2.WorkerID, JobID: bj.JobID, LeaseID: bj.LeaseID, Nonce: bj.Nonce}); err != nil {
			t.Fatal(err)
		}
		var f *projections.Flow
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			b2.Read(func(s *projections.Set) { f, _ = s.Flow(id) })
			if f.Status != projections.FlowRunning {
				break
			}
			<-b2.Changed()
		}
		if f.Status != projections.FlowSucceeded || f.State["b"].JobID != bj.JobID {
			t.Fatalf("seed %d: flow %s, steps %+v", seed, f.Status, f.State)
		}
		jobs := 0
		b2.Read(func(s *projections.Set) {
			for _, st := range []projections.Status{projections.StatusSucceeded, projections.StatusQueued} {
				js, _ := s.List(projections.JobFilter{Tenant: "acme", Status: st, Limit: 10}, time.Now())
				jobs += len(js)
			}
		})
		if jobs != 2 {
			t.Fatalf("seed %d: %d jobs, want one per step", seed, jobs)
		}
		assertLiveEqualsReplay(t, b2, broker.Config{FS: crashed.FS, Dir: crashed.Dir})
	}
	if restarted < 2 {
		t.Fatalf("b was not started before %d of 4 crashes; the deaf tenant's two at least", restarted)
	}
}

// deaf is a tenant that never hears a step end.
type deaf struct{ actors.Behaviour }

func (d deaf) Receive(env actors.Env, msg any) {
	if fmt.Sprintf("%T", msg) == "actors.flowStepEnded" {
		return
	}
	d.Behaviour.Receive(env, msg)
}

// After a restart, a lease its worker does not hold goes back to the queue at once, unspent,
// if nothing says the worker ever had it: its first heartbeat on the new server names every
// lease it holds, and no other. One it names keeps running; one it wrote under (so it had
// it) runs out as any other.
func TestRestartReleasesLeasesNoWorkerHolds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := open(t, broker.Config{Dir: dir})
	var jobs []string
	for range 3 {
		res, _, err := b.Submit(ctx(t), "acme", "", actors.JobSpec{Queue: "q", Type: "t", MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, res[0].Job.ID)
	}
	s := worker(t, b, 3)
	s.Credit(3)
	leases := map[string]actors.Assignment{}
	for range 3 {
		a := next(t, s)
		leases[a.JobID] = a
	}
	held, wrote, lost := leases[jobs[0]], leases[jobs[1]], leases[jobs[2]]
	if _, _, err := b.Event(ctx(t), actors.Progress{WorkerID: s.WorkerID, JobID: wrote.JobID, LeaseID: wrote.LeaseID, Kind: "log"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b2 := open(t, broker.Config{Dir: dir})
	defer b2.Close()
	s2, err := b2.Connect(ctx(t), s.WorkerID, "websocket", 0)
	if err != nil {
		t.Fatal(err)
	}
	// The worker got the first job and the second (and lost that one: a restart that forgot
	// it); the third's assignment never reached it.
	if ack, err := s2.Heartbeat(ctx(t), []string{held.LeaseID}); err != nil || len(ack.Unknown) > 0 {
		t.Fatalf("heartbeat: %+v, %v", ack, err)
	}
	var j *projections.Job
	for giveUp := time.After(10 * time.Second); ; {
		changed := b2.Changed()
		if j, _ = b2.Get("acme", lost.JobID); j.Status != projections.StatusLeased {
			break
		}
		select {
		case <-changed:
		case <-giveUp: // well before its restart's grace would end it
			t.Fatal("the lease no worker had is still held")
		}
	}
	if j.Status != projections.StatusQueued || j.Attempt != 0 {
		t.Fatalf("the lease no worker had: %s, attempt %d", j.Status, j.Attempt)
	}
	var last eventlog.Record
	for r, err := range b2.JobStream(lost.JobID, 0) {
		if err != nil {
			t.Fatal(err)
		}
		last = r
	}
	if p, _ := eventlog.Decode(last.Type, last.Data); p != (eventlog.JobLeaseReleased{JobID: lost.JobID, LeaseID: lost.LeaseID, WorkerID: s.WorkerID, Attempt: 1,
		Reason: eventlog.LeaseUnacknowledged}) {
		t.Fatalf("its history ends %s %s", last.Type, last.Data)
	}
	for _, a := range []actors.Assignment{held, wrote} {
		if j, _ := b2.Get("acme", a.JobID); j.Status != projections.StatusLeased || j.Lease.LeaseID != a.LeaseID {
			t.Fatalf("job %s after the heartbeat: %s %+v", a.JobID, j.Status, j.Lease)
		}
	}
}
