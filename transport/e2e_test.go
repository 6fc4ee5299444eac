package transport_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap/zaptest"

	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/actors/cells"
	"github.com/tetherhq/tether/actors/signing"
	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/transporttest"
	"github.com/tetherhq/tether/transport/wire"
)

// clock is a settable clock shared by the broker and the server, so tokens can expire and
// schedules fire without waiting.
type clock struct {
	offset atomic.Int64
	mu     sync.Mutex
	timers []*clockTimer
}

func (c *clock) now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// advance moves the clock by d; the broker's timers run in real time still, as if the wall
// clock had been set forward.
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// elapse moves the clock by d as if d had passed: it also fires, in order, the timers then due.
func (c *clock) elapse(d time.Duration) {
	c.advance(d)
	now := c.now()
	c.mu.Lock()
	var due []*clockTimer
	c.timers = slices.DeleteFunc(c.timers, func(t *clockTimer) bool {
		if !t.due.After(now) {
			due = append(due, t)
			return true
		}
		return false
	})
	c.mu.Unlock()
	slices.SortStableFunc(due, func(a, b *clockTimer) int { return a.due.Compare(b.due) })
	for _, t := range due {
		t.real.Stop() // it holds f, and what f holds, until it would have fired
		t.fire()
	}
}

// afterFunc is the broker's AfterFunc: f runs after d of real time, or once elapse moves the
// clock past now + d, whichever comes first.
func (c *clock) afterFunc(d time.Duration, f func()) cells.Timer {
	t := &clockTimer{due: c.now().Add(d), f: f}
	t.real = time.AfterFunc(d, t.fire)
	c.mu.Lock()
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	return t
}

type clockTimer struct {
	due  time.Time
	f    func()
	real *time.Timer
	once sync.Once
}

func (t *clockTimer) fire() { t.once.Do(t.f) }

// Stop stops the timer if it has not run, and reports whether it had not.
func (t *clockTimer) Stop() bool {
	t.real.Stop()
	stopped := false
	t.once.Do(func() { stopped = true })
	return stopped
}

// harness is a broker and its HTTP server on a real loopback socket.
type harness struct {
	t     *testing.T
	b     *broker.Broker
	api   *transport.Server
	url   string
	clock *clock
	admin *client.Client
}

const adminToken = "test-admin-token-0123456789"

