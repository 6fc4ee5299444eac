package main

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// receivedSpan is a span as an OTLP receiver got it, from either encoding.
type receivedSpan struct {
	service, name, trace, id, parent string
	attrs                            map[string]string
	error                            bool
	start, end                       time.Time
}

// otlpReceiver is an OTLP/HTTP trace receiver: protobuf (the Go exporter's) and OTLP JSON
// (the Python SDK's), decoded as a collector would.
type otlpReceiver struct {
	url   string
	mu    sync.Mutex
	spans []receivedSpan
	// encodings counts the requests by content type.
	encodings map[string]int
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{encodings: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
			http.NotFound(w, req)
			return
		}
		body := io.Reader(req.Body)
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		data, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ct := req.Header.Get("Content-Type")
		var spans []receivedSpan
		switch ct {
		case "application/x-protobuf":
			spans, err = decodeProtobufSpans(data)
		case "application/json":
			spans, err = decodeJSONSpans(data)
		default:
			err = fmt.Errorf("content type %q", ct)
		}
		if err != nil {
			t.Errorf("the OTLP receiver could not decode a request: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.spans = append(r.spans, spans...)
		r.encodings[ct]++
		r.mu.Unlock()
		w.Header().Set("Content-Type", ct)
		if ct == "application/json" {
			_, _ = w.Write([]byte("{}"))
		}
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

func decodeProtobufSpans(data []byte) ([]receivedSpan, error) {
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(data, &req); err != nil {
		return nil, err
	}
	var out []receivedSpan
	for _, rs := range req.ResourceSpans {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				service = a.Value.GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				attrs := map[string]string{}
				for _, a := range s.Attributes {
					switch v := a.Value.GetValue().(type) {
					case *commonpb.AnyValue_StringValue:
						attrs[a.Key] = v.StringValue
					case *commonpb.AnyValue_IntValue:
						attrs[a.Key] = fmt.Sprint(v.IntValue)
					}
				}
				out = append(out, receivedSpan{service: service, name: s.Name, trace: hex.EncodeToString(s.TraceId), id: hex.EncodeToString(s.SpanId),
					parent: hex.EncodeToString(s.ParentSpanId), attrs: attrs, error: s.GetStatus().GetCode() == 2,
					start: time.Unix(0, int64(s.StartTimeUnixNano)), end: time.Unix(0, int64(s.EndTimeUnixNano))})
			}
		}
	}
	return out, nil
}

// decodeJSONSpans reads OTLP JSON, whose ids are hex (not protobuf JSON's base64).
func decodeJSONSpans(data []byte) ([]receivedSpan, error) {
	type value struct {
		StringValue *string `json:"stringValue"`
		IntValue    *string `json:"intValue"`
	}
	type kv struct {
		Key   string `json:"key"`
		Value value  `json:"value"`
	}
	var req struct {
		ResourceSpans []struct {
			Resource struct {
				Attributes []kv `json:"attributes"`
			} `json:"resource"`
			ScopeSpans []struct {
				Spans []struct {
					TraceID, SpanID, ParentSpanID, Name string
					StartTimeUnixNano, EndTimeUnixNano  int64 `json:",string"`
					Attributes                          []kv  `json:"attributes"`
					Status                              struct{ Code int }
				} `json:"spans"`
			} `json:"scopeSpans"`
		} `json:"resourceSpans"`
	}
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, err
	}
	str := func(v value) string {
		switch {
		case v.StringValue != nil:
			return *v.StringValue
		case v.IntValue != nil:
			return *v.IntValue
		}
		return ""
	}
	var out []receivedSpan
	for _, rs := range req.ResourceSpans {
		service := ""
		for _, a := range rs.Resource.Attributes {
			if a.Key == "service.name" {
				service = str(a.Value)
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				attrs := map[string]string{}
				for _, a := range s.Attributes {
					attrs[a.Key] = str(a.Value)
				}
				if len(s.TraceID) != 32 || len(s.SpanID) != 16 {
					return nil, fmt.Errorf("span %q: trace id %q, span id %q are not hex of 16 and 8 bytes", s.Name, s.TraceID, s.SpanID)
				}
				out = append(out, receivedSpan{service: service, name: s.Name, trace: s.TraceID, id: s.SpanID, parent: s.ParentSpanID,
					attrs: attrs, error: s.Status.Code == 2, start: time.Unix(0, s.StartTimeUnixNano), end: time.Unix(0, s.EndTimeUnixNano)})
			}
		}
	}
	return out, nil
}

