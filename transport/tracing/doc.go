// Package tracing is tether's OpenTelemetry tracing, off unless an OTLP endpoint is given.
//
// A job's trace: the submit's span (tether.submit, a child of the caller's traceparent or the
// root of a new trace), the job's span under it (tether.job, or under its flow's tether.flow),
// and under the job's span the wait before each lease (tether.dispatch_wait) and each attempt
// (tether.attempt); the worker's run (tether.run, made by the worker) under the attempt, and
// the server's handling of the worker's report (tether.complete, tether.fail, tether.release)
// under the run.
//
// The job's, flow's and attempts' spans are made from committed events with the events' own
// times (Observer), after the fact: they cost nothing on the decision path, say what the log
// says, and hold nothing per queued job. Their span ids are derived from the job, flow and
// lease ids, so that the trace context handed to a worker with its assignment (Assigned) names
// the attempt's span before it is made. A job that continues no trace (a schedule's) has a
// trace id derived from its id.
//
// Export (Provider): the spans wait in a bounded queue and go to the collector in batches, over
// OTLP; a span that finds the queue full is dropped, never waited for, and every span ended is
// counted as exported, failed, dropped or still queued (SpanCounts). A stop waits for what is
// queued FlushAtStopMax at most, whatever the collector does, and logs what it did not send.
// Its settings (ReadSettings) are the OTEL_* variables, each one the SDK or its exporters would
// read checked first, so that a mistake stops the start instead of a panic or a default taken
// in silence.
//
// A nil *Tracer is tracing off: every method returns at once.
package tracing
