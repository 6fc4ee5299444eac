package actors_test

import (
	"encoding/json"
	"testing"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/actorstest"
)

// TestOneJobCosts keeps docs/flow.md's count true: a job submitted, leased to a connected
// worker with credit and completed costs eleven mailbox deliveries (ten messages and the
// stop of the job's cell) and three commits.
func TestOneJobCosts(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	one[actors.SessionOpened](t, f.w.Connect("s1", "sink:s1", actors.OpenSession{WorkerID: f.wk, Transport: actors.TransportWebSocket}))
	f.w.Send(actors.DispatcherRef(), actors.SessionCredit{SessionID: "s1", N: 1}, actorstest.External("sink:s1"))
	f.w.Run()
	// run delivers and syncs until idle, counting deliveries and syncs that committed anything.
	run := func() (messages, commits int) {
		for {
			messages += f.w.Step()
			n := len(f.w.Log)
			f.w.Sync()
			if len(f.w.Log) == n {
				return messages, commits
			}
			commits++
		}
	}
	mark := len(f.w.Log)
	f.w.Send(actors.TenantRef("acme"), actors.Submit{Tenant: "acme", Jobs: []actors.JobSpec{{Queue: "q", Type: "t"}}}, actorstest.External("client"))
	m1, c1 := run()
	a := f.assignments("s1")
	if len(a) != 1 {
		t.Fatalf("%d assignments", len(a))
	}
	// The facade sends a worker's operation straight to the job's cell (Broker.WorkerOp).
	f.w.Send(actors.JobRef(a[0].JobID), actors.Complete{WorkerID: f.wk, JobID: a[0].JobID, LeaseID: a[0].LeaseID, Nonce: a[0].Nonce, Output: json.RawMessage(`1`)}, actorstest.External("worker"))
	m2, c2 := run()
	if d := one[actors.Done](t, f.w.Inbox("worker")); d.Err != nil {
		t.Fatal(d.Err)
	}
	wantTypes(t, f.w.Since(mark), "job.submitted", "job.leased", "job.succeeded")
	if m, c := m1+m2, c1+c2; m != 11 || c != 3 {
		t.Fatalf("%d messages (%d to the lease, %d after), %d commits; docs/flow.md says 11 and 3", m, m1, m2, c)
	}
}
