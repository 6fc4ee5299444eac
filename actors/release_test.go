package actors_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/actorstest"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// openPoll opens a long-poll session for the worker.
func (f *fixture) openPoll(s string) {
	f.t.Helper()
	if o := one[actors.SessionOpened](f.t, f.w.Connect(s, "sink:"+s, actors.OpenSession{WorkerID: f.wk, Transport: actors.TransportLongPoll})); o.Err != nil {
		f.t.Fatal(o.Err)
	}
}

// poll is one long poll of session s: an offer of n, then its withdrawal. It returns the
// assignments the offer brought, which all come before the offer's end.
func (f *fixture) poll(s string, n int) []actors.Assignment {
	f.t.Helper()
	if a := one[actors.OfferAck](f.t, f.w.Call("poll:"+s, actors.SessionRef(s), actors.Offer{N: n})); a.Err != nil {
		f.t.Fatal(a.Err)
	}
	f.w.Send(actors.SessionRef(s), actors.Withdraw{}, actorstest.External("poll:"+s))
	f.w.Run()
	var got []actors.Assignment
	ended := false
	for _, m := range f.w.Inbox("sink:" + s) {
		switch m := m.(type) {
		case actors.Assignment:
			if ended {
				f.t.Fatalf("lease %s reached the poll after its offer ended", m.LeaseID)
			}
			got = append(got, m)
		case actors.OfferEnded:
			ended = true
		}
	}
	if !ended {
		f.t.Fatal("the offer never ended")
	}
	return got
}

// A long-poll worker's credit lasts exactly as long as a poll of it waits: a job submitted
// after its poll ended is not leased to it, and goes to a worker that asks.
func TestLongPollCreditLastsOnlyWhileAPollWaits(t *testing.T) {
	t.Parallel()
	f := setup(t, nil) // capacity 4
	f.openPoll("s1")
	if got := f.poll("s1", 1); len(got) != 0 {
		t.Fatalf("an empty queue gave %d jobs", len(got))
	}
	ids := f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t", MaxAttempts: 1})
	if j := f.job(ids[0]); j.Status != projections.StatusQueued || len(f.assignments("s1")) != 0 {
		t.Fatalf("a job was leased to a worker whose poll had ended: %s", j.Status)
	}
	other := one[actors.Registered](t, f.w.Call("admin", actors.TenantRef("acme"), actors.RegisterWorker{Tenant: "acme", Name: "w2",
		Queues: []string{"q"}, Capacity: 1, ExpiresAt: t0.Add(time.Hour)}))
	one[actors.SessionOpened](t, f.w.Connect("s2", "sink:s2", actors.OpenSession{WorkerID: other.WorkerID, Transport: actors.TransportWebSocket}))
	if got := f.credit("s2", 1); len(got) != 1 || got[0].JobID != ids[0] {
		t.Fatalf("the worker that asks got %+v", got)
	}
}

// A poll that ends just as its jobs are leased (its wait ran out, it was handed a first job,
// or it waits no time at all) still takes every job its offer brought: the offer ends only once
// the dispatcher has seen each of them arrive at the session.
func TestAnEndingPollTakesTheJobsItsOfferBrought(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	f.mustSubmit(actors.JobSpec{Queue: "q", Type: "a"}, actors.JobSpec{Queue: "q", Type: "b"})
	f.openPoll("s1")
	// The offer, and at once its withdrawal, before the leases it caused are durable.
	f.w.Send(actors.SessionRef("s1"), actors.Offer{N: 3}, actorstest.External("poll"))
	f.w.Step() // the dispatcher leases both jobs; their leases wait for the log
	f.w.Send(actors.SessionRef("s1"), actors.Withdraw{}, actorstest.External("poll"))
	mark := len(f.w.Log)
	f.w.Run()
	var got []string
	for _, m := range f.w.Inbox("sink:s1") {
		switch m := m.(type) {
		case actors.Assignment:
			got = append(got, m.JobType)
		case actors.OfferEnded:
			got = append(got, "end")
		}
	}
	if strings.Join(got, ",") != "a,b,end" {
		t.Fatalf("the poll saw %v, want a,b,end", got)
	}
	for _, p := range f.w.Since(mark) {
		if _, ok := p.(eventlog.JobLeaseReleased); ok {
			t.Fatalf("a job the poll took was put back: %+v", p)
		}
	}
}

