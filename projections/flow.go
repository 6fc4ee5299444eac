package projections

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/eventlog"
)

// Flow is a flow (docs/design.md §9): its steps as submitted and where each stands. A step's state
// mirrors its job's status from the job's submit on, so it stays known after the job expires.
type Flow struct {
	ID         string               `json:"id"`
	Tenant     string               `json:"tenant"`
	Name       string               `json:"name"`
	YAMLSHA256 string               `json:"yaml_sha256,omitempty"`
	YAMLBytes  int                  `json:"yaml_bytes,omitempty"`
	Steps      []eventlog.FlowStep  `json:"steps"` // in name order
	State      map[string]StepState `json:"state"` // by step name
	Status     FlowStatus           `json:"status"`
	// FailedStep names the step whose failure failed the flow.
	FailedStep     string    `json:"failed_step,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
	EndedAt        time.Time `json:"ended_at,omitzero"`
	SubmitSeq      uint64    `json:"submit_seq"`
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	RequestHash    string    `json:"request_hash,omitempty"`
	// Traceparent is the W3C trace context of the submit, which the steps' jobs continue.
	Traceparent string `json:"traceparent,omitempty"`
}

// FlowStatus is where a flow stands: running until it ends, once.
type FlowStatus string

// A flow's statuses.
const (
	FlowRunning   FlowStatus = "running"
	FlowSucceeded FlowStatus = eventlog.FlowSucceeded
	FlowFailed    FlowStatus = eventlog.FlowFailed
	FlowCancelled FlowStatus = eventlog.FlowCancelled
)

// StepWaiting and StepSkipped are the states of a step that has no job: it waits for the steps
// it needs, or it will never run. A step with a job has its job's status.
const (
	StepWaiting = "waiting"
	StepSkipped = "skipped"
)

// StepState is where one step stands. Output is the step's output once it succeeded, kept while
// the flow runs, for the steps that need it.
type StepState struct {
	JobID  string          `json:"job_id,omitempty"`
	Status string          `json:"status"`
	Output json.RawMessage `json:"output,omitempty"`
}

// Clone returns a copy that shares nothing mutable with f (the steps are never changed).
func (f *Flow) Clone() *Flow {
	c := *f
	c.State = maps.Clone(f.State)
	return &c
}

// Flow returns a copy of a flow, or false.
func (s *Set) Flow(id string) (*Flow, bool) {
	f, ok := s.flows[id]
	if !ok {
		return nil, false
	}
	return f.Clone(), true
}

// FlowIdempotency returns the live entry for a tenant's flow idempotency key at now; its JobID
// is the flow's id.
func (s *Set) FlowIdempotency(tenant, key string, now time.Time) (Idempotency, bool) {
	e, ok := s.idem[idemKey{Tenant: tenant, Key: key, Flow: true}]
	if !ok || !now.Before(e.ExpiresAt) {
		return Idempotency{}, false
	}
	return e, true
}

// Live reports whether the flow still has something to do: it runs, or it ended and a step's
// job is not finished yet (it is being cancelled).
func (f *Flow) Live() bool {
	if f.Status == FlowRunning {
		return true
	}
	for _, st := range f.State {
		if st.JobID != "" && !Status(st.Status).Terminal() {
			return true
		}
	}
	return false
}

// LiveFlows returns the ids of a tenant's live flows (Flow.Live), sorted.
func (s *Set) LiveFlows(tenant string) []string {
	var out []string
	for id, f := range s.flows {
		if f.Tenant == tenant && f.Live() {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// FlowStatusCounts counts the flows in the views by status, each status present.
func (s *Set) FlowStatusCounts() map[FlowStatus]int {
	out := map[FlowStatus]int{FlowRunning: 0, FlowSucceeded: 0, FlowFailed: 0, FlowCancelled: 0}
	for _, f := range s.flows {
		out[f.Status]++
	}
	return out
}

// LiveFlowTenants returns the tenants that have a live flow (Flow.Live).
func (s *Set) LiveFlowTenants() map[string]bool {
	out := map[string]bool{}
	for _, f := range s.flows {
		if !out[f.Tenant] && f.Live() {
			out[f.Tenant] = true
		}
	}
	return out
}

// applyFlow folds a flow event. An event naming a flow or step that was never submitted is a
// fault in the log.
func (s *Set) applyFlow(seq uint64, at time.Time, p eventlog.Payload) error {
	if e, ok := p.(eventlog.FlowSubmitted); ok {
		f := &Flow{ID: e.FlowID, Tenant: e.Tenant, Name: e.Name, YAMLSHA256: e.YAMLSHA256, YAMLBytes: e.YAMLBytes, Steps: e.Steps,
			State: make(map[string]StepState, len(e.Steps)), Status: FlowRunning, CreatedAt: at, UpdatedAt: at, SubmitSeq: seq,
			IdempotencyKey: e.IdempotencyKey, RequestHash: e.RequestHash, Traceparent: e.Traceparent}
		for _, st := range e.Steps {
			f.State[st.Name] = StepState{Status: StepWaiting}
		}
		s.flows[f.ID] = f
		if e.IdempotencyKey != "" {
			s.remember(idemKey{Tenant: e.Tenant, Key: e.IdempotencyKey, Flow: true},
				Idempotency{JobID: f.ID, RequestHash: e.RequestHash, ExpiresAt: at.Add(IdempotencyTTL), Seq: seq})
		}
		return nil
	}
	id := strings.TrimPrefix(p.Stream(), "flow/")
	f := s.flows[id]
	if f == nil {
		return fmt.Errorf("projections: seq %d: %s for unknown flow %s", seq, p.EventType(), id)
	}
	f.UpdatedAt = at
	switch e := p.(type) {
	case eventlog.FlowStepSkipped:
		if _, ok := f.State[e.Step]; !ok {
			return fmt.Errorf("projections: seq %d: flow %s has no step %q", seq, id, e.Step)
		}
		f.State[e.Step] = StepState{Status: StepSkipped}
	case eventlog.FlowExpired:
		if f.Live() {
			return fmt.Errorf("projections: seq %d: flow %s expired while live", seq, id)
		}
		delete(s.flows, id)
		s.flowsEnded.Delete(timed{f.EndedAt, id})
	case eventlog.FlowEnded:
		f.Status, f.FailedStep, f.EndedAt = FlowStatus(e.Status), e.Step, at
		s.flowsEnded.ReplaceOrInsert(timed{at, id})
		for name, st := range f.State {
			st.Output = nil // nothing will start to need it
			f.State[name] = st
		}
	}
	return nil
}

// stepChanged mirrors a flow step's job into its flow after an event on the job.
func (s *Set) stepChanged(at time.Time, j *Job) {
	f := s.flows[j.FlowID]
	if f == nil {
		return
	}
	st := StepState{JobID: j.ID, Status: string(j.Status)}
	if j.Status == StatusSucceeded && f.Status == FlowRunning {
		st.Output = j.Output
	}
	f.State[j.FlowStep] = st
	f.UpdatedAt = at
}

// timed is an id at a time, ordered by the time, then the id: the retention sweep walks the
// ended flows by when they ended, and the workers by when their retention starts.
type timed struct {
	at time.Time
	id string
}

func lessTimed(a, b timed) bool {
	return cmp.Or(a.at.Compare(b.at), strings.Compare(a.id, b.id)) < 0
}

// ExpirableFlows returns up to limit ended flows whose retention (r.Done, as for a succeeded
// job, from the flow's end) is over at now and whose steps' jobs have all finished, soonest due
// first. It walks the ended flows in the order they ended, so it costs in proportion to those
// due (and those due whose jobs are still being cancelled), not to every flow in memory.
func (s *Set) ExpirableFlows(r Retention, now time.Time, limit int) []string {
	var out []string
	if r.Done <= 0 {
		return out
	}
	s.flowsEnded.Ascend(func(e timed) bool {
		if now.Before(e.at.Add(r.Done)) {
			return false
		}
		if !s.flows[e.id].Live() {
			out = append(out, e.id)
		}
		return len(out) < limit
	})
	return out
}

// flowList returns the flows in id order, for a checkpoint.
func (s *Set) flowList() []*Flow {
	return sortedValues(s.flows, func(f *Flow) string { return f.ID })
}

// Flows returns up to limit of a tenant's flows, newest first, those of status only if it is
// set, after the flow id before (a cursor; "" starts at the newest); more says whether more
// follow.
func (s *Set) Flows(tenant string, status FlowStatus, before string, limit int) (out []*Flow, more bool) {
	var all []*Flow
	for _, f := range s.flows {
		if f.Tenant == tenant && (status == "" || f.Status == status) && (before == "" || f.ID < before) {
			all = append(all, f)
		}
	}
	slices.SortFunc(all, func(a, b *Flow) int { return strings.Compare(b.ID, a.ID) })
	if len(all) > limit {
		all, more = all[:limit], true
	}
	for _, f := range all {
		out = append(out, f.Clone())
	}
	return out, more
}
