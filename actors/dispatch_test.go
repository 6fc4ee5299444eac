package actors_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/actorstest"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

func TestDispatchOrder(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ids := f.mustSubmit(
		actors.JobSpec{Queue: "q", Type: "low", Priority: -1},
		actors.JobSpec{Queue: "q", Type: "old"},
		actors.JobSpec{Queue: "q", Type: "high", Priority: 5},
		actors.JobSpec{Queue: "q", Type: "new"},
		actors.JobSpec{Queue: "q", Type: "later", Priority: 9, RunAt: t0.Add(time.Minute)},
		actors.JobSpec{Queue: "elsewhere", Type: "x", Priority: 100},
	)
	f.connect("s1", 0)
	var order []string
	for range 4 {
		as := f.credit("s1", 1)
		if len(as) != 1 {
			t.Fatalf("assignments %+v", as)
		}
		order = append(order, as[0].JobType)
		f.complete(as[0], `1`)
	}
	if got := strings.Join(order, ","); got != "high,old,new,low" {
		t.Fatalf("order %s, want high,old,new,low", got)
	}
	if as := f.credit("s1", 1); len(as) != 0 {
		t.Fatalf("a job was leased before its run_at, or from another queue: %+v", as)
	}
	f.live("s1", time.Minute)
	if as := f.assignments("s1"); len(as) != 1 || as[0].JobID != ids[4] {
		t.Fatalf("at run_at: %+v", as)
	}
}

// A session never holds more than its capacity, whatever credit it grants. Credit granted while
// it is full is banked, up to its capacity, and spent as its leases end: a worker sends credit
// with its result, and the next job follows with the result's fsync.
func TestCreditIsBankedUpToCapacity(t *testing.T) {
	t.Parallel()
	f := setup(t, nil) // capacity 4
	var specs []actors.JobSpec
	for range 10 {
		specs = append(specs, actors.JobSpec{Queue: "q", Type: "t"})
	}
	f.mustSubmit(specs...)
	held := f.connect("s1", 100)
	if more := f.credit("s1", 100); len(held) != 4 || len(more) != 0 {
		t.Fatalf("%d then %d assignments with capacity 4", len(held), len(more))
	}
	// The bank holds 4 (the capacity), not 100: four slots that free up get one job each...
	for i := range 4 {
		f.complete(held[i], `1`)
		if more := f.assignments("s1"); len(more) != 1 {
			t.Fatalf("slot %d: %d assignments for one freed slot", i, len(more))
		} else {
			held = append(held, more[0])
		}
	}
	// ...and the fifth gets none until the worker grants more.
	f.complete(held[4], `1`)
	if more := f.assignments("s1"); len(more) != 0 {
		t.Fatalf("%d assignments past the banked credit", len(more))
	}
	if more := f.credit("s1", 1); len(more) != 1 {
		t.Fatalf("%d assignments for fresh credit and a free slot", len(more))
	}
}

func TestMaxRunningHoldsJobsBack(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	f.w.Call("c", actors.TenantRef("acme"), actors.SetQuota{Tenant: "acme", MaxRunning: new(2)})
	f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t"}, actors.JobSpec{Queue: "q", Type: "t"}, actors.JobSpec{Queue: "q", Type: "t"})
	as := f.connect("s1", 4)
	if len(as) != 2 {
		t.Fatalf("%d leased with max_running 2", len(as))
	}
	f.complete(as[0], `1`)
	if more := f.assignments("s1"); len(more) != 1 {
		t.Fatalf("%d leased after one ended", len(more))
	}
}

// Two workers, one job: only one of them gets it, and the tenant's jobs never go to another
// tenant's worker.
func TestOneJobOneWorker(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	other := one[actors.Registered](t, f.w.Call("admin", actors.TenantRef("other"), actors.RegisterWorker{Tenant: "other", Name: "x", Queues: []string{"q"}, Capacity: 1, ExpiresAt: t0.Add(time.Hour)}))
	one[actors.SessionOpened](t, f.w.Connect("s2", "sink:s2", actors.OpenSession{WorkerID: other.WorkerID}))
	f.w.Send(actors.DispatcherRef(), actors.SessionCredit{SessionID: "s2", N: 1}, actorstest.External("x"))
	f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t"})
	a1 := f.connect("s1", 1)
	f.w.Run()
	if len(a1) != 1 || len(f.assignments("s2")) != 0 {
		t.Fatalf("s1 got %d, s2 got some", len(a1))
	}
}