func start(t *testing.T, auth transport.AuthMode, configure ...func(*broker.Config)) *harness {
	t.Helper()
	h := &harness{t: t, clock: &clock{}}
	log := zaptest.NewLogger(t)
	cfg := broker.Config{Dir: t.TempDir(), Logger: log, Clock: h.clock.now, AfterFunc: h.clock.afterFunc}
	for _, c := range configure {
		c(&cfg)
	}
	b, err := broker.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.b = b
	h.api, h.url = transporttest.Serve(t, b, transport.Config{Auth: auth, AdminToken: adminToken, Logger: log, Clock: h.clock.now})
	h.admin = client.New(h.url, adminToken, nil)
	return h
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// tenant makes an API key for a tenant and returns a client that uses it.
func (h *harness) tenant(name string) *client.Client {
	h.t.Helper()
	k, err := h.admin.CreateAPIKey(ctx(h.t), name)
	if err != nil {
		h.t.Fatal(err)
	}
	return client.New(h.url, k.Key, nil)
}

// register registers a worker through an enroll token of tenant (or none under AuthNone).
func (h *harness) register(tenant string, key ed25519.PublicKey, capacity int) *wire.Registration {
	h.t.Helper()
	enroller := client.New(h.url, "", nil)
	if tenant != "" {
		tok, err := h.admin.CreateEnrollToken(ctx(h.t), tenant, 1, time.Hour)
		if err != nil {
			h.t.Fatal(err)
		}
		enroller = client.New(h.url, tok.Token, nil)
	}
	req := wire.RegisterRequest{Name: "w", Queues: []string{"q"}, Capacity: capacity}
	if key != nil {
		req.PublicKey = base64.StdEncoding.EncodeToString(key)
	}
	reg, err := enroller.RegisterWorker(ctx(h.t), req)
	if err != nil {
		h.t.Fatal(err)
	}
	return reg
}

// raw sends a request with a body as given and returns the status and the decoded body.
func (h *harness) raw(method, path, token string, body []byte) (int, map[string]any) {
	h.t.Helper()
	req, _ := http.NewRequest(method, h.url+path, bytes.NewReader(body))
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func codeOf(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func wantErr(t *testing.T, err error, status int, code string) {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) || e.Status != status || e.Code != code {
		t.Fatalf("got %v, want %d %s", err, status, code)
	}
}

// wsWorker is a worker speaking the protocol frame by frame.
type wsWorker struct {
	t       *testing.T
	conn    *websocket.Conn
	welcome wire.Frame
}

func (h *harness) dial(token string, capacity int) *wsWorker {
	h.t.Helper()
	conn, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(h.url, "http")+"/v1/worker/connect", http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		h.t.Fatalf("dial: %v (%v)", err, resp)
	}
	w := &wsWorker{t: h.t, conn: conn}
	h.t.Cleanup(func() { conn.Close() })
	w.send(wire.Frame{Type: wire.FrameHello, Capacity: capacity})
	if w.welcome = w.next(); w.welcome.Type != wire.FrameWelcome || w.welcome.HeartbeatSeconds != 10 {
		h.t.Fatalf("welcome: %+v", w.welcome)
	}
	return w
}

func (w *wsWorker) send(f wire.Frame) {
	w.t.Helper()
	if err := w.conn.WriteJSON(f); err != nil {
		w.t.Fatal(err)
	}
}

func (w *wsWorker) next() wire.Frame {
	w.t.Helper()
	_ = w.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	var f wire.Frame
	if err := w.conn.ReadJSON(&f); err != nil {
		w.t.Fatal(err)
	}
	return f
}

// ack sends f with a ref and returns the server's ack for it.
func (w *wsWorker) ack(f wire.Frame) wire.Frame {
	w.t.Helper()
	f.Ref = "r-" + f.Type
	w.send(f)
	for {
		a := w.next()
		if a.Type == wire.FrameAck && a.Ref == f.Ref {
			return a
		}
	}
}

func (w *wsWorker) assignment() wire.Frame {
	w.t.Helper()
	for {
		if f := w.next(); f.Type == wire.FrameAssign {
			return f
		}
	}
}

// leased registers a worker, connects it frame by frame with one credit, submits a job, and
// returns the worker, its registration, the job and the job's assignment.
func (h *harness) leased(c *client.Client) (*wsWorker, *wire.Registration, *wire.Job, wire.Frame) {
	h.t.Helper()
	reg := h.register("", nil, 1)
	w := h.dial(reg.WorkerToken, 1)
	w.send(wire.Frame{Type: wire.FrameCredit, N: 1})
	job := submit(h.t, c, `{}`)
	return w, reg, job, w.assignment()
}

func submit(t *testing.T, c *client.Client, payload string) *wire.Job {
	t.Helper()
	j, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t", Payload: json.RawMessage(payload)})
	if err != nil {
		t.Fatal(err)
	}
	if j.Receipt == nil || j.Receipt.Seq == 0 || len(j.Receipt.Hash) != 64 {
		t.Fatalf("submit answered without a receipt: %+v", j)
	}
	return j
}

// await watches a job until it is terminal and returns it.
func await(t *testing.T, c *client.Client, id string) *wire.Job {
	t.Helper()
	if _, err := c.Watch(ctx(t), id, 0, func(wire.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	j, err := c.Get(ctx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// runWorker runs a client.Worker over transport until the test ends; jobs answer their
// payload's "n" doubled, or fail as their payload says.
func (h *harness) runWorker(token, transportName string, key ed25519.PrivateKey) chan string {
	connected := make(chan string, 8)
	w := &client.Worker{Server: h.url, Token: token, Capacity: 2, Key: key, Transport: transportName, Logger: zaptest.NewLogger(h.t),
		OnConnect: func(tr string) { connected <- tr },
		Handler: func(ctx context.Context, j *client.Job) (any, error) {
			var p struct{ N int }
			_ = json.Unmarshal(j.Payload, &p)
			if err := j.Event(ctx, "log", "working on "+j.ID); err != nil {
				return nil, err
			}
			return map[string]int{"n": 2 * p.N}, nil
		}}
	runUntilTheEnd(h.t, w)
	return connected
}

// runUntilTheEnd runs w until the test ends; then it stops w and waits for Run to return.
func runUntilTheEnd(t *testing.T, w *client.Worker) {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
}

// firstConnect returns the transport a worker's first connection used, failing the test if
// there is none within 30 s.
func firstConnect(t *testing.T, connected chan string) string {
	t.Helper()
	select {
	case tr := <-connected:
		return tr
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not connect within 30 s")
		return ""
	}
}

func TestJobThroughWebSocketAndLongPoll(t *testing.T) {
	t.Parallel()
	for _, tr := range []string{"websocket", "longpoll"} {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			h := start(t, transport.AuthToken)
			acme := h.tenant("acme")
			pub, priv, _ := ed25519.GenerateKey(nil)
			reg := h.register("acme", pub, 2)
			if got := firstConnect(t, h.runWorker(reg.WorkerToken, tr, priv)); got != tr {
				t.Fatalf("connected over %s, want %s", got, tr)
			}
			job := submit(t, acme, `{"n":21}`)
			done := await(t, acme, job.ID)
			if done.Status != "succeeded" || string(done.Output) != `{"n":42}` || done.Attempt != 1 || done.OutputHash == "" {
				t.Fatalf("job %+v", done)
			}
			evs, err := acme.Events(ctx(t), job.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			var types []string
			for _, e := range evs.Events {
				types = append(types, e.Type)
			}
			if strings.Join(types, " ") != "job.submitted job.leased job.progress job.succeeded" || !evs.Done {
				t.Fatalf("events %v done=%v", types, evs.Done)
			}
			ws, err := acme.Workers(ctx(t))
			if err != nil || len(ws.Workers) != 1 || ws.Workers[0].Transport != tr || ws.Workers[0].Status != "online" {
				t.Fatalf("workers %+v %v", ws, err)
			}
		})
	}
}

// A worker whose WebSocket cannot be opened falls back to long-polling.
func TestWorkerFallsBackToLongPoll(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	reg := h.register("", nil, 1)
	// A proxy in front of the server that refuses WebSocket upgrades.
	target := h.url
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if websocket.IsWebSocketUpgrade(r) {
			http.Error(w, "websockets are not allowed here", http.StatusBadRequest)
			return
		}
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.RequestURI(), r.Body)
		req.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		_, _ = w.Write(buf.Bytes())
	}))
	t.Cleanup(proxy.Close)
	h.url = proxy.URL
	if got := firstConnect(t, h.runWorker(reg.WorkerToken, "auto", nil)); got != "longpoll" {
		t.Fatalf("connected over %s", got)
	}
	c := client.New(h.url, "", nil)
	if j := await(t, c, submit(t, c, `{"n":1}`).ID); j.Status != "succeeded" {
		t.Fatalf("job %+v", j)
	}
}

