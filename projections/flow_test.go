package projections_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// A flow's steps mirror their jobs from submit to end, keep a succeeded step's output while the
// flow runs, and survive a checkpoint; the flow ends with the status it is given; an event for a
// flow or step that was never submitted is refused.
func TestFlowFoldsItsStepsJobs(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	job := eventlog.JobTemplate{Queue: "q", Type: "t", MaxAttempts: 1, LeaseTTLMillis: 30000}
	steps := []eventlog.FlowStep{
		{Name: "a", JobTemplate: job},
		{Name: "b", JobTemplate: job, Needs: []string{"a"}},
		{Name: "c", JobTemplate: job, Needs: []string{"a"}},
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
	// Events for a flow or step never submitted are faults in the log.
	for _, p := range []eventlog.Payload{
		eventlog.FlowEnded{FlowID: "F2", Status: eventlog.FlowSucceeded},
		eventlog.FlowStepSkipped{FlowID: "F1", Step: "z", Reason: eventlog.FlowFailed},
		eventlog.JobSubmitted{JobID: "J9", Tenant: "acme", Queue: "q", Type: "t", MaxAttempts: 1, LeaseTTLMillis: 30000, FlowID: "F2", FlowStep: "a"},
	} {
		if err := s.Apply(s.Seq()+1, at, p); err == nil {
			t.Fatalf("%s %+v applied", p.EventType(), p)
		}
	}
}

// TestEndedFlowsExpireInTheOrderTheyEnded: ExpirableFlows gives the ended flows whose
// retention is over, soonest ended first, only once their steps' jobs have finished; and a Set
// restored from a checkpoint knows them as well as the one that folded the log.
func TestEndedFlowsExpireInTheOrderTheyEnded(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	s := projections.New()
	seq := uint64(0)
	apply := func(at time.Time, p eventlog.Payload) {
		seq++
		if err := s.Apply(seq, at, p); err != nil {
			t.Fatal(err)
		}
	}
	step := []eventlog.FlowStep{{Name: "a", JobTemplate: eventlog.JobTemplate{Queue: "q", Type: "t", MaxAttempts: 1, LeaseTTLMillis: 30000}}}
	for i, id := range []string{"F3", "F1", "F2", "F4"} { // F4 ends last, with its job still queued
		apply(at, eventlog.FlowSubmitted{FlowID: id, Tenant: "acme", Name: "f", Steps: step})
		if id == "F4" {
			apply(at, eventlog.JobSubmitted{JobID: "J4", Tenant: "acme", Queue: "q", Type: "t", MaxAttempts: 1, LeaseTTLMillis: 30000, FlowID: id, FlowStep: "a"})
		} else {
			apply(at, eventlog.FlowStepSkipped{FlowID: id, Step: "a", Reason: eventlog.SkippedFlowCancelled})
		}
		apply(at.Add(time.Duration(i)*time.Minute), eventlog.FlowEnded{FlowID: id, Status: eventlog.FlowCancelled})
	}
	r := projections.Retention{Done: time.Hour}
	data, err := s.MarshalCheckpoint()
	if err != nil {
		t.Fatal(err)
	}
	restored, err := projections.UnmarshalCheckpoint(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, set := range map[string]*projections.Set{"folded": s, "restored": restored} {
		if got := set.ExpirableFlows(r, at.Add(time.Hour+90*time.Second), 10); !slices.Equal(got, []string{"F3", "F1"}) {
			t.Errorf("%s: due %v, want F3 then F1", name, got)
		}
		if got := set.ExpirableFlows(r, at.Add(2*time.Hour), 2); !slices.Equal(got, []string{"F3", "F1"}) {
			t.Errorf("%s: due %v with a limit of 2", name, got)
		}
		if got := set.ExpirableFlows(r, at.Add(2*time.Hour), 10); !slices.Equal(got, []string{"F3", "F1", "F2"}) {
			t.Errorf("%s: due %v, want F4 kept while its job runs", name, got)
		}
	}
	apply(at.Add(2*time.Hour), eventlog.FlowExpired{FlowID: "F3", Reason: eventlog.ExpiredRetention})
	if got := s.ExpirableFlows(r, at.Add(2*time.Hour), 10); !slices.Equal(got, []string{"F1", "F2"}) {
		t.Errorf("after F3 expired: due %v", got)
	}
}
