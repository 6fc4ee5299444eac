package tracing

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

const caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

var t0 = time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// world is a Tracer fed the events a test appends, through real projections.
type world struct {
	t   *testing.T
	exp *tracetest.InMemoryExporter
	tr  *Tracer
	obs *Observer
	set *projections.Set
	seq uint64
}

func newWorld(t *testing.T) *world {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(IDGenerator{Random: rand.Reader}))
	return &world{t: t, exp: exp, tr: NewTracer(tp, zap.NewNop()), obs: NewObserver(tp.Tracer("test")), set: projections.New()}
}

func (w *world) append(ms int, events ...eventlog.Payload) {
	w.t.Helper()
	for _, p := range events {
		w.seq++
		if err := w.set.Apply(w.seq, at(ms), p); err != nil {
			w.t.Fatalf("seq %d %T: %v", w.seq, p, err)
		}
		if ob, ok := Observe(w.set, w.seq, at(ms), p); ok {
			w.obs.Apply(ob)
		}
	}
}

func (w *world) spans(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range w.exp.GetSpans().Snapshots() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func submitted(id, tp string) eventlog.JobSubmitted {
	return eventlog.JobSubmitted{JobID: id, Tenant: "acme", Queue: "q", Type: "resize", Payload: json.RawMessage(`{"secret":1}`),
		MaxAttempts: 3, LeaseTTLMillis: 30_000, Traceparent: tp}
}

func leased(id, lease string, attempt, ms int) eventlog.JobLeased {
	return eventlog.JobLeased{JobID: id, LeaseID: lease, WorkerID: "w1", Nonce: "n", Attempt: attempt, ExpiresAt: at(ms + 30_000)}
}

// A job's life in the log is one connected trace under its submit's span: the job, the wait
// before each lease and each attempt, with the attempt's id the one its worker was given, the
// events' own times, and the job's facts but never its payload.
func TestAJobsLifeIsOneTrace(t *testing.T) {
	w := newWorld(t)
	w.append(0, submitted("J", caller))
	w.append(5, leased("J", "L1", 1, 5))
	w.append(40, eventlog.JobFailed{JobID: "J", LeaseID: "L1", Attempt: 1, ErrorCode: "oom", Message: "out of memory", Retryable: true},
		eventlog.JobRetryScheduled{JobID: "J", Attempt: 1, BackoffMillis: 50, RunAt: at(90)})
	w.append(100, leased("J", "L2", 2, 100))
	w.append(180, eventlog.JobSucceeded{JobID: "J", LeaseID: "L2", Attempt: 2, Output: json.RawMessage(`1`)})

	jobs, attempts, waits := w.spans("tether.job"), w.spans("tether.attempt"), w.spans("tether.dispatch_wait")
	if len(jobs) != 1 || len(attempts) != 2 || len(waits) != 2 || len(w.exp.GetSpans()) != 5 {
		t.Fatalf("spans: %d job, %d attempt, %d wait, %d in all", len(jobs), len(attempts), len(waits), len(w.exp.GetSpans()))
	}
	job := jobs[0]
	if job.Parent().SpanID().String() != "b7ad6b7169203331" || job.SpanContext().SpanID() != JobSpanID("J", 0) ||
		!job.StartTime().Equal(at(0)) || !job.EndTime().Equal(at(180)) {
		t.Errorf("job span: parent %s id %s %v..%v", job.Parent().SpanID(), job.SpanContext().SpanID(), job.StartTime(), job.EndTime())
	}
	for _, s := range w.exp.GetSpans().Snapshots() {
		if s.SpanContext().TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
			t.Errorf("%s is in trace %s", s.Name(), s.SpanContext().TraceID())
		}
		if s.Name() != "tether.job" && s.Parent().SpanID() != JobSpanID("J", 0) {
			t.Errorf("%s's parent is %s, not the job's span", s.Name(), s.Parent().SpanID())
		}
		for _, a := range s.Attributes() {
			if a.Value.String() == `{"secret":1}` {
				t.Errorf("%s carries the payload in %s", s.Name(), a.Key)
			}
		}
	}
	want := map[string][2]time.Time{"L1": {at(5), at(40)}, "L2": {at(100), at(180)}}
	for _, s := range attempts {
		var lease string
		for _, a := range s.Attributes() {
			if a.Key == AttrLeaseID {
				lease = a.Value.AsString()
			}
		}
		if s.SpanContext().SpanID() != AttemptSpanID(lease) || !s.StartTime().Equal(want[lease][0]) || !s.EndTime().Equal(want[lease][1]) {
			t.Errorf("attempt of %q: %s %v..%v", lease, s.SpanContext().SpanID(), s.StartTime(), s.EndTime())
		}
		// The worker of this lease was told this span is its parent.
		if got := w.tr.Assigned(caller, "J", lease); got != "00-0af7651916cd43dd8448eb211c80319c-"+s.SpanContext().SpanID().String()+"-01" {
			t.Errorf("the assignment of %s names %s", lease, got)
		}
	}
	// The second wait starts when the backoff ran out, not when the attempt failed.
	for _, s := range waits {
		if s.EndTime().Equal(at(100)) && !s.StartTime().Equal(at(90)) {
			t.Errorf("the wait for lease 2 started at %v", s.StartTime())
		}
	}
	if o := w.obs; len(o.ended)+len(o.redriven) != 0 {
		t.Errorf("the observer still holds %d ended, %d redriven", len(o.ended), len(o.redriven))
	}
}

