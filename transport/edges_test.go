package transport_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/transporttest"
	"github.com/tetherhq/tether/transport/wire"
)

// startObserved is start with the server's log lines kept for the test to read.
func startObserved(t *testing.T, auth transport.AuthMode) (*harness, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core))
	h := &harness{t: t, clock: &clock{}}
	b, err := broker.Open(broker.Config{Dir: t.TempDir(), Logger: log, Clock: h.clock.now})
	if err != nil {
		t.Fatal(err)
	}
	h.b = b
	h.api, h.url = transporttest.Serve(t, b, transport.Config{Auth: auth, AdminToken: adminToken, Logger: log, Clock: h.clock.now})
	h.admin = client.New(h.url, adminToken, nil)
	return h, logs
}

// post sends a JSON request as a worker or client program would, and returns the status and
// the decoded body.
func (h *harness) post(path, token string, body any) (int, map[string]any) {
	h.t.Helper()
	b, _ := json.Marshal(body)
	return h.raw(http.MethodPost, path, token, b)
}

// call sends a JSON request with ctx and decodes a 2xx answer into out; an error answer is an
// error, and so is ctx ending first.
func (h *harness) call(ctx context.Context, token, method, path string, body, out any) (int, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, method, h.url+path, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return resp.StatusCode, errors.New(resp.Status)
	}
	if out != nil && resp.StatusCode != http.StatusNoContent {
		return resp.StatusCode, json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode, nil
}

// The reproduction, over real sockets: a long-poll worker polls once and goes away; a
// job submitted after its poll ended is not leased to it (where, with max_attempts 1, its
// lease would run out and dead-letter it unrun), and another worker that asks gets it.
func TestLongPollCreditEndsWithItsPoll(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	c := client.New(h.url, "", nil)
	absent := h.register("", nil, 4)
	if status, body := h.post("/v1/worker/lease", absent.WorkerToken, wire.LeaseRequest{Max: 1, WaitSeconds: 1}); status != http.StatusNoContent {
		t.Fatalf("poll: %d %v", status, body)
	}
	job, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	present := h.register("", nil, 1)
	w := h.dial(present.WorkerToken, 1)
	w.send(wire.Frame{Type: wire.FrameCredit, N: 1})
	if a := w.assignment(); a.JobID != job.ID || a.Attempt != 1 {
		t.Fatalf("assignment %+v", a)
	}
	if j, _ := c.Get(ctx(t), job.ID); j.Lease == nil || j.Lease.WorkerID != present.WorkerID {
		t.Fatalf("job %+v", j)
	}
}

// A poll that waits no time at all still gets a job that is ready: its offer ends only once
// the job it brought has reached it.
func TestZeroWaitPollTakesAReadyJob(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	c := client.New(h.url, "", nil)
	reg := h.register("", nil, 2)
	job := submit(t, c, `{}`)
	status, body := h.post("/v1/worker/lease", reg.WorkerToken, wire.LeaseRequest{Max: 2, WaitSeconds: 0})
	as, _ := body["assignments"].([]any)
	if status != http.StatusOK || len(as) != 1 || as[0].(map[string]any)["job_id"] != job.ID {
		t.Fatalf("poll: %d %v", status, body)
	}
	if hb := as[0].(map[string]any)["heartbeat_seconds"]; hb != 10.0 {
		t.Fatalf("the assignment's heartbeat_seconds is %v, want 10 for the default 30 s lease", hb)
	}
}

