package tracing

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"
)

// SpanCounts says what became of the spans a Provider made. Every span ended is in one of the
// other counts: Ended = Exported + Failed + Dropped + Unsent + Queued (at rest; a count read
// while a span moves on may be off by that span).
type SpanCounts struct {
	// Ended counts the sampled spans ended, those to be exported.
	Ended int64
	// Exported counts the spans the collector took.
	Exported int64
	// Failed counts the spans in exports that failed or timed out (a collector down,
	// refusing, too slow).
	Failed int64
	// Dropped counts the spans that found the queue full (a collector too slow or away).
	Dropped int64
	// Unsent counts the spans still queued when the stop's time ran out (FlushAtStopMax).
	Unsent int64
	// Queued counts the spans waiting: in the queue, or in the batch being filled or exported.
	Queued int64
}

// lost is the spans that were not exported and will not be.
func (c SpanCounts) lost() int64 { return c.Failed + c.Dropped + c.Unsent }

// exportQueue is the span processor of a Provider: the SDK's batch span processor, with every
// span counted (SpanCounts). The SDK's drops a span that finds its queue full with no count a
// user can read, panics on a negative OTEL_BSP_MAX_QUEUE_SIZE (it reads the variable itself),
// and leaves what a stop did not send uncounted, its export still running.
//
// Ended spans wait in a queue of Settings.QueueSize; one goroutine takes them into batches of
// Settings.BatchSize, and exports a batch once it is full or Settings.ScheduleDelay after the
// last export, each export given Settings.ExportTimeout. A span that finds the queue full is
// dropped, never waited for: tracing never slows the server.
type exportQueue struct {
	exporter                         sdktrace.SpanExporter
	batchSize                        int
	scheduleDelay, exportTimeout     time.Duration
	log                              *zap.Logger
	spans                            chan sdktrace.ReadOnlySpan
	flushes                          chan chan struct{}
	ended, exported, failed, dropped atomic.Int64
	unsent                           atomic.Int64
	// held is the spans taken from the queue into the batch in hand.
	held atomic.Int64
	// lastDropWarning is when the last TRACE_SPANS_DROPPED line was logged (UnixNano).
	lastDropWarning atomic.Int64

	// mu guards stopped: OnEnd holds it for reading while it hands a span over, so that once
	// Shutdown has set stopped, no span enters the queue.
	mu      sync.RWMutex
	stopped bool
	stop    chan struct{}      // closed by Shutdown: export what is queued, then end
	cut     context.CancelFunc // ends the export under way and what is left: the stop's time ran out
	done    chan struct{}      // closed once the exporting goroutine has ended
}

var _ sdktrace.SpanProcessor = (*exportQueue)(nil)

func newExportQueue(exporter sdktrace.SpanExporter, s Settings, log *zap.Logger) *exportQueue {
	ctx, cut := context.WithCancel(context.Background())
	q := &exportQueue{exporter: exporter, batchSize: s.BatchSize, scheduleDelay: s.ScheduleDelay, exportTimeout: s.ExportTimeout, log: log,
		spans: make(chan sdktrace.ReadOnlySpan, s.QueueSize), flushes: make(chan chan struct{}),
		stop: make(chan struct{}), cut: cut, done: make(chan struct{})}
	go q.run(ctx)
	return q
}

func (q *exportQueue) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues a sampled span to be exported, or drops it if the queue is full.
func (q *exportQueue) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	q.ended.Add(1)
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.stopped {
		q.unsent.Add(1)
		return
	}
	select {
	case q.spans <- s:
	default:
		n := q.dropped.Add(1)
		if last := q.lastDropWarning.Load(); time.Since(time.Unix(0, last)) >= errorsEvery && q.lastDropWarning.CompareAndSwap(last, time.Now().UnixNano()) {
			q.log.Warn("spans are dropped: the export queue is full (the collector is slow or away)", zap.String("code", "TRACE_SPANS_DROPPED"),
				zap.Int64("dropped", n), zap.Int("queue", cap(q.spans)))
		}
	}
}

// ForceFlush exports what is queued now, waiting for it as long as ctx allows.
func (q *exportQueue) ForceFlush(ctx context.Context) error {
	done := make(chan struct{})
	select {
	case q.flushes <- done:
	case <-q.done:
		return nil
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

// Shutdown exports what is queued while ctx allows; when it ends, the export under way is
// cut short (its spans failed) and what is left is counted as unsent. Then it stops the
// exporter.
func (q *exportQueue) Shutdown(ctx context.Context) error {
	q.mu.Lock()
	first := !q.stopped
	q.stopped = true
	q.mu.Unlock()
	if first {
		close(q.stop)
	}
	var late error
	select {
	case <-q.done:
	case <-ctx.Done():
		late = ctx.Err()
		q.cut()
		<-q.done // at once: an export returns when its context ends
	}
	q.cut()
	return errors.Join(late, q.exporter.Shutdown(ctx))
}

// run takes the queued spans into batches and exports them, until the stop.
func (q *exportQueue) run(ctx context.Context) {
	defer close(q.done)
	batch := make([]sdktrace.ReadOnlySpan, 0, q.batchSize)
	timer := time.NewTimer(q.scheduleDelay)
	defer timer.Stop()
	send := func() {
		if len(batch) > 0 {
			q.export(ctx, batch)
			clear(batch) // let the spans go
			batch = batch[:0]
			q.held.Store(0)
		}
		timer.Reset(q.scheduleDelay)
	}
	take := func(s sdktrace.ReadOnlySpan) {
		batch = append(batch, s)
		q.held.Store(int64(len(batch)))
		if len(batch) == q.batchSize {
			send()
		}
	}
	// drain takes all that is queued, while the stop's time lasts, and sends it.
	drain := func() {
		for ctx.Err() == nil {
			select {
			case s := <-q.spans:
				take(s)
			default:
				send()
				return
			}
		}
	}
	for {
		select {
		case <-q.stop: // first: once stopping, what is queued goes out as drain says
			drain()
			// What the stop's time left: the batch in hand, and the queue, which no span
			// enters any more.
			unsent := int64(len(batch))
			for len(q.spans) > 0 {
				<-q.spans
				unsent++
			}
			q.unsent.Add(unsent)
			q.held.Store(0)
			return
		default:
		}
		select {
		case s := <-q.spans:
			take(s)
		case <-timer.C:
			send()
		case flushed := <-q.flushes:
			drain()
			close(flushed)
		case <-q.stop:
		}
	}
}

// export sends one batch, for exportTimeout at most.
func (q *exportQueue) export(ctx context.Context, batch []sdktrace.ReadOnlySpan) {
	ctx, cancel := context.WithTimeout(ctx, q.exportTimeout)
	err := q.exporter.ExportSpans(ctx, batch)
	cancel()
	if err != nil {
		q.failed.Add(int64(len(batch)))
		otel.Handle(err)
		return
	}
	q.exported.Add(int64(len(batch)))
}

// counts reads the counts; Ended last, so that a span counted elsewhere is counted ended too.
func (q *exportQueue) counts() SpanCounts {
	c := SpanCounts{Exported: q.exported.Load(), Failed: q.failed.Load(), Dropped: q.dropped.Load(), Unsent: q.unsent.Load(),
		Queued: int64(len(q.spans)) + q.held.Load()}
	c.Ended = q.ended.Load()
	return c
}
