package tracing

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// collector is an OTLP trace service over gRPC that keeps the names of the spans it gets.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names []string
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.names = append(c.names, s.Name)
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// OTEL_EXPORTER_OTLP_PROTOCOL=grpc exports over gRPC to the endpoint given; a protocol tether
// does not speak is refused at start, not ignored.
func TestProtocolFromTheVariables(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, c)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	s, err := ReadSettings("http://"+ln.Addr().String(), env(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}))
	if err != nil {
		t.Fatal(err)
	}
	tp, err := NewProvider(context.Background(), s, "tether", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("test").Start(context.Background(), "over-grpc")
	span.End()
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	if len(c.names) != 1 || c.names[0] != "over-grpc" {
		t.Errorf("the gRPC collector got %v", c.names)
	}
	c.mu.Unlock()

	if _, err := ReadSettings("http://127.0.0.1:4318", env(map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"})); err == nil {
		t.Error("http/json was taken; tether's exporter does not speak it")
	}
}

// The endpoint variables are checked as the flag is: a typo stops the start, not every span.
func TestEndpointVariablesAreChecked(t *testing.T) {
	for _, bad := range []string{"collector:4318", "127.0.0.1:4318", "ftp://c", "http://"} {
		if err := CheckEndpoint(bad); err == nil || !strings.Contains(err.Error(), "want the collector's http:// or https:// URL") && !strings.Contains(err.Error(), "no host") {
			t.Errorf("%q: %v", bad, err)
		}
		if _, err := ReadSettings("", env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": bad})); err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_ENDPOINT") {
			t.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT=%q: %v", bad, err)
		}
	}
	if s, err := ReadSettings("", env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})); err != nil || !s.On {
		t.Fatalf("%+v %v", s, err)
	}
}

// env is a lookupEnv of the variables given.
func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}
