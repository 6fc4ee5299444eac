package transport

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/projections"
)

// submitOnly is a Core that answers a submit with one canned job and serves nothing else (the
// nil Core it embeds panics), so that what a submit allocates is counted without the broker's
// own work, which BenchmarkLifecycle counts.
type submitOnly struct {
	Core
	results []broker.SubmitResult
}

func (c submitOnly) Submit(context.Context, string, string, ...actors.JobSpec) ([]broker.SubmitResult, actors.Receipt, error) {
	return c.results, actors.Receipt{Seq: 7, Hash: "00ff"}, nil
}

// discardAnswer is a ResponseWriter that keeps one header map and the status, and drops the
// body: the answer's own costs are net/http's.
type discardAnswer struct {
	header http.Header
	status int
	n      int
}

func (d *discardAnswer) Header() http.Header         { return d.header }
func (d *discardAnswer) WriteHeader(status int)      { d.status = status }
func (d *discardAnswer) Write(b []byte) (int, error) { d.n += len(b); return len(b), nil }

// submitAllocsMax is what the transport may allocate for one POST /v1/jobs, besides net/http's
// own costs and the broker's: the handler's request, the job spec handed to the broker with
// the answer's receipt, and what the decode copies out of the pooled body (2: strings and the
// payload); and one of headroom for the request ids' blocks, one per idBlock requests. It was 8
// before issue 55 (the id and its header value, and the traceparent header's key, each
// allocated per request, and the spec apart from the receipt).
const submitAllocsMax = 5

// TestSubmitAllocations guards the transport's share of a submit's allocations: routing,
// request id, auth, body read and decode, trace context, the spec, and the answer's encode.
// It counts allocations, not time, so it holds on a loaded machine.
func TestSubmitAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what allocates")
	}
	s, err := NewServer(Config{Auth: AuthNone, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	s.clock = func() time.Time { return now }
	job := &projections.Job{ID: "job_01JDZ0000000000000000000", Tenant: DefaultTenant, Queue: "q", Type: "noop",
		Payload: []byte(`{"n":1}`), Status: projections.StatusQueued, MaxAttempts: 3, CreatedAt: now, UpdatedAt: now}
	s.Attach(submitOnly{results: []broker.SubmitResult{{Job: job}}})

	const body = `{"queue":"q","type":"noop","payload":{"n":1}}`
	r, err := http.NewRequest(http.MethodPost, "http://127.0.0.1/v1/jobs", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/json")
	r.ContentLength = int64(len(body))
	r.RemoteAddr = "127.0.0.1:1"
	reader := strings.NewReader(body)
	w := &discardAnswer{header: http.Header{}}
	submit := func() {
		reader.Reset(body)
		r.Body = readCloser{reader}
		delete(r.Header, RequestIDHeader) // so that every run makes an id, as a client without one has it do
		clear(w.header)
		w.status, w.n = 0, 0
		s.ServeHTTP(w, r)
	}
	submit()
	if w.status != http.StatusCreated || w.n == 0 {
		t.Fatalf("the submit answered %d with %d bytes", w.status, w.n)
	}
	if allocs := testing.AllocsPerRun(200, submit); allocs > submitAllocsMax {
		t.Errorf("a submit allocates %.0f times in the transport, want at most %d", allocs, submitAllocsMax)
	}
}

// readCloser is a request body whose Close does nothing, made without allocating.
type readCloser struct{ *strings.Reader }

func (readCloser) Close() error { return nil }
