package actors_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
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

func TestJobRunsToSuccess(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ids := f.mustSubmit(actors.JobSpec{Queue: "q", Type: "echo", Payload: json.RawMessage(`{"x":1}`)})
	as := f.connect("s1", 1)
	if len(as) != 1 || as[0].JobID != ids[0] || as[0].Attempt != 1 || string(as[0].Payload) != `{"x":1}` {
		t.Fatalf("assignments %+v", as)
	}
	mark := len(f.w.Log)
	if d := f.complete(as[0], `{"ok": true}`); d.Err != nil || d.Receipt.Seq == 0 {
		t.Fatalf("complete: %+v", d)
	}
	wantTypes(t, f.w.Since(mark), "job.succeeded")
	j := f.job(ids[0])
	if j.Status != projections.StatusSucceeded || j.Lease != nil || string(j.Output) != `{"ok": true}` {
		t.Fatalf("job %+v", j)
	}
	// The same completion again is accepted again, with the original event's seq; another
	// output is a conflict; and a completion under another lease id is a mismatch.
	if d := f.complete(as[0], `{"ok":true}`); d.Err != nil || d.Receipt.Seq != j.SucceededSeq {
		t.Fatalf("repeat: %+v", d)
	}
	wantCode(t, f.complete(as[0], `{"ok":false}`).Err, actors.CodeCompletionConflict)
	// Only an exact repeat: another nonce or a signature the accepted one did not carry is not.
	renonced := as[0]
	renonced.Nonce = "another"
	wantCode(t, f.complete(renonced, `{"ok": true}`).Err, actors.CodeCompletionConflict)
	wantCode(t, f.do(actors.Complete{WorkerID: f.wk, JobID: as[0].JobID, LeaseID: as[0].LeaseID, Nonce: as[0].Nonce,
		Output: json.RawMessage(`{"ok": true}`), Signature: "c2lnbmVk"}).Err, actors.CodeCompletionConflict)
	other := as[0]
	other.LeaseID = "01STALE"
	wantCode(t, f.complete(other, `{"ok":true}`).Err, actors.CodeLeaseMismatch)
	if n := len(f.w.Log); n != mark+1 {
		t.Fatalf("%d events after the repeats, want none", n-mark-1)
	}
}
