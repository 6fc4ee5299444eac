package transport_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

func messageOf(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	m, _ := e["message"].(string)
	return m
}

// nested is a JSON value nested depth arrays deep.
func nested(depth int) string { return strings.Repeat("[", depth) + strings.Repeat("]", depth) }

// Every endpoint that takes a body refuses one that is not UTF-8 as INVALID_JSON, whatever else
// is in it (a field it does not know, a wrong type), and stores none of it.
func TestBodiesThatAreNotUTF8AreRefused(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	worker := h.register("", nil, 1).WorkerToken
	const job = "/v1/worker/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV"
	for _, c := range []struct{ method, path, token, body string }{
		{"POST", "/v1/jobs", "", "{\"type\":\"t\",\"queue\":\"q\",\"payload\":\"\xff\xfe\"}"},
		{"POST", "/v1/jobs", "", "{\"type\":\"t\",\"queue\":\"q\",\"payload\":{\"k\xff\":1}}"},
		{"POST", "/v1/jobs", "", "{\"type\":\"t\",\"queue\":\"q\",\"labels\":{\"a\":\"\xff\"}}"},
		{"POST", "/v1/jobs/batch", "", "{\"jobs\":[{\"type\":\"t\",\"queue\":\"q\",\"payload\":[\"\xc3\"]}]}"},
		{"POST", "/v1/jobs/cancel", "", "{\"queue\":\"q\xff\"}"},
		{"POST", "/v1/jobs/retry", "", "{\"queue\":\"q\xff\"}"},
		{"POST", "/v1/dead-letters/purge", "", "{\"queue\":\"q\xff\",\"older_than_seconds\":0}"},
		{"POST", "/v1/reservations", "", "{\"ttl_seconds\":60,\"\xff\":1}"},
		{"POST", "/v1/schedules", "", "{\"name\":\"s\",\"cron\":\"* * * * *\",\"job\":{\"type\":\"t\",\"queue\":\"q\",\"payload\":\"\xff\"}}"},
		{"POST", "/v1/flows?name=f", "", "flow:\n  steps:\n    a: {type: t, queue: q, payload: \"\xff\"}\n"},
		{"POST", "/v1/admin/api-keys", "", "{\"tenant\":\"acme\xff\"}"},
		{"POST", "/v1/admin/enroll-tokens", "", "{\"tenant\":\"acme\xff\"}"},
		{"PUT", "/v1/admin/tenants/acme/quota", "", "{\"max_active\":1,\"\xff\":1}"},
		{"POST", "/v1/workers/register", "", "{\"name\":\"w\xff\",\"queues\":[\"q\"],\"capacity\":1}"},
		{"POST", "/v1/worker/lease", worker, "{\"max\":1,\"wait_seconds\":0,\"\xff\":1}"},
		{"POST", "/v1/worker/heartbeat", worker, "{\"leases\":[\"\xff\"]}"},
		{"POST", job + "/events", worker, "{\"lease_id\":\"l\",\"event_type\":\"log\",\"data\":\"\xff\"}"},
		{"POST", job + "/complete", worker, "{\"lease_id\":\"l\",\"nonce\":\"n\",\"output\":\"\xff\"}"},
		{"POST", job + "/fail", worker, "{\"lease_id\":\"l\",\"error_code\":\"e\",\"message\":\"\xff\"}"},
		{"POST", job + "/release", worker, "{\"lease_id\":\"l\",\"message\":\"\xff\"}"},
	} {
		st, b := h.raw(c.method, c.path, c.token, []byte(c.body))
		if msg := messageOf(b); st != http.StatusBadRequest || codeOf(b) != wire.CodeInvalidJSON || !strings.Contains(msg, "is not UTF-8: byte 0x") {
			t.Errorf("%s %s %q: %d %v, want 400 INVALID_JSON", c.method, c.path, c.body, st, b)
		}
	}
	if l, err := client.New(h.url, "", nil).List(ctx(t), client.ListOptions{}); err != nil || len(l.Jobs) != 0 {
		t.Fatalf("after refused submits: %+v %v", l, err)
	}
}

