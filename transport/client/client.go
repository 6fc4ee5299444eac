// Package client is the Go client of tether: Client for submitters and administrators (jobs,
// event streams, quotas, keys), and Worker, which runs a handler for every job a server
// leases to it over WebSocket, falling back to HTTP long-polling where WebSocket is refused
// while plain HTTP works, and stops cleanly, giving back what it could not finish. Command is
// the handler behind `tether worker`: a program run per job. Registration is a worker that
// registers once and keeps its token across restarts (in a state file, or a --token-file).
//
// Everything it sends and receives is a type of package wire; it does not link the broker.
package client

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/tetherhq/tether/transport/client/policy"
	"github.com/tetherhq/tether/transport/wire"
)

// Error is an error answer of the server, in the shape every endpoint uses.
type Error struct {
	Status  int
	Code    string
	Message string
	Details map[string]any
	// RequestID is the answer's X-Request-Id: the server's log lines about the request carry
	// it, so quote it in a report.
	RequestID string
}

func (e *Error) Error() string {
	if e.RequestID == "" {
		return fmt.Sprintf("%s (%d): %s", e.Code, e.Status, e.Message)
	}
	return fmt.Sprintf("%s (%d): %s (request %s)", e.Code, e.Status, e.Message, e.RequestID)
}

// Retryable reports whether the same request may succeed later unchanged, with backoff: the
// code's Retry in the table of codes (docs/errors.md), or, for an answer with no tether code (a
// proxy's), a 5xx or 429 status.
func (e *Error) Retryable() bool { return policy.Retryable(e.Code, e.Status) }

// Client talks to a tether server with one credential: an API key for a submitter, an enroll
// token to register a worker, the admin token for admin calls (none under --auth none).
//
// It may know several servers: the leader and the hot standbys of a replicated log. It talks
// to one at a time and finds the leader among them: its first request asks each server's
// /readyz at once; a request that cannot reach a server, or that a standby or a starting server
// refuses, goes at once to the next (or to the leader the standby names); one safe to repeat
// (repeatable) that a server leaves unanswered for HedgeAfter goes to the next server too, and
// the first answer wins; one that is not goes only to a server that answered within HedgeAfter,
// and never twice. The rules in full are at the top of servers.go.
type Client struct {
	servers []string
	current atomic.Uint32 // index into servers
	// answered holds, for each server, when it last answered (Unix nanoseconds; 0: never).
	answered []atomic.Int64
	probing  sync.Mutex             // held by findLeader
	token    atomic.Pointer[string] // a worker's renews itself while in use
	hc       *http.Client
	// RetryFor, if set, is how long a request that is safe to repeat goes on being tried
	// across a failover, while no server takes it: none answers, or each is a standby that
	// knows no leader yet, starting, or unavailable. A server is asked again 100 ms after it
	// said a leader is being chosen, and after a backoff from 100 ms to 2 s while it cannot be
	// reached. 0: each server is tried at most twice, and the last answer is returned. Set it
	// before the first request.
	RetryFor time.Duration
	// Patience is how long one server may take to answer a request (on top of the wait a long
	// poll asks for) before the client gives up on it: a request safe to repeat then goes to the
	// next server, as from one it cannot reach; one that is not fails with the timeout, and the
	// client moves off that server. 0: 10 s.
	Patience time.Duration
	// HedgeAfter is how long a request safe to repeat waits for a server's answer before it
	// goes to the next server too (the first answer wins); while it waits, the servers that
	// answered that they stand by are asked again, so a request held by a paused leader is
	// taken by the next one as soon as it leads. A request that is not safe to repeat goes only
	// to a server that answered within HedgeAfter (the client asks them all first, if need be).
	// 0: 1 s.
	HedgeAfter time.Duration
}

// New returns a client of the server at base (http://host:port), or of any of several servers
// (http://a:8080,http://b:8080), using token, which may be "". hc may be nil for a client with
// sensible timeouts and keep-alive.
func New(base, token string, hc *http.Client) *Client {
	if hc == nil {
		hc = NewHTTPClient(nil)
	}
	c := &Client{servers: SplitServers(base), hc: hc}
	c.answered = make([]atomic.Int64, len(c.servers))
	c.token.Store(&token)
	return c
}

