package actors_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tetherhq/tether/actors"
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
