package actors

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Flows (docs/design.md §9) are decided by their tenant's actor: it admits a flow as it admits
// jobs (validation, idempotency, quota), and it starts each later step as a job of the tenant, so
// that the tenant's usage and its job ids stay the one actor's to keep. The dispatcher tells it
// when a step's job has finished (flowStepEnded); what to do next is read from the flow's
// projection, so a restart, which loses that notice, loses nothing: Recover looks at every live
// flow of the tenant again.

// Flow limits.
const (
	FlowStepsMax   = 100
	FlowNameLenMax = 128
	StepNameLenMax = 64
	// NeedsKey is the key of a step's payload under which it gets the outputs of the steps it
	// needs, by step name.
	NeedsKey = "needs"
)

// FlowStepSpec is one step of a flow as a client submits it: a job, started once every step
// it needs has succeeded.
type FlowStepSpec struct {
	Name              string
	Job               JobSpec
	Needs             []string
	ContinueOnFailure bool
}

// SubmitFlow asks a tenant to accept a flow. YAMLSHA256 and YAMLBytes describe the file it came
// as, if it came as one.
type SubmitFlow struct {
	Tenant         string
	Name           string
	Steps          []FlowStepSpec
	YAMLSHA256     string
	YAMLBytes      int
	IdempotencyKey string
	APIKeyID       string
	// Traceparent is the submit's W3C trace context, which the flow's steps' jobs continue.
	Traceparent string
}

// FlowAccepted answers SubmitFlow.
type FlowAccepted struct {
	FlowID        string
	IdempotentHit bool
	Receipt       Receipt
	Err           *Rejection
}

// CancelFlow asks for a running flow to end cancelled: its waiting steps are skipped, its
// steps' jobs cancelled (cooperatively, for a leased one). Done answers.
type CancelFlow struct {
	Tenant   string
	FlowID   string
	APIKeyID string
}

// flowStepEnded tells a tenant that a job of one of its flows finished durably.
type flowStepEnded struct{ FlowID string }

// flowDone is a flow decision made durable: steps started (waiting), or the flow's end.
type flowDone struct {
	flowID  string
	reply   Ref // the submit or cancel that asked for it, if any
	submit  bool
	waiting []Waiting
	ended   bool
	key     string // the flow's idempotency key, pending until now
}

func invalidFlow(step, format string, args ...any) *Rejection {
	r := reject(CodeInvalidFlow, format, args...)
	if step != "" {
		r.Details = map[string]any{"step": step}
	}
	return r
}