func TestStaleLeaseAndBadSignature(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	c := client.New(h.url, "", nil)
	pub, priv, _ := ed25519.GenerateKey(nil)
	reg := h.register("", pub, 1)
	w := h.dial(reg.WorkerToken, 1)
	w.send(wire.Frame{Type: wire.FrameCredit, N: 1})
	job := submit(t, c, `{}`)
	a := w.assignment()
	if a.JobID != job.ID || a.Nonce == "" || a.Attempt != 1 {
		t.Fatalf("assign %+v", a)
	}
	output := json.RawMessage(`{"ok":true}`)
	hash, _ := signing.OutputHash(output)
	// Over long-poll's HTTP endpoints the same rules hold, with statuses.
	path := "/v1/worker/jobs/" + job.ID + "/complete"
	body, _ := json.Marshal(wire.CompleteRequest{LeaseID: "01STALE", Nonce: a.Nonce, Output: output, Signature: signing.SignCompletion(priv, job.ID, "01STALE", a.Nonce, hash)})
	if st, b := h.raw("POST", path, reg.WorkerToken, body); st != http.StatusConflict || codeOf(b) != "LEASE_MISMATCH" {
		t.Fatalf("stale lease: %d %v", st, b)
	}
	_, other, _ := ed25519.GenerateKey(nil)
	body, _ = json.Marshal(wire.CompleteRequest{LeaseID: a.LeaseID, Nonce: a.Nonce, Output: output, Signature: signing.SignCompletion(other, job.ID, a.LeaseID, a.Nonce, hash)})
	if st, b := h.raw("POST", path, reg.WorkerToken, body); st != http.StatusBadRequest || codeOf(b) != "SIGNATURE_INVALID" {
		t.Fatalf("bad signature: %d %v", st, b)
	}
	// Over the WebSocket, the ack says the same.
	ack := w.ack(wire.Frame{Type: wire.FrameComplete, JobID: job.ID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: output, Signature: "AAAA"})
	if *ack.OK || ack.Error.Code != "SIGNATURE_INVALID" {
		t.Fatalf("ws bad signature: %+v", ack)
	}
	good := wire.Frame{Type: wire.FrameComplete, JobID: job.ID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: output, Signature: signing.SignCompletion(priv, job.ID, a.LeaseID, a.Nonce, hash)}
	ack = w.ack(good)
	if !*ack.OK || ack.Receipt == nil || ack.Receipt.Seq == 0 {
		t.Fatalf("ws complete: %+v", ack)
	}
	if again := w.ack(good); !*again.OK || again.Receipt.Seq != ack.Receipt.Seq || again.Receipt.Hash != ack.Receipt.Hash {
		t.Fatalf("a repeated completion: %+v, want the first receipt %+v", again, ack.Receipt)
	}
	good.Output = json.RawMessage(`{"ok":false}`)
	if conflict := w.ack(good); *conflict.OK || conflict.Error.Code != "COMPLETION_CONFLICT" {
		t.Fatalf("a different completion: %+v", conflict)
	}
	if j, _ := c.Get(ctx(t), job.ID); j.Status != "succeeded" {
		t.Fatalf("job %+v", j)
	}
}