// repeatable reports whether a request may be sent again after it may have reached a server:
// reads; a submit, flow or schedule under its idempotency key or name; and actions whose second
// time changes nothing (cancel, re-drive, release, pause, resume, delete, a worker's result,
// which the server takes again as the same).
func repeatable(method, path string, body any, header []string) bool {
	if method != http.MethodPost {
		return true
	}
	for i := 0; i+1 < len(header); i += 2 {
		if http.CanonicalHeaderKey(header[i]) == "Idempotency-Key" && header[i+1] != "" {
			return true
		}
	}
	switch b := body.(type) {
	case wire.SubmitRequest:
		return b.IdempotencyKey != ""
	case wire.BatchRequest:
		for _, j := range b.Jobs {
			if j.IdempotencyKey == "" {
				return false
			}
		}
		return len(b.Jobs) > 0
	case wire.ScheduleRequest:
		return true
	}
	path, _, _ = strings.Cut(path, "?")
	for _, suffix := range []string{"/cancel", "/retry", "/release", "/pause", "/resume", "/complete", "/fail", "/heartbeat"} {
		if strings.HasSuffix(path, suffix) {
			return true
		}
	}
	return false
}

func (c *Client) tokenNow() string { return *c.token.Load() }

func (c *Client) setToken(token string) { c.token.Store(&token) }

// do sends a JSON request and decodes a JSON answer into out (if not nil).
func (c *Client) do(ctx context.Context, method, path string, body, out any, header ...string) (int, error) {
	var data []byte
	contentType := "application/json"
	if raw, ok := body.(rawBody); ok {
		data, contentType = raw.data, raw.contentType
	} else if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		data = b
	}
	// A server that took the request and does not answer in time (a paused process, one cut
	// off from its log) is given up on like one that cannot be reached.
	patience := cmp.Or(c.Patience, requestTimeout)
	if lr, ok := body.(wire.LeaseRequest); ok {
		patience += time.Duration(lr.WaitSeconds * float64(time.Second))
	}
	safe := repeatable(method, path, body, header)
	c.findLeader(ctx, safe)
	rules := raceRules{safe: safe, retryFor: c.RetryFor, patience: patience, hedgeAfter: c.hedgeAfter()}
	a, err := race(ctx, c, rules, func(ctx context.Context, server string) (answer, error) {
		return c.doOn(ctx, server, method, path, body != nil, data, contentType, header)
	}, nil)
	if err != nil {
		return a.status, err
	}
	if out != nil && a.status != http.StatusNoContent {
		if err := json.Unmarshal(a.body, out); err != nil {
			return a.status, fmt.Errorf("tether: %s %s: decoding the answer: %w", method, path, err)
		}
	}
	return a.status, nil
}

// answer is a server's successful answer to a request: its status and body.
type answer struct {
	status int
	body   []byte
}

// doOn sends one request to one server and reads its answer.
func (c *Client) doOn(ctx context.Context, server, method, path string, hasBody bool, data []byte, contentType string, header []string) (answer, error) {
	var rd io.Reader
	if hasBody {
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, server+path, rd)
	if err != nil {
		return answer{}, err
	}
	if hasBody {
		req.Header.Set("Content-Type", contentType)
	}
	if token := c.tokenNow(); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	if trace.SpanContextFromContext(ctx).IsValid() { // a submit continues the caller's trace
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	c.heardFrom(server)
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return answer{status: resp.StatusCode}, errorOf(resp)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{status: resp.StatusCode}, fmt.Errorf("tether: %s %s: reading the answer: %w", method, path, err)
	}
	return answer{status: resp.StatusCode, body: b}, nil
}

// httpCodePrefix starts the code of an error answer that is not tether's: HTTP_502, say.
const httpCodePrefix = "HTTP_"

// errorOf reads an error answer.
func errorOf(resp *http.Response) error {
	var e wire.Error
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	id := resp.Header.Get("X-Request-Id")
	if json.Unmarshal(body, &e) != nil || e.Error.Code == "" {
		return &Error{Status: resp.StatusCode, Code: httpCodePrefix + strconv.Itoa(resp.StatusCode), Message: strings.TrimSpace(string(body)), RequestID: id}
	}
	return &Error{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message, Details: e.Error.Details, RequestID: id}
}

