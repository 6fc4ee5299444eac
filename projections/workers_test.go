package projections_test

import (
	"slices"
	"testing"
	"time"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

func expiredWorkers(es []eventlog.WorkerExpired) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.WorkerID+":"+e.Reason)
	}
	return out
}

// A worker's registration leaves the views once it cannot be used and the retention after that
// and after it was last seen is over, unless it holds a session or a lease: a token that ran
// out, a revocation, a renewal whose grace outlives the token it replaced, a worker that stays
// connected past its token and one that holds a lease. What leaves, leaves its token too, and a
// restore from a checkpoint orders the rest the same.
func TestWorkersLeaveTheViews(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	f := folder{t: t, set: projections.New()}
	r := projections.Retention{Done: time.Hour}
	reg := func(id string, ttl time.Duration) {
		f.must(t0, eventlog.WorkerRegistered{WorkerID: id, Tenant: "acme", Queues: []string{"q"}, Capacity: 1, TokenHash: "h" + id, ExpiresAt: t0.Add(ttl)})
	}
	reg("expired", time.Hour)
	reg("revoked", 24*time.Hour)
	reg("renewed", time.Hour)
	reg("connected", time.Hour)
	reg("leasing", time.Hour)
	reg("fresh", 48*time.Hour)
	f.must(t0.Add(10*time.Minute), eventlog.WorkerRevoked{WorkerID: "revoked", By: "admin"})
	f.must(t0.Add(50*time.Minute), eventlog.WorkerTokenRotated{WorkerID: "renewed", TokenHash: "h2", ExpiresAt: t0.Add(2 * time.Hour),
		PreviousTokenHash: "hrenewed", PreviousValidUntil: t0.Add(51 * time.Minute)})
	f.must(t0.Add(20*time.Minute), eventlog.WorkerSessionStarted{WorkerID: "connected", SessionID: "s1", Transport: "websocket", Capacity: 1})
	f.must(t0.Add(20*time.Minute), eventlog.JobSubmitted{JobID: "j", Tenant: "acme", Queue: "q", Type: "t", MaxAttempts: 1},
		eventlog.JobLeased{JobID: "j", LeaseID: "L", WorkerID: "leasing", Attempt: 1, ExpiresAt: t0.Add(5 * time.Hour)})

	steps := []struct {
		name string
		now  time.Time
		want []string
	}{
		{"the revoked one, an hour after it was last seen (registered)", t0.Add(time.Hour), []string{"revoked:revoked"}},
		{"then the token that ran out, an hour after", t0.Add(2 * time.Hour), []string{"revoked:revoked", "expired:token_expired"}},
		{"then the renewed token's", t0.Add(3 * time.Hour), []string{"revoked:revoked", "expired:token_expired", "renewed:token_expired"}},
	}
	for _, st := range steps {
		if got := expiredWorkers(f.set.ExpirableWorkers(r, st.now, 10)); !slices.Equal(got, st.want) {
			t.Errorf("%s: ExpirableWorkers = %v, want %v", st.name, got, st.want)
		}
	}
	if got := f.set.ExpirableWorkers(r, t0.Add(3*time.Hour), 1); len(got) != 1 {
		t.Errorf("limit 1: %v", expiredWorkers(got))
	}
	if got := f.set.ExpirableWorkers(projections.Retention{}, t0.Add(1000*time.Hour), 10); len(got) != 0 {
		t.Errorf("a retention that keeps everything let %v go", expiredWorkers(got))
	}
	for _, e := range f.set.ExpirableWorkers(r, t0.Add(3*time.Hour), 10) {
		f.must(t0.Add(3*time.Hour), e)
	}
	for _, id := range []string{"expired", "revoked", "renewed"} {
		if _, ok := f.set.Worker(id); ok {
			t.Errorf("%s is still in the views", id)
		}
	}
	for _, h := range []string{"hexpired", "hrevoked", "h2", "hrenewed"} {
		if w, ok := f.set.WorkerByTokenHash(h); ok {
			t.Errorf("token %s still finds %s", h, w.ID)
		}
	}
	if err := f.apply(t0.Add(3*time.Hour), eventlog.WorkerExpired{WorkerID: "expired", Reason: eventlog.WorkerGoneTokenExpired}); err == nil {
		t.Error("a worker expired twice")
	}
	if err := f.apply(t0.Add(3*time.Hour), eventlog.WorkerExpired{WorkerID: "connected", Reason: eventlog.WorkerGoneTokenExpired}); err == nil {
		t.Error("a worker with a session open expired")
	}

	// The connected one goes an hour after its session ends; the one with a lease once the
	// lease has ended.
	f.must(t0.Add(4*time.Hour), eventlog.WorkerSessionEnded{WorkerID: "connected", SessionID: "s1", Reason: eventlog.EndedClosed})
	f = folder{t: t, set: mustRestore(t, f.set)}
	if got := expiredWorkers(f.set.ExpirableWorkers(r, t0.Add(4*time.Hour+30*time.Minute), 10)); len(got) != 0 {
		t.Errorf("at 4h30, after a restore: %v, want none (connected was seen at 4h, leasing holds j)", got)
	}
	f.must(t0.Add(5*time.Hour), eventlog.JobSucceeded{JobID: "j", LeaseID: "L", Attempt: 1})
	if got, want := expiredWorkers(f.set.ExpirableWorkers(r, t0.Add(5*time.Hour), 10)), []string{"leasing:token_expired", "connected:token_expired"}; !slices.Equal(got, want) {
		t.Errorf("at 5h once j is done: %v, want %v", got, want)
	}
	if w, ok := f.set.Worker("fresh"); !ok || w.ID != "fresh" {
		t.Error("a worker whose token works was taken out")
	}
}