// flowSteps validates a flow's steps and returns them as the log has them, in name order. Each
// step is checked as a submitted job would be; the needs must name other steps and form no cycle.
func flowSteps(specs []FlowStepSpec, l Limits) ([]eventlog.FlowStep, *Rejection) {
	if len(specs) == 0 || len(specs) > FlowStepsMax {
		return nil, invalidFlow("", "a flow has 1..%d steps, not %d", FlowStepsMax, len(specs))
	}
	byName := make(map[string]*FlowStepSpec, len(specs))
	for i := range specs {
		s := &specs[i]
		if !validName(s.Name, StepNameLenMax, false) {
			return nil, invalidFlow(clip(s.Name), "step name %q must be 1..%d of [A-Za-z0-9_-]", clip(s.Name), StepNameLenMax)
		}
		if byName[s.Name] != nil {
			return nil, invalidFlow(s.Name, "step %q is defined twice", s.Name)
		}
		byName[s.Name] = s
		j := &s.Job
		if j.Delay != 0 || !j.RunAt.IsZero() || j.IdempotencyKey != "" || j.ReservationID != "" || j.ResultTTL != 0 {
			return nil, invalidFlow(s.Name, "step %q: a step takes no delay, run_at, idempotency key, reservation or result TTL", s.Name)
		}
		if r := j.normalize(l); r != nil {
			r.Message = "step " + s.Name + ": " + r.Message
			r.Details = map[string]any{"step": s.Name}
			return nil, r
		}
		if len(s.Needs) > 0 && !neutralPayload(j.Payload) {
			return nil, invalidFlow(s.Name, "step %q needs other steps, so its payload must be an object without a %q key (their outputs arrive there)", s.Name, NeedsKey)
		}
	}
	for _, s := range specs {
		for i, n := range s.Needs {
			switch {
			case n == s.Name:
				return nil, invalidFlow(s.Name, "step %q needs itself", s.Name)
			case byName[n] == nil:
				return nil, invalidFlow(s.Name, "step %q needs %q, which is not a step of the flow", s.Name, clip(n))
			case slices.Contains(s.Needs[:i], n):
				return nil, invalidFlow(s.Name, "step %q needs %q twice", s.Name, n)
			}
		}
	}
	if cycle := findCycle(byName); cycle != nil {
		return nil, invalidFlow(cycle[0], "the steps' needs form a cycle: %s", strings.Join(cycle, " → "))
	}
	out := make([]eventlog.FlowStep, 0, len(specs))
	for _, s := range specs {
		out = append(out, eventlog.FlowStep{Name: s.Name, JobTemplate: s.Job.template(),
			Needs: slices.Clone(s.Needs), ContinueOnFailure: s.ContinueOnFailure})
	}
	slices.SortFunc(out, func(a, b eventlog.FlowStep) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// neutralPayload reports whether a payload can take the needs' outputs: null, or an object
// without NeedsKey.
func neutralPayload(p json.RawMessage) bool {
	if bytes.Equal(bytes.TrimSpace(p), []byte("null")) {
		return true
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(p, &obj) != nil || obj == nil {
		return false
	}
	_, taken := obj[NeedsKey]
	return !taken
}

// findCycle returns a cycle of needs as a path that ends where it starts, or nil. The search
// goes in name order, so the same flow always names the same cycle.
func findCycle(steps map[string]*FlowStepSpec) []string {
	const (
		unseen = iota
		onPath
		done
	)
	mark := map[string]int{}
	var path []string
	var visit func(name string) []string
	visit = func(name string) []string {
		mark[name] = onPath
		path = append(path, name)
		needs := slices.Sorted(slices.Values(steps[name].Needs))
		for _, n := range needs {
			switch mark[n] {
			case onPath:
				i := slices.Index(path, n)
				return append(slices.Clone(path[i:]), n)
			case unseen:
				if c := visit(n); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		mark[name] = done
		return nil
	}
	names := make([]string, 0, len(steps))
	for n := range steps {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if mark[n] == unseen {
			if c := visit(n); c != nil {
				return c
			}
		}
	}
	return nil
}

// flowRequestHash identifies a flow submit for its idempotency key.
func flowRequestHash(name string, steps []eventlog.FlowStep) string {
	b, _ := json.Marshal(struct {
		Name  string              `json:"name"`
		Steps []eventlog.FlowStep `json:"steps"`
	}{name, steps})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// flows is the part of a tenant that runs its flows. What a flow does next is read from its
// projection; what the part keeps is what is in flight: the decision of each flow not durable
// yet (one at a time, so each reads the ones before it), and the idempotency keys of flows
// submitted and not durable yet.
type flows struct {
	// busy holds the flows with a decision in flight, with the number of jobs it starts.
	busy map[string]int
	// again holds the flows to read again once their decision in flight is durable, because a
	// step ended meanwhile.
	// INVARIANT: a flow to read again has a decision in flight.
	again map[string]bool
	// pendingJobs counts the jobs the decisions in flight start: they count against max_active.
	// INVARIANT: pendingJobs is the sum of busy.
	pendingJobs int
	// pendingIdem holds the idempotency keys of flows admitted and not durable yet.
	// INVARIANT: the flow a pending key names has its submit in flight.
	pendingIdem map[string]pendingKey
}

func (fl *flows) reset() {
	*fl = flows{busy: map[string]int{}, again: map[string]bool{}, pendingIdem: map[string]pendingKey{}}
}

func (fl *flows) submit(t *Tenant, env Env, m SubmitFlow) {
	reply := env.Sender()
	if !validName(m.Name, FlowNameLenMax, true) {
		env.Send(reply, FlowAccepted{Err: invalidFlow("", "flow name %q must be 1..%d of [A-Za-z0-9_.:/-]", clip(m.Name), FlowNameLenMax)})
		return
	}
	if len(m.IdempotencyKey) > IdempotencyKeyLenMax {
		env.Send(reply, FlowAccepted{Err: reject(CodeInvalidArgument, "idempotency key is %d bytes; the limit is %d", len(m.IdempotencyKey), IdempotencyKeyLenMax)})
		return
	}
	steps, r := flowSteps(m.Steps, t.limits)
	for i := 0; r == nil && i < len(steps); i++ {
		if r = undefinedRateLimit(env, t.name, steps[i].RateLimits); r != nil {
			r.Message = "step " + steps[i].Name + ": " + r.Message
			r.Details["step"] = steps[i].Name
		}
	}
	if r != nil {
		env.Send(reply, FlowAccepted{Err: r})
		return
	}
	hash := flowRequestHash(m.Name, steps)
	if key := m.IdempotencyKey; key != "" {
		if id, h, ok := lookupKey(env, t.name, fl.pendingIdem, (*projections.Set).FlowIdempotency, key, env.Now()); ok {
			if h != hash {
				env.Send(reply, FlowAccepted{Err: &Rejection{Code: CodeIdempotencyKeyReused,
					Message: "the idempotency key was used for a different flow", Details: map[string]any{"flow_id": id}}})
				return
			}
			t.pipe.whenSettled(func() {
				var seq uint64
				env.Read(func(s *projections.Set) {
					if f, ok := s.Flow(id); ok {
						seq = f.SubmitSeq
					} else if e, ok := s.FlowIdempotency(t.name, key, env.Now()); ok && e.JobID == id {
						seq = e.Seq // durable, and expired since: the key outlives its flow
					}
				})
				if seq == 0 { // the submit the key named failed to append: the log failed
					env.Send(reply, FlowAccepted{Err: reject(CodeUnavailable, "the flow this idempotency key names was not made durable; the server is stopping")})
					return
				}
				env.Send(reply, FlowAccepted{FlowID: id, IdempotentHit: true, Receipt: Receipt{Seq: seq}})
			})
			return
		}
	}
	roots := 0
	for _, st := range steps {
		if len(st.Needs) == 0 {
			roots++
		}
	}
	if t.full(env, roots) {
		env.Send(reply, FlowAccepted{Err: &Rejection{Code: CodeQuotaExceeded,
			Message: "the tenant's max_active would be exceeded by the flow's first steps", Details: map[string]any{"max_active": t.intake.maxActive, "requested": roots}}})
		return
	}
	id := NextID(env, &t.lastJobID) // flows list newest first by id, as jobs do
	events := []eventlog.Payload{eventlog.FlowSubmitted{
		FlowID: id, Tenant: t.name, Name: m.Name, YAMLSHA256: m.YAMLSHA256, YAMLBytes: m.YAMLBytes, Steps: steps,
		IdempotencyKey: m.IdempotencyKey, RequestHash: hash, APIKeyID: m.APIKeyID, Traceparent: m.Traceparent,
	}}
	done := flowDone{flowID: id, reply: reply, submit: true, key: m.IdempotencyKey}
	for _, st := range steps {
		if len(st.Needs) == 0 {
			ev, w := stepJob(t, env, id, st, st.Payload, m.APIKeyID, m.Traceparent)
			w.SubmitSeq = uint64(len(events))
			events = append(events, ev)
			done.waiting = append(done.waiting, w)
		}
	}
	if m.IdempotencyKey != "" {
		fl.pendingIdem[m.IdempotencyKey] = pendingKey{jobID: id, requestHash: hash}
	}
	fl.persist(t, env, events, done)
}

// stepJob makes the job.submitted of a flow's step; the job continues the flow's trace.
func stepJob(t *Tenant, env Env, flowID string, st eventlog.FlowStep, payload json.RawMessage, apiKeyID, traceparent string) (eventlog.JobSubmitted, Waiting) {
	ev, w := t.templateJob(env, st.JobTemplate, payload)
	ev.APIKeyID, ev.FlowID, ev.FlowStep, ev.Traceparent = apiKeyID, flowID, st.Name, traceparent
	return ev, w
}

// persist hands a flow's decision to the log; the flow takes no other decision until it is
// durable, so each decision reads the ones before it in the projections.
func (fl *flows) persist(t *Tenant, env Env, events []eventlog.Payload, done flowDone) {
	fl.busy[done.flowID] = len(done.waiting)
	fl.pendingJobs += len(done.waiting)
	t.pipe.persist(env, events, done)
}

// advance decides what a flow does next: start the steps whose needs all succeeded, skip
// those that can no longer run, end the flow once, and cancel the jobs of an ended flow.
func (fl *flows) advance(t *Tenant, env Env, id string) {
	if _, busy := fl.busy[id]; busy {
		fl.again[id] = true // read it again once the decision in flight is durable
		return
	}
	var f *projections.Flow
	env.Read(func(s *projections.Set) { f, _ = s.Flow(id) })
	if f == nil || f.Tenant != t.name {
		return
	}
	if f.Status != projections.FlowRunning {
		cancelSteps(t, env, f)
		return
	}
	d := decideFlow(f, t.limits.payloadBytesMax())
	if len(d.start) == 0 && len(d.skip) == 0 && d.end == nil {
		return
	}
	var events []eventlog.Payload
	done := flowDone{flowID: id, ended: d.end != nil}
	for _, sk := range d.skip {
		events = append(events, eventlog.FlowStepSkipped{FlowID: id, Step: sk.step, Reason: sk.reason})
	}
	for _, st := range d.start {
		ev, w := stepJob(t, env, id, st.step, st.payload, "", f.Traceparent)
		w.SubmitSeq = uint64(len(events))
		events = append(events, ev)
		done.waiting = append(done.waiting, w)
	}
	if d.end != nil {
		events = append(events, *d.end)
	}
	fl.persist(t, env, events, done)
}

// cancel ends a running flow cancelled, once every decision of the flow in flight is
// durable, so that the projections show all of them.
func (fl *flows) cancel(t *Tenant, env Env, m CancelFlow, reply Ref) {
	if _, busy := fl.busy[m.FlowID]; busy {
		t.pipe.whenSettled(func() { fl.cancel(t, env, m, reply) })
		return
	}
	var f *projections.Flow
	env.Read(func(s *projections.Set) { f, _ = s.Flow(m.FlowID) })
	switch {
	case f == nil || f.Tenant != t.name:
		env.Send(reply, Done{Err: reject(CodeFlowNotFound, "no flow %q", clip(m.FlowID))})
		return
	case f.Status != projections.FlowRunning:
		env.Send(reply, Done{Err: reject(CodeFlowEnded, "flow %s has %s", f.ID, f.Status)})
		return
	}
	var events []eventlog.Payload
	for _, st := range f.Steps {
		if f.State[st.Name].Status == projections.StepWaiting {
			events = append(events, eventlog.FlowStepSkipped{FlowID: f.ID, Step: st.Name, Reason: eventlog.SkippedFlowCancelled})
		}
	}
	events = append(events, eventlog.FlowEnded{FlowID: f.ID, Status: eventlog.FlowCancelled, APIKeyID: m.APIKeyID})
	fl.persist(t, env, events, flowDone{flowID: f.ID, reply: reply, ended: true})
}

// cancelSteps asks the dispatcher to cancel the live jobs of an ended flow: the same command a
// client sends, so a leased step is cancelled cooperatively. Asking twice does no harm.
func cancelSteps(t *Tenant, env Env, f *projections.Flow) {
	for _, st := range f.Steps {
		s := f.State[st.Name]
		if s.JobID != "" && !projections.Status(s.Status).Terminal() {
			reason := eventlog.CancelledFlowFailed
			if f.Status == eventlog.FlowCancelled {
				reason = eventlog.CancelledFlowCancelled
			}
			env.Send(DispatcherRef(), Cancel{Tenant: t.name, JobID: s.JobID, Reason: reason})
		}
	}
}

func (fl *flows) persisted(t *Tenant, env Env, d flowDone, m Persisted) {
	delete(fl.busy, d.flowID)
	fl.pendingJobs -= len(d.waiting)
	if d.key != "" {
		delete(fl.pendingIdem, d.key)
	}
	// Read again only once this decision is durable; after a failed append there is no next.
	again := fl.again[d.flowID]
	delete(fl.again, d.flowID)
	err := unavailable(m.Err)
	if err == nil {
		enqueue(env, nil, d.waiting, m.Receipt)
	}
	switch {
	case d.submit:
		env.Send(d.reply, FlowAccepted{FlowID: d.flowID, Receipt: receiptOf(m.Receipt), Err: err})
	case !d.reply.IsZero():
		env.Send(d.reply, Done{Receipt: receiptOf(m.Receipt), Err: err})
	}
	if err != nil {
		return
	}
	if d.ended || again {
		// A step may have ended while the decision was in flight; an ended flow cancels its jobs.
		fl.advance(t, env, d.flowID)
	}
}

type startStep struct {
	step    eventlog.FlowStep
	payload json.RawMessage
}

type skipStep struct{ step, reason string }

// flowDecision is what a running flow does next.
type flowDecision struct {
	start []startStep
	skip  []skipStep
	end   *eventlog.FlowEnded
}

// decideFlow reads a running flow's steps and decides. A step whose job ended failed or
// cancelled fails the flow, unless it has continue_on_failure: then the steps that need it are
// skipped and the others go on. A waiting step starts once every step it needs has succeeded,
// with their outputs in its payload under NeedsKey. When no step is left to run, the flow
// succeeds. Steps are taken in dependency order (each after the steps it needs), names breaking
// ties, so a skip reaches the steps after it in one decision.
func decideFlow(f *projections.Flow, payloadMax int) flowDecision {
	var d flowDecision
	status := make(map[string]string, len(f.Steps))
	for name, st := range f.State {
		status[name] = st.Status
	}
	notSucceeded := func(s string) bool {
		return s == string(projections.StatusFailed) || s == string(projections.StatusCancelled)
	}
	for _, st := range f.Steps {
		if notSucceeded(status[st.Name]) && !st.ContinueOnFailure {
			return endFlow(f, status, eventlog.FlowFailed, st.Name, eventlog.SkippedFlowFailed)
		}
	}
	for _, st := range inDependencyOrder(f.Steps) {
		if status[st.Name] != projections.StepWaiting {
			continue
		}
		ready, blocked := true, false
		for _, n := range st.Needs {
			switch s := status[n]; {
			case s == string(projections.StatusSucceeded), mutantStartOnLease && s == string(projections.StatusLeased):
			case s == projections.StepSkipped || notSucceeded(s):
				blocked = true
			default:
				ready = false
			}
		}
		switch {
		case blocked:
			status[st.Name] = projections.StepSkipped
			d.skip = append(d.skip, skipStep{st.Name, eventlog.SkippedNeedNotSucceeded})
		case ready:
			payload, ok := withNeeds(st, f.State, payloadMax)
			if !ok {
				// The flow fails here: the steps this decision was about to start wait no more
				// than the others, and are skipped with them.
				for _, s := range d.start {
					status[s.step.Name] = projections.StepWaiting
				}
				status[st.Name] = projections.StepSkipped
				e := endFlow(f, status, eventlog.FlowFailed, st.Name, eventlog.SkippedFlowFailed)
				e.skip = append(append(d.skip, skipStep{st.Name, eventlog.SkippedPayloadTooLarge}), e.skip...)
				return e
			}
			status[st.Name] = string(projections.StatusQueued)
			d.start = append(d.start, startStep{st, payload})
		}
	}
	for _, st := range f.Steps {
		s := status[st.Name]
		if s != projections.StepSkipped && !projections.Status(s).Terminal() {
			return d // something still runs or waits
		}
	}
	d.end = &eventlog.FlowEnded{FlowID: f.ID, Status: eventlog.FlowSucceeded}
	return d
}

// endFlow ends a flow: every step still waiting is skipped with reason.
func endFlow(f *projections.Flow, status map[string]string, flowStatus, step, reason string) flowDecision {
	var d flowDecision
	for _, st := range f.Steps {
		if status[st.Name] == projections.StepWaiting {
			d.skip = append(d.skip, skipStep{st.Name, reason})
		}
	}
	d.end = &eventlog.FlowEnded{FlowID: f.ID, Status: flowStatus, Step: step}
	return d
}

// withNeeds returns a step's payload with the outputs of the steps it needs under NeedsKey, or
// false if that is over the payload limit.
func withNeeds(st eventlog.FlowStep, state map[string]projections.StepState, payloadMax int) (json.RawMessage, bool) {
	if len(st.Needs) == 0 {
		return st.Payload, true
	}
	obj := map[string]json.RawMessage{}
	if len(st.Payload) > 0 {
		_ = json.Unmarshal(st.Payload, &obj) // an object or null, checked at submit
		if obj == nil {
			obj = map[string]json.RawMessage{}
		}
	}
	outs := make(map[string]json.RawMessage, len(st.Needs))
	for _, n := range st.Needs {
		out := state[n].Output
		if len(out) == 0 {
			out = json.RawMessage("null")
		}
		outs[n] = out
	}
	needs, _ := json.Marshal(outs)
	obj[NeedsKey] = needs
	p, _ := json.Marshal(obj)
	return p, len(p) <= payloadMax
}

// inDependencyOrder returns steps so that each comes after every step it needs, in name order
// where the needs leave a choice. The steps form no cycle (flowSteps).
func inDependencyOrder(steps []eventlog.FlowStep) []eventlog.FlowStep {
	placed := make(map[string]bool, len(steps))
	out := make([]eventlog.FlowStep, 0, len(steps))
	for len(out) < len(steps) {
		for _, st := range steps { // name order
			if placed[st.Name] {
				continue
			}
			ok := true
			for _, n := range st.Needs {
				ok = ok && placed[n]
			}
			if ok {
				placed[st.Name] = true
				out = append(out, st)
			}
		}
	}
	return out
}
