package tracing

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Every OTEL_* variable the SDK and its exporters would read is checked first: a value they
// would panic on, run out of memory with, replace by a default in silence or print to stderr
// is refused with a message that names the variable (and never a header's value).
func TestReadSettingsRefuses(t *testing.T) {
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "-1"}, `OTEL_BSP_MAX_QUEUE_SIZE="-1": want a whole number 1..65536`},
		{map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "0"}, `OTEL_BSP_MAX_QUEUE_SIZE="0"`},
		{map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "9999999999"}, `OTEL_BSP_MAX_QUEUE_SIZE="9999999999": want a whole number 1..65536`},
		{map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "many"}, `OTEL_BSP_MAX_QUEUE_SIZE="many"`},
		{map[string]string{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "-5"}, `OTEL_BSP_MAX_EXPORT_BATCH_SIZE="-5": want a whole number 1..65536`},
		{map[string]string{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "600", "OTEL_BSP_MAX_QUEUE_SIZE": "100"}, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE=600 is more than OTEL_BSP_MAX_QUEUE_SIZE=100"},
		{map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "0"}, `OTEL_BSP_SCHEDULE_DELAY="0": want a whole number 1..60000 (milliseconds)`},
		{map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "5s"}, `OTEL_BSP_SCHEDULE_DELAY="5s"`},
		{map[string]string{"OTEL_BSP_EXPORT_TIMEOUT": "0"}, `OTEL_BSP_EXPORT_TIMEOUT="0"`},
		{map[string]string{"OTEL_BSP_EXPORT_TIMEOUT": "3600000"}, `OTEL_BSP_EXPORT_TIMEOUT="3600000"`},
		{map[string]string{"OTEL_TRACES_SAMPLER": "bogus"}, `OTEL_TRACES_SAMPLER="bogus": want always_on, always_off, traceidratio`},
		{map[string]string{"OTEL_TRACES_SAMPLER": "jaeger_remote"}, `OTEL_TRACES_SAMPLER="jaeger_remote"`},
		{map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "x"}, `OTEL_TRACES_SAMPLER_ARG="x": want the share of traces to keep, 0..1`},
		{map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1.5"}, `OTEL_TRACES_SAMPLER_ARG="1.5"`},
		{map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "NaN"}, `OTEL_TRACES_SAMPLER_ARG="NaN"`},
		{map[string]string{"OTEL_TRACES_SAMPLER_ARG": "0.1"}, "OTEL_TRACES_SAMPLER_ARG is given without OTEL_TRACES_SAMPLER"},
		{map[string]string{"OTEL_TRACES_SAMPLER": "always_on", "OTEL_TRACES_SAMPLER_ARG": "0.1"}, `OTEL_TRACES_SAMPLER_ARG is given, but OTEL_TRACES_SAMPLER="always_on" takes none`},
		{map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "abc"}, "OTEL_EXPORTER_OTLP_HEADERS: entry 1 has no '='"},
		{map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "a=1,"}, "OTEL_EXPORTER_OTLP_HEADERS: entry 2 has no '='"},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "bad key=1"}, `OTEL_EXPORTER_OTLP_TRACES_HEADERS: entry 1: "bad key" is not a header name`},
		{map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=s3cr3t%zz"}, "OTEL_EXPORTER_OTLP_HEADERS: the value of x-api-key is not %-encoded right"},
		{map[string]string{"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}, `OTEL_EXPORTER_OTLP_COMPRESSION="zstd": want gzip or none`},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_INSECURE": "yes"}, `OTEL_EXPORTER_OTLP_TRACES_INSECURE="yes": want true or false`},
		{map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "0"}, `OTEL_EXPORTER_OTLP_TIMEOUT="0"`},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "10s"}, `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT="10s"`},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, `OTEL_EXPORTER_OTLP_PROTOCOL="http/json": tether exports over http/protobuf or grpc`},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
		{map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem"}, "OTEL_EXPORTER_OTLP_CERTIFICATE: open /nonexistent/ca.pem"},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": notPEM}, "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE: " + notPEM + " holds no PEM certificate"},
		{map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": notPEM}, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY go together"},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE": notPEM, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY": notPEM}, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY: "},
		{map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "team"}, "OTEL_RESOURCE_ATTRIBUTES: entry 1 is not key=value"},
		{map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "team=a%zz"}, "OTEL_RESOURCE_ATTRIBUTES: the value of team is not %-encoded right"},
		{map[string]string{"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "-1"}, `OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT="-1": want a whole number 0..`},
		{map[string]string{"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": " 5"}, `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT=" 5"`}, // the SDK takes it for no value
		{map[string]string{"OTEL_GO_X_OBSERVABILITY": "yes"}, `OTEL_GO_X_OBSERVABILITY="yes": want true or false`},
		{map[string]string{"OTEL_TRACES_EXPORTER": "console"}, `OTEL_TRACES_EXPORTER="console": tether exports traces over OTLP only`},
		{map[string]string{"OTEL_SDK_DISABLED": "maybe"}, `OTEL_SDK_DISABLED="maybe": want true or false`},
	} {
		var name []string
		for k, v := range tc.env {
			name = append(name, k+"="+v)
		}
		t.Run(strings.Join(name, " "), func(t *testing.T) {
			_, err := ReadSettings("http://collector:4318", env(tc.env))
			switch {
			case err == nil:
				t.Fatalf("accepted; want %q", tc.want)
			case !strings.Contains(err.Error(), tc.want):
				t.Fatalf("err %q, want %q", err, tc.want)
			case strings.Contains(err.Error(), "s3cr3t"):
				t.Fatalf("err %q shows a header's value", err)
			}
		})
	}
	// OTEL_SDK_DISABLED is read even with no endpoint: it is what says tracing is off.
	if _, err := ReadSettings("", env(map[string]string{"OTEL_SDK_DISABLED": "maybe"})); err == nil {
		t.Error("OTEL_SDK_DISABLED=maybe was taken with tracing off")
	}
}