// A long-poll worker's heartbeats and results never wait behind its parked poll, and a poll
// whose client gives up is nothing the server logs as an error.
func TestHeartbeatDoesNotWaitForAParkedPoll(t *testing.T) {
	t.Parallel()
	h, logs := startObserved(t, transport.AuthNone)
	c := client.New(h.url, "", nil)
	reg := h.register("", nil, 2)
	tok := reg.WorkerToken
	job := submit(t, c, `{}`)
	var out wire.Assignments
	if _, err := h.call(ctx(t), tok, http.MethodPost, "/v1/worker/lease", wire.LeaseRequest{Max: 1, WaitSeconds: 0}, &out); err != nil || len(out.Assignments) != 1 {
		t.Fatalf("first poll: %v %+v", err, out)
	}
	lease := out.Assignments[0].LeaseID
	// Park a poll for the second slot.
	pollCtx, giveUp := context.WithCancel(context.Background())
	parked := make(chan error, 1)
	go func() {
		_, err := h.call(pollCtx, tok, http.MethodPost, "/v1/worker/lease", wire.LeaseRequest{Max: 1, WaitSeconds: 25}, nil)
		parked <- err
	}()
	// Far less than the poll's 25 s: the heartbeat must not wait for it.
	hbCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var hb wire.HeartbeatResponse
	for range 3 { // once, then again while the poll is surely parked
		if _, err := h.call(hbCtx, tok, http.MethodPost, "/v1/worker/heartbeat", wire.HeartbeatRequest{Leases: []string{lease}}, &hb); err != nil {
			t.Fatalf("heartbeat beside a parked poll: %v", err)
		}
	}
	if len(hb.Unknown) != 0 {
		t.Fatalf("heartbeat %+v", hb)
	}
	if _, err := h.call(hbCtx, tok, http.MethodPost, "/v1/worker/jobs/"+job.ID+"/complete",
		wire.CompleteRequest{LeaseID: lease, Nonce: out.Assignments[0].Nonce, Output: json.RawMessage(`1`)}, nil); err != nil {
		t.Fatalf("completion beside a parked poll: %v", err)
	}
	giveUp()
	if err := <-parked; !errors.Is(err, context.Canceled) {
		t.Fatalf("the parked poll ended with %v", err)
	}
	// The abandoned poll is logged at debug level; nothing is an error.
	for deadline := time.Now().Add(10 * time.Second); logs.FilterMessage("the client went away before the answer").Len() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the server did not notice the poll's client went away")
		}
		time.Sleep(10 * time.Millisecond) // polling the log for a line another goroutine writes
	}
	for _, e := range logs.All() {
		if e.Level >= zapcore.ErrorLevel {
			t.Fatalf("an error line for a client that went away: %s %v", e.Message, e.ContextMap())
		}
	}
}

