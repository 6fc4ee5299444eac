package tracing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/tetherhq/tether/eventlog"
)

// Tracer is the server's tracing; a nil *Tracer is tracing off, and every method of it costs a
// comparison.
type Tracer struct {
	provider SpanProvider
	tracer   trace.Tracer
	log      *zap.Logger
	// observations go from the committer (Observe) to the goroutine that makes their spans;
	// dropped counts those that found it full.
	observations chan Observation
	dropped      atomic.Int64
}

// SpanProvider is what a Tracer makes its spans with: a Provider, or, in tests, any tracer
// provider that uses IDGenerator.
type SpanProvider interface {
	trace.TracerProvider
	Shutdown(context.Context) error
}

// observationsMax bounds the observations waiting for their spans: past it they are dropped,
// never waited for.
const observationsMax = 1 << 16

// NewTracer returns tracing that makes its spans with provider, which must use IDGenerator.
func NewTracer(provider SpanProvider, log *zap.Logger) *Tracer {
	tr := provider.Tracer("github.com/tetherhq/tether")
	t := &Tracer{provider: provider, tracer: tr, log: log, observations: make(chan Observation, observationsMax)}
	go t.makeSpans(NewObserver(tr))
	return t
}

// makeSpans makes the spans of the observations, in order, until the process ends.
func (t *Tracer) makeSpans(o *Observer) {
	for ob := range t.observations {
		if ob.flush != nil {
			close(ob.flush)
			continue
		}
		o.Apply(ob)
	}
}

// Observe takes one committed event once the projections (view) have it
// (broker.Config.Observe), in the log's order, from one goroutine at a time. It copies what
// the spans need and leaves them to be made on a goroutine of their own: the committer, which
// holds the projections' lock, does not wait for them.
func (t *Tracer) Observe(view View, seq uint64, at time.Time, p eventlog.Payload) {
	ob, ok := Observe(view, seq, at, p)
	if !ok {
		return
	}
	select {
	case t.observations <- ob:
	default:
		if t.dropped.Add(1) == 1 {
			t.log.Warn("spans are dropped: more jobs end than their spans can be made for", zap.String("code", "TRACE_SPANS_DROPPED"))
		}
	}
}

// Counts says what became of the spans (zero with a provider that does not count them), and
// how many committed events' spans were not made (their hand-off was full).
func (t *Tracer) Counts() (spans SpanCounts, eventsDropped int64) {
	if p, ok := t.provider.(*Provider); ok {
		spans = p.Counts()
	}
	return spans, t.dropped.Load()
}

// Shutdown makes the spans of what was observed, exports what is queued, and stops the
// exporter, all within ctx.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	flushed := t.flush(ctx) // on time or not, what is queued is sent
	if n := t.dropped.Load(); n > 0 {
		t.log.Warn("spans were dropped", zap.String("code", "TRACE_SPANS_DROPPED"), zap.Int64("events", n))
	}
	return errors.Join(flushed, t.provider.Shutdown(ctx))
}

// flush waits until the spans of everything observed so far are made.
func (t *Tracer) flush(ctx context.Context) error {
	done := make(chan struct{})
	select {
	case t.observations <- Observation{flush: done}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Span is a span a request opened; its zero value (tracing off) does nothing, and costs no
// allocation (no variadic arguments, whose slices would escape).
type Span struct{ span trace.Span }

// SetString sets an attribute.
func (s Span) SetString(key, value string) {
	if s.span != nil {
		s.span.SetAttributes(attribute.String(key, value))
	}
}

// SetInt sets an attribute.
func (s Span) SetInt(key string, value int64) {
	if s.span != nil {
		s.span.SetAttributes(attribute.Int64(key, value))
	}
}

// End ends the span; err, if not nil, is its error.
func (s Span) End(err error) {
	if s.span == nil {
		return
	}
	if err != nil {
		s.span.SetStatus(codes.Error, err.Error())
	}
	s.span.End()
}

// StartSubmit opens the span of a submit (name: tether.submit, tether.submit_batch,
// tether.submit_flow) that continues caller, a version 00 traceparent or "" to start a trace.
// It returns the traceparent the submit's jobs are to continue: the submit's span, or caller
// as it is when tracing is off.
func (t *Tracer) StartSubmit(ctx context.Context, name, caller, tenant string) (string, Span) {
	if t == nil {
		return caller, Span{}
	}
	if sc, ok := parse(caller); ok {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	_, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attribute.String(AttrTenant, tenant)))
	return format(span.SpanContext()), Span{span}
}

// Reported makes the span of a worker's report (name: tether.complete, tether.fail,
// tether.release) that the server took from start until now, as a child of the trace context
// the worker sent with it (its run's span, or the attempt's); nothing when it sent none.
func (t *Tracer) Reported(name, traceparent, jobID, leaseID, workerID string, start time.Time, err error) {
	if t == nil {
		return
	}
	sc, ok := parse(traceparent)
	if !ok {
		return
	}
	_, span := t.tracer.Start(trace.ContextWithRemoteSpanContext(context.Background(), sc), name, trace.WithTimestamp(start),
		trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attribute.String(AttrJobID, jobID),
			attribute.String(AttrLeaseID, leaseID), attribute.String(AttrWorkerID, workerID)))
	Span{span}.End(err)
}

