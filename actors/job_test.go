package actors_test

import (
	"crypto/ed25519"
	"encoding/json"
	"testing"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/signing"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

func TestLeaseFields(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ids := f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t", LeaseTTL: time.Minute})
	mark := len(f.w.Log)
	a := f.connect("s1", 1)[0]
	leased := f.w.Since(mark)[1].(eventlog.JobLeased) // after worker.session_started
	if leased.JobID != ids[0] || leased.LeaseID != a.LeaseID || leased.Nonce != a.Nonce || len(a.Nonce) != 32 ||
		leased.Attempt != 1 || !leased.ExpiresAt.Equal(t0.Add(time.Minute)) || leased.WorkerID != f.wk || leased.SessionID != "s1" {
		t.Fatalf("leased %+v, assignment %+v", leased, a)
	}
}

func TestHeartbeatExtendsLease(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t", LeaseTTL: 20 * time.Second})
	a := f.connect("s1", 1)[0]
	for range 6 { // 60 s of heartbeats every 10 s keep a 20 s lease
		f.w.Advance(10 * time.Second)
		ack := one[actors.HeartbeatAck](t, f.w.Call("worker", actors.SessionRef("s1"), actors.Heartbeat{Leases: []string{a.LeaseID, "01UNKNOWN"}}))
		if len(ack.Unknown) != 1 || ack.Unknown[0] != "01UNKNOWN" || len(ack.CancelRequested) != 0 {
			t.Fatalf("ack %+v", ack)
		}
	}
	if j := f.job(a.JobID); j.Status != projections.StatusLeased {
		t.Fatalf("job %s after heartbeats", j.Status)
	}
	// No more heartbeats: the session ends after three missed, and the lease runs out on its
	// own schedule (20 s after the last heartbeat), as a failed attempt.
	mark := len(f.w.Log)
	f.w.Advance(40 * time.Second)
	got := f.w.Since(mark)
	wantTypes(t, got, "job.lease_expired", "job.retry_scheduled", "worker.session_ended")
	if e := got[2].(eventlog.WorkerSessionEnded); e.Reason != "heartbeat_timeout" {
		t.Fatalf("session ended: %+v", e)
	}
}

func TestProgressIsNumbered(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t"})
	a := f.connect("s1", 1)[0]
	for i, want := range []int{3, 4} { // submitted = 1, leased = 2
		ack := one[actors.ProgressAck](t, f.w.Call("worker", actors.DispatcherRef(),
			actors.Progress{WorkerID: f.wk, JobID: a.JobID, LeaseID: a.LeaseID, Kind: "log", Data: json.RawMessage(`"line"`)}))
		if ack.Err != nil || ack.Number != want {
			t.Fatalf("progress %d: %+v", i, ack)
		}
	}
	bad := one[actors.ProgressAck](t, f.w.Call("worker", actors.DispatcherRef(), actors.Progress{WorkerID: f.wk, JobID: a.JobID, LeaseID: "stale", Kind: "log"}))
	wantCode(t, bad.Err, actors.CodeLeaseMismatch)
	if j := f.job(a.JobID); j.Events != 4 || len(j.Progress) != 2 || j.Progress[1].Number != 4 {
		t.Fatalf("job %+v", j)
	}
}

func TestSignedCompletion(t *testing.T) {
	t.Parallel()
	pub, priv, _ := ed25519.GenerateKey(nil)
	f := setup(t, pub)
	f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t"}, actors.JobSpec{Queue: "q", Type: "t"})
	as := f.connect("s1", 2)
	out := json.RawMessage(`{"b":1,"a":[1,2]}`)
	hash, _ := signing.OutputHash(out)
	complete := func(a actors.Assignment, sig string) actors.Done {
		return f.do(actors.Complete{WorkerID: f.wk, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: out, Signature: sig})
	}
	wantCode(t, complete(as[0], "").Err, actors.CodeSignatureInvalid)
	// A signature over another job's completion does not verify for this one.
	wantCode(t, complete(as[0], signing.SignCompletion(priv, as[1].JobID, as[1].LeaseID, as[1].Nonce, hash)).Err, actors.CodeSignatureInvalid)
	if d := complete(as[0], signing.SignCompletion(priv, as[0].JobID, as[0].LeaseID, as[0].Nonce, hash)); d.Err != nil {
		t.Fatal(d.Err)
	}
	if j := f.job(as[0].JobID); j.OutputHash != hash || j.Status != projections.StatusSucceeded {
		t.Fatalf("job %+v", j)
	}
	// A wrong nonce and a wrong output hash are refused before the signature is looked at.
	bad := actors.Complete{WorkerID: f.wk, JobID: as[1].JobID, LeaseID: as[1].LeaseID, Nonce: "00", Output: out}
	wantCode(t, f.do(bad).Err, actors.CodeLeaseMismatch)
	bad.Nonce, bad.OutputHash = as[1].Nonce, "deadbeef"
	wantCode(t, f.do(bad).Err, actors.CodeInvalidArgument)
}

func TestFailRetriesWithBackoffThenDeadLetters(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ids := f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t", MaxAttempts: 3})
	f.connect("s1", 0)
	for attempt := 1; attempt <= 3; attempt++ {
		as := f.credit("s1", 1)
		if len(as) == 0 { // the retry waits out its backoff first
			j := f.job(ids[0])
			if j.StatusAt(f.w.Clock) != projections.StatusScheduled {
				t.Fatalf("attempt %d: job %s", attempt, j.Status)
			}
			f.live("s1", j.RunAt.Sub(f.w.Clock))
			as = f.assignments("s1")
		}
		if len(as) != 1 || as[0].Attempt != attempt {
			t.Fatalf("attempt %d: assignments %+v", attempt, as)
		}
		mark := len(f.w.Log)
		if d := f.do(actors.Fail{WorkerID: f.wk, JobID: as[0].JobID, LeaseID: as[0].LeaseID, Code: "boom", Retryable: true}); d.Err != nil {
			t.Fatal(d.Err)
		}
		got := f.w.Since(mark)
		if attempt == 3 {
			wantTypes(t, got, "job.failed", "job.dead_lettered")
			if got[1].(eventlog.JobDeadLettered).Reason != eventlog.DeadMaxAttempts {
				t.Fatalf("dead: %+v", got[1])
			}
			break
		}
		wantTypes(t, got, "job.failed", "job.retry_scheduled")
		r := got[1].(eventlog.JobRetryScheduled)
		base := actors.Backoff(attempt)
		if d := time.Duration(r.BackoffMillis) * time.Millisecond; d < base || d > base+base/actors.BackoffJitterFraction {
			t.Fatalf("attempt %d: backoff %s, want %s plus at most a tenth", attempt, d, base)
		}
	}
	j := f.job(ids[0])
	if j.Status != projections.StatusFailed || j.DeadReason != eventlog.DeadMaxAttempts || j.Error.Code != "boom" {
		t.Fatalf("job %+v", j)
	}
	// Re-drive: queued again with a fresh budget of three attempts.
	if d := one[actors.Done](t, f.w.Call("c", actors.TenantRef("acme"), actors.Redrive{Tenant: "acme", JobID: ids[0]})); d.Err != nil {
		t.Fatal(d.Err)
	}
	if j := f.job(ids[0]); j.Status != projections.StatusQueued || j.MaxAttempts != 6 {
		t.Fatalf("re-driven %+v", j)
	}
	wantCode(t, one[actors.Done](t, f.w.Call("c", actors.TenantRef("acme"), actors.Redrive{Tenant: "acme", JobID: ids[0]})).Err, actors.CodeNotDeadLettered)
	as := f.credit("s1", 1)
	if len(as) != 1 || as[0].Attempt != 4 {
		t.Fatalf("after re-drive: %+v", as)
	}
	mark := len(f.w.Log)
	f.do(actors.Fail{WorkerID: f.wk, JobID: as[0].JobID, LeaseID: as[0].LeaseID, Code: "boom", Retryable: true})
	if r := f.w.Since(mark)[1].(eventlog.JobRetryScheduled); r.BackoffMillis >= actors.Backoff(2).Milliseconds() {
		t.Fatalf("the backoff after a re-drive starts over: %+v", r)
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]time.Duration{1: 10 * time.Second, 2: 20 * time.Second, 5: 160 * time.Second, 6: 300 * time.Second, 60: 300 * time.Second} {
		if got := actors.Backoff(n); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestNonRetryableFailure(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t"})
	a := f.connect("s1", 1)[0]
	mark := len(f.w.Log)
	f.do(actors.Fail{WorkerID: f.wk, JobID: a.JobID, LeaseID: a.LeaseID, Code: "bad_input"})
	got := f.w.Since(mark)
	wantTypes(t, got, "job.failed", "job.dead_lettered")
	if got[1].(eventlog.JobDeadLettered).Reason != eventlog.DeadNonRetryable {
		t.Fatalf("%+v", got[1])
	}
	wantCode(t, f.do(actors.Fail{WorkerID: f.wk, JobID: a.JobID, LeaseID: a.LeaseID, Code: "x"}).Err, actors.CodeLeaseMismatch)
}

func TestLeaseExpiry(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ids := f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t", MaxAttempts: 1, LeaseTTL: 10 * time.Second})
	a := f.connect("s1", 1)[0]
	f.w.Advance(9 * time.Second)
	mark := len(f.w.Log)
	f.w.Advance(time.Second)
	got := f.w.Since(mark)
	wantTypes(t, got, "job.lease_expired", "job.dead_lettered")
	if got[1].(eventlog.JobDeadLettered).Reason != eventlog.DeadLeaseExpired {
		t.Fatalf("%+v", got[1])
	}
	// The worker is still alive, but its lease is gone.
	wantCode(t, f.complete(a, `1`).Err, actors.CodeLeaseMismatch)
	if j := f.job(ids[0]); j.Error.Code != "lease_expired" || j.Lease != nil {
		t.Fatalf("job %+v", j)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ids := f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t"}, actors.JobSpec{Queue: "q", Type: "t"}, actors.JobSpec{Queue: "q", Type: "t", Delay: time.Hour})
	cancel := func(tenant, id string) actors.Done {
		return one[actors.Done](t, f.w.Call("c", actors.DispatcherRef(), actors.Cancel{Tenant: tenant, JobID: id}))
	}
	// Scheduled: cancelled at once, and never leased.
	mark := len(f.w.Log)
	if d := cancel("acme", ids[2]); d.Err != nil {
		t.Fatal(d.Err)
	}
	wantTypes(t, f.w.Since(mark), "job.cancelled")
	wantCode(t, cancel("acme", ids[2]).Err, actors.CodeAlreadyTerminal)
	wantCode(t, cancel("other", ids[0]).Err, actors.CodeJobNotFound)
	// Leased: cancel_requested, the worker hears it (and sees it in heartbeats), and its fail
	// ends the job as cancelled, never retried.
	as := f.connect("s1", 1)
	mark = len(f.w.Log)
	if d := cancel("acme", as[0].JobID); d.Err != nil {
		t.Fatal(d.Err)
	}
	wantTypes(t, f.w.Since(mark), "job.cancel_requested")
	if n := f.w.Inbox("sink:s1"); len(n) != 1 || n[0].(actors.CancelNotice).LeaseID != as[0].LeaseID {
		t.Fatalf("sink got %+v", n)
	}
	ack := one[actors.HeartbeatAck](t, f.w.Call("worker", actors.SessionRef("s1"), actors.Heartbeat{Leases: []string{as[0].LeaseID}}))
	if len(ack.CancelRequested) != 1 {
		t.Fatalf("ack %+v", ack)
	}
	mark = len(f.w.Log)
	f.do(actors.Fail{WorkerID: f.wk, JobID: as[0].JobID, LeaseID: as[0].LeaseID, Code: "cancelled", Retryable: true})
	wantTypes(t, f.w.Since(mark), "job.failed", "job.cancelled")
	// Queued: cancelled at once; the other leased job's worker never gets it.
	other := ids[0]
	if other == as[0].JobID {
		other = ids[1]
	}
	cancel("acme", other)
	if as := f.credit("s1", 1); len(as) != 0 {
		t.Fatalf("a cancelled job was leased: %+v", as)
	}
}

func TestCancelRequestedLeaseExpires(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t", LeaseTTL: 10 * time.Second})
	a := f.connect("s1", 1)[0]
	f.w.Call("c", actors.DispatcherRef(), actors.Cancel{Tenant: "acme", JobID: a.JobID})
	mark := len(f.w.Log)
	f.w.Advance(10 * time.Second)
	got := f.w.Since(mark)
	wantTypes(t, got, "job.lease_expired", "job.cancelled")
	if got[1].(eventlog.JobCancelled).Reason != "lease_expired" {
		t.Fatalf("%+v", got[1])
	}
}

// Another worker of the same tenant that learned a lease id cannot act on the lease.
func TestLeaseBelongsToItsWorker(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t"})
	a := f.connect("s1", 1)[0]
	thief := one[actors.Registered](t, f.w.Call("admin", actors.TenantRef("acme"), actors.RegisterWorker{Tenant: "acme", Name: "thief", Queues: []string{"q"}, Capacity: 1, ExpiresAt: t0.Add(time.Hour)}))
	wantCode(t, f.do(actors.Complete{WorkerID: thief.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce}).Err, actors.CodeLeaseMismatch)
	wantCode(t, f.do(actors.Fail{WorkerID: thief.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Code: "x"}).Err, actors.CodeLeaseMismatch)
	// A worker of another tenant must not learn the job exists, whether it names the job's lease
	// (the job's actor answers) or another (the dispatcher does).
	rival := one[actors.Registered](t, f.w.Call("admin", actors.TenantRef("rival"), actors.RegisterWorker{Tenant: "rival", Name: "r", Queues: []string{"q"}, Capacity: 1, ExpiresAt: t0.Add(time.Hour)}))
	wantCode(t, f.do(actors.Complete{WorkerID: rival.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce}).Err, actors.CodeJobNotFound)
	wantCode(t, f.do(actors.Fail{WorkerID: rival.WorkerID, JobID: a.JobID, LeaseID: "01OTHER", Code: "x"}).Err, actors.CodeJobNotFound)
	wantCode(t, one[actors.ProgressAck](t, f.w.Call("worker", actors.JobRef(a.JobID), actors.Progress{WorkerID: rival.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Kind: "log"})).Err, actors.CodeJobNotFound)
	if j := f.job(a.JobID); j.Status != projections.StatusLeased || j.Lease.WorkerID != f.wk {
		t.Fatalf("job %+v", j)
	}
}

// A heartbeat keeps only its own worker's leases: another worker's lease, named in it, is
// unknown to it and is not extended.
func TestHeartbeatIgnoresAnotherWorkersLease(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t", LeaseTTL: 20 * time.Second})
	a := f.connect("s1", 1)[0]
	other := one[actors.Registered](t, f.w.Call("admin", actors.TenantRef("acme"), actors.RegisterWorker{
		Tenant: "acme", Name: "w2", Queues: []string{"q"}, Capacity: 1, TokenHash: "h2", ExpiresAt: t0.Add(time.Hour)}))
	if o := one[actors.SessionOpened](t, f.w.Connect("s2", "sink:s2", actors.OpenSession{WorkerID: other.WorkerID, Transport: "websocket"})); o.Err != nil {
		t.Fatal(o.Err)
	}
	for range 3 { // 30 s: past the lease's 20 s unless the heartbeats were taken as its holder's
		f.w.Advance(10 * time.Second)
		ack := one[actors.HeartbeatAck](t, f.w.Call("w2", actors.SessionRef("s2"), actors.Heartbeat{Leases: []string{a.LeaseID}}))
		if len(ack.Unknown) != 1 || ack.Unknown[0] != a.LeaseID {
			t.Fatalf("another worker's heartbeat: %+v", ack)
		}
	}
	if j := f.job(a.JobID); j.Lease != nil && j.Lease.LeaseID == a.LeaseID {
		t.Fatalf("another worker's heartbeats kept the lease: %+v", j.Lease)
	}
}