func TestWorkerTokenExpiredAndRevoked(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthToken)
	acme := h.tenant("acme")
	reg := h.register("acme", nil, 1)
	w := h.dial(reg.WorkerToken, 1)
	w.send(wire.Frame{Type: wire.FrameCredit, N: 1})
	job := submit(t, acme, `{}`)
	w.assignment()
	if err := acme.RevokeWorker(ctx(t), reg.WorkerID); err != nil {
		t.Fatal(err)
	}
	// The connection closes with the revoked code, and the job is back in the queue at once.
	_ = w.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		_, _, err := w.conn.ReadMessage()
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			if ce.Code != wire.CloseWorkerRevoked {
				t.Fatalf("close %v", ce)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// The lease is released at once, without waiting for it to run out: the job's stream says so.
	var seen []string
	_, werr := acme.Watch(ctx(t), job.ID, 0, func(e wire.Event) error {
		seen = append(seen, e.Type)
		if e.Type == "job.lease_expired" {
			return errors.New("released")
		}
		return nil
	})
	j, _ := acme.Get(ctx(t), job.ID)
	if j.Lease != nil || (j.Status != "scheduled" && j.Status != "queued") || j.Error == nil || j.Error.Code != "worker_revoked" {
		t.Fatalf("job after revocation (watch saw %v, ended with %v): %+v", seen, werr, j)
	}
	if st, b := h.raw("POST", "/v1/worker/heartbeat", reg.WorkerToken, []byte(`{"leases":[]}`)); st != http.StatusForbidden || codeOf(b) != "WORKER_REVOKED" {
		t.Fatalf("revoked token: %d %v", st, b)
	}
	// Another worker's token runs out after seven days.
	reg2 := h.register("acme", nil, 1)
	h.clock.advance(7*24*time.Hour + time.Second)
	if st, b := h.raw("POST", "/v1/worker/heartbeat", reg2.WorkerToken, []byte(`{"leases":[]}`)); st != http.StatusUnauthorized || codeOf(b) != "TOKEN_EXPIRED" {
		t.Fatalf("expired token: %d %v", st, b)
	}
	if st, b := h.raw("POST", "/v1/worker/heartbeat", "tw_unknown", []byte(`{"leases":[]}`)); st != http.StatusUnauthorized || codeOf(b) != "UNAUTHENTICATED" {
		t.Fatalf("unknown token: %d %v", st, b)
	}
	_, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(h.url, "http")+"/v1/worker/connect", http.Header{"Authorization": {"Bearer " + reg2.WorkerToken}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an expired token opened a WebSocket: %v %v", err, resp)
	}
}

func TestAuthAndTenants(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthToken)
	acme, globex := h.tenant("acme"), h.tenant("globex")
	job := submit(t, acme, `{}`)
	_, err := globex.Get(ctx(t), job.ID)
	wantErr(t, err, http.StatusNotFound, "JOB_NOT_FOUND")
	_, err = globex.Cancel(ctx(t), job.ID)
	wantErr(t, err, http.StatusNotFound, "JOB_NOT_FOUND")
	if l, _ := globex.List(ctx(t), client.ListOptions{}); len(l.Jobs) != 0 {
		t.Fatalf("globex lists acme's jobs: %+v", l)
	}
	if st, b := h.raw("GET", "/v1/jobs/"+job.ID, "", nil); st != http.StatusUnauthorized || codeOf(b) != "UNAUTHENTICATED" {
		t.Fatalf("no key: %d %v", st, b)
	}
	if st, _ := h.raw("GET", "/v1/jobs/"+job.ID+"?api_key=x", "", nil); st != http.StatusBadRequest {
		t.Fatalf("a credential in the query string: %d", st)
	}
	// An API key is not the admin token, and a revoked key stops working.
	k, _ := h.admin.CreateAPIKey(ctx(t), "acme")
	if st, b := h.raw("POST", "/v1/admin/api-keys", k.Key, []byte(`{"tenant":"acme"}`)); st != http.StatusForbidden || codeOf(b) != "PERMISSION_DENIED" {
		t.Fatalf("an API key on an admin endpoint: %d %v", st, b)
	}
	if err := h.admin.RevokeAPIKey(ctx(t), k.ID); err != nil {
		t.Fatal(err)
	}
	_, err = client.New(h.url, k.Key, nil).Get(ctx(t), job.ID)
	wantErr(t, err, http.StatusForbidden, "PERMISSION_DENIED")
	// An enroll token registers as many workers as it has uses.
	tok, _ := h.admin.CreateEnrollToken(ctx(t), "acme", 1, time.Hour)
	enroll := client.New(h.url, tok.Token, nil)
	if _, err := enroll.RegisterWorker(ctx(t), wire.RegisterRequest{Name: "a", Queues: []string{"q"}, Capacity: 1}); err != nil {
		t.Fatal(err)
	}
	_, err = enroll.RegisterWorker(ctx(t), wire.RegisterRequest{Name: "b", Queues: []string{"q"}, Capacity: 1})
	wantErr(t, err, http.StatusForbidden, "ENROLL_TOKEN_USED_UP")
	// Quotas are per tenant.
	if _, err := h.admin.SetQuota(ctx(t), "globex", new(1), new(0)); err != nil {
		t.Fatal(err)
	}
	submit(t, globex, `{}`)
	_, err = globex.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t"})
	wantErr(t, err, http.StatusTooManyRequests, "QUOTA_EXCEEDED")
	submit(t, acme, `{}`)
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	big := `{"queue":"q","type":"t","payload":"` + strings.Repeat("x", 2<<20) + `"}`
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"oversize body", "POST", "/v1/jobs", big, 413, "PAYLOAD_TOO_LARGE"},
		{"malformed JSON", "POST", "/v1/jobs", `{"queue":`, 400, "INVALID_JSON"},
		{"empty body", "POST", "/v1/jobs", ``, 400, "INVALID_JSON"},
		{"two values", "POST", "/v1/jobs", `{"queue":"q","type":"t"} {}`, 400, "INVALID_JSON"},
		{"unknown field", "POST", "/v1/jobs", `{"queue":"q","type":"t","prio":1}`, 400, "INVALID_ARGUMENT"},
		{"wrong type", "POST", "/v1/jobs", `{"queue":"q","type":7}`, 400, "INVALID_ARGUMENT"},
		{"bad queue", "POST", "/v1/jobs", `{"queue":"a b","type":"t"}`, 400, "INVALID_ARGUMENT"},
		{"empty batch", "POST", "/v1/jobs/batch", `{"jobs":[]}`, 400, "INVALID_ARGUMENT"},
		{"bad status filter", "GET", "/v1/jobs?status=nope", ``, 400, "INVALID_ARGUMENT"},
		{"unknown job", "GET", "/v1/jobs/nope", ``, 404, "JOB_NOT_FOUND"},
		{"unknown route", "GET", "/v1/nope", ``, 404, "NOT_FOUND"},
		{"wrong method", "DELETE", "/v1/jobs", ``, 405, "METHOD_NOT_ALLOWED"},
		{"cancel twice", "POST", "/v1/jobs/{done}/cancel", ``, 409, "ALREADY_TERMINAL"},
		{"retry a live job", "POST", "/v1/jobs/{live}/retry", ``, 409, "NOT_DEAD_LETTERED"},
		{"long wait", "POST", "/v1/worker/lease", `{"max":1,"wait_seconds":31}`, 400, "INVALID_ARGUMENT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := client.New(h.url, "", nil)
			path := tc.path
			if strings.Contains(path, "{done}") {
				j := submit(t, c, `{}`)
				if _, err := c.Cancel(ctx(t), j.ID); err != nil {
					t.Fatal(err)
				}
				path = strings.Replace(path, "{done}", j.ID, 1)
			}
			path = strings.Replace(path, "{live}", submit(t, c, `{}`).ID, 1)
			token := ""
			if strings.HasPrefix(path, "/v1/worker/") {
				token = h.register("", nil, 1).WorkerToken
			}
			st, b := h.raw(tc.method, path, token, []byte(tc.body))
			if st != tc.status || codeOf(b) != tc.code {
				t.Fatalf("%d %v, want %d %s", st, b, tc.status, tc.code)
			}
			if _, ok := b["error"].(map[string]any)["details"].(map[string]any); !ok {
				t.Fatalf("details is not an object: %v", b)
			}
		})
	}
	// A batch error names the job at fault.
	st, b := h.raw("POST", "/v1/jobs/batch", "", []byte(`{"jobs":[{"queue":"q","type":"t"},{"queue":"q","type":"t","delay_seconds":-1}]}`))
	if d := b["error"].(map[string]any)["details"].(map[string]any); st != 400 || d["index"] != float64(1) {
		t.Fatalf("batch error: %d %v", st, b)
	}
}

