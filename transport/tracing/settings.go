package tracing

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Settings is what tracing runs with: the --otel-endpoint flag and the standard OTEL_*
// variables, every one of them checked by ReadSettings before anything starts. The SDK reads
// the variables too, and takes a value it cannot use in its own way: a negative queue size
// panics, a huge one runs out of memory, an unknown sampler is replaced by the default, a bad
// header is printed to stderr in plain text. So tether reads each variable the SDK and its OTLP
// exporters read first, with the SDK's own parsing, and refuses a value it would not take or
// would misread, naming the variable, as a flag's mistake is refused.
type Settings struct {
	// On is true when traces are to be exported: an endpoint is given, in the flag or a
	// variable, and OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER=none does not turn them off.
	On bool
	// Endpoint is the flag's URL, "" when the variables say where.
	Endpoint string
	// Protocol is the OTLP protocol, http/protobuf or grpc.
	Protocol string
	// Sampler is OTEL_TRACES_SAMPLER's, nil for the default (parentbased_always_on).
	Sampler sdktrace.Sampler
	// The batch (OTEL_BSP_*): the most spans waiting (QueueSize), sent in one export
	// (BatchSize), how long a batch that is not full waits (ScheduleDelay), how long one
	// export may take (ExportTimeout).
	QueueSize, BatchSize         int
	ScheduleDelay, ExportTimeout time.Duration
}

// The defaults of OTEL_BSP_*, the specification's, and their bounds. A queued span holds a
// few hundred bytes to a few KiB, so a full queue at queueSizeMax is tens of MiB at most.
const (
	queueSizeDefault     = 2048
	queueSizeMax         = 1 << 16
	batchSizeDefault     = 512
	scheduleDelayDefault = 5 * time.Second
	exportTimeoutDefault = 30 * time.Second
	// millisMax bounds every time in milliseconds the variables give (the batch's wait, an
	// export's time): longer, and a collector that is away holds spans for minutes.
	millisMax = time.Minute
)

// otlpVariables names an OTEL_EXPORTER_OTLP_ variable by its suffix ("HEADERS"), then its
// traces-only twin (OTEL_EXPORTER_OTLP_TRACES_HEADERS), which overrides it.
func otlpVariables(suffix string) [2]string {
	return [2]string{"OTEL_EXPORTER_OTLP_" + suffix, "OTEL_EXPORTER_OTLP_TRACES_" + suffix}
}

