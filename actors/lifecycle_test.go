package actors_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/actorstest"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

var t0 = time.Date(2026, 11, 21, 14, 5, 0, 0, time.UTC)

// fixture is a world with tenant "acme" and one registered worker, "w1", serving queue "q".
type fixture struct {
	t  *testing.T
	w  *actorstest.World
	wk string // worker id
}

func setup(t *testing.T, workerKey ed25519.PublicKey) *fixture {
	t.Helper()
	f := &fixture{t: t, w: actorstest.New(1, t0)}
	reg := actors.RegisterWorker{Tenant: "acme", Name: "w1", Queues: []string{"q"}, Capacity: 4, TokenHash: "h1", ExpiresAt: t0.Add(7 * 24 * time.Hour)}
	if workerKey != nil {
		reg.PublicKey = base64.StdEncoding.EncodeToString(workerKey)
	}
	r := one[actors.Registered](t, f.w.Call("admin", actors.TenantRef("acme"), reg))
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	f.wk = r.WorkerID
	return f
}

// one returns the only reply, of type T.
func one[T any](t *testing.T, replies []any) T {
	t.Helper()
	if len(replies) != 1 {
		t.Fatalf("got %d replies %+v, want 1", len(replies), replies)
	}
	r, ok := replies[0].(T)
	if !ok {
		t.Fatalf("got %T %+v, want %T", replies[0], replies[0], *new(T))
	}
	return r
}

func (f *fixture) submit(specs ...actors.JobSpec) actors.Submitted {
	f.t.Helper()
	return one[actors.Submitted](f.t, f.w.Call("client", actors.TenantRef("acme"), actors.Submit{Tenant: "acme", Jobs: specs}))
}

func (f *fixture) mustSubmit(specs ...actors.JobSpec) []string {
	f.t.Helper()
	s := f.submit(specs...)
	if s.Err != nil {
		f.t.Fatal(s.Err)
	}
	var ids []string
	for _, j := range s.Jobs {
		ids = append(ids, j.ID)
	}
	return ids
}

// connect opens session s for the worker with the given credit and returns its assignments.
func (f *fixture) connect(s string, credit int) []actors.Assignment {
	f.t.Helper()
	o := one[actors.SessionOpened](f.t, f.w.Connect(s, "sink:"+s, actors.OpenSession{WorkerID: f.wk, Transport: "websocket"}))
	if o.Err != nil {
		f.t.Fatal(o.Err)
	}
	return f.credit(s, credit)
}

func (f *fixture) credit(s string, n int) []actors.Assignment {
	f.t.Helper()
	f.w.Send(actors.DispatcherRef(), actors.SessionCredit{SessionID: s, N: n}, actorstest.External("sink:"+s))
	f.w.Run()
	return f.assignments(s)
}

func (f *fixture) assignments(s string) []actors.Assignment {
	var out []actors.Assignment
	for _, m := range f.w.Inbox("sink:" + s) {
		if a, ok := m.(actors.Assignment); ok {
			out = append(out, a)
		}
	}
	return out
}

// live advances the clock by d while session s heartbeats every HeartbeatInterval.
func (f *fixture) live(s string, d time.Duration) {
	f.t.Helper()
	for d > 0 {
		step := min(d, actors.HeartbeatInterval)
		f.w.Advance(step)
		f.w.Call("hb:"+s, actors.SessionRef(s), actors.Heartbeat{})
		d -= step
	}
}

func (f *fixture) do(msg any) actors.Done {
	f.t.Helper()
	return one[actors.Done](f.t, f.w.Call("worker", actors.DispatcherRef(), msg))
}

func (f *fixture) complete(a actors.Assignment, output string) actors.Done {
	f.t.Helper()
	return f.do(actors.Complete{WorkerID: f.wk, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: json.RawMessage(output)})
}

func (f *fixture) job(id string) *projections.Job {
	f.t.Helper()
	j, ok := f.w.Set.Job(id)
	if !ok {
		f.t.Fatalf("no job %s", id)
	}
	return j
}

func wantCode(t *testing.T, err *actors.Rejection, code actors.Code) {
	t.Helper()
	if err == nil || err.Code != code {
		t.Fatalf("got %v, want %s", err, code)
	}
}

func wantTypes(t *testing.T, got []eventlog.Payload, want ...string) {
	t.Helper()
	if g := actorstest.Types(got); !slices.Equal(g, want) {
		t.Fatalf("events %v, want %v", g, want)
	}
}

// TestOneJobCosts keeps docs/flow.md's count true: a job submitted, leased to a connected
// worker with credit and completed costs nine mailbox deliveries (the job's cell stops itself,
// with no delivery) and three commits.
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
	if m, c := m1+m2, c1+c2; m != 9 || c != 3 {
		t.Fatalf("%d messages (%d to the lease, %d after), %d commits; docs/flow.md says 9 and 3", m, m1, m2, c)
	}
}

// TestGroupOfJobsCosts: under load the notices of one group commit share a delivery per actor.
// Four jobs submitted by four callers and made durable by one fsync, leased to one session in
// one commit and completed together, cost 27 mailbox deliveries, 6.75 a job (40 when every
// notice was a delivery of its own): the tenant's four Persisted are one delivery, so are its
// four Enqueue to the dispatcher and the session's four assignments. docs/flow.md says so.
func TestGroupOfJobsCosts(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	one[actors.SessionOpened](t, f.w.Connect("s1", "sink:s1", actors.OpenSession{WorkerID: f.wk, Transport: actors.TransportWebSocket}))
	f.w.Send(actors.DispatcherRef(), actors.SessionCredit{SessionID: "s1", N: 4}, actorstest.External("sink:s1"))
	f.w.Run()
	run := func() (messages int) {
		for {
			messages += f.w.Step()
			n := len(f.w.Log)
			f.w.Sync()
			if len(f.w.Log) == n {
				return messages
			}
		}
	}
	const jobs = 4
	for i := range jobs {
		f.w.Send(actors.TenantRef("acme"), actors.Submit{Tenant: "acme", Jobs: []actors.JobSpec{{Queue: "q", Type: "t"}}}, actorstest.External(fmt.Sprint("client", i)))
	}
	m1 := run()
	a := f.assignments("s1")
	if len(a) != jobs {
		t.Fatalf("%d assignments, want %d", len(a), jobs)
	}
	for _, a := range a {
		f.w.Send(actors.JobRef(a.JobID), actors.Complete{WorkerID: f.wk, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: json.RawMessage(`1`)}, actorstest.External("worker"))
	}
	m2 := run()
	if done := f.w.Inbox("worker"); len(done) != jobs {
		t.Fatalf("%d answers to the worker, want %d", len(done), jobs)
	}
	if m := m1 + m2; m != 27 {
		t.Fatalf("%d messages for %d jobs (%d to the leases, %d after); docs/flow.md says 27", m, jobs, m1, m2)
	}
}