// trace waits (30 s at most) until the spans of trace id hold want[name] spans of each name,
// and returns the trace's spans, failing the test if it holds more.
func (r *otlpReceiver) trace(t *testing.T, id string, want map[string]int) []receivedSpan {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		r.mu.Lock()
		var got []receivedSpan
		have := map[string]int{}
		for _, s := range r.spans {
			if s.trace == id {
				got = append(got, s)
				have[s.name]++
			}
		}
		r.mu.Unlock()
		missing, extra := map[string]int{}, map[string]int{}
		for n, c := range want {
			if have[n] < c {
				missing[n] = c - have[n]
			}
		}
		for n, c := range have {
			if c > want[n] {
				extra[n] = c - want[n]
			}
		}
		if len(extra) > 0 {
			t.Fatalf("trace %s has spans too many %v:%s", id, extra, describe(got))
		}
		if len(missing) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s lacks %v:%s", id, missing, describe(got))
		}
		time.Sleep(50 * time.Millisecond) // another process exports when its batch is due
	}
}

func describe(spans []receivedSpan) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "\n  %s/%s id %s parent %s %v", s.service, s.name, s.id, s.parent, s.attrs)
	}
	return b.String()
}

// connected checks that the spans are one tree under the caller's span: every span's parent
// is the caller's or another span of the trace, each span once; it returns them by name.
func connected(t *testing.T, spans []receivedSpan, callerSpan string) map[string][]receivedSpan {
	t.Helper()
	ids := map[string]bool{callerSpan: true}
	for _, s := range spans {
		if ids[s.id] {
			t.Errorf("span id %s twice (%s)", s.id, s.name)
		}
		ids[s.id] = true
	}
	byName := map[string][]receivedSpan{}
	for _, s := range spans {
		if !ids[s.parent] {
			t.Errorf("%s's parent %s is not in the trace:%s", s.name, s.parent, describe(spans))
		}
		byName[s.name] = append(byName[s.name], s)
	}
	return byName
}

// render draws the trace as a tree under root (the caller's span id), with each span's start
// after the root's first span and its duration.
func render(spans []receivedSpan, root string) string {
	var b strings.Builder
	var t0 time.Time
	for _, s := range spans {
		if t0.IsZero() || s.start.Before(t0) {
			t0 = s.start
		}
	}
	var walk func(parent, indent string)
	walk = func(parent, indent string) {
		kids := []receivedSpan{}
		for _, s := range spans {
			if s.parent == parent {
				kids = append(kids, s)
			}
		}
		slices.SortFunc(kids, func(a, b receivedSpan) int { return a.start.Compare(b.start) })
		for _, s := range kids {
			fmt.Fprintf(&b, "\n%-40s %-14s +%-9s %s", indent+s.name, s.service, s.start.Sub(t0).Round(10*time.Microsecond), s.end.Sub(s.start).Round(10*time.Microsecond))
			walk(s.id, indent+"  ")
		}
	}
	walk(root, "")
	return b.String()
}

// parentOf fails the test unless child's parent is parent.
func parentOf(t *testing.T, parent, child receivedSpan) {
	t.Helper()
	if child.parent != parent.id {
		t.Errorf("%s's parent is %s, not %s (%s)", child.name, child.parent, parent.name, parent.id)
	}
}

// postTraced sends body to path with a traceparent header and decodes the answer into out.
func postTraced(t *testing.T, url, contentType, traceparent, body string, out any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatal(err)
	}
}

// waitJob polls a job until it is terminal and returns it.
func waitJob(t *testing.T, base, id string) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(base + "/v1/jobs/" + id)
		if err != nil {
			t.Fatal(err)
		}
		var j map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&j)
		resp.Body.Close()
		switch j["status"] {
		case "succeeded", "failed", "cancelled":
			return j
		}
	}
	t.Fatalf("job %s did not end", id)
	return nil
}

