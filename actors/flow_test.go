package actors_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

func step(name string, needs ...string) actors.FlowStepSpec {
	return actors.FlowStepSpec{Name: name, Job: actors.JobSpec{Queue: "q", Type: name}, Needs: needs}
}

func (f *fixture) submitFlow(key string, steps ...actors.FlowStepSpec) actors.FlowAccepted {
	f.t.Helper()
	return one[actors.FlowAccepted](f.t, f.w.Call("client", actors.TenantRef("acme"),
		actors.SubmitFlow{Tenant: "acme", Name: "demo", Steps: steps, IdempotencyKey: key}))
}

func (f *fixture) mustSubmitFlow(steps ...actors.FlowStepSpec) string {
	f.t.Helper()
	a := f.submitFlow("", steps...)
	if a.Err != nil {
		f.t.Fatal(a.Err)
	}
	return a.FlowID
}

func (f *fixture) flow(id string) *projections.Flow {
	f.t.Helper()
	fl, ok := f.w.Set.Flow(id)
	if !ok {
		f.t.Fatalf("no flow %s", id)
	}
	return fl
}

// byType indexes assignments by job type (a step's type is its name here).
func byType(as []actors.Assignment) map[string]actors.Assignment {
	m := map[string]actors.Assignment{}
	for _, a := range as {
		m[a.JobType] = a
	}
	return m
}

func TestFlowValidation(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	withPayload := step("b", "a")
	withPayload.Job.Payload = json.RawMessage(`[1]`)
	takenKey := step("b", "a")
	takenKey.Job.Payload = json.RawMessage(`{"needs": 1}`)
	badJob := step("a")
	badJob.Job.Queue = "no spaces"
	delayed := step("a")
	delayed.Job.Delay = 1
	var many []actors.FlowStepSpec
	for i := range actors.FlowStepsMax + 1 {
		many = append(many, step("s"+strings.Repeat("x", i%10)+string(rune('a'+i%26))+string(rune('a'+i/26))))
	}
	for _, c := range []struct {
		name  string
		steps []actors.FlowStepSpec
		code  actors.Code
		want  string
	}{
		{"empty", nil, actors.CodeInvalidFlow, "1..100 steps"},
		{"too many", many, actors.CodeInvalidFlow, "not 101"},
		{"cycle", []actors.FlowStepSpec{step("a", "c"), step("b", "a"), step("c", "b"), step("d")}, actors.CodeInvalidFlow, "a → c → b → a"},
		{"self", []actors.FlowStepSpec{step("a", "a")}, actors.CodeInvalidFlow, `"a" needs itself`},
		{"unknown need", []actors.FlowStepSpec{step("a", "zz")}, actors.CodeInvalidFlow, `needs "zz", which is not a step`},
		{"need twice", []actors.FlowStepSpec{step("a"), step("b", "a", "a")}, actors.CodeInvalidFlow, `needs "a" twice`},
		{"duplicate", []actors.FlowStepSpec{step("a"), step("a")}, actors.CodeInvalidFlow, `"a" is defined twice`},
		{"bad name", []actors.FlowStepSpec{step("a b")}, actors.CodeInvalidFlow, "step name"},
		{"payload not an object", []actors.FlowStepSpec{step("a"), withPayload}, actors.CodeInvalidFlow, "must be an object"},
		{"payload takes needs", []actors.FlowStepSpec{step("a"), takenKey}, actors.CodeInvalidFlow, "must be an object"},
		{"bad job", []actors.FlowStepSpec{badJob}, actors.CodeInvalidArgument, "step a: queue"},
		{"delay", []actors.FlowStepSpec{delayed}, actors.CodeInvalidFlow, "no delay"},
	} {
		a := f.submitFlow("", c.steps...)
		if a.Err == nil || a.Err.Code != c.code || !strings.Contains(a.Err.Message, c.want) {
			t.Errorf("%s: got %v, want %s containing %q", c.name, a.Err, c.code, c.want)
		}
	}
	if n := len(f.w.Set.LiveFlows("acme")); n != 0 {
		t.Fatalf("%d flows after refused submits", n)
	}
}