// ReadSettings checks endpoint (the --otel-endpoint flag's value, checked by CheckEndpoint
// already) and the OTEL_* variables from lookupEnv (os.LookupEnv) and returns the settings,
// or an error that names the first variable that is wrong. With tracing off (no endpoint, or
// turned off) only the variables that turn it off are read.
func ReadSettings(endpoint string, lookupEnv func(string) (string, bool)) (Settings, error) {
	get := func(name string) string {
		v, _ := lookupEnv(name)
		return strings.TrimSpace(v) // an empty value is no value, as the specification says
	}
	s := Settings{Endpoint: endpoint, Protocol: "http/protobuf", QueueSize: queueSizeDefault, BatchSize: batchSizeDefault,
		ScheduleDelay: scheduleDelayDefault, ExportTimeout: exportTimeoutDefault}
	disabled, err := boolVariable("OTEL_SDK_DISABLED", get("OTEL_SDK_DISABLED"))
	if err != nil {
		return s, err
	}
	if v := get("OTEL_TRACES_EXPORTER"); v != "" {
		for _, e := range strings.Split(v, ",") {
			switch strings.TrimSpace(e) {
			case "otlp":
			case "none":
				disabled = true
			default:
				return s, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: tether exports traces over OTLP only: want otlp, or none for no traces", v)
			}
		}
	}
	s.On = !disabled && (endpoint != "" || get("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "")
	if !s.On {
		return s, nil
	}
	if s.Protocol, err = checkExporterVariables(get); err != nil {
		return s, err
	}
	if s.Sampler, err = sampler(get("OTEL_TRACES_SAMPLER"), get("OTEL_TRACES_SAMPLER_ARG")); err != nil {
		return s, err
	}
	queue, err := countVariable("OTEL_BSP_MAX_QUEUE_SIZE", get("OTEL_BSP_MAX_QUEUE_SIZE"), queueSizeDefault, 1, queueSizeMax)
	if err != nil {
		return s, err
	}
	batch, err := countVariable("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE"), min(batchSizeDefault, queue), 1, queueSizeMax)
	switch {
	case err != nil:
		return s, err
	case batch > queue:
		return s, fmt.Errorf("OTEL_BSP_MAX_EXPORT_BATCH_SIZE=%d is more than OTEL_BSP_MAX_QUEUE_SIZE=%d: a batch is taken from the queue", batch, queue)
	}
	s.QueueSize, s.BatchSize = int(queue), int(batch)
	if s.ScheduleDelay, err = millisVariable("OTEL_BSP_SCHEDULE_DELAY", get("OTEL_BSP_SCHEDULE_DELAY"), scheduleDelayDefault); err != nil {
		return s, err
	}
	if s.ExportTimeout, err = millisVariable("OTEL_BSP_EXPORT_TIMEOUT", get("OTEL_BSP_EXPORT_TIMEOUT"), exportTimeoutDefault); err != nil {
		return s, err
	}
	for _, name := range spanLimitVariables {
		v, _ := lookupEnv(name) // as it is: the SDK does not trim these, and takes " 5" for no value
		if _, err := countVariable(name, v, 0, 0, 1<<31-1); err != nil {
			return s, err
		}
	}
	if err := checkResourceAttributes(get("OTEL_RESOURCE_ATTRIBUTES")); err != nil {
		return s, err
	}
	for _, name := range experimentVariables {
		if _, err := boolVariable(name, get(name)); err != nil {
			return s, err
		}
	}
	return s, nil
}

// checkExporterVariables checks the variables the OTLP exporters read (their otlpconfig's
// getOptionsFromEnv) and returns the protocol they name.
func checkExporterVariables(get func(string) string) (protocol string, err error) {
	protocol = "http/protobuf"
	for _, name := range otlpVariables("PROTOCOL") {
		switch v := get(name); v {
		case "":
		case "http/protobuf", "grpc":
			protocol = v
		default:
			return protocol, fmt.Errorf("%s=%q: tether exports over http/protobuf or grpc", name, v)
		}
	}
	for _, name := range otlpVariables("ENDPOINT") {
		if err := CheckEndpoint(get(name)); err != nil {
			return protocol, fmt.Errorf("%s: %w", name, err)
		}
	}
	for _, name := range otlpVariables("HEADERS") {
		if err := checkHeaders(name, get(name)); err != nil {
			return protocol, err
		}
	}
	for _, name := range otlpVariables("COMPRESSION") {
		if v := get(name); v != "" && v != "gzip" && v != "none" {
			return protocol, fmt.Errorf("%s=%q: want gzip or none", name, v)
		}
	}
	for _, name := range otlpVariables("INSECURE") {
		if _, err := boolVariable(name, get(name)); err != nil {
			return protocol, err
		}
	}
	for _, name := range otlpVariables("TIMEOUT") {
		if _, err := millisVariable(name, get(name), 0); err != nil {
			return protocol, err
		}
	}
	for _, name := range otlpVariables("CERTIFICATE") {
		if err := checkCertificate(name, get(name)); err != nil {
			return protocol, err
		}
	}
	for _, prefix := range []string{"OTEL_EXPORTER_OTLP_", "OTEL_EXPORTER_OTLP_TRACES_"} {
		cert, key := prefix+"CLIENT_CERTIFICATE", prefix+"CLIENT_KEY"
		if err := checkClientCertificate(cert, get(cert), key, get(key)); err != nil {
			return protocol, err
		}
	}
	return protocol, nil
}

// spanLimitVariables are the span limits the SDK reads (sdktrace.NewSpanLimits).
var spanLimitVariables = []string{
	"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT",
	"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT",
	"OTEL_SPAN_EVENT_COUNT_LIMIT", "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT",
	"OTEL_SPAN_LINK_COUNT_LIMIT", "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT",
}

// experimentVariables are the SDK's and the exporters' experimental switches (their
// internal/x packages), each on with "true".
var experimentVariables = []string{"OTEL_GO_X_RESOURCE", "OTEL_GO_X_OBSERVABILITY", "OTEL_GO_X_SELF_OBSERVABILITY"}

// boolVariable reads true or false, in any case, as the SDK compares them; "" is false.
func boolVariable(name, v string) (bool, error) {
	switch {
	case v == "" || strings.EqualFold(v, "false"):
		return false, nil
	case strings.EqualFold(v, "true"):
		return true, nil
	}
	return false, fmt.Errorf("%s=%q: want true or false", name, v)
}

// countVariable reads a whole number lo..hi; "" is def.
func countVariable(name, v string, def, lo, hi int64) (int64, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		return def, fmt.Errorf("%s=%q: want a whole number %d..%d", name, v, lo, hi)
	}
	return n, nil
}

