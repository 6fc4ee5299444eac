package actors_test

import (
	"testing"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/actorstest"
	"github.com/tetherhq/tether/projections"
)

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