// A diamond: b and c start when a has succeeded, d when both have; each gets the outputs of
// the steps it needs. d does not start while c is only leased.
func TestDiamondFlow(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	id := f.mustSubmitFlow(step("d", "b", "c"), step("b", "a"), step("c", "a"), step("a"))
	as := f.connect("s1", 4)
	if len(as) != 1 || as[0].JobType != "a" {
		t.Fatalf("first assignments %+v, want a alone", as)
	}
	if st := f.flow(id).State; st["b"].Status != projections.StepWaiting || st["a"].Status != "leased" {
		t.Fatalf("state %+v", st)
	}
	f.complete(as[0], `{"rows": 3}`)
	next := byType(f.assignments("s1"))
	if len(next) != 2 || next["b"].JobID == "" || next["c"].JobID == "" {
		t.Fatalf("after a: %+v", next)
	}
	if got := string(next["b"].Payload); got != `{"needs":{"a":{"rows":3}}}` {
		t.Fatalf("b's payload %s", got)
	}
	f.complete(next["b"], `"B"`)
	if as := f.assignments("s1"); len(as) != 0 {
		t.Fatalf("d started while c was leased: %+v", as)
	}
	f.complete(next["c"], `"C"`)
	last := f.assignments("s1")
	if len(last) != 1 || last[0].JobType != "d" || string(last[0].Payload) != `{"needs":{"b":"B","c":"C"}}` {
		t.Fatalf("d: %+v", last)
	}
	if s := f.flow(id).Status; s != projections.FlowRunning {
		t.Fatalf("status %s before d ended", s)
	}
	f.complete(last[0], `1`)
	fl := f.flow(id)
	if fl.Status != projections.FlowSucceeded || fl.EndedAt.IsZero() {
		t.Fatalf("flow %+v", fl)
	}
	for name, st := range fl.State {
		if st.Status != "succeeded" || st.JobID == "" {
			t.Fatalf("step %s: %+v", name, st)
		}
	}
	// A tenant restarted after the end decides nothing more.
	before := len(f.w.Since(0))
	f.w.Restart(actors.TenantRef("acme"), actors.NewTenant("acme", actors.Limits{}))
	f.w.Run()
	if after := f.w.Since(before); len(after) != 0 {
		t.Fatalf("a restarted tenant wrote %v", after)
	}
}

// A step that fails fails the flow: the steps after it are skipped and the flow's live jobs
// are cancelled, a leased one cooperatively.
func TestFailingStepFailsTheFlow(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	id := f.mustSubmitFlow(step("a"), step("b", "a"), step("c"), step("d"))
	as := byType(f.connect("s1", 2)) // a and c; d waits for credit
	f.do(actors.Fail{WorkerID: f.wk, JobID: as["a"].JobID, LeaseID: as["a"].LeaseID, Code: "boom", Message: "no", Retryable: false})
	fl := f.flow(id)
	if fl.Status != projections.FlowFailed || fl.FailedStep != "a" {
		t.Fatalf("flow %s failed at %q", fl.Status, fl.FailedStep)
	}
	if st := fl.State; st["b"].Status != projections.StepSkipped || st["d"].Status != "cancelled" || !f.job(st["c"].JobID).CancelRequested {
		t.Fatalf("state %+v; c cancel requested: %v", st, f.job(st["c"].JobID).CancelRequested)
	}
	if d := one[actors.Done](t, f.w.Call("client", actors.TenantRef("acme"), actors.Redrive{Tenant: "acme", JobID: as["a"].JobID})); d.Err == nil || d.Err.Code != actors.CodeFlowStep {
		t.Fatalf("re-driving a failed flow's step: %v", d.Err)
	}
	if d := one[actors.Done](t, f.w.Call("client", actors.TenantRef("acme"), actors.CancelFlow{Tenant: "acme", FlowID: id})); d.Err == nil || d.Err.Code != actors.CodeFlowEnded {
		t.Fatalf("cancelling an ended flow: %v", d.Err)
	}
}

// continue_on_failure: the step's failure skips the steps that need it, and the rest go on.
func TestContinueOnFailure(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	a := step("a")
	a.ContinueOnFailure = true
	id := f.mustSubmitFlow(a, step("b", "a"), step("c", "b"), step("d"))
	as := byType(f.connect("s1", 4))
	f.do(actors.Fail{WorkerID: f.wk, JobID: as["a"].JobID, LeaseID: as["a"].LeaseID, Code: "boom", Retryable: false})
	if st := f.flow(id).State; st["b"].Status != projections.StepSkipped || st["c"].Status != projections.StepSkipped {
		t.Fatalf("state %+v", st)
	}
	if s := f.flow(id).Status; s != projections.FlowRunning {
		t.Fatalf("status %s while d runs", s)
	}
	f.complete(as["d"], `1`)
	if s := f.flow(id).Status; s != projections.FlowSucceeded {
		t.Fatalf("status %s", s)
	}
}

