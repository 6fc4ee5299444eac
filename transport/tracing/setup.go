package tracing

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.uber.org/zap"
)

// Enabled reports whether traces are to be exported: an endpoint given (--otel-endpoint), or
// one in the standard OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT variables, and the SDK not
// disabled (OTEL_SDK_DISABLED=true, OTEL_TRACES_EXPORTER=none).
func Enabled(endpoint string) bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || os.Getenv("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	return endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Protocol is the OTLP protocol the standard variables ask for: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
// else OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf.
func Protocol() string {
	return cmp.Or(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), "http/protobuf")
}

// newExporter returns the OTLP exporter the protocol asks for: over HTTP (protobuf) to
// endpoint's /v1/traces, or over gRPC to endpoint; where the variables say when endpoint is "".
func newExporter(ctx context.Context, endpoint string) (sdktrace.SpanExporter, error) {
	switch p := Protocol(); p {
	case "grpc":
		var opts []otlptracegrpc.Option
		if endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(endpoint))
		}
		return otlptracegrpc.New(ctx, opts...)
	case "http/protobuf":
		var opts []otlptracehttp.Option
		if endpoint != "" {
			if !strings.HasSuffix(strings.TrimRight(endpoint, "/"), "/v1/traces") {
				endpoint = strings.TrimRight(endpoint, "/") + "/v1/traces"
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(endpoint))
		}
		return otlptracehttp.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: tether exports over http/protobuf or grpc", p)
	}
}

// CheckEndpoint says what is wrong with an --otel-endpoint, if anything: "" (off), or an
// http(s) URL with a host.
func CheckEndpoint(endpoint string) error {
	if endpoint == "" {
		return nil
	}
	u, err := url.Parse(endpoint)
	switch {
	case err != nil || u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: want the collector's http:// or https:// URL, e.g. http://localhost:4318", endpoint)
	case u.Host == "":
		return fmt.Errorf("%q has no host", endpoint)
	}
	return nil
}

// NewProvider returns a tracer provider that exports in batches over OTLP/HTTP (protobuf) to
// endpoint, the collector's base URL (http://collector:4318; /v1/traces is added unless it
// ends so), or over gRPC to it (http://collector:4317) when OTEL_EXPORTER_OTLP_PROTOCOL is
// grpc; or
// where the OTEL_EXPORTER_OTLP_* variables say. service is the service.name unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise; OTEL_TRACES_SAMPLER is obeyed.
// It uses IDGenerator. Shutdown flushes it.
func NewProvider(ctx context.Context, endpoint, service string) (*sdktrace.TracerProvider, *Stats, error) {
	if endpoint == "" { // the variables' URLs are checked as the flag's is: a typo is not silence
		for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
			if err := CheckEndpoint(os.Getenv(v)); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", v, err)
			}
		}
	}
	exp, err := newExporter(ctx, endpoint)
	if err != nil {
		return nil, nil, err
	}
	stats := &Stats{}
	version := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Version
	}
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName(service), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(endedCounter{stats}), sdktrace.WithBatcher(countingExporter{exp, stats}),
		sdktrace.WithResource(res), sdktrace.WithIDGenerator(IDGenerator{Random: rand.Reader}))
	return tp, stats, nil
}

// Stats counts what became of the spans a provider made; what is neither exported nor failed
// is waiting in its batch, or was dropped because the batch was full (a collector too slow).
type Stats struct {
	Ended, Exported, Failed atomic.Int64
}

// endedCounter is a span processor that counts the spans ended.
type endedCounter struct{ stats *Stats }

func (c endedCounter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (c endedCounter) OnEnd(sdktrace.ReadOnlySpan)                     { c.stats.Ended.Add(1) }
func (c endedCounter) Shutdown(context.Context) error                  { return nil }
func (c endedCounter) ForceFlush(context.Context) error                { return nil }

// countingExporter counts the spans its exporter sent and those it could not.
type countingExporter struct {
	sdktrace.SpanExporter
	stats *Stats
}

func (e countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		e.stats.Failed.Add(int64(len(spans)))
	} else {
		e.stats.Exported.Add(int64(len(spans)))
	}
	return err
}

// LogErrors sends what the OpenTelemetry SDK reports (an export that failed or timed out) to
// log as TRACE_EXPORT_FAILED, at most one line every errorsEvery with the count since the last,
// instead of a line of Go's log per failed batch.
func LogErrors(log *zap.Logger) {
	var mu sync.Mutex
	var last time.Time
	errs := 0
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs++
		if now := time.Now(); now.Sub(last) >= errorsEvery {
			log.Warn("traces could not be exported", zap.String("code", "TRACE_EXPORT_FAILED"), zap.Error(err), zap.Int("errors", errs))
			last, errs = now, 0
		}
	}))
}

// errorsEvery is the least time between two lines of LogErrors.
const errorsEvery = 30 * time.Second
