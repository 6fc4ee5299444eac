package transport_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/openapi"
	"github.com/tetherhq/tether/transport/wire"
)

// The OpenAPI document is valid OpenAPI 3.1, the server serves it, and real answers of a
// running server match it: a submit, a get, a list, an error, a lease and a worker list.
func TestOpenAPIDescribesTheAnswers(t *testing.T) {
	t.Parallel()
	doc, err := libopenapi.NewDocument(openapi.Document())
	if err != nil {
		t.Fatal(err)
	}
	if v := doc.GetVersion(); v != "3.1.0" {
		t.Fatalf("openapi %s", v)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("the document: %s", e.Message)
		}
		t.FailNow()
	}

	h := start(t, transport.AuthNone)
	reg := h.register("", nil, 1)
	check := func(method, path, token, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, h.url+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(raw))
		req.Body = io.NopCloser(strings.NewReader(body))
		if ok, verrs := v.ValidateHttpRequestResponse(req, resp); !ok {
			for _, e := range verrs {
				t.Errorf("%s %s → %d %s: %s (%s)", method, path, resp.StatusCode, raw, e.Message, e.Reason)
				for _, se := range e.SchemaValidationErrors {
					t.Errorf("  %s at %s", se.Reason, se.FieldPath)
				}
			}
		}
		resp.Body = io.NopCloser(bytes.NewReader(raw))
		return resp
	}
	if resp := check("GET", "/v1/openapi.json", "", ""); resp.StatusCode != 200 {
		t.Fatalf("GET /v1/openapi.json: %d", resp.StatusCode)
	}
	resp := check("POST", "/v1/jobs", "", `{"queue":"q","type":"t","payload":{"n":1},"labels":{"a":"b"}}`)
	var job wire.Job
	decode(t, resp, &job)
	check("GET", "/v1/jobs/"+job.ID, "", "")
	check("GET", "/v1/jobs?limit=10", "", "")
	check("GET", "/v1/jobs/01NOSUCHJOB00000000000000", "", "")
	check("POST", "/v1/jobs", "", `{"queue":"","type":"t"}`)
	if resp := check("POST", "/v1/worker/lease", reg.WorkerToken, `{"max":1,"wait_seconds":0}`); resp.StatusCode != 200 {
		t.Fatalf("lease: %d", resp.StatusCode)
	}
	check("POST", "/v1/worker/heartbeat", reg.WorkerToken, `{"leases":[]}`)
	check("GET", "/v1/jobs/"+job.ID, "", "")
	check("GET", "/v1/workers", "", "")
	check("GET", "/v1/workers?all=true", "", "")
	check("GET", "/v1/quota", "", "")
	check("GET", "/v1/archive", "", "")

	resp = check("POST", "/v1/jobs", "", `{"queue":"q","type":"t","result_ttl_seconds":3600}`)
	decode(t, resp, &job)
	check("DELETE", "/v1/jobs/"+job.ID, "", "") // queued: 409 JOB_NOT_FINISHED
	check("POST", "/v1/jobs/"+job.ID+"/cancel", "", "")
	if resp := check("DELETE", "/v1/jobs/"+job.ID, "", ""); resp.StatusCode != 200 {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	if resp := check("GET", "/v1/jobs/"+job.ID, "", ""); resp.StatusCode != 410 {
		t.Fatalf("get of a deleted job: %d", resp.StatusCode)
	}
	check("DELETE", "/v1/jobs/01NOSUCHJOB00000000000000", "", "")
	check("POST", "/v1/dead-letters/purge", "", `{"queue":"q","older_than_seconds":60}`)
	check("POST", "/v1/dead-letters/purge", "", `{"all":true}`)
	check("POST", "/v1/jobs/cancel", "", `{"queue":"q","label":"a=b","limit":10}`)
	check("POST", "/v1/jobs/cancel", "", `{"all":true,"limit":10}`)
	check("POST", "/v1/jobs/retry", "", `{"queue":"q"}`)
	check("POST", "/v1/queues/q/pause", "", "")
	check("GET", "/v1/queues", "", "")
	check("POST", "/v1/admin/tenants/default/queues/q/resume", "", "")
	check("POST", "/v1/queues/q/resume", "", "")
	resp = check("POST", "/v1/flows?name=f", "", `{"flow":{"defaults":{"queue":"q"},"steps":{"a":{},"b":{"needs":["a"]}}}}`)
	var flow wire.Flow
	if err := json.NewDecoder(resp.Body).Decode(&flow); err != nil || resp.StatusCode != 201 {
		t.Fatalf("flow submit: %d %v", resp.StatusCode, err)
	}
	check("POST", "/v1/flows?name=f", "", `{"flow":{"steps":{"a":{"needs":["a"]}}}}`)
	check("GET", "/v1/flows/"+flow.ID, "", "")
	check("GET", "/v1/flows?status=running", "", "")
	check("GET", "/v1/flows/"+flow.ID+"/events", "", "")
	check("POST", "/v1/flows/"+flow.ID+"/cancel", "", "")
	check("POST", "/v1/flows/"+flow.ID+"/cancel", "", "") // 409 FLOW_ENDED
	check("GET", "/v1/flows/01NOSUCHFLOW0000000000000", "", "")
	resp = check("POST", "/v1/schedules", "", `{"name":"s","cron":"@hourly","timezone":"Asia/Tokyo","job":{"queue":"q","type":"t","payload":{"n":1}}}`)
	var sched wire.Schedule
	if decode(t, resp, &sched); resp.StatusCode != 201 {
		t.Fatalf("POST /v1/schedules: %d", resp.StatusCode)
	}
	check("POST", "/v1/schedules", "", `{"name":"s","cron":"@hourly","timezone":"Asia/Tokyo","job":{"queue":"q","type":"t","payload":{"n":1}}}`)
	check("POST", "/v1/schedules", "", `{"name":"s","cron":"@daily","job":{"queue":"q","type":"t"}}`) // 409
	check("POST", "/v1/schedules", "", `{"name":"s","cron":"daily","job":{"queue":"q","type":"t"}}`)  // 400
	check("GET", "/v1/schedules", "", "")
	check("GET", "/v1/schedules/"+sched.ID, "", "")
	check("POST", "/v1/schedules/"+sched.ID+"/pause", "", "")
	check("POST", "/v1/schedules/"+sched.ID+"/resume", "", "")
	check("DELETE", "/v1/schedules/"+sched.ID, "", "")
	check("GET", "/v1/schedules/"+sched.ID, "", "") // 404
	check("PUT", "/v1/queues/q/limits", "", `{"max_running_per_key":2}`)
	check("GET", "/v1/queues", "", "")
	check("DELETE", "/v1/queues/q/limits", "", "")
	check("POST", "/v1/jobs", "", `{"queue":"q","type":"t","concurrency_key":"c"}`)
	check("GET", "/v1/jobs/"+job.ID+"/explain", "", "")
	check("GET", "/v1/jobs/01NOSUCHJOB00000000000000/explain", "", "")
}