// millisVariable reads a time in milliseconds, 1 ms..millisMax; "" is def. 0, which the SDK
// takes for no limit or for no wait (a loop that exports empty batches), is refused.
func millisVariable(name, v string, def time.Duration) (time.Duration, error) {
	n, err := countVariable(name, v, int64(def/time.Millisecond), 1, int64(millisMax/time.Millisecond))
	if err != nil {
		return def, fmt.Errorf("%w (milliseconds)", err)
	}
	return time.Duration(n) * time.Millisecond, nil
}

// sampler is the sampler OTEL_TRACES_SAMPLER names, with its argument, read as the SDK reads
// them (sdktrace's samplerFromEnv); nil for none named. An argument is refused where it would
// be ignored: given alone, it says what its author meant and did not get.
func sampler(name, arg string) (sdktrace.Sampler, error) {
	ratio := func() (sdktrace.Sampler, error) {
		if arg == "" {
			return sdktrace.TraceIDRatioBased(1), nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || !(r >= 0 && r <= 1) {
			return nil, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: want the share of traces to keep, 0..1 (e.g. 0.25)", arg)
		}
		return sdktrace.TraceIDRatioBased(r), nil
	}
	switch strings.ToLower(name) {
	case "traceidratio":
		return ratio()
	case "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		return sdktrace.ParentBased(r), nil
	}
	switch {
	case arg != "" && name == "":
		return nil, errors.New("OTEL_TRACES_SAMPLER_ARG is given without OTEL_TRACES_SAMPLER: it goes with traceidratio or parentbased_traceidratio")
	case arg != "":
		return nil, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG is given, but OTEL_TRACES_SAMPLER=%q takes none: it goes with traceidratio or parentbased_traceidratio", name)
	}
	switch strings.ToLower(name) {
	case "":
		return nil, nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	}
	return nil, fmt.Errorf("OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", name)
}

// checkHeaders checks a list of headers key=value,key=value (values %-encoded) as the
// exporters parse it, where a pair they cannot read is left out with a line on stderr. The
// values are secrets (API keys), so only keys and positions are named.
func checkHeaders(name, v string) error {
	if v == "" {
		return nil
	}
	for i, pair := range strings.Split(v, ",") {
		key, value, found := strings.Cut(pair, "=")
		key = strings.TrimSpace(key)
		switch {
		case !found:
			return fmt.Errorf("%s: entry %d has no '=': want key=value,key=value (values %%-encoded)", name, i+1)
		case !headerKey(key):
			return fmt.Errorf("%s: entry %d: %q is not a header name", name, i+1, key)
		}
		if _, err := url.PathUnescape(value); err != nil {
			return fmt.Errorf("%s: the value of %s is not %%-encoded right (a %% must be followed by two hex digits)", name, key)
		}
	}
	return nil
}

// headerKey reports whether key is an HTTP header name (an RFC 9110 token), as the exporters
// check it.
func headerKey(key string) bool {
	if key == "" {
		return false
	}
	for _, c := range key {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.ContainsRune("!#$%&'*+-.^_`|~", c):
		default:
			return false
		}
	}
	return true
}

// checkCertificate checks that path, if given, is a PEM file of CA certificates.
func checkCertificate(name, path string) error {
	if path == "" {
		return nil
	}
	pem, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		return fmt.Errorf("%s: %s holds no PEM certificate", name, path)
	}
	return nil
}

// checkClientCertificate checks a client certificate and its key: both or neither (the
// exporters take one alone for none), and a pair.
func checkClientCertificate(certName, cert, keyName, key string) error {
	switch {
	case cert == "" && key == "":
		return nil
	case cert == "" || key == "":
		return fmt.Errorf("%s and %s go together", certName, keyName)
	}
	if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
		return fmt.Errorf("%s and %s: %w", certName, keyName, err)
	}
	return nil
}

// checkResourceAttributes checks OTEL_RESOURCE_ATTRIBUTES, key=value,key=value (values
// %-encoded), as the SDK's resource detector reads it.
func checkResourceAttributes(v string) error {
	if v == "" {
		return nil
	}
	for i, pair := range strings.Split(v, ",") {
		key, value, found := strings.Cut(pair, "=")
		switch {
		case !found || strings.TrimSpace(key) == "":
			return fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: entry %d is not key=value: want key=value,key=value (values %%-encoded)", i+1)
		}
		if _, err := url.PathUnescape(strings.TrimSpace(value)); err != nil {
			return fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: the value of %s is not %%-encoded right (a %% must be followed by two hex digits)", strings.TrimSpace(key))
		}
	}
	return nil
}