func TestRevocationReleasesLeasesAtOnce(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t"})
	a := f.connect("s1", 1)[0]
	mark := len(f.w.Log)
	if d := one[actors.Done](t, f.w.Call("admin", actors.TenantRef("acme"), actors.RevokeWorker{Tenant: "acme", WorkerID: f.wk, By: "admin"})); d.Err != nil {
		t.Fatal(d.Err)
	}
	got := f.w.Since(mark)
	wantTypes(t, got, "worker.revoked", "worker.session_ended", "job.lease_expired", "job.retry_scheduled")
	if r := got[3].(eventlog.JobRetryScheduled); r.BackoffMillis != 0 {
		t.Fatalf("a released lease waits %d ms", r.BackoffMillis)
	}
	if got[2].(eventlog.JobLeaseExpired).Reason != "worker_revoked" {
		t.Fatalf("%+v", got[2])
	}
	wantCode(t, f.complete(a, `1`).Err, actors.CodeLeaseMismatch)
	r := one[actors.SessionOpened](t, f.w.Connect("s9", "sink:s9", actors.OpenSession{WorkerID: f.wk}))
	wantCode(t, r.Err, actors.CodeWorkerRevoked)
}

// A worker whose connection drops and comes back before its leases run out keeps its jobs: the
// new session adopts the leases, its heartbeats keep them, and they count against its capacity.
func TestReconnectKeepsLeases(t *testing.T) {
	t.Parallel()
	f := setup(t, nil) // capacity 4
	var specs []actors.JobSpec
	for range 6 {
		specs = append(specs, actors.JobSpec{Queue: "q", Type: "t", LeaseTTL: time.Minute})
	}
	f.mustSubmit(specs...)
	held := f.connect("s1", 4)
	f.w.Send(actors.SessionRef("s1"), actors.CloseSession{Reason: "closed"}, actorstest.External("x"))
	f.w.Advance(20 * time.Second)
	one[actors.SessionOpened](t, f.w.Connect("s2", "sink:s2", actors.OpenSession{WorkerID: f.wk, Transport: "websocket"}))
	if more := f.credit("s2", 4); len(more) != 0 {
		t.Fatalf("%d assignments on top of 4 adopted leases with capacity 4", len(more))
	}
	var ids []string
	for _, a := range held {
		ids = append(ids, a.LeaseID)
	}
	f.w.Call("c", actors.DispatcherRef(), actors.Cancel{Tenant: "acme", JobID: held[1].JobID})
	ack := one[actors.HeartbeatAck](t, f.w.Call("w", actors.SessionRef("s2"), actors.Heartbeat{Leases: ids}))
	if len(ack.Unknown) != 0 || len(ack.CancelRequested) != 1 || ack.CancelRequested[0] != held[1].LeaseID {
		t.Fatalf("ack %+v", ack)
	}
	f.live("s2", 45*time.Second) // past the original expiry: the heartbeat extended the leases
	if d := f.complete(held[0], `1`); d.Err != nil {
		t.Fatal(d.Err)
	}
	if more := f.credit("s2", 1); len(more) != 1 {
		t.Fatalf("%d assignments for the slot the completion freed", len(more))
	}
	ack = one[actors.HeartbeatAck](t, f.w.Call("w", actors.SessionRef("s2"), actors.Heartbeat{Leases: ids[:1]}))
	if len(ack.Unknown) != 1 {
		t.Fatalf("a completed lease is not reported unknown: %+v", ack)
	}
}