// A job that continues no trace (a schedule's) is a trace of its own, whose id the assignment
// names too; a flow step's job is a child of its flow's span.
func TestUntracedJobsAndFlowSteps(t *testing.T) {
	w := newWorld(t)
	w.append(0, submitted("S", ""))
	w.append(1, leased("S", "LS", 1, 1))
	w.append(2, eventlog.JobSucceeded{JobID: "S", LeaseID: "LS", Attempt: 1, Output: json.RawMessage(`1`)})
	job := w.spans("tether.job")[0]
	if job.Parent().IsValid() || job.SpanContext().TraceID() != JobTraceID("S") {
		t.Errorf("an untraced job's span: parent %v trace %s", job.Parent(), job.SpanContext().TraceID())
	}
	attempt := w.spans("tether.attempt")[0]
	if got := w.tr.Assigned("", "S", "LS"); got != "00-"+JobTraceID("S").String()+"-"+attempt.SpanContext().SpanID().String()+"-01" {
		t.Errorf("the untraced job's assignment names %s", got)
	}

	w.append(10, eventlog.FlowSubmitted{FlowID: "F", Tenant: "acme", Name: "f", Traceparent: caller,
		Steps: []eventlog.FlowStep{{Name: "a", JobTemplate: eventlog.JobTemplate{Queue: "q", Type: "t", MaxAttempts: 1, LeaseTTLMillis: 30_000}}}})
	step := submitted("A", caller)
	step.FlowID, step.FlowStep = "F", "a"
	w.append(10, step)
	w.append(11, leased("A", "LA", 1, 11))
	w.append(12, eventlog.JobSucceeded{JobID: "A", LeaseID: "LA", Attempt: 1, Output: json.RawMessage(`1`)})
	w.append(12, eventlog.FlowEnded{FlowID: "F", Status: eventlog.FlowSucceeded})
	flows := w.spans("tether.flow")
	if len(flows) != 1 || flows[0].SpanContext().SpanID() != FlowSpanID("F") || flows[0].Parent().SpanID().String() != "b7ad6b7169203331" {
		t.Fatalf("flow spans %v", flows)
	}
	for _, s := range w.spans("tether.job") {
		if s.SpanContext().SpanID() == JobSpanID("A", 0) && s.Parent().SpanID() != FlowSpanID("F") {
			t.Errorf("the step's job span's parent is %s, not the flow's", s.Parent().SpanID())
		}
	}
}

