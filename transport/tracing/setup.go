package tracing

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"os"
	"runtime/debug"
	"strings"

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
// ends so), or
// where the OTEL_EXPORTER_OTLP_* variables say. service is the service.name unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise; OTEL_TRACES_SAMPLER is obeyed.
// It uses IDGenerator. Shutdown flushes it.
func NewProvider(ctx context.Context, endpoint, service string) (*sdktrace.TracerProvider, error) {
	var opts []otlptracehttp.Option
	if endpoint != "" {
		if !strings.HasSuffix(strings.TrimRight(endpoint, "/"), "/v1/traces") {
			endpoint = strings.TrimRight(endpoint, "/") + "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(endpoint))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
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