// oneJob is the spans of a job run once: what the server, then the worker, then the server
// again make of it.
var oneJob = map[string]int{"tether.submit": 1, "tether.job": 1, "tether.dispatch_wait": 1, "tether.attempt": 1, "tether.run": 1, "tether.complete": 1}

// One job through a Go worker (`tether worker`, a command) and one flow yield one connected
// trace each under the caller's span, exported by the server and the worker over OTLP/HTTP:
// submit, job, dispatch wait, attempt, the worker's run, the server's handling of the result;
// the command's TRACEPARENT names the run; a flow's steps' jobs are children of its span.
func TestTraceThroughGoWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100") // the exporters send every 100 ms, not every 5 s
	recv := newOTLPReceiver(t)
	s := startServer(t, t.TempDir(), "--otel-endpoint", recv.url)
	w := startTether(t, nil, "worker", "--server", s.url, "--state-dir", t.TempDir(), "--queue", "traced",
		"--otel-endpoint", recv.url, "--", "sh", "-c", `printf '{"traceparent":"%s"}' "$TRACEPARENT"`)
	defer func() {
		w.signal(t, syscall.SIGTERM)
		w.wait(10 * time.Second)
	}()

	const caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var job struct{ ID string }
	postTraced(t, s.url+"/v1/jobs", "application/json", caller, `{"queue":"traced","type":"render","payload":{"secret":"do-not-export"}}`, &job)
	done := waitJob(t, s.url, job.ID)
	if done["status"] != "succeeded" {
		t.Fatalf("job %v", done)
	}
	spans := recv.trace(t, "4bf92f3577b34da6a3ce929d0e0e4736", oneJob)
	by := connected(t, spans, "00f067aa0ba902b7")
	submit, jobSpan, attempt, run, complete := by["tether.submit"][0], by["tether.job"][0], by["tether.attempt"][0], by["tether.run"][0], by["tether.complete"][0]
	if submit.parent != "00f067aa0ba902b7" {
		t.Errorf("the submit's parent is %s, not the caller's span", submit.parent)
	}
	parentOf(t, submit, jobSpan)
	parentOf(t, jobSpan, by["tether.dispatch_wait"][0])
	parentOf(t, jobSpan, attempt)
	parentOf(t, attempt, run)
	parentOf(t, run, complete)
	t.Logf("the job's trace (span, service, start, duration):%s", render(spans, "00f067aa0ba902b7"))
	if run.service != "tether-worker" || jobSpan.service != "tether" {
		t.Errorf("services: run %q, job %q", run.service, jobSpan.service)
	}
	if jobSpan.attrs["tether.job.id"] != job.ID || jobSpan.attrs["tether.queue"] != "traced" || jobSpan.attrs["tether.tenant"] != "default" ||
		jobSpan.attrs["tether.outcome"] != "succeeded" || attempt.attrs["tether.attempt"] != "1" || run.attrs["tether.job.id"] != job.ID {
		t.Errorf("attributes: job %v attempt %v run %v", jobSpan.attrs, attempt.attrs, run.attrs)
	}
	for _, sp := range spans {
		for k, v := range sp.attrs {
			if strings.Contains(v, "do-not-export") {
				t.Errorf("%s exports the payload in %s", sp.name, k)
			}
		}
	}
	// The command was handed the run's span as its parent.
	out, _ := done["output"].(map[string]any)
	if out["traceparent"] != "00-4bf92f3577b34da6a3ce929d0e0e4736-"+run.id+"-01" {
		t.Errorf("the command's TRACEPARENT was %v; the run's span is %s", out["traceparent"], run.id)
	}

	// /metrics says what became of the spans.
	metrics := httpGet(t, s.url+"/metrics")
	mustContain(t, "/metrics", metrics, "tether_trace_spans_ended_total ", "tether_trace_spans_export_failed_total 0\n", "tether_trace_events_dropped_total 0\n")
	if strings.Contains(metrics, "tether_trace_spans_exported_total 0\n") {
		t.Errorf("no span exported, says /metrics")
	}

	// `tether job submit` in a traced script continues the trace in TRACEPARENT.
	const cliCaller = "00-7bf92f3577b34da6a3ce929d0e0e4736-30f067aa0ba902b7-01"
	stdout, stderr, code := tether(t, []string{"TRACEPARENT=" + cliCaller}, "job", "submit", "--server", s.url, "--queue", "traced", "--type", "t", "--quiet")
	if code != 0 {
		t.Fatalf("tether job submit: %d %s", code, stderr)
	}
	waitJob(t, s.url, strings.TrimSpace(stdout))
	spans = recv.trace(t, "7bf92f3577b34da6a3ce929d0e0e4736", oneJob)
	if by := connected(t, spans, "30f067aa0ba902b7"); by["tether.submit"][0].parent != "30f067aa0ba902b7" {
		t.Errorf("the command line's submit is not a child of TRACEPARENT's span")
	}

	// A flow: its span under the submit's, each step's job span under the flow's.
	const flowCaller = "00-5bf92f3577b34da6a3ce929d0e0e4736-10f067aa0ba902b7-01"
	var flow struct{ ID string }
	postTraced(t, s.url+"/v1/flows?name=traced", "application/yaml", flowCaller,
		"flow:\n  steps:\n    a: {type: t, queue: traced}\n    b: {type: t, queue: traced, needs: [a]}\n", &flow)
	spans = recv.trace(t, "5bf92f3577b34da6a3ce929d0e0e4736", map[string]int{"tether.submit_flow": 1, "tether.flow": 1, "tether.job": 2,
		"tether.dispatch_wait": 2, "tether.attempt": 2, "tether.run": 2, "tether.complete": 2})
	by = connected(t, spans, "10f067aa0ba902b7")
	t.Logf("the flow's trace:%s", render(spans, "10f067aa0ba902b7"))
	parentOf(t, by["tether.submit_flow"][0], by["tether.flow"][0])
	for _, j := range by["tether.job"] {
		parentOf(t, by["tether.flow"][0], j)
	}
}