// Off is nil: what the request carried goes on as it was, and nothing is made.
func TestOffIsNil(t *testing.T) {
	var tr *Tracer
	if tp, span := tr.StartSubmit(context.Background(), "tether.submit", caller, "acme"); tp != caller || span.span != nil {
		t.Errorf("off: %q %v", tp, span)
	}
	if got := tr.Assigned(caller, "J", "L"); got != caller {
		t.Errorf("off, an assignment names %q", got)
	}
	tr.Reported("tether.complete", caller, "J", "L", "w", time.Now(), nil)
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

// A submit's span continues the caller's trace, and its jobs continue the submit's span; a
// submit with no caller starts a trace.
func TestSubmitSpan(t *testing.T) {
	w := newWorld(t)
	tp, span := w.tr.StartSubmit(context.Background(), "tether.submit", caller, "acme")
	span.End(nil)
	s := w.spans("tether.submit")[0]
	if s.Parent().SpanID().String() != "b7ad6b7169203331" || tp != format(s.SpanContext()) || s.SpanKind() != trace.SpanKindServer {
		t.Errorf("submit span %s parent %s kind %v", tp, s.Parent().SpanID(), s.SpanKind())
	}
	if tp, span := w.tr.StartSubmit(context.Background(), "tether.submit", "", "acme"); !sameTrace(tp, tp) || tp[3:35] == caller[3:35] {
		t.Errorf("a submit without a caller: %q", tp)
	} else {
		span.End(nil)
	}
}

func sameTrace(a, b string) bool {
	_, ok1 := parse(a)
	_, ok2 := parse(b)
	return ok1 && ok2 && a[3:35] == b[3:35]
}

// discard is an exporter that drops what it is given, so that a benchmark measures making and
// batching spans, not a collector.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkObserveJob measures what one job's spans (job, wait, attempt) cost with tracing on
// and the export queue, as the server makes them: on the committer, which copies what the
// spans need (committer), and on the goroutine that makes them (spans).
func BenchmarkObserveJob(b *testing.B) {
	s, err := ReadSettings("http://collector:4318", env(nil))
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(newExportQueue(discard{}, s, zap.NewNop())),
		sdktrace.WithIDGenerator(IDGenerator{Random: rand.Reader}))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	o := NewObserver(tp.Tracer("bench"))
	set := projections.New()
	var seq uint64
	var obs []Observation
	observe := func(p eventlog.Payload) {
		seq++
		if err := set.Apply(seq, at(int(seq)), p); err != nil {
			b.Fatal(err)
		}
		if ob, ok := Observe(set, seq, at(int(seq)), p); ok {
			obs = append(obs, ob)
		}
	}
	b.Run("committer", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			id := fmt.Sprintf("J%09d", seq)
			lease := leased(id, "L"+id, 1, 0)
			done := eventlog.JobSucceeded{JobID: id, LeaseID: "L" + id, Attempt: 1, Output: json.RawMessage(`1`)}
			seq++
			_ = set.Apply(seq, at(int(seq)), submitted(id, caller))
			seq++
			_ = set.Apply(seq, at(int(seq)), lease)
			b.StartTimer()
			if ob, ok := Observe(set, seq, at(int(seq)), lease); ok {
				obs = append(obs, ob)
			}
			b.StopTimer()
			seq++
			_ = set.Apply(seq, at(int(seq)), done)
			b.StartTimer()
			if ob, ok := Observe(set, seq, at(int(seq)), done); ok {
				obs = append(obs, ob)
			}
		}
	})
	b.Run("spans", func(b *testing.B) {
		b.StopTimer()
		obs = obs[:0]
		for i := 0; i < b.N; i++ {
			id := fmt.Sprintf("S%09d", i)
			observe(submitted(id, caller))
			observe(leased(id, "L"+id, 1, 0))
			observe(eventlog.JobSucceeded{JobID: id, LeaseID: "L" + id, Attempt: 1, Output: json.RawMessage(`1`)})
		}
		b.ReportAllocs()
		b.StartTimer()
		for _, ob := range obs {
			o.Apply(ob)
		}
	})
}