// A newer poll of the same worker (a client that gave up on its poll and sent another) ends the
// older one at once instead of waiting behind it.
func TestANewerPollEndsTheOlderOne(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	reg := h.register("", nil, 1)
	tok := reg.WorkerToken
	older := make(chan int, 1)
	go func() {
		status, _ := h.call(context.Background(), tok, http.MethodPost, "/v1/worker/lease", wire.LeaseRequest{Max: 1, WaitSeconds: 30}, nil)
		older <- status
	}()
	c := client.New(h.url, "", nil)
	// The newer poll comes once the older one waits (its session is open), and gets the job.
	for {
		changed := h.b.Changed() // before the read, so that no change slips between the two
		ws, err := c.Workers(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(ws.Workers) == 1 && ws.Workers[0].Status == "online" {
			break
		}
		<-changed
	}
	newer := make(chan wire.Assignments, 1)
	go func() {
		var out wire.Assignments
		_, _ = h.call(context.Background(), tok, http.MethodPost, "/v1/worker/lease", wire.LeaseRequest{Max: 1, WaitSeconds: 30}, &out)
		newer <- out
	}()
	select {
	case status := <-older:
		if status != http.StatusNoContent {
			t.Fatalf("the older poll answered %d", status)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the older poll was not ended by the newer one")
	}
	job := submit(t, c, `{}`)
	if out := <-newer; len(out.Assignments) != 1 || out.Assignments[0].JobID != job.ID {
		t.Fatalf("the newer poll got %+v", out)
	}
}

// The cross-site requests, over real sockets: under --auth none a page on another site
// cannot submit (a text/plain "simple request"), a rebound host name cannot reach the API, and
// neither can another origin; under any auth, a state-changing request marked cross-site is
// refused. The server's own pages, and programs, go on working.
func TestCrossSiteRequestsAreRefused(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	host := strings.TrimPrefix(h.url, "http://")
	send := func(method, path string, header map[string]string, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, h.url+path, strings.NewReader(body))
		for k, v := range header {
			if k == "Host" {
				req.Host = v
				continue
			}
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, codeOf(out)
	}
	job := `{"queue":"csrf","type":"x","payload":{}}`
	for _, tc := range []struct {
		name         string
		method, path string
		header       map[string]string
		body         string
		status       int
		code         string
	}{
		{"the issue's curl", "POST", "/v1/jobs", map[string]string{"Origin": "http://evil.example", "Content-Type": "text/plain"}, job, 403, "ORIGIN_NOT_ALLOWED"},
		{"a text/plain body", "POST", "/v1/jobs", map[string]string{"Content-Type": "text/plain"}, job, 415, "UNSUPPORTED_MEDIA_TYPE"},
		{"a form body", "POST", "/v1/jobs", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, job, 415, "UNSUPPORTED_MEDIA_TYPE"},
		{"a body without a type", "POST", "/v1/jobs", nil, job, 415, "UNSUPPORTED_MEDIA_TYPE"},
		{"a form post with no body", "POST", "/v1/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV/cancel", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, "", 415, "UNSUPPORTED_MEDIA_TYPE"},
		{"DNS rebinding", "POST", "/v1/admin/api-keys", map[string]string{"Host": "evil.example:8080", "Content-Type": "application/json"}, `{"tenant":"default"}`, 403, "HOST_NOT_ALLOWED"},
		{"DNS rebinding, reading", "GET", "/v1/jobs", map[string]string{"Host": "evil.example:8080"}, "", 403, "HOST_NOT_ALLOWED"},
		{"another origin, JSON", "POST", "/v1/jobs", map[string]string{"Origin": "http://evil.example", "Content-Type": "application/json"}, job, 403, "ORIGIN_NOT_ALLOWED"},
		{"an opaque origin", "POST", "/v1/jobs", map[string]string{"Origin": "null", "Content-Type": "application/json"}, job, 403, "ORIGIN_NOT_ALLOWED"},
		{"another port on this host", "POST", "/v1/jobs", map[string]string{"Origin": "http://127.0.0.1:1", "Content-Type": "application/json"}, job, 403, "ORIGIN_NOT_ALLOWED"},
		{"marked cross-site", "POST", "/v1/jobs", map[string]string{"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}, job, 403, "CROSS_SITE_REQUEST"},
		{"health with any host", "GET", "/healthz", map[string]string{"Host": "evil.example"}, "", 200, ""},
		{"the dashboard's own request", "POST", "/v1/jobs", map[string]string{"Origin": h.url, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"}, job, 201, ""},
		{"a program, JSON with a charset", "POST", "/v1/jobs", map[string]string{"Content-Type": "application/json; charset=utf-8"}, job, 201, ""},
		{"localhost by name", "POST", "/v1/jobs", map[string]string{"Host": "localhost:" + strings.Split(host, ":")[1], "Content-Type": "application/json"}, job, 201, ""},
		{"a cross-site read", "GET", "/v1/queues", map[string]string{"Sec-Fetch-Site": "cross-site"}, "", 200, ""},
	} {
		if status, code := send(tc.method, tc.path, tc.header, tc.body); status != tc.status || code != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, status, code, tc.status, tc.code)
		}
	}
	// No job reached the queue from any refused request.
	jobs, err := client.New(h.url, "", nil).List(ctx(t), client.ListOptions{Queue: "csrf", Limit: 100})
	if err != nil || len(jobs.Jobs) != 3 {
		t.Fatalf("%d jobs in queue csrf, want the 3 accepted ones (%v)", len(jobs.Jobs), err)
	}

	// Under --auth token the credential keeps pages out, but a request marked cross-site is
	// still refused, and hosts are not checked (the server may sit behind any name).
	ht := start(t, transport.AuthToken)
	k, err := ht.admin.CreateAPIKey(ctx(t), "acme")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		header map[string]string
		status int
	}{
		{map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{map[string]string{"Host": "tether.example.com"}, 201},
	} {
		req, _ := http.NewRequest("POST", ht.url+"/v1/jobs", strings.NewReader(job))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+k.Key)
		for key, v := range tc.header {
			if key == "Host" {
				req.Host = v
			} else {
				req.Header.Set(key, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("--auth token, %v: %d, want %d", tc.header, resp.StatusCode, tc.status)
		}
	}
}

// A quota update changes only the limits it names, over PATCH and PUT alike.
func TestQuotaUpdateIsPartial(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	for _, step := range []struct {
		method, body string
	}{
		{http.MethodPatch, `{"max_active":10}`},
		{http.MethodPatch, `{"max_running":2}`},
		{http.MethodPut, `{"max_active":12}`},
	} {
		if status, body := h.raw(step.method, "/v1/admin/tenants/default/quota", "", []byte(step.body)); status != http.StatusOK {
			t.Fatalf("%s %s: %d %v", step.method, step.body, status, body)
		}
	}
	q, err := client.New(h.url, "", nil).Quota(ctx(t))
	if err != nil || q.MaxActive != 12 || q.MaxRunning != 2 {
		t.Fatalf("quota %+v (%v), want max_active 12 and max_running 2", q, err)
	}
	if status, body := h.raw(http.MethodPatch, "/v1/admin/tenants/default/quota", "", []byte(`{"max_running":-1}`)); status != http.StatusBadRequest {
		t.Fatalf("a negative limit: %d %v", status, body)
	}
}

// What the API used to take silently it now refuses with a reason: a cursor it never gave, an
// enroll token for no workers.
func TestAPIRefusesWhatItCannotMeanSilently(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthToken)
	k := h.tenant("acme")
	_, err := k.List(ctx(t), client.ListOptions{Cursor: "garbage", Limit: 10})
	wantErr(t, err, http.StatusBadRequest, "INVALID_ARGUMENT")
	_, err = k.Flows(ctx(t), "", "garbage", 10) // as the jobs' list refuses it
	wantErr(t, err, http.StatusBadRequest, "INVALID_ARGUMENT")
	// Wrong types and times are said in JSON's words, not Go's.
	open := start(t, transport.AuthNone)
	for _, c := range []struct{ path, body, code, message string }{
		{"/v1/jobs", `{"queue":"q","type":"t","priority":"high"}`, "INVALID_ARGUMENT", `field "priority" must be a whole number, not a JSON string`},
		{"/v1/jobs", `[1]`, "INVALID_JSON", "the body must be a JSON object, not a JSON array"},
		{"/v1/jobs/cancel", `{"created_before":""}`, "INVALID_ARGUMENT", `a time must be RFC 3339, such as 2026-01-02T15:04:05Z, not ""`},
	} {
		st, b := open.raw("POST", c.path, "", []byte(c.body))
		if st != http.StatusBadRequest || codeOf(b) != c.code || messageOf(b) != c.message {
			t.Errorf("%s %s: %d %v, want %s %q", c.path, c.body, st, b, c.code, c.message)
		}
	}
	if status, body := h.post("/v1/admin/enroll-tokens", adminToken, map[string]any{"tenant": "acme", "uses": 0}); status != http.StatusBadRequest {
		t.Fatalf("uses 0: %d %v", status, body)
	}
	var tok wire.EnrollToken
	b, _ := json.Marshal(map[string]any{"tenant": "acme"})
	status, body := h.raw(http.MethodPost, "/v1/admin/enroll-tokens", adminToken, b)
	raw, _ := json.Marshal(body)
	_ = json.Unmarshal(raw, &tok)
	if status != http.StatusCreated || tok.Uses != 1 {
		t.Fatalf("uses left out: %d %+v", status, tok)
	}
}

// A number of seconds past its limit is refused with the value as sent and the limit, not a
// duration that wrapped around on the way (1e11 s is past a time.Duration's 292 years).
func TestSecondsPastTheirLimitSayTheirValue(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	for _, c := range []struct{ path, body, message string }{
		{"/v1/jobs", `{"queue":"q","type":"t","lease_ttl_seconds":99999999999}`, "lease_ttl_seconds 99999999999 is outside 5..3600 (0: the default)"},
		{"/v1/jobs", `{"queue":"q","type":"t","delay_seconds":99999999999}`, "delay_seconds 99999999999 is outside 0..31622400 (0: the default)"},
		{"/v1/jobs", `{"queue":"q","type":"t","delay_seconds":-1}`, "delay_seconds -1 is outside 0..31622400 (0: the default)"},
		{"/v1/jobs", `{"queue":"q","type":"t","result_ttl_seconds":1e20}`, "result_ttl_seconds 100000000000000000000 is outside 1..31622400 (0: the default)"},
		{"/v1/reservations", `{"ttl_seconds":99999999999}`, "ttl_seconds 99999999999 is outside 0..86400 (0: the default)"},
		{"/v1/admin/enroll-tokens", `{"tenant":"default","ttl_seconds":99999999999}`, "ttl_seconds 99999999999 is outside 0..31536000 (0: the default)"},
	} {
		st, b := h.raw("POST", c.path, "", []byte(c.body))
		if st != http.StatusBadRequest || codeOf(b) != "INVALID_ARGUMENT" || messageOf(b) != c.message {
			t.Errorf("%s %s: %d %v, want 400 INVALID_ARGUMENT %q", c.path, c.body, st, b, c.message)
		}
	}
}

// Under --auth token /metrics names tenants and queues, so it needs the metrics token or the
// admin token; a listener of its own (MetricsHandler, for --metrics-addr) serves it without.
func TestMetricsNeedACredentialUnderTokenAuth(t *testing.T) {
	t.Parallel()
	b, err := broker.Open(broker.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	const metricsToken = "metrics-token-0123456789"
	api, url := transporttest.Serve(t, b, transport.Config{Auth: transport.AuthToken, AdminToken: adminToken, MetricsToken: metricsToken})
	get := func(h http.Handler, base, token string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if h != nil {
			rec := &recorder{header: http.Header{}}
			h.ServeHTTP(rec, req)
			return rec.status
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		token string
		want  int
	}{{"", 401}, {"wrong-token-0123456789", 403}, {adminToken, 200}, {metricsToken, 200}} {
		if got := get(nil, url, tc.token); got != tc.want {
			t.Errorf("/metrics with %q: %d, want %d", tc.token, got, tc.want)
		}
	}
	if got := get(api.MetricsHandler(), "http://127.0.0.1", ""); got != 200 {
		t.Errorf("the metrics listener: %d", got)
	}
	if got := get(api.MetricsHandler(), "http://rebound.example", ""); got != 403 {
		t.Errorf("the metrics listener under a rebound name: %d", got)
	}
}

type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = 200
	}
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(s int) { r.status = s }

// No lease the server accepts expires under a worker that is alive and connected: a job with
// the shortest lease_ttl outlives it, heartbeaten as often as its assignment says, over
// WebSocket and over long-poll with capacity 2 (whose heartbeats a parked poll once blocked).
func TestShortLeasesLiveAsLongAsTheirWorkers(t *testing.T) {
	t.Parallel()
	for _, tr := range []string{client.TransportWebSocket, client.TransportLongPoll} {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			h := start(t, transport.AuthNone)
			c := client.New(h.url, "", nil)
			reg := h.register("", nil, 2)
			work := actors.LeaseTTLMin + 1500*time.Millisecond // the job runs past its lease_ttl
			connected := make(chan string, 4)
			w := &client.Worker{Server: h.url, Token: reg.WorkerToken, Capacity: 2, Transport: tr, Logger: zaptest.NewLogger(t),
				OnConnect: func(tr string) { connected <- tr },
				Handler: func(ctx context.Context, j *client.Job) (any, error) {
					select {
					case <-time.After(work): // the job's own work, not a wait for the test
						return "done", nil
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}}
			runUntilTheEnd(t, w)
			firstConnect(t, connected)
			job, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t", MaxAttempts: 1, LeaseTTLSeconds: actors.LeaseTTLMin.Seconds()})
			if err != nil {
				t.Fatal(err)
			}
			if j := await(t, c, job.ID); j.Status != "succeeded" || j.Attempt != 1 {
				t.Fatalf("job %s attempt %d, error %+v", j.Status, j.Attempt, j.Error)
			}
		})
	}
}

// A worker stopped cleanly takes no new job, gives back the one it runs with no attempt spent
// (saying so in the job's history), and a job that finishes within the grace completes.
func TestCleanStopReleasesWithoutSpendingAttempts(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	c := client.New(h.url, "", nil)
	reg := h.register("", nil, 2)
	started := make(chan string, 4)
	quick, hurry := make(chan struct{}), make(chan struct{})
	w := &client.Worker{Server: h.url, Token: reg.WorkerToken, Capacity: 2, Grace: time.Minute, Hurry: hurry, Logger: zaptest.NewLogger(t),
		Handler: func(ctx context.Context, j *client.Job) (any, error) {
			started <- string(j.Payload)
			if string(j.Payload) == `"quick"` {
				<-quick // finishes within the grace, once the test says so
				return "finished", nil
			}
			<-ctx.Done() // runs until it is stopped
			return nil, ctx.Err()
		}}
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	slow, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t", MaxAttempts: 1, Payload: json.RawMessage(`"slow"`)})
	if err != nil {
		t.Fatal(err)
	}
	quickJob, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t", MaxAttempts: 1, Payload: json.RawMessage(`"quick"`)})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	<-started
	stop() // SIGTERM: the grace begins
	next, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	close(quick) // the quick job finishes within the grace...
	if j := await(t, c, quickJob.ID); j.Status != "succeeded" {
		t.Fatalf("the job that finished within the grace: %+v", j)
	}
	close(hurry) // ...and a second signal ends the grace for the other
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	j, _ := c.Get(ctx(t), slow.ID)
	if j.Status != "queued" || j.Attempt != 0 || j.Lease != nil || j.DeadReason != "" {
		t.Fatalf("the stopped job: %s attempt %d dead %q", j.Status, j.Attempt, j.DeadReason)
	}
	evs, _ := c.Events(ctx(t), slow.ID, 0)
	last := evs.Events[len(evs.Events)-1]
	if last.Type != "job.lease_released" || !strings.Contains(string(last.Data), `"reason":"worker_stopping"`) {
		t.Fatalf("the stopped job's history ends %s %s", last.Type, last.Data)
	}
	if j, _ := c.Get(ctx(t), next.ID); j.Status != "queued" || j.Attempt != 0 {
		t.Fatalf("a job submitted as the worker stopped: %s attempt %d", j.Status, j.Attempt)
	}
}

// A server that restarts, even one that accepts connections and drops them, is not a
// WebSocket failure: the worker keeps trying WebSocket with backoff, and connects over it once
// the server is back. Only WebSocket refused while plain HTTP works sends it to long-polling.
func TestARestartIsNotAWebSocketFailure(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	reg := h.register("", nil, 1)
	// A listener that drops every connection, as a server on its way down or up does.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var dropped atomic.Int32
	enough := make(chan struct{})
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
			if dropped.Add(1) == 5 { // more than the three failures that used to mean fallback
				close(enough)
			}
		}
	}()
	connected := make(chan string, 4)
	w := &client.Worker{Server: "http://" + ln.Addr().String(), Token: reg.WorkerToken, Logger: zaptest.NewLogger(t),
		OnConnect: func(tr string) { connected <- tr },
		Handler:   func(context.Context, *client.Job) (any, error) { return nil, nil }}
	runUntilTheEnd(t, w)
	<-enough
	// The server comes back on the address: a proxy to the real one.
	addr := ln.Addr().String()
	ln.Close()
	// Rebinding the port can meet a connection of another test that the kernel gave it as its
	// own ephemeral port; that connection ends soon.
	back, err := net.Listen("tcp", addr)
	for deadline := time.Now().Add(5 * time.Second); err != nil && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		back, err = net.Listen("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	target := strings.TrimPrefix(h.url, "http://")
	go func() {
		for {
			conn, err := back.Accept()
			if err != nil {
				return
			}
			go proxyTCP(conn, target)
		}
	}()
	t.Cleanup(func() { back.Close() })
	if got := firstConnect(t, connected); got != client.TransportWebSocket {
		t.Fatalf("after the restart the worker connected over %s", got)
	}
}

// proxyTCP copies bytes between conn and a new connection to target until either closes.
func proxyTCP(conn net.Conn, target string) {
	defer conn.Close()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { _, _ = copyConn(up, conn) }()
	_, _ = copyConn(conn, up)
}

func copyConn(dst, src net.Conn) (int64, error) {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		r, err := src.Read(buf)
		if r > 0 {
			if _, werr := dst.Write(buf[:r]); werr != nil {
				return n, werr
			}
			n += int64(r)
		}
		if err != nil {
			return n, err
		}
	}
}
