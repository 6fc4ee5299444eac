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

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
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
	case err != nil:
		return err
	case u.Scheme != "http" && u.Scheme != "https":
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
func NewProvider(ctx context.Context, endpoint, service string) (*sdktrace.TracerProvider, error) {
	exp, err := newExporter(ctx, endpoint)
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
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(IDGenerator{Random: rand.Reader})), nil
}
