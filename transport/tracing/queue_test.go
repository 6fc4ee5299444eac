package tracing

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// hung is an exporter whose collector takes each export and never answers: ExportSpans
// returns only when its context ends. entered receives the size of each batch it is given.
type hung struct{ entered chan int }

func (h hung) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	h.entered <- len(spans)
	<-ctx.Done()
	return ctx.Err()
}
func (hung) Shutdown(context.Context) error { return nil }

// batches is an exporter that keeps the size of each batch, or fails each with err if set.
type batches struct {
	mu    sync.Mutex
	sizes []int
	err   error
}

func (b *batches) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sizes = append(b.sizes, len(spans))
	return b.err
}
func (*batches) Shutdown(context.Context) error { return nil }

func queueSettings(queue, batch int) Settings {
	return Settings{QueueSize: queue, BatchSize: batch, ScheduleDelay: time.Hour, ExportTimeout: time.Hour}
}

// endSpans ends n sampled spans of tp.
func endSpans(tp *sdktrace.TracerProvider, n int) {
	for range n {
		_, span := tp.Tracer("test").Start(context.Background(), "s")
		span.End()
	}
}

// addsUp fails the test unless every span ended is in exactly one count.
func addsUp(t *testing.T, c SpanCounts) {
	t.Helper()
	if c.Ended != c.Exported+c.Failed+c.Dropped+c.Unsent+c.Queued {
		t.Errorf("the counts do not add up: %+v", c)
	}
}

// With a collector that never answers, every span is counted: those in the export under way
// and those queued behind it as queued, those that found the queue full as dropped; a stop
// whose time runs out cuts the export short (its spans failed) and counts what is left as
// unsent, and returns: it does not wait for the collector.
func TestAHungCollectorLosesSpansCountedAndHoldsNoStop(t *testing.T) {
	exp := hung{entered: make(chan int, 10)}
	q := newExportQueue(exp, queueSettings(4, 2), zap.NewNop())
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(q))
	endSpans(tp, 2) // a full batch: its export starts, and hangs
	if n := <-exp.entered; n != 2 {
		t.Fatalf("the first export took %d spans, want the batch of 2", n)
	}
	endSpans(tp, 8) // 4 wait in the queue, 4 find it full
	c := q.counts()
	if c != (SpanCounts{Ended: 10, Dropped: 4, Queued: 6}) {
		t.Errorf("with the export hung: %+v", c)
	}
	addsUp(t, c)

	ctx, stopTimeRunsOut := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- q.Shutdown(ctx) }()
	stopTimeRunsOut()
	if err := <-stopped; !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown: %v, want the stop's context's error", err)
	}
	endSpans(tp, 1) // after the stop: never queued
	c = q.counts()
	if c != (SpanCounts{Ended: 11, Failed: 2, Dropped: 4, Unsent: 5}) {
		t.Errorf("after the stop: %+v", c)
	}
	addsUp(t, c)
}

// A collector that answers gets every span, in batches no larger than asked; a full batch
// goes at once, the rest when flushed or at the stop; a failed export counts its spans failed.
func TestSpansAreExportedInBatches(t *testing.T) {
	exp := &batches{}
	q := newExportQueue(exp, queueSettings(100, 3), zap.NewNop())
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(q))
	endSpans(tp, 7)
	if err := q.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	endSpans(tp, 2)
	if err := q.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	exp.mu.Lock()
	sizes := exp.sizes
	exp.mu.Unlock()
	total := 0
	for _, n := range sizes {
		if n > 3 {
			t.Errorf("a batch of %d, want 3 at most: %v", n, sizes)
		}
		total += n
	}
	if c := q.counts(); total != 9 || c != (SpanCounts{Ended: 9, Exported: 9}) {
		t.Errorf("exported %d in %v; counts %+v", total, sizes, c)
	}

	failing := &batches{err: errors.New("503")}
	q = newExportQueue(failing, queueSettings(100, 2), zap.NewNop())
	endSpans(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(q)), 5)
	if err := q.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := q.counts(); c != (SpanCounts{Ended: 5, Failed: 5}) {
		t.Errorf("with every export failing: %+v", c)
	}
}

// A batch that is not full goes once the schedule's delay has passed since the last export.
func TestABatchThatIsNotFullGoesOnSchedule(t *testing.T) {
	s := queueSettings(100, 50)
	s.ScheduleDelay = 10 * time.Millisecond
	exp := &batches{}
	q := newExportQueue(exp, s, zap.NewNop())
	defer func() { _ = q.Shutdown(context.Background()) }()
	endSpans(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(q)), 3)
	for deadline := time.Now().Add(30 * time.Second); q.counts().Exported != 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("3 spans not exported on schedule: %+v", q.counts())
		}
	}
}

// Spans that are not sampled are not the queue's: neither queued nor counted.
func TestUnsampledSpansAreNotCounted(t *testing.T) {
	q := newExportQueue(&batches{}, queueSettings(10, 5), zap.NewNop())
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(q), sdktrace.WithSampler(recordOnly{}))
	endSpans(tp, 3)
	if err := q.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := q.counts(); c != (SpanCounts{}) {
		t.Errorf("%+v", c)
	}
}

// recordOnly records every span and samples none.
type recordOnly struct{}

func (recordOnly) ShouldSample(sdktrace.SamplingParameters) sdktrace.SamplingResult {
	return sdktrace.SamplingResult{Decision: sdktrace.RecordOnly}
}
func (recordOnly) Description() string { return "recordOnly" }

// The OTLP exporter gives up an export when its context ends, so a stop whose time runs out
// returns although the collector took the POST and never answers; the stop logs what it lost.
func TestAStopLeavesAHungCollectorBehind(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			go func() {
				if _, err := c.Read(make([]byte, 1)); err == nil {
					got <- struct{}{}
				}
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	defer ln.Close()
	s, err := ReadSettings("http://"+ln.Addr().String(), env(map[string]string{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	logs, seen := observer.New(zap.WarnLevel)
	tp, err := NewProvider(context.Background(), s, "tether", zap.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	endSpans(tp.TracerProvider, 2) // the first is posted at once, and never answered
	<-got
	ctx, stopTimeRunsOut := context.WithCancel(context.Background())
	stopTimeRunsOut()
	if err := tp.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown: %v", err)
	}
	if c := tp.Counts(); c != (SpanCounts{Ended: 2, Failed: 1, Unsent: 1}) {
		t.Errorf("%+v", c)
	}
	if lost := seen.FilterField(zap.String("code", "TRACE_SPANS_LOST")).All(); len(lost) != 1 || lost[0].ContextMap()["unsent_at_stop"] != int64(1) {
		t.Errorf("the stop logged %v", seen.All())
	}
}
