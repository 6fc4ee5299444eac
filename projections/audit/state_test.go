package audit_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/actorstest"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/audit"
)

var t0 = time.Date(2026, 11, 21, 14, 5, 0, 0, time.UTC)

// scriptedWorkload runs the production behaviours in the deterministic world through most of
// the lifecycle: quotas and reservations, API keys, two workers, success, progress, retry after
// a failure, a lease that expires, a dead letter and its re-drive, cancels of a queued and of a
// leased job, a delayed job, and a revoked worker. It returns the world.
func scriptedWorkload(t *testing.T, applied func(*projections.Set, actorstest.Record)) *actorstest.World {
	t.Helper()
	w := actorstest.New(7, t0)
	w.Applied = func(r actorstest.Record) { applied(w.Set, r) }
	call := func(to actors.Ref, msg any) any {
		t.Helper()
		replies := w.Call("client", to, msg)
		if len(replies) != 1 {
			t.Fatalf("%T: %d replies", msg, len(replies))
		}
		return replies[0]
	}
	tenant := actors.TenantRef("acme")
	call(tenant, actors.SetQuota{Tenant: "acme", MaxActive: new(50), MaxRunning: new(5)})
	call(tenant, actors.CreateAPIKey{Tenant: "acme", KeyHash: "kh1"})
	res := call(tenant, actors.Reserve{Tenant: "acme", TTL: time.Minute}).(actors.Reserved)
	res2 := call(tenant, actors.Reserve{Tenant: "acme", TTL: time.Minute}).(actors.Reserved)
	call(tenant, actors.Release{Tenant: "acme", ID: res2.ID})
	call(tenant, actors.Reserve{Tenant: "acme", TTL: time.Minute}) // left to expire
	register := func(name string) string {
		r := call(tenant, actors.RegisterWorker{Tenant: "acme", Name: name, Queues: []string{"q"}, Capacity: 2, TokenHash: "h-" + name, ExpiresAt: t0.Add(time.Hour)}).(actors.Registered)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		return r.WorkerID
	}
	w1, w2 := register("w1"), register("w2")
	submit := func(spec actors.JobSpec) string {
		s := call(tenant, actors.Submit{Tenant: "acme", Jobs: []actors.JobSpec{spec}, APIKeyID: "k1"}).(actors.Submitted)
		if s.Err != nil {
			t.Fatal(s.Err)
		}
		return s.Jobs[0].ID
	}
	submit(actors.JobSpec{Queue: "q", Type: "a", ReservationID: res.ID, IdempotencyKey: "idem-1"})
	submit(actors.JobSpec{Queue: "q", Type: "b", Priority: 5, MaxAttempts: 1, LeaseTTL: 30 * time.Second})
	submit(actors.JobSpec{Queue: "q", Type: "c", MaxAttempts: 2})
	queued := submit(actors.JobSpec{Queue: "other", Type: "d"})
	submit(actors.JobSpec{Queue: "q", Type: "e", Delay: time.Hour})
	batch := call(tenant, actors.Submit{Tenant: "acme", Jobs: []actors.JobSpec{{Queue: "later", Type: "f"}, {Queue: "later", Type: "g"}}}).(actors.Submitted)
	if batch.Err != nil {
		t.Fatal(batch.Err)
	}

	var assigned []actors.Assignment
	sink := func(s string) {
		for _, m := range w.Inbox("sink:" + s) {
			if a, ok := m.(actors.Assignment); ok {
				assigned = append(assigned, a)
			}
		}
	}
	w.Connect("s1", "sink:s1", actors.OpenSession{WorkerID: w1, Transport: "websocket"})
	w.Send(actors.DispatcherRef(), actors.SessionCredit{SessionID: "s1", N: 2}, actorstest.External("sink:s1"))
	w.Run()
	sink("s1")
	w.Connect("s2", "sink:s2", actors.OpenSession{WorkerID: w2, Transport: "longpoll"})
	w.Call("poll:s2", actors.SessionRef("s2"), actors.Offer{N: 1}) // a long poll waits...
	w.Call("poll:s2", actors.SessionRef("s2"), actors.Withdraw{})  // ...and ends with its job
	sink("s2")
	if len(assigned) != 3 {
		t.Fatalf("%d assignments, want 3", len(assigned))
	}
	byType := map[string]actors.Assignment{}
	for _, a := range assigned {
		byType[a.JobType] = a
	}
	a, b, c := byType["a"], byType["b"], byType["c"]
	worker := map[string]string{} // job id → the worker holding its lease
	for _, x := range assigned {
		j, _ := w.Set.Job(x.JobID)
		worker[x.JobID] = j.Lease.WorkerID
	}
	dispatch := func(msg any) {
		t.Helper()
		call(actors.DispatcherRef(), msg)
	}
	dispatch(actors.Progress{WorkerID: worker[a.JobID], JobID: a.JobID, LeaseID: a.LeaseID, Kind: "progress", Data: json.RawMessage(`{"pct":50}`)})
	dispatch(actors.Complete{WorkerID: worker[a.JobID], JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: json.RawMessage(`{"ok":1}`)})
	dispatch(actors.Fail{WorkerID: worker[c.JobID], JobID: c.JobID, LeaseID: c.LeaseID, Code: "flaky", Retryable: true})
	dispatch(actors.Cancel{Tenant: "acme", JobID: queued, APIKeyID: "k1"})
	// b's lease runs out (nobody heartbeats): one attempt only, so it is dead-lettered, then
	// re-driven.
	w.Advance(2 * time.Minute)
	call(tenant, actors.Redrive{Tenant: "acme", JobID: b.JobID, APIKeyID: "k1"})
	w.Advance(time.Minute)
	call(tenant, actors.RevokeWorker{Tenant: "acme", WorkerID: w2, By: "k1"})
	w.Advance(2 * time.Hour) // the delayed job and the retry come due; reservations expire
	return w
}