func decode(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// The description of a release says which reasons are the server's own and refuses them: a
// request that gives one does not match it, and the reason's text names each.
func TestOpenAPIRefusesTheServersReleaseReasons(t *testing.T) {
	t.Parallel()
	doc, err := libopenapi.NewDocument(openapi.Document())
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	release := func(reason string) bool {
		req, _ := http.NewRequest("POST", "http://tether/v1/worker/jobs/01J/release", strings.NewReader(`{"lease_id":"L","reason":"`+reason+`"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer tw_x")
		ok, _ := v.ValidateHttpRequest(req)
		return ok
	}
	if !release(eventlog.ReleasedWorkerStopping) {
		t.Fatalf("a release with reason %s does not match the description", eventlog.ReleasedWorkerStopping)
	}
	var raw map[string]any
	if err := json.Unmarshal(openapi.Document(), &raw); err != nil {
		t.Fatal(err)
	}
	described := fmt.Sprint(dig(raw, "paths", "/v1/worker/jobs/{id}/release", "post", "requestBody", "content", "application/json", "schema", "properties", "reason", "description"))
	for _, r := range eventlog.ServerReleaseReasons() {
		if release(r) {
			t.Errorf("a release with the server's own reason %s matches the description", r)
		}
		if !strings.Contains(described, r) {
			t.Errorf("the release reason's description does not name %s, the server's own: %q", r, described)
		}
	}
}

// dig walks a decoded JSON document by key.
func dig(doc any, keys ...string) any {
	for _, k := range keys {
		m, _ := doc.(map[string]any)
		doc = m[k]
	}
	return doc
}
