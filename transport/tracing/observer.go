package tracing

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// View is what the Observer reads of the projections, which already hold the event it is given
// (*projections.Set).
type View interface {
	JobRef(id string) *projections.Job
	Flow(id string) (*projections.Flow, bool)
}

// Observer makes the spans of jobs and flows from the committed events, with the events' own
// times: a job's span (submit to its end), the wait before each lease, each attempt (lease to
// its end), a flow's span. It holds only when the jobs between attempts became ready, and
// takes the rest from the projections (an attempt's start, worker and number stay there after
// it ends). It is fed from one goroutine, in the log's order.
type Observer struct {
	tracer trace.Tracer
	// ended holds, until a job's next lease or its end, when it became ready for that lease:
	// when its last attempt ended, or the run_at it was scheduled for (a delay, a backoff).
	ended map[string]time.Time
	// redriven holds when a client put a job back from the dead letters, until the job ends:
	// each such life of a job is a span of its own, which starts then.
	redriven map[string]time.Time
}

// NewObserver returns an observer that makes its spans with tracer, from a provider that uses
// IDGenerator.
func NewObserver(tracer trace.Tracer) *Observer {
	return &Observer{tracer: tracer, ended: map[string]time.Time{}, redriven: map[string]time.Time{}}
}

// Observation is a committed event with what its spans need of its job or flow, copied from
// the projections as they held it just after the event: it outlives the lock that guards them,
// so that the spans are made off the committer's path.
type Observation struct {
	Seq   uint64
	At    time.Time
	Event eventlog.Payload
	Job   *JobFacts  // the event's job, nil if none
	Flow  *FlowFacts // the ended flow, nil if none
	flush chan struct{}
}

// JobFacts is what spans say of a job.
type JobFacts struct {
	ID, Queue, Tenant, Type, FlowID, FlowStep, Traceparent, WorkerID string
	CreatedAt, StartedAt                                             time.Time
	// Attempt is the current or last attempt; AttemptBase the attempts before the job was last
	// re-driven (0 if never): it tells the job's lives apart.
	Attempt, AttemptBase int
}

// FlowFacts is what a flow's span says of it.
type FlowFacts struct {
	Tenant, Traceparent string
	CreatedAt           time.Time
}

// Observe returns the observation of the event at seq, committed at at, which view already
// holds, or false if no span needs it.
func Observe(view View, seq uint64, at time.Time, p eventlog.Payload) (Observation, bool) {
	o := Observation{Seq: seq, At: at, Event: p}
	var jobID string
	switch e := p.(type) {
	case eventlog.JobScheduled, eventlog.JobRetryScheduled, eventlog.JobRedriven:
		return o, true
	case eventlog.JobLeased, eventlog.JobSucceeded, eventlog.JobFailed, eventlog.JobLeaseExpired, eventlog.JobLeaseReleased,
		eventlog.JobDeadLettered, eventlog.JobCancelled:
		jobID = strings.TrimPrefix(p.Stream(), eventlog.JobStream(""))
	case eventlog.FlowEnded:
		f, ok := view.Flow(e.FlowID)
		if !ok {
			return o, false
		}
		o.Flow = &FlowFacts{Tenant: f.Tenant, Traceparent: f.Traceparent, CreatedAt: f.CreatedAt}
		return o, true
	default:
		return o, false
	}
	j := view.JobRef(jobID)
	if j == nil {
		return o, false
	}
	o.Job = &JobFacts{ID: j.ID, Queue: j.Queue, Tenant: j.Tenant, Type: j.Type, FlowID: j.FlowID, FlowStep: j.FlowStep,
		Traceparent: j.Traceparent, WorkerID: j.WorkerID, CreatedAt: j.CreatedAt, StartedAt: j.StartedAt, Attempt: j.Attempt,
		AttemptBase: j.AttemptBase}
	return o, true
}

// Apply makes the spans an observation ends, in the log's order.
func (o *Observer) Apply(ob Observation) {
	j, at := ob.Job, ob.At
	switch e := ob.Event.(type) {
	case eventlog.JobLeased:
		// The wait began when the job became ready: at its submit for the first attempt, else
		// when the last attempt ended (or the backoff after it). Across a restart that is not
		// known, and no span is better than a wrong one.
		since, known := o.ended[e.JobID]
		if !known && j.AttemptBase == 0 && e.Attempt == 1 {
			since, known = j.CreatedAt, true
		}
		delete(o.ended, e.JobID)
		if known {
			o.child(j, "tether.dispatch_wait", trace.SpanID{}, since, at, attribute.Int(AttrAttempt, e.Attempt))
		}
	case eventlog.JobSucceeded:
		o.endAttempt(j, e.LeaseID, e.Attempt, at, "succeeded", "")
		o.endJob(j, at, "succeeded", "")
	case eventlog.JobFailed:
		o.endAttempt(j, e.LeaseID, e.Attempt, at, "failed", e.ErrorCode)
	case eventlog.JobLeaseExpired:
		o.endAttempt(j, e.LeaseID, e.Attempt, at, "lease_expired", "lease_expired")
	case eventlog.JobLeaseReleased:
		o.endAttempt(j, e.LeaseID, e.Attempt, at, "released", "")
	case eventlog.JobDeadLettered:
		o.endJob(j, at, "dead_lettered", e.Reason)
	case eventlog.JobCancelled: // a leased job's attempt ended in the same append, before it
		o.endJob(j, at, "cancelled", "")
	case eventlog.JobScheduled: // its wait for a lease starts at run_at, which the lease clears
		o.ended[e.JobID] = e.RunAt
	case eventlog.JobRetryScheduled:
		o.ended[e.JobID] = e.RunAt
	case eventlog.JobRedriven:
		o.redriven[e.JobID] = at
		o.ended[e.JobID] = at
	case eventlog.FlowEnded:
		o.endFlow(ob.Flow, e, at)
	}
}