// An assignment that reaches a session no longer there to deliver it (the connection closed
// while the lease was being made durable) goes back to the queue at once, with no attempt
// spent and no failure counted.
func TestUndeliveredAssignmentGoesBackWithNoAttempt(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ids := f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t", MaxAttempts: 1})
	one[actors.SessionOpened](t, f.w.Connect("s1", "sink:s1", actors.OpenSession{WorkerID: f.wk, Transport: actors.TransportWebSocket}))
	mark := len(f.w.Log)
	f.w.Send(actors.DispatcherRef(), actors.SessionCredit{SessionID: "s1", N: 1}, actorstest.External("x"))
	f.w.Step() // leased, not yet durable
	f.w.Send(actors.SessionRef("s1"), actors.CloseSession{Reason: "closed"}, actorstest.External("x"))
	f.w.Run()
	if got := f.assignments("s1"); len(got) != 0 {
		t.Fatalf("a closed session delivered %+v", got)
	}
	events := f.w.Since(mark)
	wantTypes(t, events, "job.leased", "worker.session_ended", "job.lease_released")
	if r := events[2].(eventlog.JobLeaseReleased); r.Reason != eventlog.LeaseUndelivered || r.Attempt != 1 || r.AttemptSpent {
		t.Fatalf("released %+v", r)
	}
	j := f.job(ids[0])
	if j.Status != projections.StatusQueued || j.Attempt != 0 || j.Error != nil || j.Lease != nil {
		t.Fatalf("job %+v", j)
	}
	// With its one attempt unspent, it runs when a worker asks.
	if got := f.connect("s2", 1); len(got) != 1 || got[0].Attempt != 1 {
		t.Fatalf("then: %+v", got)
	}
	if c := f.w.Set.Counters()["q"]; c.Failed != 0 || c.Released != 1 {
		t.Fatalf("counters %+v", c)
	}
}

// A session that has stopped altogether sends back what still comes for it (actors.Bounce):
// here the assignment arrives after the session's actor is gone.
func TestAssignmentToAStoppedSessionBounces(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ids := f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t"})
	one[actors.SessionOpened](t, f.w.Connect("s1", "sink:s1", actors.OpenSession{WorkerID: f.wk, Transport: actors.TransportWebSocket}))
	f.w.Send(actors.SessionRef("s1"), actors.CloseSession{Reason: "closed"}, actorstest.External("x"))
	f.w.Send(actors.DispatcherRef(), actors.SessionCredit{SessionID: "s1", N: 1}, actorstest.External("x"))
	f.w.Step() // the session is ending; the dispatcher still has its credit and leases the job
	f.w.Sync()
	f.w.Step() // the session's end is durable: it stops; the lease is durable: its job assigns
	f.w.Run()
	if j := f.job(ids[0]); j.Status != projections.StatusQueued || j.Attempt != 0 {
		t.Fatalf("job %+v", j)
	}
	if to, notice, ok := actors.Bounce(actors.CancelNotice{JobID: "x"}); ok {
		t.Fatalf("a cancel notice bounced to %v: %+v", to, notice)
	}
}

// A worker gives a job back untried (a clean stop, a command that cannot start): no attempt is
// spent, the history says why, and the job runs again at once. A worker that keeps giving a job
// back cannot keep it from running out of attempts forever.
func TestWorkerReleaseSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ids := f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t", MaxAttempts: 2})
	release := func(a actors.Assignment, reason string) actors.Done {
		t.Helper()
		return f.do(actors.ReleaseLease{WorkerID: f.wk, JobID: a.JobID, LeaseID: a.LeaseID, Reason: reason, Message: "why"})
	}
	a := f.connect("s1", 1)[0]
	wantCode(t, release(a, "no spaces allowed").Err, actors.CodeInvalidArgument)
	wantCode(t, release(a, eventlog.LeaseUndelivered).Err, actors.CodeInvalidArgument) // the server's own word
	wantCode(t, f.do(actors.ReleaseLease{WorkerID: f.wk, JobID: a.JobID, LeaseID: "01STALE", Reason: "worker_stopping"}).Err, actors.CodeLeaseMismatch)
	for i := range actors.LeaseReleasesMax {
		mark := len(f.w.Log)
		if d := release(a, "worker_stopping"); d.Err != nil {
			t.Fatal(d.Err)
		}
		wantTypes(t, f.w.Since(mark), "job.lease_released")
		if j := f.job(ids[0]); j.Status != projections.StatusQueued || j.Attempt != 0 || j.Releases != i+1 {
			t.Fatalf("release %d: job %s attempt %d releases %d", i, j.Status, j.Attempt, j.Releases)
		}
		next := f.credit("s1", 1)
		if len(next) != 1 || next[0].Attempt != 1 {
			t.Fatalf("release %d: then %+v", i, next)
		}
		a = next[0]
	}
	mark := len(f.w.Log)
	release(a, "worker_stopping")
	events := f.w.Since(mark)
	wantTypes(t, events, "job.lease_released", "job.retry_scheduled")
	if r := events[0].(eventlog.JobLeaseReleased); !r.AttemptSpent {
		t.Fatalf("release %d in a row spent no attempt: %+v", actors.LeaseReleasesMax+1, r)
	}
	if j := f.job(ids[0]); j.Attempt != 1 || j.Releases != 0 || j.Error == nil || j.Error.Code != "released_too_often" {
		t.Fatalf("job %+v %+v", j, j.Error)
	}
}

