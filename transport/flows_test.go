package transport_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

const diamondFlow = `
flow:
  defaults: {queue: q, max_attempts: 1}
  steps:
    a: {payload: {n: 1}}
    b: {needs: [a]}
    c: {needs: [a], payload: {extra: true}}
    d: {needs: [b, c]}
`

// complete finishes an assignment with output.
func (w *wsWorker) complete(a wire.Frame, output string) {
	w.t.Helper()
	if ack := w.ack(wire.Frame{Type: wire.FrameComplete, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: []byte(output)}); ack.OK == nil || !*ack.OK {
		w.t.Fatalf("complete %s: %+v", a.JobType, ack)
	}
	w.send(wire.Frame{Type: wire.FrameCredit, N: 1})
}

// A diamond a → (b, c) → d runs through a worker over WebSocket: each step only once what it
// needs has succeeded, with their outputs under "needs"; the flow's events list its life.
func TestDiamondFlowThroughAWorker(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	c := client.New(h.url, "", nil)
	f, err := c.SubmitFlow(ctx(t), "diamond", []byte(diamondFlow), "")
	if err != nil {
		t.Fatal(err)
	}
	if f.Status != "running" || f.Name != "diamond" || f.YAMLBytes != len(diamondFlow) || len(f.YAMLSHA256) != 64 ||
		f.Receipt == nil || f.Receipt.Seq == 0 || f.IdempotentHit == nil || *f.IdempotentHit {
		t.Fatalf("submit answered %+v", f)
	}
	if s := f.Steps["d"]; s.Status != "waiting" || s.JobID != "" || strings.Join(s.Needs, ",") != "b,c" || strings.Join(s.WaitingFor, ",") != "b,c" {
		t.Fatalf("step d at submit: %+v", s)
	}
	if s := f.Steps["a"]; s.WaitingFor != nil {
		t.Fatalf("step a, which needs nothing, waits for %v", s.WaitingFor)
	}
	reg := h.register("", nil, 4)
	w := h.dial(reg.WorkerToken, 4)
	w.send(wire.Frame{Type: wire.FrameCredit, N: 4})
	a := w.assignment()
	if a.JobType != "a" || string(a.Payload) != `{"n":1}` {
		t.Fatalf("first assignment %s %s", a.JobType, a.Payload)
	}
	// A worker's progress event stays in its job's stream, out of the flow's.
	w.ack(wire.Frame{Type: wire.FrameEvent, JobID: a.JobID, LeaseID: a.LeaseID, EventType: "log", Data: json.RawMessage(`"line"`)})
	w.complete(a, `{"rows":3}`)
	got := map[string]wire.Frame{}
	for range 2 {
		x := w.assignment()
		got[x.JobType] = x
	}
	if string(got["b"].Payload) != `{"needs":{"a":{"rows":3}}}` || string(got["c"].Payload) != `{"extra":true,"needs":{"a":{"rows":3}}}` {
		t.Fatalf("b and c got %s and %s", got["b"].Payload, got["c"].Payload)
	}
	w.complete(got["b"], `"B"`)
	if f, err := c.Flow(ctx(t), f.ID); err != nil || strings.Join(f.Steps["d"].WaitingFor, ",") != "c" {
		t.Fatalf("step d once b succeeded: %+v %v", f.Steps["d"], err)
	}
	w.complete(got["c"], `"C"`)
	d := w.assignment()
	if d.JobType != "d" || string(d.Payload) != `{"needs":{"b":"B","c":"C"}}` {
		t.Fatalf("d: %s %s", d.JobType, d.Payload)
	}
	w.complete(d, `1`)
	end := awaitFlow(t, h, c, f.ID)
	if end.Status != "succeeded" || end.EndedAt == nil {
		t.Fatalf("flow %+v", end)
	}
	for name, s := range end.Steps {
		if s.Status != "succeeded" || s.JobID == "" {
			t.Fatalf("step %s: %+v", name, s)
		}
	}
	job, err := c.Get(ctx(t), end.Steps["d"].JobID)
	if err != nil || string(job.Payload) != `{"needs":{"b":"B","c":"C"}}` {
		t.Fatalf("d's job: %+v %v", job, err)
	}
	evs, err := c.FlowEvents(ctx(t), f.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(evs.Events); !evs.Done || n < 10 || evs.Events[0].Type != "flow.submitted" || evs.Events[n-1].Type != "flow.ended" {
		t.Fatalf("events: done %v, %d: %+v", evs.Done, n, evs.Events)
	}
	for i, e := range evs.Events {
		if e.Type == "job.progress" {
			t.Fatalf("event %d is a worker's progress event: %+v", i, e)
		}
		if e.Number != i+1 || (i > 0 && e.Seq <= evs.Events[i-1].Seq) {
			t.Fatalf("event %d is numbered %d at seq %d", i, e.Number, e.Seq)
		}
	}
	// A resume after event n repeats nothing and skips nothing.
	rest, err := c.FlowEvents(ctx(t), f.ID, 4)
	if err != nil || len(rest.Events) != len(evs.Events)-4 || rest.Events[0].Seq != evs.Events[4].Seq {
		t.Fatalf("resumed after 4: %+v %v", rest, err)
	}
	list, err := c.Flows(ctx(t), "succeeded", "", 10)
	if err != nil || len(list.Flows) != 1 || list.Flows[0].ID != f.ID {
		t.Fatalf("list: %+v %v", list, err)
	}
}

// awaitFlow reads a flow's events to their end and returns the flow.
func awaitFlow(t *testing.T, h *harness, c *client.Client, id string) *wire.Flow {
	t.Helper()
	resp := sse(t, h.url+"/v1/flows/"+id+"/events")
	if !strings.Contains(resp, "event: done") {
		t.Fatalf("the flow's event stream ended without done:\n%s", resp)
	}
	f, err := c.Flow(ctx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// sse reads an event stream to its end.
func sse(t *testing.T, url string) string {
	t.Helper()
	return readStream(openStream(t, url, ""))
}

// openStream opens an event stream, resuming after lastEventID unless it is empty, and returns
// once the server has sent the headers.
func openStream(t *testing.T, url, lastEventID string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx(t), http.MethodGet, url, nil)
	req.Header.Set("Accept", "text/event-stream")
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// readStream reads a stream to its end and closes it.
func readStream(resp *http.Response) string {
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return b.String()
}

// A reader that resumes a flow's events at or past their end is told at once that it has them
// all once the flow has ended (JSON done, SSE done, the client's watch returns), as a job's
// are; while the flow runs it waits for what comes.
func TestFlowEventsResumedAtTheEnd(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	c := client.New(h.url, "", nil)
	f, err := c.SubmitFlow(ctx(t), "resumed", []byte("flow:\n  defaults: {queue: nobody-serves}\n  steps: {a: {}, b: {needs: [a]}}\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	running, err := c.FlowEvents(ctx(t), f.ID, 0)
	if err != nil || running.Done || len(running.Events) == 0 {
		t.Fatalf("a running flow's events: %+v %v", running, err)
	}
	n := len(running.Events)
	if atEnd, err := c.FlowEvents(ctx(t), f.ID, n); err != nil || atEnd.Done || len(atEnd.Events) != 0 {
		t.Fatalf("a running flow's events after the last: %+v %v", atEnd, err)
	}
	stream := openStream(t, h.url+"/v1/flows/"+f.ID+"/events", strconv.Itoa(n))
	if _, err := c.CancelFlow(ctx(t), f.ID); err != nil {
		t.Fatal(err)
	}
	body := readStream(stream)
	if !strings.HasPrefix(body, "id: "+strconv.Itoa(n+1)+"\n") || !strings.HasSuffix(body, "event: done\ndata: {\"status\":\"cancelled\"}\n\n") {
		t.Fatalf("the stream resumed at the end of a running flow, which then was cancelled:\n%s", body)
	}

	all, err := c.FlowEvents(ctx(t), f.ID, 0)
	if err != nil || !all.Done || len(all.Events) <= n {
		t.Fatalf("an ended flow's events: %+v %v", all, err)
	}
	end := len(all.Events)
	for _, after := range []int{end, end + 1, end + 1000} {
		if rest, err := c.FlowEvents(ctx(t), f.ID, after); err != nil || !rest.Done || len(rest.Events) != 0 {
			t.Fatalf("an ended flow's events after %d of %d: %+v %v", after, end, rest, err)
		}
		if body := readStream(openStream(t, h.url+"/v1/flows/"+f.ID+"/events", strconv.Itoa(after))); body != "event: done\ndata: {\"status\":\"cancelled\"}\n\n" {
			t.Fatalf("the stream of an ended flow resumed after %d of %d:\n%s", after, end, body)
		}
	}
	if status, err := c.WatchFlow(ctx(t), f.ID, end, func(e wire.Event) error { return fmt.Errorf("event %d after the end", e.Number) }); err != nil || status != "cancelled" {
		t.Fatalf("watch after the end: %q %v", status, err)
	}
}

// A step that fails fails the flow: the steps after it are skipped, a step still leased is
// asked to cancel; a cancelled flow skips what waits and cancels what runs.
func TestFailedAndCancelledFlows(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	c := client.New(h.url, "", nil)
	reg := h.register("", nil, 2)
	w := h.dial(reg.WorkerToken, 2)
	f, err := c.SubmitFlow(ctx(t), "failing", []byte("flow:\n  defaults: {queue: q, max_attempts: 1}\n  steps: {a: {}, b: {needs: [a]}, slow: {}}\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	w.send(wire.Frame{Type: wire.FrameCredit, N: 2})
	got := map[string]wire.Frame{}
	for range 2 {
		x := w.assignment()
		got[x.JobType] = x
	}
	w.ack(wire.Frame{Type: wire.FrameFail, JobID: got["a"].JobID, LeaseID: got["a"].LeaseID, ErrorCode: "boom", Message: "no"})
	if cancel := w.next(); cancel.Type != wire.FrameCancel || cancel.JobID != got["slow"].JobID {
		t.Fatalf("the running step was not asked to cancel: %+v", cancel)
	}
	w.ack(wire.Frame{Type: wire.FrameFail, JobID: got["slow"].JobID, LeaseID: got["slow"].LeaseID, ErrorCode: "cancelled"})
	end := awaitFlow(t, h, c, f.ID)
	if end.Status != "failed" || end.FailedStep != "a" || end.Steps["b"].Status != "skipped" || end.Steps["slow"].Status != "cancelled" {
		t.Fatalf("failed flow: %+v", end)
	}
	_, err = c.CancelFlow(ctx(t), f.ID)
	wantErr(t, err, http.StatusConflict, "FLOW_ENDED")
	_, err = c.Retry(ctx(t), end.Steps["a"].JobID)
	wantErr(t, err, http.StatusConflict, "FLOW_STEP")

	g, err := c.SubmitFlow(ctx(t), "cancelled", []byte("flow:\n  defaults: {queue: q}\n  steps: {a: {}, b: {needs: [a]}, c: {}}\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	w.send(wire.Frame{Type: wire.FrameCredit, N: 1})
	leased := w.assignment()
	cancelled, err := c.CancelFlow(ctx(t), g.ID)
	if err != nil || cancelled.Status != "cancelled" || cancelled.Receipt == nil || cancelled.Steps["b"].Status != "skipped" {
		t.Fatalf("cancel: %+v %v", cancelled, err)
	}
	if cancel := w.next(); cancel.Type != wire.FrameCancel || cancel.JobID != leased.JobID {
		t.Fatalf("the leased step was not asked to cancel: %+v", cancel)
	}
	w.ack(wire.Frame{Type: wire.FrameFail, JobID: leased.JobID, LeaseID: leased.LeaseID, ErrorCode: "cancelled"})
	end = awaitFlow(t, h, c, g.ID)
	for name, s := range end.Steps {
		if s.Status != "cancelled" && s.Status != "skipped" {
			t.Fatalf("step %s of a cancelled flow is %s", name, s.Status)
		}
	}
}

// Flow files are refused with a stable code and the place named; the name comes from the
// query, the form or the file; idempotency keys work; tenants see only their flows.
func TestFlowSubmitErrors(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthToken)
	key, err := h.admin.CreateAPIKey(ctx(t), "acme")
	if err != nil {
		t.Fatal(err)
	}
	acme, globex := client.New(h.url, key.Key, nil), h.tenant("globex")
	post := func(path, contentType string, body []byte) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, h.url+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Authorization", "Bearer "+key.Key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	for _, x := range []struct {
		name, body, contentType string
		status                  int
		code, want              string
	}{
		{"unknown key", "flow:\n  steps:\n    a: {queue: q, neds: [b]}\n", "application/yaml", 400, "INVALID_FLOW", "line 3"},
		{"flows", "flows: []\n", "application/yaml", 400, "INVALID_FLOW", `"flows" is not allowed`},
		{"discovery", "flow: {steps: {a: {queue: q}}}\ndiscovery: {}\n", "application/yaml", 400, "INVALID_FLOW", `"discovery" is not allowed`},
		{"cycle", "flow:\n  defaults: {queue: q}\n  steps: {a: {needs: [b]}, b: {needs: [a]}}\n", "application/yaml", 400, "INVALID_FLOW", "a → b → a"},
		{"unknown need", "flow:\n  defaults: {queue: q}\n  steps: {a: {needs: [x]}}\n", "application/yaml", 400, "INVALID_FLOW", `needs "x"`},
		{"duplicate step", "flow:\n  defaults: {queue: q}\n  steps:\n    a: {}\n    a: {}\n", "application/yaml", 400, "INVALID_FLOW", "given twice"},
		{"bad yaml", "flow: [\n", "application/yaml", 400, "INVALID_FLOW", "not valid YAML"},
		{"no queue", "flow: {steps: {a: {}}}\n", "application/yaml", 400, "INVALID_ARGUMENT", "step a: queue"},
		{"too large", "flow: {steps: {a: {queue: q, payload: {x: \"" + strings.Repeat("x", 262_144) + "\"}}}}\n", "application/yaml", 413, "PAYLOAD_TOO_LARGE", "262144"},
		{"form-encoded", "flow=x", "application/x-www-form-urlencoded", 415, "UNSUPPORTED_MEDIA_TYPE", "application/yaml"},
	} {
		status, body := post("/v1/flows?name=x", x.contentType, []byte(x.body))
		e, _ := body["error"].(map[string]any)
		if msg, _ := e["message"].(string); status != x.status || codeOf(body) != x.code || !strings.Contains(msg, x.want) {
			t.Errorf("%s: %d %v, want %d %s with %q", x.name, status, body, x.status, x.code, x.want)
		}
	}
	if status, body := post("/v1/flows", "application/yaml", []byte("flow: {steps: {a: {queue: q}}}\n")); status != 400 || codeOf(body) != "INVALID_ARGUMENT" {
		t.Errorf("no name: %d %v", status, body)
	}
	// The form of seed 003: a file part and a flow_name field.
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	fw, _ := mw.CreateFormFile("file", "flow.yaml")
	_, _ = fw.Write([]byte("flow: {steps: {a: {queue: q}}}\n"))
	_ = mw.WriteField("flow_name", "from-form")
	_ = mw.Close()
	status, body := post("/v1/flows", mw.FormDataContentType(), form.Bytes())
	if status != 201 || body["name"] != "from-form" || body["yaml_bytes"] != float64(len("flow: {steps: {a: {queue: q}}}\n")) {
		t.Fatalf("multipart: %d %v", status, body)
	}
	id, _ := body["id"].(string)
	form.Reset()
	mw = multipart.NewWriter(&form)
	for range 2 {
		fw, _ = mw.CreateFormFile("file", "flow.yaml")
		_, _ = fw.Write([]byte("flow: {steps: {a: {queue: q}}}\n"))
	}
	_ = mw.Close()
	if status, body := post("/v1/flows?name=x", mw.FormDataContentType(), form.Bytes()); status != 400 || codeOf(body) != "INVALID_ARGUMENT" {
		t.Fatalf("a form with two files: %d %v", status, body)
	}
	if _, err := globex.Flow(ctx(t), id); err == nil {
		t.Fatal("another tenant read the flow")
	} else {
		wantErr(t, err, http.StatusNotFound, "FLOW_NOT_FOUND")
	}
	_, err = globex.CancelFlow(ctx(t), id)
	wantErr(t, err, http.StatusNotFound, "FLOW_NOT_FOUND")
	// The name in the file, and an idempotency key.
	file := []byte("flow:\n  name: named-in-file\n  steps: {a: {queue: q}}\n")
	first, err := acme.SubmitFlow(ctx(t), "", file, "k1")
	if err != nil || first.Name != "named-in-file" {
		t.Fatalf("%+v %v", first, err)
	}
	again, err := acme.SubmitFlow(ctx(t), "", file, "k1")
	if err != nil || again.ID != first.ID || again.IdempotentHit == nil || !*again.IdempotentHit {
		t.Fatalf("again: %+v %v", again, err)
	}
	_, err = acme.SubmitFlow(ctx(t), "other", file, "k1")
	wantErr(t, err, http.StatusUnprocessableEntity, "IDEMPOTENCY_KEY_REUSED")
}

// TestFlowKeyAfterTheFlowExpired: an ended flow leaves the views after the retention, and a
// submit repeated under its key then answers 200 with the flow as expired, not an error, as a
// job's does; without the file and times the server no longer knows, rather than zeros.
func TestFlowKeyAfterTheFlowExpired(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone, func(c *broker.Config) { c.Retention = projections.Retention{Done: time.Minute} })
	c := client.New(h.url, "", nil)
	file := []byte("flow:\n  steps: {a: {queue: nobody}}\n")
	f, err := c.SubmitFlow(ctx(t), "once", file, "k1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CancelFlow(ctx(t), f.ID); err != nil {
		t.Fatal(err)
	}
	h.clock.elapse(2 * time.Minute) // the retention sweep's timer fires
	for {
		changed := h.b.Changed()
		if _, err := c.Flow(ctx(t), f.ID); err != nil {
			wantErr(t, err, http.StatusNotFound, "FLOW_NOT_FOUND")
			break
		}
		select {
		case <-changed:
		case <-ctx(t).Done():
			t.Fatal("the ended flow never left the views")
		}
	}
	again, err := c.SubmitFlow(ctx(t), "once", file, "k1")
	if err != nil || again.ID != f.ID || again.Status != wire.FlowExpired || !*again.IdempotentHit || again.Receipt == nil {
		t.Fatalf("the same submit after the flow expired: %+v, %v", again, err)
	}
	status, body := h.raw(http.MethodPost, "/v1/flows?name=once&idempotency_key=k1", "", []byte(`{"flow":{"steps":{"a":{"queue":"nobody"}}}}`))
	if status != http.StatusOK || body["status"] != wire.FlowExpired || body["name"] != "once" {
		t.Fatalf("the same submit as JSON: %d %v", status, body)
	}
	for _, unknown := range []string{"yaml_sha256", "yaml_bytes", "created_at", "updated_at"} {
		if v, ok := body[unknown]; ok {
			t.Errorf("the expired flow's answer has %s %v", unknown, v)
		}
	}
}