// What the variables say is what the provider is made with; tracing off reads nothing more.
func TestReadSettingsTakes(t *testing.T) {
	s, err := ReadSettings("http://collector:4318", env(nil))
	if err != nil || !s.On || s.Protocol != "http/protobuf" || s.QueueSize != 2048 || s.BatchSize != 512 ||
		s.ScheduleDelay != 5*time.Second || s.ExportTimeout != 30*time.Second || s.Sampler != nil {
		t.Fatalf("the defaults: %+v %v", s, err)
	}
	s, err = ReadSettings("", env(map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://c/v1/traces", "OTEL_BSP_MAX_QUEUE_SIZE": "100",
		"OTEL_BSP_SCHEDULE_DELAY": " 100 ", "OTEL_BSP_EXPORT_TIMEOUT": "2000", "OTEL_TRACES_SAMPLER": "ParentBased_TraceIDRatio", "OTEL_TRACES_SAMPLER_ARG": "0.25",
		"OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=s%20ecret, other = 1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_RESOURCE_ATTRIBUTES": "team=gpu,zone=eu%2Dwest",
		"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "64", "OTEL_EXPORTER_OTLP_INSECURE": "TRUE", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}))
	if err != nil || !s.On || s.Protocol != "grpc" || s.QueueSize != 100 || s.BatchSize != 100 || s.ScheduleDelay != 100*time.Millisecond ||
		s.ExportTimeout != 2*time.Second || s.Sampler == nil || !strings.Contains(s.Sampler.Description(), "TraceIDRatioBased{0.25}") {
		t.Fatalf("%+v %v", s, err)
	}
	// Off: the other variables are not read, so not refused.
	for _, vars := range []map[string]string{
		{"OTEL_BSP_MAX_QUEUE_SIZE": "-1"},
		{"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_BSP_MAX_QUEUE_SIZE": "-1"},
		{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_SAMPLER": "bogus"},
	} {
		if s, err := ReadSettings("", env(vars)); err != nil || s.On {
			t.Errorf("%v: %+v %v", vars, s, err)
		}
	}
}
