package actors_test

import (
	"slices"
	"testing"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// retained is a fixture whose dispatcher keeps finished jobs a minute, a job with a result TTL
// as long as that says, and dead letters an hour, at most two per tenant.
func retained(t *testing.T) *fixture {
	f := setup(t, nil)
	r := projections.Retention{Done: time.Minute, Dead: time.Hour, MaxDead: 2}
	f.w.Retention = r
	f.w.Restart(actors.DispatcherRef(), actors.NewDispatcher(r))
	return f
}

func (f *fixture) expiredEvents(since int) []eventlog.JobExpired {
	var out []eventlog.JobExpired
	for _, p := range f.w.Since(since) {
		if e, ok := p.(eventlog.JobExpired); ok {
			out = append(out, e)
		}
	}
	return out
}

func (f *fixture) gone(id string) bool {
	_, ok := f.w.Set.Job(id)
	return !ok
}

func TestRetentionCapsDeadLetters(t *testing.T) {
	t.Parallel()
	f := retained(t)
	var ids []string
	for range 3 {
		ids = append(ids, f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t", MaxAttempts: 1})...)
	}
	mark := len(f.w.Log)
	for _, a := range f.connect("s1", 3) {
		f.do(actors.Fail{WorkerID: f.wk, JobID: a.JobID, LeaseID: a.LeaseID, Code: "boom"})
		f.w.Advance(time.Second) // they die one second apart
	}
	f.live("s1", 15*time.Second)
	got := f.expiredEvents(mark)
	if len(got) != 1 || got[0].JobID != ids[0] || got[0].Reason != eventlog.ExpiredDeadCap {
		t.Fatalf("expiries %+v, want the oldest dead letter past the cap of 2", got)
	}
	// A re-drive and an expiry never meet: the re-driven job is live and stays.
	if d := one[actors.Done](t, f.w.Call("c", actors.TenantRef("acme"), actors.Redrive{Tenant: "acme", JobID: ids[1]})); d.Err != nil {
		t.Fatal(d.Err)
	}
	wantCode(t, one[actors.Done](t, f.w.Call("c", actors.TenantRef("acme"), actors.Redrive{Tenant: "acme", JobID: ids[0]})).Err, actors.CodeJobNotFound)
	f.live("s1", 2*time.Hour)
	if f.gone(ids[1]) || !f.gone(ids[2]) {
		t.Fatal("after 2h: the re-driven job should be live, the other dead letter gone")
	}
}

func TestDeleteAndPurge(t *testing.T) {
	t.Parallel()
	f := retained(t)
	ids := f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t", MaxAttempts: 1}, actors.JobSpec{Queue: "q", Type: "t", MaxAttempts: 1},
		actors.JobSpec{Queue: "other", Type: "t", MaxAttempts: 1}, actors.JobSpec{Queue: "q", Type: "t"})
	del := func(id string) actors.Done {
		return one[actors.Done](t, f.w.Call("c", actors.DispatcherRef(), actors.Delete{Tenant: "acme", JobID: id, APIKeyID: "k1"}))
	}
	wantCode(t, del(ids[3]).Err, actors.CodeNotFinished)
	wantCode(t, del("nope").Err, actors.CodeJobNotFound)
	as := f.connect("s1", 2)
	f.do(actors.Fail{WorkerID: f.wk, JobID: as[0].JobID, LeaseID: as[0].LeaseID, Code: "boom"})
	f.complete(as[1], `1`)
	mark := len(f.w.Log)
	if d := del(as[1].JobID); d.Err != nil || d.Receipt.Seq == 0 {
		t.Fatalf("delete: %+v", d)
	}
	if !f.gone(as[1].JobID) {
		t.Fatal("a deleted job is still in the views")
	}
	wantCode(t, del(as[1].JobID).Err, actors.CodeJobNotFound)
	if e := f.expiredEvents(mark); len(e) != 1 || e[0].Reason != eventlog.ExpiredDeleted || e[0].APIKeyID != "k1" {
		t.Fatalf("delete wrote %+v", e)
	}

	purge := func(queue string, before time.Time) actors.PurgeDone {
		return one[actors.PurgeDone](t, f.w.Call("c", actors.DispatcherRef(), actors.PurgeDead{Tenant: "acme", Queue: queue, Before: before}))
	}
	if p := purge("q", f.w.Clock.Add(-time.Minute)); p.Purged != 0 || p.More {
		t.Fatalf("a purge of nothing old enough took %+v", p)
	}
	if p := purge("q", f.w.Clock.Add(time.Second)); p.Purged != 1 || p.Err != nil || !f.gone(as[0].JobID) {
		t.Fatalf("purge of q: %+v", p)
	}
	if p := one[actors.PurgeDone](t, f.w.Call("c", actors.DispatcherRef(), actors.PurgeDead{Tenant: "other", Before: f.w.Clock.Add(time.Hour)})); p.Purged != 0 {
		t.Fatalf("another tenant's purge took %+v", p)
	}
	if f.gone(ids[3]) || f.gone(ids[2]) {
		t.Fatal("a purge took a live job")
	}
}

// TestEndedFlowsExpire: an ended flow leaves the views once its retention is over and each of
// its steps' jobs has finished; a running one stays.
func TestEndedFlowsExpire(t *testing.T) {
	t.Parallel()
	f := retained(t)
	done := f.mustSubmitFlow(step("a"))
	running := f.mustSubmitFlow(step("a"), step("b", "a"))
	cancelling := f.mustSubmitFlow(step("a"))
	as := f.connect("s1", 3)
	if len(as) != 3 {
		t.Fatalf("%d assignments", len(as))
	}
	for _, a := range as {
		if a.JobID == f.flow(done).State["a"].JobID {
			f.complete(a, `1`)
		}
	}
	// The cancelled flow's leased step is cancel-requested: the worker never acknowledges, and
	// the flow stays until the step's lease runs out (it is not extended once cancel-requested).
	if d := one[actors.Done](t, f.w.Call("client", actors.TenantRef("acme"), actors.CancelFlow{Tenant: "acme", FlowID: cancelling})); d.Err != nil {
		t.Fatal(d.Err)
	}
	f.live("s1", 55*time.Second)
	if _, ok := f.w.Set.Flow(cancelling); !ok || f.gone(f.flow(done).State["a"].JobID) {
		t.Fatal("55 s after: the cancelled flow is gone, or the succeeded flow's job")
	}
	f.live("s1", 2*time.Minute)
	if _, ok := f.w.Set.Flow(running); !ok {
		t.Fatal("a running flow left the views")
	}
	var expired []string
	for _, p := range f.w.Since(0) {
		switch e := p.(type) {
		case eventlog.FlowExpired:
			expired = append(expired, e.FlowID)
		case eventlog.JobCancelled:
			if len(expired) > 1 {
				t.Fatalf("the cancelled flow expired before its step's job %s ended", e.JobID)
			}
		}
	}
	if len(expired) != 2 || expired[0] != done || expired[1] != cancelling {
		t.Fatalf("flow.expired for %v, want %s then %s", expired, done, cancelling)
	}
}

// TestFlowKeyOutlivesItsFlow: a flow submitted again under its idempotency key after it expired
// is the same flow, answered with the receipt of its submit, not a failed append.
func TestFlowKeyOutlivesItsFlow(t *testing.T) {
	t.Parallel()
	f := retained(t)
	first := f.submitFlow("nightly", step("a"))
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	if d := one[actors.Done](t, f.w.Call("client", actors.TenantRef("acme"), actors.CancelFlow{Tenant: "acme", FlowID: first.FlowID})); d.Err != nil {
		t.Fatal(d.Err)
	}
	f.w.Advance(2 * time.Minute)
	if _, ok := f.w.Set.Flow(first.FlowID); ok {
		t.Fatal("the cancelled flow did not expire")
	}
	again := f.submitFlow("nightly", step("a"))
	if again.Err != nil || again.FlowID != first.FlowID || !again.IdempotentHit || again.Receipt.Seq == 0 || again.Receipt.Seq > first.Receipt.Seq {
		t.Fatalf("again after the flow expired: %+v; first %+v", again, first)
	}
}

// The retention sweep takes out the registrations that can no longer be used, once the
// retention after their end is over: a worker whose token ran out and one revoked, never a
// connected one; what went is gone for a session and a revocation too.
func TestRetentionExpiresWorkersGone(t *testing.T) {
	t.Parallel()
	f := retained(t)
	register := func(name string, ttl time.Duration) string {
		r := one[actors.Registered](t, f.w.Call("admin", actors.TenantRef("acme"), actors.RegisterWorker{Tenant: "acme", Name: name,
			Queues: []string{"q"}, Capacity: 1, TokenHash: "h-" + name, ExpiresAt: f.w.Clock.Add(ttl)}))
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		return r.WorkerID
	}
	lapsed, revoked := register("lapsed", 30*time.Second), register("revoked", time.Hour)
	if d := one[actors.Done](t, f.w.Call("c", actors.TenantRef("acme"), actors.RevokeWorker{Tenant: "acme", WorkerID: revoked, By: "admin"})); d.Err != nil {
		t.Fatal(d.Err)
	}
	f.connect("s1", 0)
	mark := len(f.w.Log)
	expired := func() []string {
		var out []string
		for _, p := range f.w.Since(mark) {
			if e, ok := p.(eventlog.WorkerExpired); ok {
				out = append(out, e.WorkerID+":"+e.Reason)
			}
		}
		return out
	}
	f.live("s1", 50*time.Second)
	if got := expired(); len(got) != 0 {
		t.Fatalf("after 50 s: %v expired, want none (retention is a minute)", got)
	}
	f.live("s1", 50*time.Second)
	if got := expired(); !slices.Equal(got, []string{revoked + ":revoked", lapsed + ":token_expired"}) {
		t.Fatalf("after 100 s: %v, want the revoked worker, then the lapsed one", got)
	}
	if _, ok := f.w.Set.Worker(f.wk); !ok {
		t.Fatal("the connected worker left the views")
	}
	o := one[actors.SessionOpened](t, f.w.Connect("s2", "sink:s2", actors.OpenSession{WorkerID: lapsed, Transport: "websocket"}))
	wantCode(t, o.Err, actors.CodeWorkerNotFound)
	wantCode(t, one[actors.Done](t, f.w.Call("c", actors.TenantRef("acme"), actors.RevokeWorker{Tenant: "acme", WorkerID: lapsed, By: "admin"})).Err,
		actors.CodeWorkerNotFound)
}