// Submit submits one job. An idempotent hit returns the original job with IdempotentHit set.
func (c *Client) Submit(ctx context.Context, req wire.SubmitRequest) (*wire.Job, error) {
	var j wire.Job
	_, err := c.do(ctx, http.MethodPost, "/v1/jobs", req, &j)
	return &j, err
}

// SubmitBatch submits jobs all or none.
func (c *Client) SubmitBatch(ctx context.Context, jobs []wire.SubmitRequest) (*wire.BatchResponse, error) {
	var out wire.BatchResponse
	_, err := c.do(ctx, http.MethodPost, "/v1/jobs/batch", wire.BatchRequest{Jobs: jobs}, &out)
	return &out, err
}

// Get returns a job.
func (c *Client) Get(ctx context.Context, id string) (*wire.Job, error) {
	var j wire.Job
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id), nil, &j)
	return &j, err
}

// Explain asks why a job is not running, whom it runs on, or how it ended: the dispatcher's own
// reason, as a stable code with its details (GET /v1/jobs/{id}/explain).
func (c *Client) Explain(ctx context.Context, id string) (*wire.Explanation, error) {
	var x wire.Explanation
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/explain", nil, &x)
	return &x, err
}

// ListOptions filter and page GET /v1/jobs; empty fields match everything.
type ListOptions struct {
	Status, Queue, Type, Cursor string
	// Label is key=value: only jobs with that label.
	Label string
	Limit int
	// Newest lists the newest jobs first.
	Newest bool
}

