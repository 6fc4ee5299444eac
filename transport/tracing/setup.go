package tracing

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.uber.org/zap"
)

// newExporter returns the OTLP exporter the settings ask for: over HTTP (protobuf) to the
// endpoint's /v1/traces, or over gRPC to the endpoint; where the variables say when the
// settings name no endpoint.
func newExporter(ctx context.Context, s Settings) (sdktrace.SpanExporter, error) {
	endpoint := s.Endpoint
	switch s.Protocol {
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
		return nil, fmt.Errorf("OTLP protocol %q: tether exports over http/protobuf or grpc", s.Protocol)
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

// Provider is a tracer provider that exports its spans over OTLP in batches (NewProvider)
// and counts what became of them.
type Provider struct {
	*sdktrace.TracerProvider
	queue *exportQueue
	log   *zap.Logger
}

// NewProvider returns a tracer provider that exports in batches over OTLP/HTTP (protobuf) to
// the settings' endpoint, the collector's base URL (http://collector:4318; /v1/traces is added
// unless it ends so), or over gRPC to it (http://collector:4317) when the protocol is grpc; or
// where the OTEL_EXPORTER_OTLP_* variables say. service is the service.name unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise. The settings must come from
// ReadSettings, which checked the variables the SDK reads here. It uses IDGenerator, and logs
// to log when spans are dropped and, at Shutdown, what was not exported.
func NewProvider(ctx context.Context, s Settings, service string, log *zap.Logger) (*Provider, error) {
	exp, err := newExporter(ctx, s)
	if err != nil {
		return nil, err
	}
	version := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Version
	}
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName(service), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, err
	}
	q := newExportQueue(exp, s, log)
	opts := []sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(q), sdktrace.WithResource(res), sdktrace.WithIDGenerator(IDGenerator{Random: rand.Reader})}
	if s.Sampler != nil {
		opts = append(opts, sdktrace.WithSampler(s.Sampler))
	}
	return &Provider{TracerProvider: sdktrace.NewTracerProvider(opts...), queue: q, log: log}, nil
}

// Counts says what became of the spans.
func (p *Provider) Counts() SpanCounts { return p.queue.counts() }

// Shutdown exports the spans still queued while ctx lasts, counts those it could not send,
// stops the exporter, and logs what was not exported (TRACE_SPANS_LOST), if anything.
func (p *Provider) Shutdown(ctx context.Context) error {
	err := p.queue.Shutdown(ctx)
	_ = p.TracerProvider.Shutdown(context.Background()) // its one processor, the queue, has stopped
	if c := p.Counts(); c.lost() > 0 {
		p.log.Warn("spans were not exported", zap.String("code", "TRACE_SPANS_LOST"), zap.Int64("ended", c.Ended),
			zap.Int64("exported", c.Exported), zap.Int64("failed", c.Failed), zap.Int64("dropped", c.Dropped), zap.Int64("unsent_at_stop", c.Unsent))
	}
	return err
}

// FlushAtStopMax is how long a stop waits for the spans still queued to be exported, the
// export under way included: a collector that is slow or hung costs a stop this much at
// most, and the spans it did not take are counted (SpanCounts.Failed, Unsent) and logged.
const FlushAtStopMax = 500 * time.Millisecond

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