// A key twice in one object, at any level of a body, payload included, is refused as
// INVALID_JSON naming the key, where encoding/json would keep the last; the flow file's YAML
// refuses repeats too.
func TestBodiesWithAKeyTwiceAreRefused(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	for _, c := range []struct{ path, body, message string }{
		{"/v1/jobs", `{"type":"t","queue":"a","queue":"b"}`, `the body has the key "queue" twice`},
		{"/v1/jobs", `{"type":"t","queue":"q","payload":{"amount":1,"amount":100}}`, `the body has the key "amount" twice in the object at payload`},
		{"/v1/jobs", `{"type":"t","queue":"q","labels":{"a":"1","\u0061":"2"}}`, `the body has the key "a" twice in the object at labels`},
		{"/v1/jobs/batch", `{"jobs":[{"type":"t","queue":"q"},{"type":"t","queue":"q","payload":[{"x":{"y":1,"y":2}}]}]}`,
			`the body has the key "y" twice in the object at jobs[1].payload[0].x`},
		{"/v1/jobs/cancel", `{"queue":"q","queue":"r"}`, `the body has the key "queue" twice`},
	} {
		st, b := h.raw("POST", c.path, "", []byte(c.body))
		if msg := messageOf(b); st != http.StatusBadRequest || codeOf(b) != wire.CodeInvalidJSON || msg != c.message {
			t.Errorf("%s %s: %d %v, want 400 INVALID_JSON %q", c.path, c.body, st, b, c.message)
		}
	}
	// The same key in sibling objects, or at different levels, is no repeat.
	if st, b := h.raw("POST", "/v1/jobs", "", []byte(`{"type":"t","queue":"q","payload":{"type":"x","a":[{"k":1},{"k":2}]}}`)); st != http.StatusCreated {
		t.Fatalf("%d %v", st, b)
	}
}

// A body nests at most wire.JSONDepthMax levels, its own object included: a payload one
// level less deep than that is taken and reads back; one level more is refused.
func TestBodiesNestAtMostTheLimit(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	st, b := h.raw("POST", "/v1/jobs", "", []byte(`{"type":"t","queue":"q","payload":`+nested(wire.JSONDepthMax-1)+`}`))
	if st != http.StatusCreated {
		t.Fatalf("a payload as deep as allowed: %d %v", st, b)
	}
	j, err := client.New(h.url, "", nil).Get(ctx(t), b["id"].(string))
	if err != nil || string(j.Payload) != nested(wire.JSONDepthMax-1) {
		t.Fatalf("read back: %v", err)
	}
	st, b = h.raw("POST", "/v1/jobs", "", []byte(`{"type":"t","queue":"q","payload":`+nested(wire.JSONDepthMax)+`}`))
	if msg := messageOf(b); st != http.StatusBadRequest || codeOf(b) != wire.CodeInvalidJSON ||
		!strings.HasPrefix(msg, "the body nests deeper than 512 levels") {
		t.Fatalf("a payload too deep: %d %v", st, b)
	}
	// A flow step's payload, which YAML nests, is held to a submit's.
	flow := "flow:\n  steps:\n    a:\n      type: t\n      queue: q\n      payload: " + nested(wire.JSONDepthMax) + "\n"
	if st, b := h.raw("POST", "/v1/flows?name=f", "", []byte(flow)); st != http.StatusBadRequest || codeOf(b) != "INVALID_FLOW" {
		t.Fatalf("a flow payload too deep: %d %v", st, b)
	}
}

// A WebSocket frame that is not UTF-8, repeats a key, nests too deep or is not I-JSON closes
// the session with 1007, as a frame that is not JSON does.
func TestFramesThatDoNotReadBackCloseTheSession(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	reg := h.register("", nil, 1)
	for _, frame := range []string{
		"{\"type\":\"credit\",\"n\":1,\"ref\":\"\xff\"}",
		`{"type":"credit","n":1,"n":2}`,
		`{"type":"event","job_id":"j","lease_id":"l","event_type":"log","data":` + nested(wire.JSONDepthMax) + `}`,
		`{"type":"event","job_id":"j","lease_id":"l","event_type":"progress","data":{"pct":1e999}}`,
		`{"type":"complete","job_id":"j","lease_id":"l","nonce":"n","output":["\ud800"]}`,
	} {
		w := h.dial(reg.WorkerToken, 1)
		_ = w.conn.WriteMessage(websocket.TextMessage, []byte(frame))
		_, _, err := w.conn.ReadMessage()
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.CloseInvalidFramePayloadData || !strings.HasPrefix(ce.Text, "a frame ") {
			t.Fatalf("%.80q: %v, want a close with 1007", frame, err)
		}
	}
	// The first frame, the hello, the same.
	for _, hello := range []string{"{\"type\":\"hello\",\"capacity\":1,\"x\":\"\xff\"}", `{"type":"hello","capacity":1,"capacity":2}`} {
		conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(h.url, "http")+"/v1/worker/connect", http.Header{"Authorization": {"Bearer " + reg.WorkerToken}})
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.WriteMessage(websocket.TextMessage, []byte(hello))
		_, _, err = conn.ReadMessage()
		conn.Close()
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.CloseInvalidFramePayloadData || !strings.HasPrefix(ce.Text, "a frame ") {
			t.Fatalf("hello %.80q: %v, want a close with 1007", hello, err)
		}
	}
}