// Assigned is the trace context a worker gets with a lease of a job that continues
// traceparent: the same trace, with the attempt's span (AttemptSpanID) as parent. A job that
// continues none is in a trace of its own (JobTraceID). Off, traceparent is passed on as it is.
func (t *Tracer) Assigned(traceparent, jobID, leaseID string) string {
	if t == nil {
		return traceparent
	}
	tid, flags := JobTraceID(jobID), trace.FlagsSampled
	if sc, ok := parse(traceparent); ok {
		tid, flags = sc.TraceID(), sc.TraceFlags()
	}
	return format(trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: AttemptSpanID(leaseID), TraceFlags: flags}))
}

// The attributes of tether's spans. Never the payload, the output or an error's message.
const (
	AttrJobID    = "tether.job.id"
	AttrJobType  = "tether.job.type"
	AttrQueue    = "tether.queue"
	AttrTenant   = "tether.tenant"
	AttrAttempt  = "tether.attempt"
	AttrAttempts = "tether.attempts"
	AttrLeaseID  = "tether.lease.id"
	AttrWorkerID = "tether.worker.id"
	AttrOutcome  = "tether.outcome"
	AttrFlowID   = "tether.flow.id"
	AttrFlowStep = "tether.flow.step"
	AttrSeq      = "tether.seq"
	AttrJobs     = "tether.jobs"
)

// JobSpanID is the span id of a job's span. A dead letter put back is a life of its own, with a
// span of its own: attemptBase is the attempts before it was put back (0 for the first life),
// which the projections keep, so the id is the same after a restart.
func JobSpanID(jobID string, attemptBase int) trace.SpanID {
	if attemptBase == 0 {
		return spanID("tether/job/" + jobID)
	}
	return spanID("tether/job/" + jobID + "/" + strconv.Itoa(attemptBase))
}

// AttemptSpanID is the span id of the attempt that holds a lease.
func AttemptSpanID(leaseID string) trace.SpanID { return spanID("tether/lease/" + leaseID) }

// FlowSpanID is the span id of a flow's span.
func FlowSpanID(flowID string) trace.SpanID { return spanID("tether/flow/" + flowID) }

// JobTraceID is the trace of a job that continues none (a schedule's, or one submitted before
// tracing was on).
func JobTraceID(jobID string) trace.TraceID {
	sum := sha256.Sum256([]byte("tether/trace/" + jobID))
	var id trace.TraceID
	copy(id[:], sum[:16])
	return id
}

func spanID(s string) trace.SpanID {
	sum := sha256.Sum256([]byte(s))
	var id trace.SpanID
	copy(id[:], sum[:8])
	if !id.IsValid() {
		id[7] = 1
	}
	return id
}

// parse reads a version 00 traceparent (the form the log keeps, transport.ParseTraceparent's).
func parse(tp string) (trace.SpanContext, bool) {
	if len(tp) != 55 || tp[:3] != "00-" {
		return trace.SpanContext{}, false
	}
	tid, err1 := trace.TraceIDFromHex(tp[3:35])
	sid, err2 := trace.SpanIDFromHex(tp[36:52])
	flags, err3 := hex.DecodeString(tp[53:55])
	if err1 != nil || err2 != nil || err3 != nil {
		return trace.SpanContext{}, false
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]), Remote: true}), true
}

// format writes a span context as a version 00 traceparent.
func format(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// idsKey carries the ids a span must have (IDGenerator): ids{} in a context.
type idsKey struct{}

type ids struct {
	trace trace.TraceID // for a span with no parent; zero: random
	span  trace.SpanID
}

// withIDs returns ctx asking for a span with id span (and, with no parent, in trace tid).
func withIDs(ctx context.Context, tid trace.TraceID, span trace.SpanID) context.Context {
	return context.WithValue(ctx, idsKey{}, ids{tid, span})
}

// IDGenerator gives a span the id its context asks for (the Observer's derived ids), and
// random ids otherwise: the tracer provider of a Tracer must use it.
type IDGenerator struct {
	Random interface{ Read([]byte) (int, error) }
}

// NewIDs makes a trace and span id for a span with no parent.
func (g IDGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	want, _ := ctx.Value(idsKey{}).(ids)
	t := want.trace
	for !t.IsValid() {
		_, _ = g.Random.Read(t[:])
	}
	return t, g.NewSpanID(ctx, t)
}

// NewSpanID makes the id of a span of trace t.
func (g IDGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if want, ok := ctx.Value(idsKey{}).(ids); ok {
		return want.span
	}
	var s trace.SpanID
	for !s.IsValid() {
		_, _ = g.Random.Read(s[:])
	}
	return s
}
