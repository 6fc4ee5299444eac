package actors_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/actorstest"
	"github.com/tetherhq/tether/eventlog"
)

// The behaviours are pure: they import neither protoactor nor transport (docs/design.md §1), and
// read neither the wall clock nor global randomness (docs/design.md §2).
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
	f.w.Send(actors.DispatcherRef(), &actors.Enqueue{Jobs: []actors.Waiting{stale}, Seq: 1 << 40}, actorstest.External("stale"))
	if more := f.credit("s1", 1); len(more) != 0 {
		t.Fatalf("the finished job was assigned again: %+v", more)
	}
	f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t"})
	f.w.Run()
	if more := f.assignments("s1"); len(more) != 1 {
		t.Fatalf("%d assignments for the credit the refused lease gave back", len(more))
	}
}

// An idle fleet that churns leaves nothing in the dispatcher: a session that gave credit and
// ended while no job was ready leaves the turn order at once (it used to wait there for a turn
// that only a ready job brings, one slot per worker ever connected), which the dispatcher's
// invariants check after each of these messages.
func TestEndedSessionsLeaveTheTurnOrder(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	for i := range 3 {
		s := fmt.Sprintf("s%d", i)
		if got := f.connect(s, 2); len(got) != 0 {
			t.Fatalf("%s: %d assignments with no job", s, len(got))
		}
		f.w.Send(actors.SessionRef(s), actors.CloseSession{Reason: eventlog.EndedClosed}, actorstest.External("sink:"+s))
		f.w.Run()
	}
	f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t"})
	if got := f.connect("s3", 1); len(got) != 1 {
		t.Fatalf("the open session got %d assignments, want the job", len(got))
	}
}