// The committer hands observations over and never waits: past the queue's room they are
// dropped and counted; Shutdown makes the spans of every one handed over before it.
func TestObservationsAreHandedOverNotWaitedFor(t *testing.T) {
	exp := &counting{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithIDGenerator(IDGenerator{Random: rand.Reader}))
	set := projections.New()
	events := []eventlog.Payload{submitted("J", caller), leased("J", "L", 1, 1),
		eventlog.JobSucceeded{JobID: "J", LeaseID: "L", Attempt: 1, Output: json.RawMessage(`1`)}}
	for i, p := range events {
		if err := set.Apply(uint64(i+1), at(i), p); err != nil {
			t.Fatal(err)
		}
	}

	stalled := &Tracer{provider: tp, log: zap.NewNop(), observations: make(chan Observation, 1)} // nobody makes its spans
	stalled.Observe(set, 2, at(1), events[1])
	stalled.Observe(set, 3, at(2), events[2]) // no room: dropped, not waited for
	if stalled.dropped.Load() != 1 {
		t.Errorf("dropped %d, want 1", stalled.dropped.Load())
	}

	tr := NewTracer(tp, zap.NewNop())
	for i, p := range events {
		tr.Observe(set, uint64(i+1), at(i), p)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := exp.spans.Load(); n != 3 {
		t.Errorf("%d spans after Shutdown, want the job's 3", n)
	}
}

// counting is an exporter that counts the spans it is given (the in-memory one forgets them
// when it is shut down).
type counting struct{ spans atomic.Int64 }

func (c *counting) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	c.spans.Add(int64(len(spans)))
	return nil
}
func (c *counting) Shutdown(context.Context) error { return nil }

// A dead letter put back is a second life of the job, a job span of its own, with or without a
// restart of the server between the re-drive and the end (the observer's memory lost): never
// the first life's span id again, nor a span that starts before it could have.
func TestARedrivenJobIsALifeOfItsOwn(t *testing.T) {
	for _, restart := range []bool{false, true} {
		w := newWorld(t)
		w.append(0, submitted("J", caller))
		w.append(10, leased("J", "L1", 1, 10))
		w.append(20, eventlog.JobFailed{JobID: "J", LeaseID: "L1", Attempt: 1, ErrorCode: "boom"},
			eventlog.JobDeadLettered{JobID: "J", Reason: "non_retryable", Attempt: 1})
		w.append(100, eventlog.JobRedriven{JobID: "J", MaxAttempts: 3})
		if restart {
			w.obs = NewObserver(w.obs.tracer)
		}
		w.append(150, leased("J", "L2", 2, 150))
		w.append(170, eventlog.JobSucceeded{JobID: "J", LeaseID: "L2", Attempt: 2, Output: json.RawMessage(`1`)})

		jobs := w.spans("tether.job")
		if len(jobs) != 2 || jobs[0].SpanContext().SpanID() == jobs[1].SpanContext().SpanID() {
			t.Fatalf("restart %v: job spans %v", restart, jobs)
		}
		second := jobs[1]
		wantStart := at(100)
		if restart {
			wantStart = at(150) // the re-drive's time went with the observer: from its lease
		}
		if second.SpanContext().SpanID() != JobSpanID("J", 1) || !second.StartTime().Equal(wantStart) || !second.EndTime().Equal(at(170)) {
			t.Errorf("restart %v: the second life %s %v..%v", restart, second.SpanContext().SpanID(), second.StartTime(), second.EndTime())
		}
		for _, s := range w.spans("tether.attempt") {
			if lease := s.SpanContext().SpanID(); lease == AttemptSpanID("L2") && s.Parent().SpanID() != JobSpanID("J", 1) {
				t.Errorf("restart %v: attempt 2 is under %s, not the second life", restart, s.Parent().SpanID())
			}
		}
		waits := w.spans("tether.dispatch_wait")
		switch {
		case !restart && (len(waits) != 2 || !waits[1].StartTime().Equal(at(100))):
			t.Errorf("the second wait: %v", waits)
		case restart && len(waits) != 1: // its start is not known after the restart
			t.Errorf("after a restart, %d waits", len(waits))
		}
	}
}