// The projections `state --at` rebuilds from the log equal the live ones at every seq, with
// the finished jobs spilled to the scratch table after every 3 changed jobs.
func TestStateAtEverySeqEqualsTheLiveProjections(t *testing.T) {
	defer func(n int) { *audit.SpillAt = n }(*audit.SpillAt)
	*audit.SpillAt = 3
	live := map[uint64][]byte{}
	world := scriptedWorkload(t, func(set *projections.Set, r actorstest.Record) {
		b, err := set.MarshalFold()
		if err != nil {
			t.Fatal(err)
		}
		live[r.Seq] = b
	})
	// Write the same records to a real log, stamped with the times the world gave them.
	var now time.Time
	l, err := eventlog.Open("log", eventlog.Options{FS: vfs.NewMem(), Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	types := map[string]bool{}
	for _, r := range world.Log {
		e, err := eventlog.NewEvent(r.Payload.Stream(), r.Payload)
		if err != nil {
			t.Fatal(err)
		}
		now = r.Time
		if _, err := l.Append(ctx(t), e); err != nil {
			t.Fatal(err)
		}
		types[e.Type] = true
	}
	for _, want := range []string{"job.succeeded", "job.retry_scheduled", "job.lease_expired", "job.dead_lettered", "job.redriven",
		"job.cancelled", "job.progress", "job.scheduled", "worker.revoked", "tenant.reservation_expired", "tenant.reservation_released"} {
		if !types[want] {
			t.Errorf("the workload has no %s", want)
		}
	}
	n := uint64(len(world.Log))
	if uint64(len(live)) != n || n < 30 {
		t.Fatalf("%d live captures for %d records", len(live), n)
	}
	everSpilled := false
	for seq := uint64(1); seq <= n; seq++ {
		set, head, err := audit.StateAt(ctx(t), l, seq, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := set.MarshalFold()
		spilled := set.InMemory() < set.RetainedCount()+set.LiveCount()
		set.Close()
		if head.Seq != seq || !bytes.Equal(got, live[seq]) {
			t.Fatalf("state at seq %d differs from the live projections then:\n got %s\nwant %s", seq, got, live[seq])
		}
		everSpilled = everSpilled || spilled
	}
	if !everSpilled {
		t.Fatal("no state held a finished job in the scratch table")
	}
	// --at TIME picks the last record stamped at or before it.
	mid := world.Log[n/2]
	seq, err := audit.SeqAt(l, mid.Time)
	if err != nil {
		t.Fatal(err)
	}
	if seq < mid.Seq || world.Log[seq-1].Time.After(mid.Time) || (seq < n && !world.Log[seq].Time.After(mid.Time)) {
		t.Fatalf("SeqAt(%s) = %d", mid.Time, seq)
	}
	if seq, _ := audit.SeqAt(l, t0.Add(-time.Second)); seq != 0 {
		t.Fatalf("before the first record: %d", seq)
	}
	st := audit.Summarize(projections.New(), eventlog.Head{Hash: eventlog.Genesis})
	if st.Seq != 0 || len(st.Leases) != 0 {
		t.Fatalf("empty state %+v", st)
	}
}