// The behaviours are pure: they import neither protoactor nor transport (DESIGN §1), and read
// neither the wall clock nor global randomness (DESIGN §2).
func TestBehavioursArePure(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/tetherhq/tether/actors", "github.com/tetherhq/tether/projections").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "protoactor") || strings.HasSuffix(dep, "tether/transport") {
			t.Errorf("behaviours depend on %s", dep)
		}
	}
	files, _ := filepath.Glob("*.go")
	more, _ := filepath.Glob("../projections/*.go")
	for _, name := range append(files, more...) {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, banned := range []string{"time.Now(", "time.Since(", "time.Until(", "time.AfterFunc(", "time.Sleep(", "rand.Int", "rand.Uint", "rand.Float", "go func("} {
			if strings.Contains(string(src), banned) {
				t.Errorf("%s uses %s", name, banned)
			}
		}
	}
}

// Scheduled jobs become ready when each one falls due, the soonest first.
func TestScheduledJobsFallDueInOrder(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ids := f.mustSubmit(actors.JobSpec{Queue: "q", Type: "late", Delay: 90 * time.Second}, actors.JobSpec{Queue: "q", Type: "soon", Delay: 30 * time.Second})
	f.connect("s1", 2)
	f.live("s1", 30*time.Second)
	as := f.assignments("s1")
	if len(as) != 1 || as[0].JobID != ids[1] {
		t.Fatalf("at 30 s: %+v", as)
	}
	f.complete(as[0], `1`)
	f.live("s1", 60*time.Second)
	if as := f.assignments("s1"); len(as) != 1 || as[0].JobID != ids[0] {
		t.Fatalf("at 90 s: %+v", as)
	}
}

// A worker's next job need not wait for the fsync of its last result: the dispatcher leases it
// as soon as the job's actor has decided the end, the new lease is appended after that end (so
// one sync makes both durable), and the assignment leaves only once it is.
func TestNextLeaseFollowsTheEndInTheSameSync(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t"}, actors.JobSpec{Queue: "q", Type: "t"}, actors.JobSpec{Queue: "q", Type: "t"})
	one[actors.SessionOpened](t, f.w.Connect("s1", "sink:s1", actors.OpenSession{WorkerID: f.wk, Transport: "websocket", Capacity: 1}))
	first := f.credit("s1", 1)
	if len(first) != 1 {
		t.Fatalf("%d assignments with capacity 1", len(first))
	}
	f.credit("s1", 1) // banked: the slot is held
	a := first[0]
	f.w.Send(actors.DispatcherRef(), actors.Complete{WorkerID: f.wk, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: json.RawMessage(`1`)}, actorstest.External("worker"))
	f.w.Step()
	if n := len(f.assignments("s1")); n != 0 {
		t.Fatalf("%d assignments before anything was durable", n)
	}
	before := len(f.w.Log)
	f.w.Sync()
	var ended, leased int
	for i, r := range f.w.Log[before:] {
		switch e := r.Payload.(type) {
		case eventlog.JobSucceeded:
			ended = i + 1
		case eventlog.JobLeased:
			if e.JobID != a.JobID {
				leased = i + 1
			}
		}
	}
	if ended == 0 || leased == 0 || leased < ended {
		t.Fatalf("one sync made the end at %d and the next lease at %d (0: not in it); want both, the end first", ended, leased)
	}
	f.w.Run()
	if n := len(f.assignments("s1")); n != 1 {
		t.Fatalf("%d assignments once both were durable", n)
	}
	if d := one[actors.Done](t, f.w.Inbox("worker")); d.Err != nil {
		t.Fatal(d.Err)
	}
	// The end, once durable, frees nothing more: the slot is the second job's.
	if more := f.credit("s1", 1); len(more) != 0 {
		t.Fatalf("%d more assignments with capacity 1 and a job held", len(more))
	}
}