// A leased job whose cancel was asked for is cancelled when its lease is given back.
func TestReleaseOfACancelRequestedJobCancelsIt(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ids := f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t"})
	a := f.connect("s1", 1)[0]
	f.w.Call("c", actors.DispatcherRef(), actors.Cancel{Tenant: "acme", JobID: ids[0]})
	mark := len(f.w.Log)
	f.do(actors.ReleaseLease{WorkerID: f.wk, JobID: a.JobID, LeaseID: a.LeaseID, Reason: "worker_stopping"})
	events := f.w.Since(mark)
	wantTypes(t, events, "job.lease_released", "job.cancelled")
	if c := events[1].(eventlog.JobCancelled); c.Reason != "lease_released" {
		t.Fatalf("cancelled %+v", c)
	}
}

// Each assignment says how often its lease must be heartbeaten: a third of its lease_ttl, so
// that the shortest lease the API accepts cannot expire under a worker that heartbeats on time.
func TestAssignmentSaysItsHeartbeatInterval(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	f.mustSubmit(actors.JobSpec{Queue: "q", Type: "short", LeaseTTL: actors.LeaseTTLMin}, actors.JobSpec{Queue: "q", Type: "long", LeaseTTL: time.Hour})
	got := map[string]time.Duration{}
	for _, a := range f.connect("s1", 2) {
		got[a.JobType] = a.HeartbeatInterval
	}
	if got["short"] != actors.LeaseTTLMin/3 || got["long"] != actors.HeartbeatInterval {
		t.Fatalf("intervals %v", got)
	}
	// Heartbeats at that interval keep the short lease for as long as they come.
	for range 10 {
		f.w.Advance(got["short"])
		f.w.Call("hb", actors.SessionRef("s1"), actors.Heartbeat{Leases: f.leaseIDs()})
	}
	for _, j := range f.w.Set.Leases() {
		if j.Lease == nil {
			t.Fatalf("job %s lost its lease", j.ID)
		}
	}
	if n := len(f.w.Set.Leases()); n != 2 {
		t.Fatalf("%d leases held after 10 heartbeats, want 2", n)
	}
}

// leaseIDs lists the leases held now.
func (f *fixture) leaseIDs() []string {
	var ids []string
	for _, j := range f.w.Set.Leases() {
		ids = append(ids, j.Lease.LeaseID)
	}
	return ids
}

// A quota update changes only the limits it names.
func TestQuotaUpdateKeepsWhatItDoesNotName(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	for _, q := range []actors.SetQuota{{Tenant: "acme", MaxActive: new(10)}, {Tenant: "acme", MaxRunning: new(2)}} {
		if d := one[actors.Done](t, f.w.Call("admin", actors.TenantRef("acme"), q)); d.Err != nil {
			t.Fatal(d.Err)
		}
	}
	if q := f.w.Set.Tenant("acme"); q.MaxActive != 10 || q.MaxRunning != 2 {
		t.Fatalf("quota %+v, want max_active 10 and max_running 2", q)
	}
	d := one[actors.Done](t, f.w.Call("admin", actors.TenantRef("acme"), actors.SetQuota{Tenant: "acme", MaxActive: new(-1)}))
	wantCode(t, d.Err, actors.CodeInvalidArgument)
}
