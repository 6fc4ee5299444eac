package sim

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Flows in the simulator: clients submit small random DAGs of steps and cancel some of them;
// the oracle checks that no step starts before every step it needs has succeeded, that a flow
// ends once and as its steps say, and, after heal, that every flow has ended.

// oflow is the oracle's fold of a flow.
type oflow struct {
	id, tenant string
	steps      map[string]eventlog.FlowStep
	jobs       map[string]string // step → its job
	skipped    map[string]bool
	ended      bool
	status     string
	endedAt    time.Time // the flow.ended record's time
	expired    bool
}

// submitFlow submits a random flow of 2..5 steps, each needing some of the steps before it;
// some tolerate failure, some carry an idempotency key, which a retry after a timeout reuses.
func (c *client) submitFlow() {
	s := c.s
	r := s.flowRand
	c.n++
	m := actors.SubmitFlow{Tenant: c.tenant, Name: fmt.Sprintf("%s-flow-%d", c.name, c.n)}
	n := 2 + r.IntN(4)
	for i := range n {
		st := actors.FlowStepSpec{Name: fmt.Sprintf("s%d", i), Job: actors.JobSpec{
			Queue: fmt.Sprintf("q%d", r.IntN(2)), Type: "step", MaxAttempts: 1 + r.IntN(3),
			LeaseTTL: time.Duration(5+r.IntN(25)) * time.Second, Payload: json.RawMessage(fmt.Sprintf(`{"flow":%q}`, m.Name)),
		}}
		for j := range i {
			if r.IntN(3) == 0 {
				st.Needs = append(st.Needs, fmt.Sprintf("s%d", j))
			}
		}
		st.ContinueOnFailure = r.IntN(5) == 0
		m.Steps = append(m.Steps, st)
	}
	if r.IntN(2) == 0 {
		m.IdempotencyKey = m.Name
	}
	c.sendFlow(m, 0)
}

func (c *client) sendFlow(m actors.SubmitFlow, attempt int) {
	s := c.s
	s.call(c.name, "submit flow", toRef(actors.TenantRef(c.tenant)), m, func(reply any) {
		if r := reply.(actors.FlowAccepted); r.Err == nil {
			c.flows = append(c.flows, r.FlowID)
		}
	}, func() {
		if m.IdempotencyKey != "" && attempt < 2 {
			c.sendFlow(m, attempt+1)
		}
	})
}

// cancelFlow cancels one of the client's flows.
func (c *client) cancelFlow() {
	s := c.s
	if len(c.flows) == 0 {
		return
	}
	id := c.flows[s.flowRand.IntN(len(c.flows))]
	s.call(c.name, "cancel flow", toRef(actors.TenantRef(c.tenant)), actors.CancelFlow{Tenant: c.tenant, FlowID: id}, func(any) {}, nil)
}

// flow folds a flow's events and checks them. A step's job.submitted goes through job(), which
// checks the step's needs.
func (o *oracle) flow(seq uint64, at time.Time, p eventlog.Payload, decidedAt time.Time, clock int) {
	if f := o.flows[p.Stream()[len("flow/"):]]; f != nil && f.expired {
		o.fail("retention", "%s for flow %s after it expired (seq %d)", p.EventType(), f.id, seq)
		return
	}
	switch e := p.(type) {
	case eventlog.FlowSubmitted:
		if o.flows[e.FlowID] != nil {
			o.fail("flow_end", "flow %s submitted twice (seq %d)", e.FlowID, seq)
			return
		}
		f := &oflow{id: e.FlowID, tenant: e.Tenant, steps: map[string]eventlog.FlowStep{}, jobs: map[string]string{}, skipped: map[string]bool{}}
		for _, st := range e.Steps {
			f.steps[st.Name] = st
		}
		o.flows[e.FlowID] = f
		if e.IdempotencyKey != "" {
			k := e.Tenant + "\x00flow\x00" + e.IdempotencyKey
			if u, ok := o.idem[k]; ok && at.Sub(u.at) < IdempotencyTTL {
				o.fail("idempotency", "flow key %q of tenant %s names flow %s and, within its TTL, flow %s", e.IdempotencyKey, e.Tenant, u.jobID, e.FlowID)
			}
			o.idem[k] = idemUse{jobID: e.FlowID, at: at}
		}
	case eventlog.FlowStepSkipped:
		f := o.flows[e.FlowID]
		switch {
		case f == nil:
			o.fail("flow_end", "step %s of unknown flow %s skipped (seq %d)", e.Step, e.FlowID, seq)
		case f.ended:
			o.fail("flow_end", "step %s of flow %s skipped after the flow ended (seq %d)", e.Step, e.FlowID, seq)
		case f.jobs[e.Step] != "" || f.skipped[e.Step]:
			o.fail("flow_order", "step %s of flow %s skipped after it started or was skipped (seq %d)", e.Step, e.FlowID, seq)
		default:
			f.skipped[e.Step] = true
		}
	case eventlog.FlowExpired:
		f := o.flows[e.FlowID]
		switch {
		case f == nil || !f.ended:
			o.fail("retention", "flow %s expired before it ended (seq %d)", e.FlowID, seq)
			return
		case clock >= 0 && decidedAt.Sub(f.endedAt) < o.s.retention.Done:
			o.fail("retention", "flow %s expired at %s, %s after it ended, within the retention of %s (seq %d)", f.id, decidedAt, decidedAt.Sub(f.endedAt), o.s.retention.Done, seq)
		}
		for _, name := range slices.Sorted(maps.Keys(f.jobs)) {
			if j := o.jobs[f.jobs[name]]; j != nil && !j.status.Terminal() {
				o.fail("retention", "flow %s expired while the job %s of its step %s is %s (seq %d)", f.id, j.id, name, j.status, seq)
			}
		}
		f.expired = true
		o.s.probe(ProbeFlowExpired)
	case eventlog.FlowEnded:
		f := o.flows[e.FlowID]
		if f == nil || f.ended {
			o.fail("flow_end", "flow %s ended twice, or without a submit (seq %d)", e.FlowID, seq)
			return
		}
		f.ended, f.status, f.endedAt = true, e.Status, at
		if e.Status == eventlog.FlowFailed {
			o.s.probe(ProbeFlowFailed)
		}
		o.checkFlowEnd(seq, f, e)
	}
}