// List returns one page of jobs; pass NextCursor as Cursor for the next.
func (c *Client) List(ctx context.Context, o ListOptions) (*wire.JobList, error) {
	q := url.Values{}
	for k, v := range map[string]string{"status": o.Status, "queue": o.Queue, "type": o.Type, "label": o.Label, "cursor": o.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Newest {
		q.Set("order", "newest")
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	var out wire.JobList
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs?"+q.Encode(), nil, &out)
	return &out, err
}

// Cancel cancels a job: at once if it waits, by request if it is leased.
func (c *Client) Cancel(ctx context.Context, id string) (*wire.Job, error) {
	var j wire.Job
	_, err := c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/cancel", nil, &j)
	return &j, err
}

// Retry re-drives a dead-lettered job with a fresh attempt budget.
func (c *Client) Retry(ctx context.Context, id string) (*wire.Job, error) {
	var j wire.Job
	_, err := c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/retry", nil, &j)
	return &j, err
}

// Delete takes a finished job out of every view now; a job still running is JOB_NOT_FINISHED.
func (c *Client) Delete(ctx context.Context, id string) (*wire.Deleted, error) {
	var d wire.Deleted
	_, err := c.do(ctx, http.MethodDelete, "/v1/jobs/"+url.PathEscape(id), nil, &d)
	return &d, err
}

// PurgeDead takes the dead letters of queue (every queue if empty) that died at least
// olderThan ago out of every view, up to 1000 a call; the answer's More says to call again.
func (c *Client) PurgeDead(ctx context.Context, queue string, olderThan time.Duration) (*wire.PurgeResponse, error) {
	var p wire.PurgeResponse
	_, err := c.do(ctx, http.MethodPost, "/v1/dead-letters/purge", wire.PurgeRequest{Queue: queue, OlderThanSeconds: new(olderThan.Seconds())}, &p)
	return &p, err
}

// CancelMatching cancels one page of the caller's live jobs that req's filter matches; call
// again with req.Cursor = NextCursor while it is set.
func (c *Client) CancelMatching(ctx context.Context, req wire.BulkRequest) (*wire.BulkCancelResponse, error) {
	var out wire.BulkCancelResponse
	_, err := c.do(ctx, http.MethodPost, "/v1/jobs/cancel", req, &out)
	return &out, err
}

// RedriveMatching re-drives one page of the caller's dead letters that req's filter matches;
// call again with req.Cursor = NextCursor while it is set.
func (c *Client) RedriveMatching(ctx context.Context, req wire.BulkRequest) (*wire.BulkRedriveResponse, error) {
	var out wire.BulkRedriveResponse
	_, err := c.do(ctx, http.MethodPost, "/v1/jobs/retry", req, &out)
	return &out, err
}

// Events returns the events of a job after event number after, one page.
func (c *Client) Events(ctx context.Context, id string, after int) (*wire.EventList, error) {
	var out wire.EventList
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/events?after="+strconv.Itoa(after), nil, &out)
	return &out, err
}

// Watch streams a job's events after number after to fn until the job is terminal, and
// returns its final status. A broken stream is resumed with Last-Event-ID: no gap, no repeat.
func (c *Client) Watch(ctx context.Context, id string, after int, fn func(wire.Event) error) (string, error) {
	return c.watch(ctx, "/v1/jobs/"+url.PathEscape(id)+"/events", after, fn)
}

// WatchFlow is Watch for a flow: its events and its steps' jobs' lifecycle events, until the
// flow has ended and its steps' jobs have finished.
func (c *Client) WatchFlow(ctx context.Context, id string, after int, fn func(wire.Event) error) (string, error) {
	return c.watch(ctx, "/v1/flows/"+url.PathEscape(id)+"/events", after, fn)
}

func (c *Client) watch(ctx context.Context, path string, after int, fn func(wire.Event) error) (string, error) {
	failures := 0
	for {
		status, last, err := c.watchOnce(ctx, path, after, fn)
		if err == nil {
			return status, nil
		}
		var apiErr *Error
		if errors.As(err, &apiErr) || ctx.Err() != nil || errors.Is(err, errCallback) {
			return "", err
		}
		if last > after {
			after, failures = last, 0
		}
		failures++
		if failures > 5 {
			return "", err
		}
		select {
		case <-time.After(backoff(failures, 100*time.Millisecond, 5*time.Second)):
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

var errCallback = errors.New("watch callback failed")

func (c *Client) watchOnce(ctx context.Context, path string, after int, fn func(wire.Event) error) (status string, last int, err error) {
	c.findLeader(ctx, true)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rules := raceRules{safe: true, retryFor: c.RetryFor, patience: cmp.Or(c.Patience, requestTimeout), hedgeAfter: c.hedgeAfter()}
	s, err := race(ctx, c, rules, func(actx context.Context, server string) (stream, error) {
		return c.openStream(ctx, actx, server, path, after)
	}, func(s stream) { s.close() })
	if err != nil {
		return "", after, err
	}
	defer s.close()
	// A stream that stays quiet past the server's keep-alives is a server that stopped
	// answering (paused, cut off): resume it, elsewhere if another server leads now.
	idle := time.AfterFunc(streamIdleMax, func() {
		c.failover(s.server, "")
		s.close()
	})
	defer idle.Stop()
	resp := s.resp
	last = after
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var event, data string
	for sc.Scan() {
		idle.Reset(streamIdleMax)
		line := sc.Text()
		switch {
		case line == "":
			if event == "done" {
				var d struct{ Status string }
				_ = json.Unmarshal([]byte(data), &d)
				return d.Status, last, nil
			}
			if data != "" {
				var e wire.Event
				if err := json.Unmarshal([]byte(data), &e); err != nil {
					return "", last, fmt.Errorf("tether: event stream: %w", err)
				}
				if err := fn(e); err != nil {
					return "", last, fmt.Errorf("%w: %w", errCallback, err)
				}
				last = e.Number
			}
			event, data = "", ""
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		}
	}
	if err := sc.Err(); err != nil {
		return "", last, err
	}
	return "", last, io.ErrUnexpectedEOF
}

// streamIdleMax is how long an event stream may be quiet before the client takes it for
// broken: four of the server's keep-alives (every 15 s).
const streamIdleMax = 60 * time.Second

// stream is an event stream's answer, open, from server.
type stream struct {
	resp   *http.Response
	server string
	close  func()
}

// openStream asks server for an event stream and returns it once its answer began, within
// actx; the stream itself lasts as long as ctx.
func (c *Client) openStream(ctx, actx context.Context, server, path string, after int) (stream, error) {
	ctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+path, nil)
	if err != nil {
		cancel()
		return stream{}, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if after > 0 {
		req.Header.Set("Last-Event-ID", strconv.Itoa(after))
	}
	if token := c.tokenNow(); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	stop := context.AfterFunc(actx, cancel) // no answer in time, or the race is over
	resp, err := c.hc.Do(req)
	if err == nil {
		c.heardFrom(server)
	}
	if !stop() {
		err = cmp.Or(actx.Err(), err)
	}
	switch {
	case err != nil && resp != nil:
		resp.Body.Close()
	case err == nil && resp.StatusCode >= 400:
		err = errorOf(resp)
		resp.Body.Close()
	case err == nil:
		return stream{resp: resp, server: server, close: func() { cancel(); resp.Body.Close() }}, nil
	}
	cancel()
	return stream{}, err
}

// Reserve holds one of the tenant's max_active slots for ttl (0: 300 s).
func (c *Client) Reserve(ctx context.Context, ttl time.Duration) (*wire.Reservation, error) {
	var out wire.Reservation
	_, err := c.do(ctx, http.MethodPost, "/v1/reservations", wire.ReservationRequest{TTLSeconds: ttl.Seconds()}, &out)
	return &out, err
}

// Release gives a reservation back.
func (c *Client) Release(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodPost, "/v1/reservations/"+url.PathEscape(id)+"/release", nil, nil)
	return err
}

// Quota returns the tenant's limits and usage.
func (c *Client) Quota(ctx context.Context) (*wire.Quota, error) {
	var out wire.Quota
	_, err := c.do(ctx, http.MethodGet, "/v1/quota", nil, &out)
	return &out, err
}

// Queues returns the tenant's queues.
func (c *Client) Queues(ctx context.Context) (*wire.Queues, error) {
	var out wire.Queues
	_, err := c.do(ctx, http.MethodGet, "/v1/queues", nil, &out)
	return &out, err
}

// PauseQueue pauses one of the caller's queues (paused) or resumes it. With an admin token,
// tenant names whose queue; with an API key it must be empty.
func (c *Client) PauseQueue(ctx context.Context, tenant, queue string, paused bool) (*wire.QueueState, error) {
	action := "resume"
	if paused {
		action = "pause"
	}
	path := "/v1/queues/" + url.PathEscape(queue) + "/" + action
	if tenant != "" {
		path = "/v1/admin/tenants/" + url.PathEscape(tenant) + path[len("/v1"):]
	}
	var out wire.QueueState
	_, err := c.do(ctx, http.MethodPost, path, nil, &out)
	return &out, err
}

// Workers returns the tenant's workers.
func (c *Client) Workers(ctx context.Context) (*wire.Workers, error) {
	var out wire.Workers
	_, err := c.do(ctx, http.MethodGet, "/v1/workers", nil, &out)
	return &out, err
}

// AllWorkers lists the tenant's workers with those Workers leaves out: revoked ones, and those
// offline for more than a day.
func (c *Client) AllWorkers(ctx context.Context) (*wire.Workers, error) {
	var out wire.Workers
	_, err := c.do(ctx, http.MethodGet, "/v1/workers?all=true", nil, &out)
	return &out, err
}

// RegisterWorker registers a worker; the client's token is the enroll token.
func (c *Client) RegisterWorker(ctx context.Context, req wire.RegisterRequest) (*wire.Registration, error) {
	var out wire.Registration
	_, err := c.do(ctx, http.MethodPost, "/v1/workers/register", req, &out)
	return &out, err
}

// RevokeWorker revokes a worker: its connection closes and its leases go back at once.
func (c *Client) RevokeWorker(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/workers/"+url.PathEscape(id), nil, nil)
	return err
}

// CreateAPIKey issues an API key for a tenant (admin).
func (c *Client) CreateAPIKey(ctx context.Context, tenant string) (*wire.APIKey, error) {
	var out wire.APIKey
	_, err := c.do(ctx, http.MethodPost, "/v1/admin/api-keys", wire.APIKeyRequest{Tenant: tenant}, &out)
	return &out, err
}

// RevokeAPIKey stops an API key (admin).
func (c *Client) RevokeAPIKey(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/admin/api-keys/"+url.PathEscape(id), nil, nil)
	return err
}

// CreateEnrollToken issues a token that registers up to uses workers within ttl (admin).
func (c *Client) CreateEnrollToken(ctx context.Context, tenant string, uses int, ttl time.Duration) (*wire.EnrollToken, error) {
	var out wire.EnrollToken
	_, err := c.do(ctx, http.MethodPost, "/v1/admin/enroll-tokens", wire.EnrollTokenRequest{Tenant: tenant, Uses: &uses, TTLSeconds: ttl.Seconds()}, &out)
	return &out, err
}

// SetQuota sets a tenant's limits (admin): 0 is unlimited, nil keeps the current value.
func (c *Client) SetQuota(ctx context.Context, tenant string, maxActive, maxRunning *int) (*wire.Quota, error) {
	return c.SetLimits(ctx, tenant, wire.QuotaRequest{MaxActive: maxActive, MaxRunning: maxRunning})
}

// SetLimits sets what req names of a tenant's quota and limits (admin), its default
// max_running_per_key among them: 0 is unlimited, nil keeps the current value.
func (c *Client) SetLimits(ctx context.Context, tenant string, req wire.QuotaRequest) (*wire.Quota, error) {
	var out wire.Quota
	_, err := c.do(ctx, http.MethodPatch, "/v1/admin/tenants/"+url.PathEscape(tenant)+"/quota", req, &out)
	return &out, err
}

// SetQueueLimits sets a queue's own max_running_per_key, the leases one concurrency key may
// hold at once in it (0: unlimited), or with nil clears it, so the tenant's applies. With an
// admin token, tenant names whose queue; with an API key it must be empty. Setting a limit is
// safe to repeat.
func (c *Client) SetQueueLimits(ctx context.Context, tenant, queue string, maxRunningPerKey *int) (*wire.QueueLimits, error) {
	path := "/v1/queues/" + url.PathEscape(queue) + "/limits"
	if tenant != "" {
		path = "/v1/admin/tenants/" + url.PathEscape(tenant) + path[len("/v1"):]
	}
	var out wire.QueueLimits
	var err error
	if maxRunningPerKey == nil {
		_, err = c.do(ctx, http.MethodDelete, path, nil, &out)
	} else {
		_, err = c.do(ctx, http.MethodPut, path, wire.QueueLimitsRequest{MaxRunningPerKey: maxRunningPerKey}, &out)
	}
	return &out, err
}

// rateLimitPath is a tenant's rate limits' path: its own with an API key, or with tenant set the
// admin twin's (the admin token).
func rateLimitPath(tenant, name string) string {
	path := "/v1/rate-limits"
	if name != "" {
		path += "/" + url.PathEscape(name)
	}
	if tenant != "" {
		path = "/v1/admin/tenants/" + url.PathEscape(tenant) + path[len("/v1"):]
	}
	return path
}

// SetRateLimit sets one of the tenant's rate limits, new or changed: rate tokens a second, at
// most burst held (0: the server's default, the rate rounded up).
func (c *Client) SetRateLimit(ctx context.Context, tenant, name string, rate float64, burst int) (*wire.RateLimit, error) {
	var out wire.RateLimit
	_, err := c.do(ctx, http.MethodPut, rateLimitPath(tenant, name), wire.RateLimitRequest{Rate: rate, Burst: burst}, &out)
	return &out, err
}

// DeleteRateLimit deletes one of the tenant's rate limits.
func (c *Client) DeleteRateLimit(ctx context.Context, tenant, name string) (*wire.RateLimitDeleted, error) {
	var out wire.RateLimitDeleted
	_, err := c.do(ctx, http.MethodDelete, rateLimitPath(tenant, name), nil, &out)
	return &out, err
}

// RateLimits lists the tenant's rate limits.
func (c *Client) RateLimits(ctx context.Context, tenant string) (*wire.RateLimitList, error) {
	var out wire.RateLimitList
	_, err := c.do(ctx, http.MethodGet, rateLimitPath(tenant, ""), nil, &out)
	return &out, err
}

// rawBody is a request body sent as it is, not as JSON.
type rawBody struct {
	data        []byte
	contentType string
}

// SubmitFlow submits a flow file (YAML) as a flow named name; key, if set, is its idempotency
// key.
func (c *Client) SubmitFlow(ctx context.Context, name string, file []byte, key string) (*wire.Flow, error) {
	var out wire.Flow
	var header []string
	if key != "" {
		header = []string{"Idempotency-Key", key}
	}
	_, err := c.do(ctx, http.MethodPost, "/v1/flows?name="+url.QueryEscape(name), rawBody{file, "application/yaml"}, &out, header...)
	return &out, err
}

// Flow reads a flow.
func (c *Client) Flow(ctx context.Context, id string) (*wire.Flow, error) {
	var out wire.Flow
	_, err := c.do(ctx, http.MethodGet, "/v1/flows/"+url.PathEscape(id), nil, &out)
	return &out, err
}

// Flows lists flows, newest first: those of status if it is set, after cursor.
func (c *Client) Flows(ctx context.Context, status, cursor string, limit int) (*wire.FlowList, error) {
	q := url.Values{}
	for k, v := range map[string]string{"status": status, "cursor": cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out wire.FlowList
	_, err := c.do(ctx, http.MethodGet, "/v1/flows?"+q.Encode(), nil, &out)
	return &out, err
}

// CancelFlow cancels a running flow.
func (c *Client) CancelFlow(ctx context.Context, id string) (*wire.Flow, error) {
	var out wire.Flow
	_, err := c.do(ctx, http.MethodPost, "/v1/flows/"+url.PathEscape(id)+"/cancel", nil, &out)
	return &out, err
}

// FlowEvents reads one page of a flow's events after event number after.
func (c *Client) FlowEvents(ctx context.Context, id string, after int) (*wire.EventList, error) {
	var out wire.EventList
	_, err := c.do(ctx, http.MethodGet, "/v1/flows/"+url.PathEscape(id)+"/events?after="+strconv.Itoa(after), nil, &out)
	return &out, err
}

// CreateSchedule creates a schedule, or answers the tenant's schedule of the same name and
// definition (IdempotentHit).
func (c *Client) CreateSchedule(ctx context.Context, req wire.ScheduleRequest) (*wire.Schedule, error) {
	var out wire.Schedule
	_, err := c.do(ctx, http.MethodPost, "/v1/schedules", req, &out)
	return &out, err
}

// Schedule reads a schedule.
func (c *Client) Schedule(ctx context.Context, id string) (*wire.Schedule, error) {
	var out wire.Schedule
	_, err := c.do(ctx, http.MethodGet, "/v1/schedules/"+url.PathEscape(id), nil, &out)
	return &out, err
}

// Schedules lists the tenant's schedules, by name.
func (c *Client) Schedules(ctx context.Context) (*wire.ScheduleList, error) {
	var out wire.ScheduleList
	_, err := c.do(ctx, http.MethodGet, "/v1/schedules", nil, &out)
	return &out, err
}

// PauseSchedule pauses a schedule, or resumes it: it fires again at its ticks after the resume.
func (c *Client) PauseSchedule(ctx context.Context, id string, paused bool) (*wire.Schedule, error) {
	action := "resume"
	if paused {
		action = "pause"
	}
	var out wire.Schedule
	_, err := c.do(ctx, http.MethodPost, "/v1/schedules/"+url.PathEscape(id)+"/"+action, nil, &out)
	return &out, err
}

// DeleteSchedule deletes a schedule; the jobs it fired stay.
func (c *Client) DeleteSchedule(ctx context.Context, id string) (*wire.Deleted, error) {
	var out wire.Deleted
	_, err := c.do(ctx, http.MethodDelete, "/v1/schedules/"+url.PathEscape(id), nil, &out)
	return &out, err
}

// WithTraceparent returns ctx carrying the W3C trace context traceparent (as OpenTelemetry's
// propagator reads it; one that does not parse is ignored), so that the jobs a request with it
// submits continue that trace. A context that holds an OpenTelemetry span needs nothing more:
// every request sends the span's context in the traceparent header.
func WithTraceparent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}