// A body shorter than its Content-Length, from a client that then closed its side (it has
// nothing more to send, and reads on), is refused with an error: net/http cancels the
// request's context when it reads the end of the connection, and the server used to take
// that for a client gone and write nothing, which net/http sends as an empty 200.
func TestABodyCutShortIsRefused(t *testing.T) {
	h := start(t, transport.AuthNone)
	u, _ := url.Parse(h.url)
	for _, declared := range []int{100, 1 << 40} {
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		body := `{"queue":"q","type":"t"}`
		fmt.Fprintf(conn, "POST /v1/jobs HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", u.Host, declared, body)
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("Content-Length %d: %v", declared, err)
		}
		answer, _ := io.ReadAll(resp.Body)
		conn.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(answer), `"code":"INVALID_JSON"`) {
			t.Errorf("Content-Length %d, %d bytes sent: %d %s, want 400 INVALID_JSON", declared, len(body), resp.StatusCode, answer)
		}
	}
}

// Every body and frame is held to I-JSON (RFC 7493), so that what is stored reads back the
// same in every client: a number past a double's range and a lone surrogate, in a payload, an
// output, an event's data, a label or a key, are refused as INVALID_JSON naming where they
// are, at every endpoint that takes a body, and none of it is stored.
func TestBodiesThatAreNotIJSONAreRefused(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	worker := h.register("", nil, 1).WorkerToken
	const job = "/v1/worker/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV"
	for _, bad := range []struct{ value, says string }{
		{`1e999`, "has the number 1e999 at "},
		{`-2E+308`, "has the number -2E+308 at "},
		{`"ab\ud800"`, `has a lone surrogate \ud800 in the string at `},
		{`"\udc00"`, `has a lone surrogate \udc00 in the string at `},
	} {
		for _, c := range []struct{ method, path, token, body, at string }{
			{"POST", "/v1/jobs", "", `{"type":"t","queue":"q","payload":V}`, "payload"},
			{"POST", "/v1/jobs", "", `{"type":"t","queue":"q","payload":{"a":[1,{"b":V}]}}`, "payload.a[1].b"},
			{"POST", "/v1/jobs", "", `{"type":"t","queue":"q","labels":{"a":V}}`, "labels.a"},
			{"POST", "/v1/jobs", "", `{"type":"t","queue":"q","priority":V}`, "priority"},
			{"POST", "/v1/jobs/batch", "", `{"jobs":[{"type":"t","queue":"q"},{"type":"t","queue":"q","payload":[V]}]}`, "jobs[1].payload[0]"},
			{"POST", "/v1/jobs/cancel", "", `{"queue":V}`, "queue"},
			{"POST", "/v1/jobs/retry", "", `{"queue":V}`, "queue"},
			{"POST", "/v1/dead-letters/purge", "", `{"queue":"q","older_than_seconds":V}`, "older_than_seconds"},
			{"POST", "/v1/reservations", "", `{"ttl_seconds":V}`, "ttl_seconds"},
			{"POST", "/v1/schedules", "", `{"name":"s","cron":"* * * * *","job":{"type":"t","queue":"q","payload":{"x":V}}}`, "job.payload.x"},
			{"POST", "/v1/admin/api-keys", "", `{"tenant":V}`, "tenant"},
			{"PUT", "/v1/admin/tenants/acme/quota", "", `{"max_active":V}`, "max_active"},
			{"PUT", "/v1/queues/q/limits", "", `{"max_running_per_key":V}`, "max_running_per_key"},
			{"POST", "/v1/workers/register", "", `{"name":"w","queues":["q"],"capacity":1,"labels":{"gpu":V}}`, "labels.gpu"},
			{"POST", "/v1/worker/lease", worker, `{"max":1,"wait_seconds":V}`, "wait_seconds"},
			{"POST", "/v1/worker/heartbeat", worker, `{"leases":[V]}`, "leases[0]"},
			{"POST", job + "/events", worker, `{"lease_id":"l","event_type":"progress","data":{"pct":V}}`, "data.pct"},
			{"POST", job + "/complete", worker, `{"lease_id":"l","nonce":"n","output":{"result":V}}`, "output.result"},
			{"POST", job + "/fail", worker, `{"lease_id":"l","error_code":"e","message":V}`, "message"},
			{"POST", job + "/release", worker, `{"lease_id":"l","message":V}`, "message"},
		} {
			body := strings.Replace(c.body, "V", bad.value, 1)
			st, b := h.raw(c.method, c.path, c.token, []byte(body))
			rest, named := strings.CutPrefix(messageOf(b), "the body "+bad.says+c.at)
			if st != http.StatusBadRequest || codeOf(b) != wire.CodeInvalidJSON || !named || !strings.HasPrefix(rest, " ") && !strings.HasPrefix(rest, ",") ||
				!strings.Contains(rest, "I-JSON") {
				t.Errorf("%s %s %s: %d %v, want 400 INVALID_JSON saying %q", c.method, c.path, body, st, b, bad.says+c.at)
			}
		}
	}
	// A lone surrogate in a key, and what I-JSON takes: a surrogate pair, the largest double,
	// a number that becomes 0 in every client.
	st, b := h.raw("POST", "/v1/jobs", "", []byte(`{"type":"t","queue":"q","payload":{"\udfffk":1}}`))
	if msg := messageOf(b); st != http.StatusBadRequest || msg != `the body has a lone surrogate \udfff in a key of the object at payload (I-JSON, RFC 7493; at offset 36)` {
		t.Errorf("a lone surrogate in a key: %d %v", st, b)
	}
	if l, err := client.New(h.url, "", nil).List(ctx(t), client.ListOptions{}); err != nil || len(l.Jobs) != 0 {
		t.Fatalf("after refused submits: %+v %v", l, err)
	}
	taken := `{"s":"\ud83d\ude00","max":1.7976931348623157e308,"tiny":1e-400}`
	if st, b := h.raw("POST", "/v1/jobs", "", []byte(`{"type":"t","queue":"q","payload":`+taken+`}`)); st != http.StatusCreated {
		t.Fatalf("an I-JSON payload: %d %v", st, b)
	}
}