// A worker that reconnects while a lease's end is on its way to the log does not count that
// lease against the new connection: its slot is free already.
func TestReconnectDoesNotCountAnEndingLease(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t"}, actors.JobSpec{Queue: "q", Type: "t"})
	one[actors.SessionOpened](t, f.w.Connect("s1", "sink:s1", actors.OpenSession{WorkerID: f.wk, Transport: "websocket", Capacity: 1}))
	first := f.credit("s1", 1)
	if len(first) != 1 {
		t.Fatalf("%d assignments with capacity 1", len(first))
	}
	// The new connection's start and the end of its job reach the log in one sync, and the
	// dispatcher hears of the connection before the end is durable.
	f.w.Spawn(actors.SessionRef("s2"), actors.NewSession("s2", actorstest.External("sink:s2")))
	f.w.Send(actors.SessionRef("s2"), actors.OpenSession{WorkerID: f.wk, Transport: "websocket", Capacity: 1}, actorstest.External("connect:s2"))
	f.w.Step()
	a := first[0]
	f.w.Send(actors.DispatcherRef(), actors.Complete{WorkerID: f.wk, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: json.RawMessage(`1`)}, actorstest.External("worker"))
	f.w.Run()
	if more := f.credit("s2", 1); len(more) != 1 {
		t.Fatalf("%d assignments for the reconnected worker's free slot", len(more))
	}
}

// A lease the job's actor refuses (a stale notice put a finished job back in the queue) gives
// the worker its credit back: a worker that grants credit only per result would starve otherwise.
func TestRefusedLeaseRefundsCredit(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t"})
	one[actors.SessionOpened](t, f.w.Connect("s1", "sink:s1", actors.OpenSession{WorkerID: f.wk, Transport: "websocket", Capacity: 1}))
	first := f.credit("s1", 1)
	if len(first) != 1 {
		t.Fatalf("%d assignments with capacity 1", len(first))
	}
	if d := f.complete(first[0], `1`); d.Err != nil {
		t.Fatal(d.Err)
	}
	stale := actors.Waiting{ID: first[0].JobID, Tenant: "acme", Queue: "q"}
	f.w.Send(actors.DispatcherRef(), actors.Enqueue{Jobs: []actors.Waiting{stale}, Seq: 1 << 40}, actorstest.External("stale"))
	if more := f.credit("s1", 1); len(more) != 0 {
		t.Fatalf("the finished job was assigned again: %+v", more)
	}
	f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t"})
	f.w.Run()
	if more := f.assignments("s1"); len(more) != 1 {
		t.Fatalf("%d assignments for the credit the refused lease gave back", len(more))
	}
}

// A paused queue takes submits and assigns nothing, from the dispatcher's decision on and after
// a restart of the dispatcher; a resume assigns what waited. Pausing twice changes nothing and
// answers the first pause's receipt.
func TestPausedQueueAssignsNothing(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	pause := func(paused bool) actors.Done {
		t.Helper()
		d := f.do(actors.PauseQueue{Tenant: "acme", Queue: "q", Paused: paused})
		if d.Err != nil {
			t.Fatal(d.Err)
		}
		return d
	}
	first := pause(true)
	if again := pause(true); again.Receipt.Seq != first.Receipt.Seq || first.Receipt.Seq == 0 {
		t.Fatalf("pausing twice: receipts %d then %d", first.Receipt.Seq, again.Receipt.Seq)
	}
	f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t"}, actors.JobSpec{Queue: "q", Type: "t"})
	if as := f.connect("s1", 4); len(as) != 0 {
		t.Fatalf("a paused queue assigned %d jobs", len(as))
	}
	f.w.Restart(actors.DispatcherRef(), actors.NewDispatcher(projections.Retention{}))
	f.w.Run()
	if as := f.credit("s1", 4); len(as) != 0 {
		t.Fatalf("after a restart, a paused queue assigned %d jobs", len(as))
	}
	if p, ok := f.w.Set.Paused("acme", "q"); !ok || p.Seq != first.Receipt.Seq {
		t.Fatalf("projection: %+v %v", p, ok)
	}
	pause(false)
	if as := f.assignments("s1"); len(as) != 2 {
		t.Fatalf("a resumed queue assigned %d of 2 jobs", len(as))
	}
	if _, ok := f.w.Set.Paused("acme", "q"); ok {
		t.Fatal("resumed, but the projection says paused")
	}
	if d := f.do(actors.PauseQueue{Tenant: "acme", Queue: "no spaces", Paused: true}); d.Err == nil || d.Err.Code != actors.CodeInvalidArgument {
		t.Fatalf("a bad queue name: %+v", d.Err)
	}
}