// stepSubmitted checks a flow step's job.submitted: the flow runs, the step has not started or
// been skipped, and every step it needs has succeeded.
func (o *oracle) stepSubmitted(seq uint64, e eventlog.JobSubmitted) {
	f := o.flows[e.FlowID]
	if f == nil {
		o.fail("flow_order", "job %s is step %s of unknown flow %s (seq %d)", e.JobID, e.FlowStep, e.FlowID, seq)
		return
	}
	st, ok := f.steps[e.FlowStep]
	switch {
	case !ok:
		o.fail("flow_order", "job %s is step %q, which flow %s does not have (seq %d)", e.JobID, e.FlowStep, f.id, seq)
		return
	case f.ended:
		o.fail("flow_order", "step %s of flow %s started after the flow ended (seq %d)", e.FlowStep, f.id, seq)
	case f.jobs[e.FlowStep] != "" || f.skipped[e.FlowStep]:
		o.fail("flow_order", "step %s of flow %s started twice, or after it was skipped (seq %d)", e.FlowStep, f.id, seq)
	}
	for _, need := range st.Needs {
		if j := o.jobs[f.jobs[need]]; j == nil || j.status != projections.StatusSucceeded {
			status := "not started"
			if j != nil {
				status = string(j.status)
			}
			o.fail("flow_order", "step %s of flow %s started (seq %d) while the step %s it needs is %s", e.FlowStep, f.id, seq, need, status)
		}
	}
	f.jobs[e.FlowStep] = e.JobID
}

// checkFlowEnd checks that a flow's end matches its steps: a success leaves no step waiting or
// running and no intolerable failure; a failure names a step that failed without tolerance (or
// whose payload could not be made).
func (o *oracle) checkFlowEnd(seq uint64, f *oflow, e eventlog.FlowEnded) {
	failed := func(name string) bool {
		j := o.jobs[f.jobs[name]]
		return j != nil && (j.status == projections.StatusFailed || j.status == projections.StatusCancelled)
	}
	switch e.Status {
	case eventlog.FlowSucceeded:
		for _, name := range slices.Sorted(maps.Keys(f.steps)) {
			j := o.jobs[f.jobs[name]]
			switch {
			case f.skipped[name]:
			case j == nil || !j.status.Terminal():
				o.fail("flow_end", "flow %s succeeded (seq %d) while step %s was not finished", f.id, seq, name)
			case failed(name) && !f.steps[name].ContinueOnFailure:
				o.fail("flow_end", "flow %s succeeded (seq %d) though step %s ended %s", f.id, seq, name, j.status)
			}
		}
	case eventlog.FlowFailed:
		st, ok := f.steps[e.Step]
		if !ok || !(failed(e.Step) && !st.ContinueOnFailure || f.skipped[e.Step]) {
			o.fail("flow_end", "flow %s failed at step %q (seq %d), which did not fail", f.id, e.Step, seq)
		}
	case eventlog.FlowCancelled:
	default:
		o.fail("flow_end", "flow %s ended %q (seq %d)", f.id, e.Status, seq)
	}
	for name := range f.steps {
		if f.jobs[name] == "" && !f.skipped[name] {
			o.fail("flow_end", "flow %s ended (seq %d) with step %s neither started nor skipped", f.id, seq, name)
			return
		}
	}
}

// unsettledFlow names a flow that has not ended, or "".
func (o *oracle) unsettledFlow() string {
	for _, id := range slices.Sorted(maps.Keys(o.flows)) {
		if !o.flows[id].ended {
			return fmt.Sprintf("flow %s has not ended", id)
		}
	}
	return ""
}