// SSE resumes after Last-Event-ID with no gap and no repeat, and ends with "done".
func TestEventStreamResume(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	c := client.New(h.url, "", nil)
	w, _, job, a := h.leased(c)
	for i := range 5 {
		if ack := w.ack(wire.Frame{Type: wire.FrameEvent, JobID: job.ID, LeaseID: a.LeaseID, EventType: "progress", Data: json.RawMessage(`{"i":` + string(rune('0'+i)) + `}`)}); ack.Number != 3+i {
			t.Fatalf("event %d numbered %d", i, ack.Number)
		}
	}
	// Read the stream up to event 4, then drop it.
	var seen []int
	_, err := c.Watch(ctx(t), job.ID, 0, func(e wire.Event) error {
		seen = append(seen, e.Number)
		if e.Number == 4 {
			return errors.New("hang up")
		}
		return nil
	})
	if err == nil || len(seen) != 4 {
		t.Fatalf("first read: %v %v", seen, err)
	}
	// The job finishes while nobody watches; resuming after 4 gives 5..8 and done.
	if ack := w.ack(wire.Frame{Type: wire.FrameComplete, JobID: job.ID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: json.RawMessage(`1`)}); !*ack.OK {
		t.Fatalf("complete %+v", ack)
	}
	var resumed []int
	status, err := c.Watch(ctx(t), job.ID, 4, func(e wire.Event) error { resumed = append(resumed, e.Number); return nil })
	if err != nil || status != "succeeded" {
		t.Fatalf("resume: %s %v", status, err)
	}
	if len(resumed) != 4 || resumed[0] != 5 || resumed[3] != 8 {
		t.Fatalf("resumed %v, want 5..8", resumed)
	}
	// The raw stream: ids, event names, and the final done. An EventSource that reconnects
	// to the URL it opened, ?after=2 and all, resumes after its Last-Event-ID, the later.
	req, _ := http.NewRequest("GET", h.url+"/v1/jobs/"+job.ID+"/events?after=2", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", "7")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	if !strings.HasPrefix(body.String(), "id: 8\nevent: job.succeeded\ndata: {") || !strings.HasSuffix(body.String(), "event: done\ndata: {\"status\":\"succeeded\"}\n\n") {
		t.Fatalf("stream:\n%s", body.String())
	}
}

// An SSE client sees events live, as the worker appends them.
func TestEventStreamIsLive(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	c := client.New(h.url, "", nil)
	w, _, job, a := h.leased(c)
	got := make(chan wire.Event)
	go func() {
		_, _ = c.Watch(ctx(t), job.ID, 0, func(e wire.Event) error { got <- e; return nil })
		close(got)
	}()
	for _, want := range []string{"job.submitted", "job.leased"} {
		if e := <-got; e.Type != want {
			t.Fatalf("got %s, want %s", e.Type, want)
		}
	}
	w.ack(wire.Frame{Type: wire.FrameEvent, JobID: job.ID, LeaseID: a.LeaseID, EventType: "log", Data: json.RawMessage(`"line"`)})
	if e := <-got; e.Type != "job.progress" || e.Number != 3 {
		t.Fatalf("live event %+v", e)
	}
	w.ack(wire.Frame{Type: wire.FrameFail, JobID: job.ID, LeaseID: a.LeaseID, ErrorCode: "boom", Retryable: new(bool)})
	var last wire.Event
	for e := range got {
		last = e
	}
	if last.Type != "job.dead_lettered" {
		t.Fatalf("last event %+v", last)
	}
}

// A worker that loses its connection mid-job keeps the lease if it comes back in time.
func TestReconnectKeepsLease(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	c := client.New(h.url, "", nil)
	w, reg, job, a := h.leased(c)
	_ = w.conn.UnderlyingConn().(*net.TCPConn).SetLinger(0)
	w.conn.UnderlyingConn().Close() // no close frame: the network dropped
	w2 := h.dial(reg.WorkerToken, 1)
	if hb := w2.ack(wire.Frame{Type: wire.FrameHeartbeat, Leases: []string{a.LeaseID}}); !*hb.OK || len(hb.Unknown) != 0 {
		t.Fatalf("heartbeat after reconnecting: %+v", hb)
	}
	if ack := w2.ack(wire.Frame{Type: wire.FrameComplete, JobID: job.ID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: json.RawMessage(`"ok"`)}); !*ack.OK {
		t.Fatalf("complete after reconnecting: %+v", ack)
	}
	if j, _ := c.Get(ctx(t), job.ID); j.Status != "succeeded" || j.Attempt != 1 {
		t.Fatalf("job %+v", j)
	}
}

// A worker that does not come back in time loses the lease: the job is retried.
func TestLeaseExpiresWithoutWorker(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	c := client.New(h.url, "", nil)
	reg := h.register("", nil, 1)
	w := h.dial(reg.WorkerToken, 1)
	w.send(wire.Frame{Type: wire.FrameCredit, N: 1})
	job, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t", LeaseTTLSeconds: 5})
	if err != nil {
		t.Fatal(err)
	}
	a := w.assignment()
	w.conn.UnderlyingConn().Close()
	var types []string
	var mu sync.Mutex
	watch, cancel := context.WithCancel(ctx(t))
	defer cancel()
	_, _ = c.Watch(watch, job.ID, 0, func(e wire.Event) error {
		mu.Lock()
		defer mu.Unlock()
		types = append(types, e.Type)
		if e.Type == "job.retry_scheduled" {
			cancel()
		}
		return nil
	})
	if strings.Join(types, " ") != "job.submitted job.leased job.lease_expired job.retry_scheduled" {
		t.Fatalf("events %v", types)
	}
	w2 := h.dial(reg.WorkerToken, 1)
	if ack := w2.ack(wire.Frame{Type: wire.FrameComplete, JobID: job.ID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: json.RawMessage(`"late"`)}); *ack.OK || ack.Error.Code != "LEASE_MISMATCH" {
		t.Fatalf("a completion after the lease expired: %+v", ack)
	}
}

func TestProtocolViolationsCloseCleanly(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	reg := h.register("", nil, 1)
	u := "ws" + strings.TrimPrefix(h.url, "http") + "/v1/worker/connect"
	hdr := http.Header{"Authorization": {"Bearer " + reg.WorkerToken}}
	for _, tc := range []struct {
		name  string
		first string
		code  int
	}{
		{"no hello", `{"type":"credit","n":1}`, websocket.ClosePolicyViolation},
		{"not JSON", `hello`, websocket.ClosePolicyViolation},
	} {
		conn, _, err := websocket.DefaultDialer.Dial(u, hdr)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.WriteMessage(websocket.TextMessage, []byte(tc.first))
		_, _, err = conn.ReadMessage()
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != tc.code {
			t.Fatalf("%s: %v", tc.name, err)
		}
		conn.Close()
	}
	// After hello: an unknown frame gets an error ack, a frame that is not JSON closes with 1007,
	// one over the limit with 1009.
	w := h.dial(reg.WorkerToken, 1)
	if a := w.ack(wire.Frame{Type: "dance"}); *a.OK || a.Error.Code != "INVALID_ARGUMENT" {
		t.Fatalf("unknown frame: %+v", a)
	}
	if a := w.ack(wire.Frame{Type: wire.FrameCredit, N: 5000}); *a.OK {
		t.Fatalf("credit 5000 accepted: %+v", a)
	}
	_ = w.conn.WriteMessage(websocket.TextMessage, []byte(`{"type":`))
	_, _, err := w.conn.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseInvalidFramePayloadData {
		t.Fatalf("bad JSON after hello: %v", err)
	}
	w = h.dial(reg.WorkerToken, 1)
	_ = w.conn.WriteMessage(websocket.TextMessage, bytes.Repeat([]byte("x"), transport.FrameBytesMax+1))
	_, _, err = w.conn.ReadMessage()
	if !errors.As(err, &ce) || ce.Code != websocket.CloseMessageTooBig {
		t.Fatalf("oversize frame: %v", err)
	}
}

// client.Command, the runner behind `tether worker`: output from stdout (JSON or text), stderr
// lines as log events, exit codes that retry or not, and a cancel that reaches the program as
// SIGTERM.
func TestCommandWorker(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	c := client.New(h.url, "", nil)
	reg := h.register("", nil, 4)
	// The sleeping case spins on a builtin rather than running sleep(1): a shell waiting for a
	// child that the same SIGTERM killed may report "Terminated" and skip its trap.
	script := `p=$(cat); case "$p" in
*ok*) echo "[$TETHER_JOB_ATTEMPT] $TETHER_JOB_TYPE" >&2; echo '{"ok": true}';;
*text*) echo hello;;
*fatal*) echo "bad input" >&2; exit 3;;
*retry*) exit 1;;
*sleep*) trap 'echo "got TERM" >&2; exit 143' TERM; echo started >&2; while :; do :; done;;
esac`
	w := &client.Worker{Server: h.url, Token: reg.WorkerToken, Capacity: 4, Logger: zaptest.NewLogger(t),
		Handler: client.Command{Args: []string{"sh", "-c", script}, FatalExitCodes: []int{3}, KillGrace: 5 * time.Second}.Handler()}
	runUntilTheEnd(t, w)

	submitMode := func(mode string) *wire.Job {
		j, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "kind", Payload: json.RawMessage(`{"mode":"` + mode + `"}`)})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	ok, text, fatal, retry, sleep := submitMode("ok"), submitMode("text"), submitMode("fatal"), submitMode("retry"), submitMode("sleep")
	if j := await(t, c, ok.ID); j.Status != "succeeded" || string(j.Output) != `{"ok":true}` {
		t.Fatalf("ok: %+v", j)
	}
	evs, _ := c.Events(ctx(t), ok.ID, 0)
	if e := evs.Events[2]; e.Type != "job.progress" || !strings.Contains(string(e.Data), `"data":"[1] kind"`) {
		t.Fatalf("stderr line: %s %s", e.Type, e.Data)
	}
	if j := await(t, c, text.ID); string(j.Output) != `"hello"` {
		t.Fatalf("text: %+v", j)
	}
	if j := await(t, c, fatal.ID); j.Status != "failed" || j.DeadReason != "non_retryable" || j.Error.Code != "exit_3" || !strings.Contains(j.Error.Message, "bad input") {
		t.Fatalf("fatal: %+v %+v", j, j.Error)
	}
	// A retryable failure goes back to wait out its backoff.
	_, _ = c.Watch(ctx(t), retry.ID, 0, func(e wire.Event) error {
		if e.Type == "job.retry_scheduled" {
			return errors.New("seen")
		}
		return nil
	})
	if j, _ := c.Get(ctx(t), retry.ID); j.Status != "scheduled" || j.Error.Code != "exit_1" {
		t.Fatalf("retry: %+v", j)
	}
	// Once the program says it started, cancel it: it gets SIGTERM, and the job is cancelled.
	_, _ = c.Watch(ctx(t), sleep.ID, 0, func(e wire.Event) error {
		if strings.Contains(string(e.Data), `"data":"started"`) {
			return errors.New("running")
		}
		return nil
	})
	if _, err := c.Cancel(ctx(t), sleep.ID); err != nil {
		t.Fatal(err)
	}
	if j := await(t, c, sleep.ID); j.Status != "cancelled" {
		t.Fatalf("cancel: %+v", j)
	}
	evs, _ = c.Events(ctx(t), sleep.ID, 0)
	var sawTerm bool
	for _, e := range evs.Events {
		sawTerm = sawTerm || strings.Contains(string(e.Data), "got TERM")
	}
	if !sawTerm {
		var seen []string
		for _, e := range evs.Events {
			seen = append(seen, e.Type+" "+string(e.Data))
		}
		t.Fatalf("the program never got SIGTERM:\n%s", strings.Join(seen, "\n"))
	}
}

// Shutdown: long polls end at once, and a WebSocket worker is told the server is going away.
func TestShutdownTellsWorkersGoingAway(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	reg := h.register("", nil, 1)
	if st, _ := h.raw("POST", "/v1/worker/lease", reg.WorkerToken, []byte(`{"max":1,"wait_seconds":0}`)); st != http.StatusNoContent {
		t.Fatalf("a poll with nothing ready: %d, want 204", st)
	}
	w := h.dial(h.register("", nil, 1).WorkerToken, 1)
	polled := make(chan int)
	go func() {
		st, _ := h.raw("POST", "/v1/worker/lease", reg.WorkerToken, []byte(`{"max":1,"wait_seconds":30}`))
		polled <- st
	}()
	h.api.Shutdown()
	if err := h.b.Close(); err != nil {
		t.Fatal(err)
	}
	_ = w.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	var ce *websocket.CloseError
	if _, _, err := w.conn.ReadMessage(); !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
		t.Fatalf("the worker got %v, want close 1001", err)
	}
	if st := <-polled; st != http.StatusNoContent && st != http.StatusServiceUnavailable {
		t.Fatalf("a long poll during shutdown answered %d", st)
	}
	h.api.Wait(ctx(t))
}

