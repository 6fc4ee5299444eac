package client_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/transporttest"
	"github.com/tetherhq/tether/transport/wire"
)

// serve starts a real server (a broker on a temp dir, --auth none) and returns its URL.
func serve(t *testing.T) string {
	t.Helper()
	log := zaptest.NewLogger(t)
	b, err := broker.Open(broker.Config{Dir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	_, url := transporttest.Serve(t, b, transport.Config{Auth: transport.AuthNone, Logger: log})
	return url
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// A job's life through the client: submit (and an idempotent resubmit), a worker of the
// package's own that signs its result, Watch to the end, Get and List of the result.
func TestClientDrivesAJobToItsResult(t *testing.T) {
	t.Parallel()
	url := serve(t)
	c := client.New(url, "", nil)
	req := wire.SubmitRequest{Queue: "q", Type: "sum", Payload: json.RawMessage(`{"a":2,"b":3}`), IdempotencyKey: "k1", Labels: map[string]string{"team": "x"}}
	job, err := c.Submit(ctx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if job.Status != "queued" || job.Receipt == nil || job.Receipt.Seq == 0 || job.IdempotentHit == nil || *job.IdempotentHit {
		t.Fatalf("submitted: %+v", job)
	}
	again, err := c.Submit(ctx(t), req)
	if err != nil || again.ID != job.ID || again.IdempotentHit == nil || !*again.IdempotentHit {
		t.Fatalf("resubmitted: %+v, %v", again, err)
	}

	pub, key, _ := ed25519.GenerateKey(nil)
	reg, err := c.RegisterWorker(ctx(t), wire.RegisterRequest{Name: "w", Queues: []string{"q"}, Capacity: 1, PublicKey: base64.StdEncoding.EncodeToString(pub)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx(t))
	defer stop()
	w := &client.Worker{Server: url, Token: reg.WorkerToken, Key: key, Logger: zaptest.NewLogger(t),
		Handler: func(ctx context.Context, j *client.Job) (any, error) {
			var in struct{ A, B int }
			if err := json.Unmarshal(j.Payload, &in); err != nil {
				return nil, err
			}
			if err := j.Event(ctx, "progress", map[string]int{"done": 1}); err != nil {
				return nil, err
			}
			return map[string]int{"sum": in.A + in.B}, nil
		}}
	ran := make(chan error, 1)
	go func() { ran <- w.Run(runCtx) }()

	var types []string
	status, err := c.Watch(ctx(t), job.ID, 0, func(e wire.Event) error {
		types = append(types, e.Type)
		return nil
	})
	if err != nil || status != "succeeded" {
		t.Fatalf("watch: %s, %v (events %v)", status, err, types)
	}
	if len(types) < 3 || types[0] != "job.submitted" || types[len(types)-1] != "job.succeeded" {
		t.Fatalf("events %v", types)
	}
	got, err := c.Get(ctx(t), job.ID)
	if err != nil || string(got.Output) != `{"sum":5}` || got.OutputHash == "" {
		t.Fatalf("get: %+v, %v", got, err)
	}
	page, err := c.List(ctx(t), client.ListOptions{Status: "succeeded", Queue: "q", Limit: 10})
	if err != nil || len(page.Jobs) != 1 || page.Jobs[0].ID != job.ID || page.NextCursor != "" {
		t.Fatalf("list: %+v, %v", page, err)
	}
	other, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "idle", Type: "sum", Labels: map[string]string{"team": "y"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		o    client.ListOptions
		want []string
	}{
		{client.ListOptions{Label: "team=x"}, []string{job.ID}},
		{client.ListOptions{Label: "team=y"}, []string{other.ID}},
		{client.ListOptions{Label: "team="}, nil},
		{client.ListOptions{Newest: true}, []string{other.ID, job.ID}},
		{client.ListOptions{}, []string{job.ID, other.ID}},
	} {
		page, err := c.List(ctx(t), tc.o)
		var ids []string
		for _, j := range page.Jobs {
			ids = append(ids, j.ID)
		}
		if err != nil || !slices.Equal(ids, tc.want) {
			t.Fatalf("list %+v: %v, %v; want %v", tc.o, ids, err, tc.want)
		}
	}
	if _, err := c.List(ctx(t), client.ListOptions{Label: "no-equals-sign"}); err == nil || !strings.Contains(err.Error(), "INVALID_ARGUMENT") {
		t.Fatalf("a label filter without =: %v", err)
	}
	stop()
	if err := <-ran; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("worker: %v", err)
	}
}

// A refusal reaches the caller as *client.Error with the code, the status of the table, the
// request id and whether to retry; a cancelled job cannot be cancelled again.
func TestClientErrorsCarryTheTable(t *testing.T) {
	t.Parallel()
	c := client.New(serve(t), "", nil)
	_, err := c.Get(ctx(t), "01NOSUCHJOB00000000000000")
	var e *client.Error
	if !errors.As(err, &e) || e.Code != "JOB_NOT_FOUND" || e.Status != http.StatusNotFound || e.RequestID == "" || e.Retryable() {
		t.Fatalf("get of no job: %#v", err)
	}
	job, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if j, err := c.Cancel(ctx(t), job.ID); err != nil || j.Status != "cancelled" {
		t.Fatalf("cancel: %+v, %v", j, err)
	}
	_, err = c.Cancel(ctx(t), job.ID)
	if !errors.As(err, &e) || e.Code != "ALREADY_TERMINAL" || e.Status != http.StatusConflict || e.Retryable() {
		t.Fatalf("second cancel: %#v", err)
	}
	_, err = c.Submit(ctx(t), wire.SubmitRequest{Queue: "", Type: "t"})
	if !errors.As(err, &e) || e.Code != "INVALID_ARGUMENT" || e.Status != http.StatusBadRequest {
		t.Fatalf("submit with no queue: %#v", err)
	}
}

// An answer that is not tether's (a proxy's 502 page) still becomes an *Error, with an HTTP_
// code and retry by its status; a code the table does not know (a newer server's) is a 500.
func TestClientErrorsFromElsewhere(t *testing.T) {
	t.Parallel()
	answers := map[string]func(w http.ResponseWriter){
		"/v1/jobs/proxy": func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte("<html>bad gateway</html>"))
		},
		"/v1/jobs/newer": func(w http.ResponseWriter) {
			w.Header().Set("X-Request-Id", "r1")
			w.WriteHeader(http.StatusTeapot)
			_ = json.NewEncoder(w).Encode(wire.Error{Error: wire.ErrorDetail{Code: "SOMETHING_NEW", Message: "m"}})
		},
		"/v1/jobs/busy": func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(wire.Error{Error: wire.ErrorDetail{Code: "NOT_READY", Message: "recovering"}})
		},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { answers[r.URL.Path](w) }))
	defer srv.Close()
	c := client.New(srv.URL, "", nil)
	for _, tc := range []struct {
		id, code string
		status   int
		retry    bool
	}{
		{"proxy", "HTTP_502", http.StatusBadGateway, true},
		{"newer", "SOMETHING_NEW", http.StatusTeapot, false},
		{"busy", "NOT_READY", http.StatusServiceUnavailable, true},
	} {
		_, err := c.Get(ctx(t), tc.id)
		var e *client.Error
		if !errors.As(err, &e) || e.Code != tc.code || e.Status != tc.status || e.Retryable() != tc.retry {
			t.Errorf("%s: %#v (retryable %v)", tc.id, err, e != nil && e.Retryable())
		}
	}
	if got := wire.StatusOf("SOMETHING_NEW"); got != http.StatusInternalServerError {
		t.Errorf("an unknown code's status: %d", got)
	}
}