// endAttempt makes the span of the attempt that held leaseID, ended at at; failure, if set, is
// its error code.
// The lease began at the job's StartedAt, held by its WorkerID, both kept after it ends.
func (o *Observer) endAttempt(j *JobFacts, leaseID string, attempt int, at time.Time, outcome, failure string) {
	o.ended[j.ID] = at
	span := o.start(j, "tether.attempt", AttemptSpanID(leaseID), j.StartedAt)
	span.SetAttributes(attribute.Int(AttrAttempt, attempt), attribute.String(AttrLeaseID, leaseID),
		attribute.String(AttrWorkerID, j.WorkerID), attribute.String(AttrOutcome, outcome))
	if failure != "" {
		span.SetStatus(codes.Error, failure)
	}
	span.End(trace.WithTimestamp(at))
}

// endJob makes the job's span, ended at at with outcome; failure, if set, is why it failed.
func (o *Observer) endJob(j *JobFacts, at time.Time, outcome, failure string) {
	jobID := j.ID
	delete(o.ended, jobID)
	parent, tid := jobParent(j)
	start := j.CreatedAt
	if j.AttemptBase > 0 { // a re-driven life: from the re-drive, or, across a restart, from its last lease
		start = j.StartedAt
		if t, ok := o.redriven[jobID]; ok {
			start = t
		}
	}
	delete(o.redriven, jobID)
	ctx := withIDs(context.Background(), tid, JobSpanID(jobID, j.AttemptBase))
	if parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	attrs := append(jobAttributes(j), attribute.Int(AttrAttempts, j.Attempt), attribute.String(AttrOutcome, outcome))
	_, span := o.tracer.Start(ctx, "tether.job", trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	if failure != "" {
		span.SetStatus(codes.Error, failure)
	}
	span.End(trace.WithTimestamp(at))
}

// endFlow makes a flow's span, if its submit continued a trace.
func (o *Observer) endFlow(f *FlowFacts, e eventlog.FlowEnded, at time.Time) {
	parent, ok := parse(f.Traceparent)
	if !ok {
		return
	}
	ctx := withIDs(trace.ContextWithRemoteSpanContext(context.Background(), parent), trace.TraceID{}, FlowSpanID(e.FlowID))
	_, span := o.tracer.Start(ctx, "tether.flow", trace.WithTimestamp(f.CreatedAt), trace.WithAttributes(
		attribute.String(AttrFlowID, e.FlowID), attribute.String(AttrTenant, f.Tenant), attribute.String(AttrOutcome, e.Status)))
	if e.Status == eventlog.FlowFailed {
		span.SetStatus(codes.Error, "step "+e.Step+" failed")
	}
	span.End(trace.WithTimestamp(at))
}

// child makes a span of j's, from start to end.
func (o *Observer) child(j *JobFacts, name string, id trace.SpanID, start, end time.Time, attrs ...attribute.KeyValue) {
	span := o.start(j, name, id, start)
	span.SetAttributes(attrs...)
	span.End(trace.WithTimestamp(end))
}

// start opens a span of j's (a child of its span in flight), with the id asked for (zero:
// random), at start.
func (o *Observer) start(j *JobFacts, name string, id trace.SpanID, start time.Time) trace.Span {
	parent, tid := jobParent(j)
	if parent.IsValid() {
		tid = parent.TraceID()
	}
	jobSpan := JobSpanID(j.ID, j.AttemptBase)
	flags := trace.FlagsSampled
	if parent.IsValid() {
		flags = parent.TraceFlags()
	}
	ctx := trace.ContextWithRemoteSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: jobSpan, TraceFlags: flags, Remote: true}))
	if id.IsValid() {
		ctx = withIDs(ctx, trace.TraceID{}, id)
	}
	_, span := o.tracer.Start(ctx, name, trace.WithTimestamp(start), trace.WithAttributes(jobAttributes(j)...))
	return span
}

// jobParent is the span a job's span is a child of (a flow step's: its flow's; a job's: its
// submit's), or, for a job that continues no trace, none and the trace of its own.
func jobParent(j *JobFacts) (trace.SpanContext, trace.TraceID) {
	sc, ok := parse(j.Traceparent)
	if !ok {
		return trace.SpanContext{}, JobTraceID(j.ID)
	}
	if j.FlowID != "" {
		sc = trace.NewSpanContext(trace.SpanContextConfig{TraceID: sc.TraceID(), SpanID: FlowSpanID(j.FlowID), TraceFlags: sc.TraceFlags(), Remote: true})
	}
	return sc, sc.TraceID()
}

func jobAttributes(j *JobFacts) []attribute.KeyValue {
	attrs := []attribute.KeyValue{attribute.String(AttrJobID, j.ID), attribute.String(AttrQueue, j.Queue),
		attribute.String(AttrTenant, j.Tenant), attribute.String(AttrJobType, j.Type)}
	if j.FlowID != "" {
		attrs = append(attrs, attribute.String(AttrFlowID, j.FlowID), attribute.String(AttrFlowStep, j.FlowStep))
	}
	return attrs
}