// A flow file's step payloads, which YAML writes, are held to I-JSON too: YAML's .inf and .nan
// are refused naming the step, never stored as JSON that other clients cannot read; a number
// YAML cannot read as one (1e999) is, by YAML's own rule, the string it is written as.
func TestFlowPayloadsThatAreNotIJSONAreRefused(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	flow := func(payload string) []byte {
		return []byte("flow:\n  steps:\n    a:\n      type: t\n      queue: q\n      payload: " + payload + "\n")
	}
	for _, payload := range []string{"{n: .inf}", "{n: -.Inf}", "[1, .nan]"} {
		st, b := h.raw("POST", "/v1/flows?name=f", "", flow(payload))
		if msg := messageOf(b); st != http.StatusBadRequest || codeOf(b) != "INVALID_FLOW" || !strings.Contains(msg, "flow.steps.a") || !strings.Contains(msg, "I-JSON") {
			t.Errorf("a flow payload %s: %d %v", payload, st, b)
		}
	}
	if l, err := client.New(h.url, "", nil).List(ctx(t), client.ListOptions{}); err != nil || len(l.Jobs) != 0 {
		t.Fatalf("after refused flows: %+v %v", l, err)
	}
	if st, b := h.raw("POST", "/v1/flows?name=f", "", flow("{n: 1e999}")); st != http.StatusCreated {
		t.Fatalf("a flow payload with 1e999: %d %v", st, b)
	}
	l, err := client.New(h.url, "", nil).List(ctx(t), client.ListOptions{})
	if err != nil || len(l.Jobs) != 1 || string(l.Jobs[0].Payload) != `{"n":"1e999"}` {
		t.Fatalf("the step of a flow with 1e999: %+v %v", l, err)
	}
}