// cutProxy forwards TCP connections to a server. While held, what the server sends is dropped;
// cut closes every connection open so far.
type cutProxy struct {
	url  string
	held atomic.Bool
	mu   sync.Mutex
	open []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	p := &cutProxy{url: "http://" + ln.Addr().String()}
	addr := strings.TrimPrefix(target, "http://")
	go func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				_ = down.Close()
				continue
			}
			p.mu.Lock()
			p.open = append(p.open, down, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, down); _ = up.Close() }()
			go func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := up.Read(buf)
					if n > 0 && !p.held.Load() {
						if _, werr := down.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				_ = down.Close()
			}()
		}
	}()
	t.Cleanup(p.cut)
	return p
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.open {
		_ = c.Close()
	}
	p.open = nil
}

// A result whose connection breaks before its ack arrives is sent again on the next one, and
// the server takes the repeat as the same completion: the worker hears of it once, as taken.
func TestResultResentAfterConnectionBreaks(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	reg := h.register("", nil, 1)
	proxy := newCutProxy(t, h.url)
	type result struct {
		report string
		err    error
	}
	results := make(chan result, 4)
	connected := make(chan string, 4)
	w := &client.Worker{Server: proxy.url, Token: reg.WorkerToken, Capacity: 1, Transport: "websocket", Logger: zaptest.NewLogger(t),
		OnConnect: func(tr string) { connected <- tr },
		OnResult:  func(_ *client.Job, report string, err error) { results <- result{report, err} },
		Handler: func(context.Context, *client.Job) (any, error) {
			proxy.held.Store(true) // the server's ack to this result will not get through
			return "done", nil
		}}
	run, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = w.Run(run) }()
	t.Cleanup(func() { cancel(); <-stopped })
	firstConnect(t, connected)

	c := client.New(h.url, "", nil)
	job := submit(t, c, `{}`)
	if j := await(t, c, job.ID); j.Status != "succeeded" || j.Attempt != 1 {
		t.Fatalf("job %+v", j)
	}
	select {
	case r := <-results:
		t.Fatalf("the worker heard %+v though the ack was held back", r)
	default:
	}
	proxy.held.Store(false)
	proxy.cut()
	firstConnect(t, connected) // the second connection
	select {
	case r := <-results:
		if r.report != "complete" || r.err != nil {
			t.Fatalf("the resent result: %+v, want complete taken", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the result was not resent within 30 s")
	}
	select {
	case r := <-results:
		t.Fatalf("a second answer for one result: %+v", r)
	default:
	}
}

// Seed 002's wire: a worker may send its public key and its signatures in URL-safe base64,
// padding or not, as well as in standard base64. The key is kept in one form.
func TestBase64URLKeysAndSignatures(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	c := client.New(h.url, "", nil)
	for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.URLEncoding, base64.RawStdEncoding} {
		var pub ed25519.PublicKey
		var priv ed25519.PrivateKey
		for { // a key whose encodings differ between the alphabets, so the test means something
			pub, priv, _ = ed25519.GenerateKey(nil)
			if base64.StdEncoding.EncodeToString(pub) != base64.URLEncoding.EncodeToString(pub) {
				break
			}
		}
		reg, err := client.New(h.url, "", nil).RegisterWorker(ctx(t), wire.RegisterRequest{Name: "w", Queues: []string{"q"}, Capacity: 1, PublicKey: enc.EncodeToString(pub)})
		if err != nil {
			t.Fatalf("register with a %v key: %v", enc, err)
		}
		w := h.dial(reg.WorkerToken, 1)
		if welcome := w.welcome; welcome.PublicKey != base64.StdEncoding.EncodeToString(pub) {
			t.Fatalf("welcome names the key %q, want it in standard base64", welcome.PublicKey)
		}
		w.send(wire.Frame{Type: wire.FrameCredit, N: 1})
		job := submit(t, c, `{}`)
		a := w.assignment()
		output := json.RawMessage(`{"ok":true}`)
		hash, _ := signing.OutputHash(output)
		sig := enc.EncodeToString(ed25519.Sign(priv, signing.SignedCompletion(job.ID, a.LeaseID, a.Nonce, hash)))
		body, _ := json.Marshal(wire.CompleteRequest{LeaseID: a.LeaseID, Nonce: a.Nonce, Output: output, Signature: sig})
		if st, b := h.raw("POST", "/v1/worker/jobs/"+job.ID+"/complete", reg.WorkerToken, body); st != http.StatusOK {
			t.Fatalf("a %v signature: %d %v", enc, st, b)
		}
	}
	for _, key := range []string{"not base64!", base64.StdEncoding.EncodeToString(make([]byte, 31)), "AAAA-AAA+" + strings.Repeat("A", 34), strings.Repeat("A", 43) + "==="} {
		body, _ := json.Marshal(wire.RegisterRequest{Name: "w", Queues: []string{"q"}, Capacity: 1, PublicKey: key})
		if st, b := h.raw("POST", "/v1/workers/register", "", body); st != http.StatusBadRequest || codeOf(b) != "INVALID_ARGUMENT" {
			t.Errorf("public key %q: %d %v", key, st, b)
		}
	}
}
