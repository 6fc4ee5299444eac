package transport_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/wire"
)

func TestParseTraceparent(t *testing.T) {
	const valid = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for h, want := range map[string]string{
		valid: valid,
		"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-more": valid[:53] + "01", // a later version: its first four fields
		"cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00":      "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
		"": "",
		"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01":   "", // version ff is invalid
		"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01":   "", // uppercase
		"00-00000000000000000000000000000000-b7ad6b7169203331-01":   "", // a zero trace id
		"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01":   "", // a zero parent id
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x": "", // version 00 has four fields
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331":      "",
		"00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01":   "",
		"00-0af7651916cd43dd8448eb211c80319g-b7ad6b7169203331-01":   "",
	} {
		got, ok := transport.ParseTraceparent(h)
		if got != want || ok != (want != "") {
			t.Errorf("ParseTraceparent(%q) = %q, %v; want %q", h, got, ok, want)
		}
	}
}

// A submit's traceparent header travels with its jobs to the worker, in the assign frame:
// a job's, a batch's, and a flow's steps' (which continue the flow's); a header that does not
// parse is ignored, not refused.
func TestTraceparentReachesTheWorker(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	reg := h.register("", nil, 10)
	w := h.dial(reg.WorkerToken, 10)
	w.send(wire.Frame{Type: wire.FrameCredit, N: 10})

	post := func(path, contentType, traceparent, body string) {
		t.Helper()
		req, _ := http.NewRequest("POST", h.url+path, bytes.NewReader([]byte(body)))
		req.Header.Set("Content-Type", contentType)
		if traceparent != "" {
			req.Header.Set("traceparent", traceparent)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST %s: %d", path, resp.StatusCode)
		}
	}
	const (
		one   = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		batch = "00-11111111111111111111111111111111-2222222222222222-00"
		flow  = "00-33333333333333333333333333333333-4444444444444444-01"
	)
	post("/v1/jobs", "application/json", one, `{"queue":"q","type":"one"}`)
	post("/v1/jobs", "application/json", "00-garbage", `{"queue":"q","type":"bad"}`)
	post("/v1/jobs", "application/json", "", `{"queue":"q","type":"none"}`)
	post("/v1/jobs/batch", "application/json", batch, `{"jobs":[{"queue":"q","type":"batch"},{"queue":"q","type":"batch"}]}`)
	post("/v1/flows?name=f", "application/yaml", flow, "flow:\n  steps:\n    a: {type: step, queue: q}\n")

	want := map[string][]string{"one": {one}, "bad": {""}, "none": {""}, "batch": {batch, batch}, "step": {flow}}
	got := map[string][]string{}
	for range 6 {
		a := w.assignment()
		got[a.JobType] = append(got[a.JobType], a.Traceparent)
	}
	for typ, tps := range want {
		if len(got[typ]) != len(tps) || got[typ][0] != tps[0] {
			t.Errorf("%s jobs' traceparent %q, want %q", typ, got[typ], tps)
		}
	}
}
