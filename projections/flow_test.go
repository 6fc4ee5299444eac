package projections_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// A flow's steps mirror their jobs from submit to end, keep a succeeded step's output while the
// flow runs, and survive a checkpoint; the flow ends once, with the status it is given.
func TestFlowFoldsItsStepsJobs(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	steps := []eventlog.FlowStep{
		{Name: "a", Queue: "q", Type: "t", MaxAttempts: 1, LeaseTTLMillis: 30000},
		{Name: "b", Queue: "q", Type: "t", MaxAttempts: 1, LeaseTTLMillis: 30000, Needs: []string{"a"}},
		{Name: "c", Queue: "q", Type: "t", MaxAttempts: 1, LeaseTTLMillis: 30000, Needs: []string{"a"}},
	}
	log := []eventlog.Payload{
		eventlog.FlowSubmitted{FlowID: "F1", Tenant: "acme", Name: "diamond", YAMLSHA256: "ab", YAMLBytes: 120, Steps: steps},
		eventlog.JobSubmitted{JobID: "J1", Tenant: "acme", Queue: "q", Type: "t", MaxAttempts: 1, LeaseTTLMillis: 30000, FlowID: "F1", FlowStep: "a"},
		eventlog.JobLeased{JobID: "J1", LeaseID: "L1", WorkerID: "W", Nonce: "n", Attempt: 1, ExpiresAt: at.Add(time.Minute)},
		eventlog.JobSucceeded{JobID: "J1", LeaseID: "L1", Attempt: 1, Output: json.RawMessage(`{"rows":3}`)},
		eventlog.JobSubmitted{JobID: "J2", Tenant: "acme", Queue: "q", Type: "t", MaxAttempts: 1, LeaseTTLMillis: 30000, FlowID: "F1", FlowStep: "b"},
	}
	s := projections.New()
	apply := func(ps ...eventlog.Payload) {
		for _, p := range ps {
			if err := s.Apply(s.Seq()+1, at, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	apply(log...)
	f, ok := s.Flow("F1")
	if !ok || f.Status != projections.FlowRunning || f.YAMLBytes != 120 {
		t.Fatalf("flow %+v %v", f, ok)
	}
	want := map[string]string{"a": "succeeded", "b": "queued", "c": projections.StepWaiting}
	for name, st := range want {
		if f.State[name].Status != st {
			t.Fatalf("step %s is %q, want %q (%+v)", name, f.State[name].Status, st, f.State)
		}
	}
	if string(f.State["a"].Output) != `{"rows":3}` || f.State["b"].JobID != "J2" {
		t.Fatalf("state %+v", f.State)
	}
	if got := s.RunningFlows(); len(got) != 1 || got[0] != "F1" {
		t.Fatalf("running flows %v", got)
	}
	// A checkpoint holds the flow as it is.
	b, err := s.MarshalCheckpoint()
	if err != nil {
		t.Fatal(err)
	}
	back, err := projections.UnmarshalCheckpoint(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b2, _ := back.MarshalCheckpoint(); !bytes.Equal(b, b2) {
		t.Fatalf("checkpoint round trip differs:\n%s\n%s", b, b2)
	}
	apply(eventlog.FlowStepSkipped{FlowID: "F1", Step: "c", Reason: eventlog.FlowFailed},
		eventlog.FlowEnded{FlowID: "F1", Status: eventlog.FlowFailed, Step: "b"})
	f, _ = s.Flow("F1")
	if f.Status != projections.FlowFailed || f.FailedStep != "b" || f.State["c"].Status != projections.StepSkipped || f.State["a"].Output != nil {
		t.Fatalf("ended flow %+v", f)
	}
	if len(s.RunningFlows()) != 0 {
		t.Fatal("an ended flow is still running")
	}
	if page, _ := s.Flows("acme", "", 10); len(page) != 1 {
		t.Fatalf("acme's flows: %d", len(page))
	}
	if page, _ := s.Flows("globex", "", 10); len(page) != 0 {
		t.Fatalf("globex sees acme's flow")
	}
}