func TestCancelFlow(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	id := f.mustSubmitFlow(step("a"), step("b", "a"), step("c"))
	as := f.connect("s1", 1)
	cancel := func(flowID string) actors.Done {
		return one[actors.Done](t, f.w.Call("client", actors.TenantRef("acme"), actors.CancelFlow{Tenant: "acme", FlowID: flowID}))
	}
	if d := cancel(id); d.Err != nil || d.Receipt.Seq == 0 {
		t.Fatalf("cancel: %+v", d)
	}
	fl := f.flow(id)
	leased, queued := as[0].JobType, map[string]string{"a": "c", "c": "a"}[as[0].JobType]
	if fl.Status != projections.FlowCancelled || fl.State["b"].Status != projections.StepSkipped ||
		fl.State[queued].Status != "cancelled" || !f.job(fl.State[leased].JobID).CancelRequested {
		t.Fatalf("flow %s, state %+v", fl.Status, fl.State)
	}
	f.do(actors.Fail{WorkerID: f.wk, JobID: as[0].JobID, LeaseID: as[0].LeaseID, Code: "cancelled"})
	if st := f.flow(id).State[leased].Status; st != "cancelled" {
		t.Fatalf("the leased step ended %s", st)
	}
	if len(f.w.Set.LiveFlows("acme")) != 0 {
		t.Fatal("a cancelled flow with no live job is still live")
	}
	wantCode(t, cancel("01JUNKNOWN").Err, actors.CodeFlowNotFound)
}

func TestFlowIdempotency(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	first := f.submitFlow("k1", step("a"), step("b", "a"))
	again := f.submitFlow("k1", step("b", "a"), step("a")) // the same flow, in another order
	if first.Err != nil || again.Err != nil || again.FlowID != first.FlowID || !again.IdempotentHit || again.Receipt.Seq != f.flow(first.FlowID).SubmitSeq {
		t.Fatalf("first %+v, again %+v", first, again)
	}
	wantCode(t, f.submitFlow("k1", step("a")).Err, actors.CodeIdempotencyKeyReused)
	// A job's key of the same name is another key.
	if s := f.submit(actors.JobSpec{Queue: "q", Type: "t", IdempotencyKey: "k1"}); s.Err != nil || s.Jobs[0].IdempotentHit {
		t.Fatalf("a job with a flow's key: %+v", s)
	}
	var submitted int
	for _, p := range f.w.Since(0) {
		if _, ok := p.(eventlog.FlowSubmitted); ok {
			submitted++
		}
	}
	if submitted != 1 {
		t.Fatalf("%d flows submitted", submitted)
	}
}

// The quota holds a flow's first steps; the steps it starts later are not held back by it.
func TestFlowQuota(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	limit := 1
	if d := one[actors.Done](t, f.w.Call("admin", actors.TenantRef("acme"), actors.SetQuota{Tenant: "acme", MaxActive: &limit})); d.Err != nil {
		t.Fatal(d.Err)
	}
	wantCode(t, f.submitFlow("", step("a"), step("b")).Err, actors.CodeQuotaExceeded)
	id := f.mustSubmitFlow(step("a"), step("b", "a"))
	as := f.connect("s1", 2)
	f.complete(as[0], `1`)
	if st := f.flow(id).State["b"].Status; st != "leased" {
		t.Fatalf("b is %s", st)
	}
}

// A step whose payload, with its needs' outputs, would be over the payload limit fails the flow;
// a step the same decision would have started is skipped with the rest, not left waiting.
func TestFlowFailsOnAPayloadTooLarge(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	f.w.Restart(actors.TenantRef("acme"), actors.NewTenant("acme", actors.Limits{PayloadBytesMax: 200}))
	f.w.Run()
	big := step("c", "a")
	big.Job.Payload = json.RawMessage(`{"pad":"` + strings.Repeat("x", 120) + `"}`)
	id := f.mustSubmitFlow(step("a"), step("b", "a"), big)
	as := f.connect("s1", 4)
	f.complete(as[0], `"`+strings.Repeat("y", 60)+`"`)
	fl := f.flow(id)
	if fl.Status != projections.FlowFailed || fl.FailedStep != "c" || fl.State["b"].Status != projections.StepSkipped || fl.State["c"].Status != projections.StepSkipped {
		t.Fatalf("flow %s at %q, state %+v", fl.Status, fl.FailedStep, fl.State)
	}
	if as := f.assignments("s1"); len(as) != 0 {
		t.Fatalf("a step of a failed flow was assigned: %+v", as)
	}
}