// One job through a Python worker (sdk/python, the standard library's OTLP JSON export) is
// one connected trace too: the worker's run under the attempt, the handler's traceparent its
// run's, and the server's handling of the result under the run.
func TestTraceThroughPythonWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary and Python")
	}
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		if os.Getenv("TETHER_REQUIRE_TOOLS") != "" {
			t.Fatalf("no %s: %v", python, err)
		}
		t.Skip("no " + python)
	}
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	recv := newOTLPReceiver(t)
	s := startServer(t, t.TempDir(), "--otel-endpoint", recv.url)
	sdk, _ := filepath.Abs("../../sdk/python")
	script := filepath.Join(t.TempDir(), "worker.py")
	if err := os.WriteFile(script, []byte(`
import sys, tether
w = tether.Worker(sys.argv[1], queues=["py"], otel_endpoint=sys.argv[2])
@w.handler("render")
def render(ctx):
    return {"traceparent": ctx.traceparent}
w.run()
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(python, script, s.url, recv.url)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+sdk)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	const caller = "00-6bf92f3577b34da6a3ce929d0e0e4736-20f067aa0ba902b7-01"
	var job struct{ ID string }
	postTraced(t, s.url+"/v1/jobs", "application/json", caller, `{"queue":"py","type":"render","payload":{"secret":"do-not-export"}}`, &job)
	done := waitJob(t, s.url, job.ID)
	if done["status"] != "succeeded" {
		t.Fatalf("job %v\n%s", done, stderr.String())
	}
	spans := recv.trace(t, "6bf92f3577b34da6a3ce929d0e0e4736", oneJob)
	by := connected(t, spans, "20f067aa0ba902b7")
	attempt, run, complete := by["tether.attempt"][0], by["tether.run"][0], by["tether.complete"][0]
	parentOf(t, by["tether.job"][0], attempt)
	parentOf(t, attempt, run)
	parentOf(t, run, complete)
	t.Logf("the job's trace through Python:%s", render(spans, "20f067aa0ba902b7"))
	if run.service != "tether-worker" || run.attrs["tether.job.id"] != job.ID || run.attrs["tether.outcome"] != "succeeded" || run.attrs["tether.attempt"] != "1" {
		t.Errorf("the Python run span: %s %v", run.service, run.attrs)
	}
	out, _ := done["output"].(map[string]any)
	if out["traceparent"] != "00-6bf92f3577b34da6a3ce929d0e0e4736-"+run.id+"-01" {
		t.Errorf("the handler's ctx.traceparent was %v; the run's span is %s", out["traceparent"], run.id)
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if recv.encodings["application/json"] == 0 || recv.encodings["application/x-protobuf"] == 0 {
		t.Errorf("requests by encoding: %v (the server's protobuf, the Python worker's JSON)", recv.encodings)
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// With the collector away, the server goes on serving and says so in its own log, once in a
// while, with a stable code, not a raw line of Go's log for every batch; /metrics counts the
// spans that failed; and a collector URL with a typo in the variable stops the start.
func TestTraceExportFailuresAreLogged(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	nobody := freeAddr(t)
	addr := freeAddr(t)
	p := startTether(t, nil, "server", "--data", t.TempDir(), "--addr", addr, "--log-format", "json", "--otel-endpoint", "http://"+nobody)
	p.waitFor(t, `"msg":"ready"`)
	for i := 0; i < 20; i++ {
		var job struct{ ID string }
		postTraced(t, "http://"+addr+"/v1/jobs", "application/json", "00-8bf92f3577b34da6a3ce929d0e0e4736-40f067aa0ba902b7-01", `{"queue":"q","type":"t"}`, &job)
		time.Sleep(60 * time.Millisecond) // one batch each: failures, not one failure
	}
	p.waitFor(t, `"code":"TRACE_EXPORT_FAILED"`)
	if n := strings.Count(p.output(), "TRACE_EXPORT_FAILED"); n != 1 {
		t.Errorf("%d TRACE_EXPORT_FAILED lines in a second; want one every 30 s", n)
	}
	for _, line := range strings.Split(strings.TrimSpace(p.output()), "\n") {
		if !strings.HasPrefix(line, "{") {
			t.Errorf("a line that is not the server's JSON log: %q", line)
		}
	}
	if m := httpGet(t, "http://"+addr+"/metrics"); strings.Contains(m, "tether_trace_spans_export_failed_total 0\n") {
		t.Errorf("/metrics counts no failed span")
	}

	_, stderr, code := tether(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=collector:4318"}, "server", "--data", t.TempDir(), "--addr", freeAddr(t))
	if code == 0 || !strings.Contains(stderr, "OTEL_EXPORTER_OTLP_ENDPOINT") {
		t.Errorf("a typo in OTEL_EXPORTER_OTLP_ENDPOINT: exit %d\n%s", code, stderr)
	}
}

// A setting of tracing's that the OpenTelemetry SDK would panic on (a negative queue), run out
// of memory with (a huge one), or take in silence or print as plain text (an unknown sampler, a
// bad ratio, a header without '=') stops `tether server` and `tether worker` at start as a bad
// flag does: exit 2, a message that names the variable, no log line, nothing made on disk.
func TestBadTraceSettingsAreRefusedAtStart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	for _, env := range [][]string{
		{"OTEL_BSP_MAX_QUEUE_SIZE=-1"},
		{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE=-5"},
		{"OTEL_BSP_MAX_QUEUE_SIZE=9999999999"},
		{"OTEL_TRACES_SAMPLER=bogus"},
		{"OTEL_TRACES_SAMPLER=traceidratio", "OTEL_TRACES_SAMPLER_ARG=x"},
		{"OTEL_EXPORTER_OTLP_HEADERS=abc"},
	} {
		variable, _, _ := strings.Cut(env[len(env)-1], "=")
		refused := func(command, stderr string, code int, made string) {
			t.Helper()
			if code != 2 || !strings.HasPrefix(stderr, "tether "+command+": "+variable) {
				t.Errorf("%v tether %s: exit %d, stderr:\n%s", env, command, code, stderr)
			}
			if strings.Contains(stderr, "panic") || strings.Contains(stderr, `"level"`) {
				t.Errorf("%v tether %s: a panic or a log line:\n%s", env, command, stderr)
			}
			if _, err := os.Stat(made); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%v tether %s: %s was made", env, command, made)
			}
		}
		data := filepath.Join(t.TempDir(), "data")
		_, stderr, code := tether(t, env, "server", "--data", data, "--addr", "127.0.0.1:0", "--log-format", "json", "--otel-endpoint", "http://127.0.0.1:4318")
		refused("server", stderr, code, data)
		state := filepath.Join(t.TempDir(), "state")
		_, stderr, code = tether(t, env, "worker", "--server", "http://127.0.0.1:9", "--state-dir", state, "--log-format", "json",
			"--otel-endpoint", "http://127.0.0.1:4318", "--", "true")
		refused("worker", stderr, code, state)
	}
}

// hungCollector is an OTLP collector that takes the connection and the POST and never answers.
type hungCollector struct {
	url string
	got chan struct{} // closed once a request has arrived
}

func newHungCollector(t *testing.T) *hungCollector {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hungCollector{url: "http://" + ln.Addr().String(), got: make(chan struct{})}
	var once sync.Once
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				if _, err := c.Read(make([]byte, 1)); err == nil {
					once.Do(func() { close(h.got) })
				}
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return h
}

// waitRequest waits until the collector has been sent a request.
func (h *hungCollector) waitRequest(t *testing.T) {
	t.Helper()
	select {
	case <-h.got:
	case <-time.After(30 * time.Second):
		t.Fatal("no span was sent to the collector in 30 s")
	}
}

// stopTime sends SIGTERM to p and returns how long it took to exit (failing the test after 30 s).
func stopTime(t *testing.T, p *process) time.Duration {
	t.Helper()
	began := time.Now()
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, p.output())
	}
	return time.Since(began)
}

// stopTimeMax is the most a stop may take with a hung collector in these tests: the README's
// 2 s, with room for a loaded CI machine; a stop that waited for the exporter took 5 s more.
const stopTimeMax = 5 * time.Second

// traceMetrics reads the server's tether_trace_* figures from /metrics.
func traceMetrics(t *testing.T, base string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, line := range strings.Split(httpGet(t, base+"/metrics"), "\n") {
		var name string
		var v float64
		if strings.HasPrefix(line, "tether_trace_") {
			if _, err := fmt.Sscan(line, &name, &v); err == nil {
				out[name] = int64(v)
			}
		}
	}
	return out
}

// A collector that takes the POST and never answers holds up no stop: SIGTERM to exit stays
// within the README's 2 s (checked here as under stopTimeMax) for the server, `tether worker`
// and a Python worker; and every span ended is counted somewhere a user looks: exported,
// failed, dropped or queued in /metrics while the server runs, and what a stop left behind in
// its log.
func TestAHungCollectorHoldsNoStop(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	const caller = "00-9bf92f3577b34da6a3ce929d0e0e4736-50f067aa0ba902b7-01"
	t.Run("server", func(t *testing.T) {
		hung := newHungCollector(t)
		addr := freeAddr(t)
		p := startTether(t, []string{"OTEL_BSP_MAX_QUEUE_SIZE=8", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE=4"},
			"server", "--data", t.TempDir(), "--addr", addr, "--log-format", "json", "--otel-endpoint", hung.url)
		p.waitFor(t, `"msg":"ready"`)
		base := "http://" + addr
		const submits = 20 // a span each: 4 in the hung export, 8 queued behind it, 8 dropped
		for range submits {
			var job struct{ ID string }
			postTraced(t, base+"/v1/jobs", "application/json", caller, `{"queue":"nobody-serves","type":"t"}`, &job)
		}
		hung.waitRequest(t)
		var m map[string]int64
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if m = traceMetrics(t, base); m["tether_trace_spans_ended_total"] == submits || time.Now().After(deadline) {
				break
			}
		}
		t.Logf("/metrics with the collector hung: %v", m)
		if m["tether_trace_spans_ended_total"] != submits || m["tether_trace_spans_dropped_total"] == 0 || m["tether_trace_spans_queued"] == 0 ||
			m["tether_trace_spans_ended_total"] != m["tether_trace_spans_exported_total"]+m["tether_trace_spans_export_failed_total"]+
				m["tether_trace_spans_dropped_total"]+m["tether_trace_spans_queued"] {
			t.Errorf("the spans ended are not all exported, failed, dropped or queued: %v", m)
		}
		took := stopTime(t, p)
		t.Logf("SIGTERM to exit with the collector hung: %v", took)
		if took >= stopTimeMax {
			t.Errorf("the server took %v to stop", took)
		}
		mustContain(t, "the server's log", p.output(), `"code":"TRACE_SPANS_LOST"`, `"ended":20`, `"dropped":8`, `"unsent_at_stop":8`)
		for _, line := range strings.Split(strings.TrimSpace(p.output()), "\n") {
			if !strings.HasPrefix(line, "{") {
				t.Errorf("a line that is not the server's JSON log: %q", line)
			}
		}
	})
	t.Run("tether worker", func(t *testing.T) {
		hung := newHungCollector(t)
		s := startServer(t, t.TempDir())
		w := startTether(t, []string{"OTEL_BSP_SCHEDULE_DELAY=50"}, "worker", "--server", s.url, "--state-dir", t.TempDir(), "--queue", "hung",
			"--log-format", "json", "--otel-endpoint", hung.url, "--", "true")
		for range 3 {
			var job struct{ ID string }
			postTraced(t, s.url+"/v1/jobs", "application/json", caller, `{"queue":"hung","type":"t"}`, &job)
			if j := waitJob(t, s.url, job.ID); j["status"] != "succeeded" {
				t.Fatalf("job %v", j)
			}
		}
		hung.waitRequest(t)
		took := stopTime(t, w)
		t.Logf("SIGTERM to exit with the collector hung: %v", took)
		if took >= stopTimeMax {
			t.Errorf("tether worker took %v to stop", took)
		}
		mustContain(t, "the worker's log", w.output(), `"code":"TRACE_SPANS_LOST"`, `"ended":3`)
	})
	t.Run("python worker", func(t *testing.T) {
		const python = "/usr/bin/python3"
		if _, err := os.Stat(python); err != nil {
			if os.Getenv("TETHER_REQUIRE_TOOLS") != "" {
				t.Fatalf("no %s: %v", python, err)
			}
			t.Skip("no " + python)
		}
		hung := newHungCollector(t)
		s := startServer(t, t.TempDir())
		sdk, _ := filepath.Abs("../../sdk/python")
		script := filepath.Join(t.TempDir(), "worker.py")
		if err := os.WriteFile(script, []byte(`
import logging, sys, tether
logging.basicConfig(level=logging.INFO)
w = tether.Worker(sys.argv[1], queues=["hung"], otel_endpoint=sys.argv[2])
@w.handler("t")
def t(ctx):
    return {}
w.run()
`), 0o644); err != nil {
			t.Fatal(err)
		}
		p := &process{cmd: exec.Command(python, script, s.url, hung.url), done: make(chan struct{})}
		p.cmd.Env = append(os.Environ(), "PYTHONPATH="+sdk, "OTEL_BSP_SCHEDULE_DELAY=50")
		p.cmd.Stdout, p.cmd.Stderr = p, p
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { p.err = p.cmd.Wait(); close(p.done) }()
		t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
		for range 3 {
			var job struct{ ID string }
			postTraced(t, s.url+"/v1/jobs", "application/json", caller, `{"queue":"hung","type":"t"}`, &job)
			if j := waitJob(t, s.url, job.ID); j["status"] != "succeeded" {
				t.Fatalf("job %v\n%s", j, p.output())
			}
		}
		hung.waitRequest(t)
		took := stopTime(t, p)
		t.Logf("SIGTERM to exit with the collector hung: %v", took)
		if took >= stopTimeMax {
			t.Errorf("the Python worker took %v to stop", took)
		}
		mustContain(t, "the worker's log", p.output(), "3 of 3 spans were not exported")
	})
}
