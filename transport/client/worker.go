package client

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors/signing"
	"github.com/tetherhq/tether/eventlog/fastjson"
	"github.com/tetherhq/tether/transport/client/policy"
	"github.com/tetherhq/tether/transport/wire"
)

// Job is a job leased to a worker, as its handler sees it.
type Job struct {
	ID             string
	LeaseID        string
	Queue          string
	Type           string
	Payload        json.RawMessage
	Attempt        int
	LeaseExpiresAt time.Time
	// Traceparent is the W3C trace context the job continues, "" if none: the run's span when
	// the worker traces (TracerProvider), else what the assignment named (the attempt's span
	// when the server traces, else the submitter's). The handler's context carries it too.
	Traceparent string

	nonce  string
	r      *runner
	events atomic.Int64 // numbers the events of this lease: a resent one is not written twice
}

// Event appends an event (a log line, progress, any type) to the job's stream, where clients
// watching the job see it.
func (j *Job) Event(ctx context.Context, eventType string, data any) error {
	raw, err := json.Marshal(data)
	if err != nil {
		return err
	}
	if err := checkValue("the event's data", raw); err != nil {
		return err
	}
	seq := int(j.events.Add(1))
	_, err = j.r.request(ctx, wire.Frame{Type: wire.FrameEvent, JobID: j.ID, LeaseID: j.LeaseID, EventType: eventType, Data: raw, Seq: seq})
	return err
}

// Handler runs one job and returns its output (any JSON-encodable value; json.RawMessage is
// sent as is) or an error. A *Failure says how the attempt failed, a *Release gives the job back
// untried; any other error fails it with code "error", retryable. ctx ends when the server asks
// to cancel the job, the lease is lost, or the worker stops and its grace is over; whatever the
// handler returns after that, the job does not succeed: a cancelled job ends cancelled (the
// server takes an output sent after the cancel as its acknowledgement, and keeps no output),
// and a job stopped by the worker's stop is given back with no attempt spent.
type Handler func(ctx context.Context, job *Job) (output any, err error)

// Failure is a failed attempt with a code. Retryable false sends the job to the dead-letter
// queue at once.
type Failure struct {
	Code      string
	Message   string
	Retryable bool
}

func (f *Failure) Error() string { return f.Code + ": " + f.Message }

// Release is a handler's answer for a job it could not even try, through no fault of the job
// (its command could not start, say): the job goes back to the queue with no attempt spent,
// and the worker takes no new job for a while, 1 s and twice as long each time in a row (up to
// 5 minutes) until a job completes: the job goes back to its place in its queue, and taken back
// at once it would only be released again, until the server spends an attempt on it (eleven
// releases in a row). Reason is the code the job's history shows ("released" if empty).
type Release struct {
	Reason  string // a short code: ReleaseStartFailed
	Message string
	// Deprecated: every Release backs the worker off; Backoff is not read.
	Backoff bool
}

// The reasons this worker gives a job back with, which the server writes to its log as they
// come: eventlog.ReleasedWorkerStopping, ReleasedStartFailed and ReleasedWorkerRestarted,
// restated here so that a worker does not link the server's log
// (TestReleaseReasonsAreTheCatalogues holds them equal).
const (
	ReleaseWorkerStopping  = "worker_stopping"
	ReleaseStartFailed     = "start_failed"
	ReleaseWorkerRestarted = "worker_restarted"
)

func (r *Release) Error() string { return r.Reason + ": " + r.Message }

// Worker runs Handler for every job the server leases to it, up to Capacity at once. It
// connects over WebSocket and falls back to long-polling when WebSocket itself is refused while
// plain HTTP works; it reconnects with exponential backoff and jitter, heartbeats each lease as
// often as its lease_ttl needs, and signs completions with Key when set.
//
// When Run's context ends the worker stops cleanly: it takes no new job, lets the running ones
// finish for up to Grace, then stops them and gives their leases back, with no attempt spent.
type Worker struct {
	Server   string // http(s)://host:port
	Token    string // the worker token from registration
	Capacity int    // jobs at once; 0: 1
	Handler  Handler
	Key      ed25519.PrivateKey // signs every completion; the server's registered key must match
	// Transport is "auto" (WebSocket, long-poll when it is refused; the default), "websocket"
	// or "longpoll".
	Transport  string
	Logger     *zap.Logger
	HTTPClient *http.Client
	// TLSConfig, if set, is the TLS configuration of the WebSocket and, when HTTPClient is nil,
	// of the HTTP requests (TLSConfigWithCA for a private CA).
	TLSConfig *tls.Config
	// Grace is how long running jobs may go on once Run's context ends; the rest are then
	// stopped and released. 0: none. Hurry, if set and closed, ends the grace early.
	Grace time.Duration
	Hurry <-chan struct{}
	// DrainTimeout is how long stopped jobs have to report before Run returns; 0: 10 s.
	DrainTimeout time.Duration
	// OnConnect, if set, is called each time a connection is up, with its transport.
	OnConnect func(transport string)
	// OnTokenRenewed, if set, is called with the worker's new token each time the worker
	// renews it (at half its life, without a reconnect): keep it where the next start finds it.
	// The token the worker was started with stops working a few minutes later.
	OnTokenRenewed func(token string, expiresAt time.Time)
	// OnResult, if set, is called once the server has answered a job's result: report is
	// "complete", "fail" or "release", err what the server refused it with (nil: accepted).
	// Over WebSocket it runs on the goroutine that reads the connection, so it must not block.
	OnResult func(job *Job, report string, err error)
	// TracerProvider makes the span of each job's run (tether.run), a child of the trace
	// context its assignment names (the attempt's span when the server traces), and the
	// handler's context carries it, so that the handler's own spans nest under the job; the
	// Job's Traceparent, a command's TRACEPARENT and the result sent name it too. nil: the
	// global provider (otel.GetTracerProvider), which does nothing unless the program set one.
	TracerProvider trace.TracerProvider
	// ResultsDir, if set, is where the worker keeps each job's result until the server has
	// taken it or refused it for good: written before the result is first sent, so that a
	// worker that stops or dies first sends it again when it starts on the same directory.
	// Without it, results wait in memory only. It holds each running job's lease too, and the
	// process group a Command started for it, so that a start after the worker died without a
	// clean stop (kill -9) ends what its jobs left running and gives their leases back at once
	// (ReleaseWorkerRestarted), rather than let them fill its capacity until they expire.
	ResultsDir string

	// settleOnly runs only what ResultsDir holds from an earlier run (its kept results, the
	// leases to give back) and returns once the server has answered them all, taking no job:
	// a Registration whose queues, capacity or key changed settles the old worker's so, under
	// its token, before it registers anew (the server takes a lease's result only from the
	// worker that holds it).
	settleOnly bool
}

// Transports a Worker may use.
const (
	TransportAuto      = "auto"
	TransportWebSocket = "websocket"
	TransportLongPoll  = "longpoll"
)

// errLinkDown is a request that could not be answered because its connection went away; the
// runner sends it again on the next one.
var errLinkDown = errors.New("tether: connection lost")

// Tunables of reconnection and heartbeats.
const (
	backoffMin       = 200 * time.Millisecond
	backoffMax       = 30 * time.Second
	wsFailuresMax    = 3               // WebSocket refusals in a row, with HTTP working, before falling back
	longPollFor      = 5 * time.Minute // how long a fallback lasts before WebSocket is tried again
	pollWait         = 25              // seconds
	handshakeTimeout = 10 * time.Second
	// heartbeatDefault is the interval before the server has said one.
	heartbeatDefault = 10 * time.Second
	// pauseMax caps how long a worker whose jobs cannot start waits before it takes another.
	pauseMax = 5 * time.Minute
	// lastSendWait is how long the one more send of a result after its lease may have expired
	// waits for a connection.
	lastSendWait = 30 * time.Second
)

// Run runs the worker until ctx ends (then it stops cleanly, as the Worker's comment says, and
// returns nil) or the server refuses its token or key for good (an error saying why).
func (w *Worker) Run(ctx context.Context) error {
	if w.Handler == nil {
		return errors.New("tether: Worker.Handler is nil")
	}
	for _, server := range SplitServers(w.Server) {
		if _, err := wsURL(server); err != nil {
			return err
		}
	}
	switch w.Transport {
	case "", TransportAuto, TransportWebSocket, TransportLongPoll:
	default:
		return fmt.Errorf("tether: transport %q is not auto, websocket or longpoll", w.Transport)
	}
	tp := w.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	r := &runner{w: w, tracer: tp.Tracer("github.com/tetherhq/tether/transport/client"), runCtx: ctx, tasks: map[string]*task{}, linkUp: make(chan struct{}), freed: make(chan struct{}, 1),
		tighter: make(chan struct{}, 1), api: New(w.Server, w.Token, w.httpClient()), log: w.Logger,
		idle: make(chan *task), ended: make(chan struct{})}
	defer close(r.ended)
	if r.log == nil {
		r.log = zap.NewNop()
	}
	if w.Capacity <= 0 {
		w.Capacity = 1
	}
	if w.Key != nil {
		r.publicKey = base64.StdEncoding.EncodeToString(w.Key.Public().(ed25519.PublicKey))
	}
	if w.ResultsDir != "" {
		r.results = &resultStore{dir: w.ResultsDir}
		r.resume()
		r.leftovers()
	}
	if w.settleOnly {
		if r.busy() == 0 {
			return nil
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go r.cancelWhenSettled(ctx, cancel)
	}
	err := r.connectLoop(ctx)
	r.stop(err)
	return err
}

// resume sends again the results a worker on the same ResultsDir left unsent: their leases are
// heartbeaten as the running jobs' are, until the server has them.
func (r *runner) resume() {
	pending, errs := r.results.load()
	for _, err := range errs {
		r.log.Error("a kept result could not be read; it is left where it is", zap.String("dir", r.w.ResultsDir), zap.Error(err))
	}
	for _, p := range pending {
		f := p.Frame
		t := &task{job: &Job{ID: f.JobID, LeaseID: f.LeaseID, nonce: f.Nonce, r: r}, leaseTTL: p.LeaseTTL}
		t.ctx, t.cancel = context.WithCancel(context.Background())
		t.heard.Store(p.Heard.UnixNano())
		t.kept.Store(true)
		r.mu.Lock()
		r.tasks[f.LeaseID] = t
		r.mu.Unlock()
		r.log.Info("sending a result kept from before", zap.String("job_id", f.JobID), zap.String("report", f.Type))
		go r.reportAndWait(t, f)
	}
}

// leftovers ends what the jobs of a worker on the same ResultsDir left running when it died
// without a clean stop (kill -9, the OOM killer), and gives back at once the leases of those
// whose result it did not keep: each is heartbeaten while its processes are ended, then released
// (ReleaseWorkerRestarted) by the rules of a kept result. A job whose result is kept finished:
// the result is sent (resume), and whatever it left running is ended too.
func (r *runner) leftovers() {
	jobs, errs := r.results.running()
	for _, err := range errs {
		r.log.Error("a running job's record could not be read; it is left where it is", zap.String("dir", r.w.ResultsDir), zap.Error(err))
	}
	for _, rj := range jobs {
		r.mu.Lock()
		_, kept := r.tasks[rj.LeaseID] // its result, resumed
		r.mu.Unlock()
		if kept {
			go r.endLeftover(rj)
			continue
		}
		t := &task{job: &Job{ID: rj.JobID, LeaseID: rj.LeaseID, r: r}, leaseTTL: rj.LeaseTTL}
		t.ctx, t.cancel = context.WithCancel(context.Background())
		t.heard.Store(rj.Heard.UnixNano())
		r.mu.Lock()
		r.tasks[rj.LeaseID] = t
		r.mu.Unlock()
		go func() {
			ended := r.endLeftover(rj)
			f := wire.Frame{Type: wire.FrameRelease, JobID: rj.JobID, LeaseID: rj.LeaseID, Reason: ReleaseWorkerRestarted,
				Message: fmt.Sprintf("the worker was restarted after it died running the job; %d of its processes were left, and ended", ended)}
			r.keep(t, f)
			if err := r.results.untrack(rj.LeaseID); err != nil {
				r.log.Error("a running job's record could not be removed", zap.String("job_id", rj.JobID), zap.Error(err))
			}
			r.reportAndWait(t, f)
		}()
	}
}

// endLeftover ends what rj left running, if its handler started processes, and says how many
// there were.
func (r *runner) endLeftover(rj runningJob) int {
	if rj.Process == nil {
		return 0
	}
	if !canEndLeftovers {
		r.log.Warn("a job of this worker's last run may have left processes running: this platform cannot tell them from others, so they are not ended",
			zap.String("job_id", rj.JobID), zap.Int("pgid", rj.Process.PGID))
		return 0
	}
	n := endLeftover(rj.Process, rj.LeaseID)
	if n > 0 {
		r.log.Warn("ended the processes a job of this worker's last run left running", zap.String("code", "LEFTOVER_ENDED"),
			zap.String("job_id", rj.JobID), zap.Int("pgid", rj.Process.PGID), zap.Int("processes", n))
	}
	return n
}

// connectLoop keeps a connection up until ctx ends or the server refuses the worker for good.
// A connection that breaks is made again at once. A server that cannot be reached, is a
// standby or is starting sends the worker on to the next one (or the leader the standby names)
// at once; only after a whole round of the servers does it wait: briefly while some answered
// (a failover under way: a new leader is ready within about a TTL), with exponential backoff
// while none did.
func (r *runner) connectLoop(ctx context.Context) error {
	w := r.w
	servers := len(SplitServers(w.Server))
	failures, wsFailures := 0, 0
	tried, answered := 0, false // in this round of the servers
	var pollUntil time.Time
	for ctx.Err() == nil {
		useWS := w.Transport == TransportWebSocket || (w.Transport != TransportLongPoll && time.Now().After(pollUntil))
		began := time.Now()
		from := r.api.Server()
		var connected bool
		var err error
		if useWS {
			connected, err = r.runWS(ctx)
		} else {
			connected, err = r.runPoll(ctx)
		}
		if permanent(err) {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if connected {
			failures, wsFailures, tried, answered = 0, 0, 0, false
			if time.Since(began) > time.Second { // not a server that drops every connection
				r.log.Info("disconnected; reconnecting", zap.Error(err))
				continue
			}
		}
		// A server that is down, restarting or recovering is no reason to leave WebSocket;
		// one that answers HTTP but refuses the upgrade (a proxy that strips it) is.
		if useWS && w.Transport != TransportWebSocket && wsRefused(err) && r.httpWorks(ctx) {
			if wsFailures++; wsFailures >= wsFailuresMax {
				r.log.Warn("WebSocket is refused while HTTP works; long-polling for a while", zap.Error(err), zap.Duration("for", longPollFor))
				pollUntil, wsFailures, failures = time.Now().Add(longPollFor), 0, 0
				continue
			}
		}
		var e *Error
		answered = answered || errors.As(err, &e)
		if tried++; !connected && tried < servers && r.api.Server() != from {
			continue // on to the next server, or the leader a standby named
		}
		d := backoffMin
		if !answered {
			failures++
			d = backoff(failures, backoffMin, backoffMax)
		}
		tried, answered = 0, false
		r.log.Info("disconnected; reconnecting", zap.Error(err), zap.Duration("in", d))
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	return nil
}

// errMisconfigured is a worker the server will never take results from as it is configured.
var errMisconfigured = errors.New("tether: worker misconfigured")

// permanent reports whether err means the worker will never work as it is: reconnecting is
// pointless. A 401 or 403 counts only when tether said it, not a proxy on the way.
func permanent(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return (e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden) && isTetherCode(e.Code)
	}
	return errors.Is(err, errMisconfigured) || closedRevoked(err) || CertificateRefused(err)
}

func (w *Worker) httpClient() *http.Client {
	if w.HTTPClient == nil && w.TLSConfig != nil {
		return NewHTTPClient(w.TLSConfig)
	}
	return w.HTTPClient
}

// isTetherCode reports whether an error code is tether's own, not one errorOf made of a bare
// status (from a proxy, say).
func isTetherCode(code string) bool { return code != "" && !strings.HasPrefix(code, httpCodePrefix) }

// backoff is the delay before attempt n (from 1): exponential from min, capped at max, with
// jitter over its upper half so that many workers do not come back in step.
func backoff(n int, lo, hi time.Duration) time.Duration {
	return policy.Backoff(n, lo, hi, func(d time.Duration) time.Duration { return rand.N(d + 1) })
}

// httpWorks reports whether the server answers plain HTTP.
func (r *runner) httpWorks(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.api.Server()+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := r.api.hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// runner is the state of a running Worker that outlives connections: its jobs.
type runner struct {
	w         *Worker
	tracer    trace.Tracer
	api       *Client
	log       *zap.Logger
	publicKey string       // the worker's own, base64; "" without a key
	results   *resultStore // nil without Worker.ResultsDir

	mu    sync.Mutex
	tasks map[string]*task // by lease id, from assignment until the result is acknowledged
	// running counts the handlers running; the rest of the capacity is free. uncredited counts
	// the slots freed since the server was last granted credit for them.
	running, uncredited int
	// runCtx is Run's; stopping is set when Run ends (stoppingLocked).
	runCtx   context.Context
	stopping bool
	// pausedUntil holds credit back after jobs given back untried (Release); pauses counts them
	// in a row.
	pausedUntil time.Time
	pauses      int
	token       tokenState
	link        link          // nil while disconnected
	linkUp      chan struct{} // closed when a link is set, replaced when it goes
	freed       chan struct{} // a handler returned, a job finished reporting, or a pause ended
	tighter     chan struct{} // a lease that needs heartbeats more often arrived
	// heartbeatsEvery is the interval the heartbeat loop last reckoned (0: none yet): a new
	// lease wakes the loop only if it needs heartbeats more often than that, not on every job.
	heartbeatsEvery time.Duration

	// idle hands a task to a goroutine that finished one and waits for the next; parked
	// counts those, at most Capacity. A goroutine that has run a job has grown its stack:
	// reusing it spares each job growing a new one (5% of a bench worker's CPU). ended is
	// closed when Run returns, and parked goroutines exit.
	idle   chan *task
	parked atomic.Int32
	ended  chan struct{}
}

type task struct {
	job    *Job
	ctx    context.Context // the handler's: cancelled when the server cancels the job
	cancel context.CancelFunc
	// heartbeat is how often the lease must be heartbeaten.
	heartbeat time.Duration
	// cancelled is why the job was stopped: "cancelled" (a client asked), "lost" (the lease is
	// no longer this worker's) or "stopping" (the worker stops); "" once its handler returned
	// before any of these, which a later one does not change.
	cancelled atomic.Value
	// leaseTTL is how long the lease lasts past each heartbeat the server answers, and heard
	// (Unix nanoseconds) when it last answered one for this lease: the lease may be valid
	// until heard plus twice leaseTTL (a server that restarts gives every lease one more).
	leaseTTL time.Duration
	heard    atomic.Int64
	// kept is set once its result is in ResultsDir: a restart sends it if this run does not.
	kept atomic.Bool
	// sends is what the reporting path knows of the result's sends (policy.Sends); it alone
	// touches them, one send at a time.
	sends policy.Sends
}

// mayBeValid is until when the task's lease may still be valid, as far as the worker knows.
func (t *task) mayBeValid() time.Time {
	return policy.MayBeValid(time.Unix(0, t.heard.Load()), t.leaseTTL)
}

// link is one connection to the server: WebSocket or long-poll.
type link interface {
	// request sends an event, complete, fail, release or heartbeat, with credit for n more
	// jobs if n > 0, and returns the server's ack.
	request(ctx context.Context, f wire.Frame, credit int) (wire.Frame, error)
	// credit lets the server lease n more jobs (a long-poll link asks when it polls instead).
	credit(n int)
	// drop closes the connection, for the worker to make another.
	drop()
}

func (r *runner) setLink(l link) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.link = l
	select {
	case <-r.linkUp: // already up: l replaces the link
	default:
		close(r.linkUp)
	}
}

func (r *runner) clearLink(l link) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.link == l {
		r.link = nil
		r.linkUp = make(chan struct{})
	}
}

// takeCreditLocked returns the credit owed for freed slots that may be granted now, and
// counts it as granted: none while stopping or paused. r.mu is held.
func (r *runner) takeCreditLocked() int {
	if r.w.settleOnly || r.stoppingLocked() || time.Now().Before(r.pausedUntil) {
		return 0
	}
	n := r.uncredited
	r.uncredited = 0
	return n
}

// request sends f over the current link, waiting for one while disconnected and resending
// after a reconnect (the server treats a repeated completion as the same one). Credit for the
// slots freed since the last grant goes with it; a new link grants its own at connect.
func (r *runner) request(ctx context.Context, f wire.Frame) (wire.Frame, error) {
	for {
		r.mu.Lock()
		l, up := r.link, r.linkUp
		credit := 0
		if l != nil {
			credit = r.takeCreditLocked()
		}
		r.mu.Unlock()
		if l == nil {
			select {
			case <-up:
				continue
			case <-ctx.Done():
				return wire.Frame{}, ctx.Err()
			}
		}
		ack, err := l.request(ctx, f, credit)
		if errors.Is(err, errLinkDown) {
			r.clearLink(l)
			continue
		}
		return ack, err
	}
}

func (r *runner) leases() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.tasks))
	for id := range r.tasks {
		out = append(out, id)
	}
	return out
}

// cancelWhenSettled calls cancel once a settling run (Worker.settleOnly) has nothing left to
// report, or ctx ends.
func (r *runner) cancelWhenSettled(ctx context.Context, cancel context.CancelFunc) {
	tick := time.NewTicker(settlePoll)
	defer tick.Stop()
	for r.busy() > 0 {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
	cancel()
}

// settlePoll is how often a settling run looks whether it has reported everything.
const settlePoll = 50 * time.Millisecond

// free is how many more jobs the worker would take now.
func (r *runner) free() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w.settleOnly || r.stoppingLocked() || time.Now().Before(r.pausedUntil) {
		return 0
	}
	return r.w.Capacity - r.running
}

// busy counts the jobs not yet finished: running, or reporting their result.
func (r *runner) busy() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.tasks)
}

// grantCredit sends the credit owed for freed slots over the current link, if there is one.
func (r *runner) grantCredit() {
	r.mu.Lock()
	l, n := r.link, 0
	if l != nil {
		n = r.takeCreditLocked()
	}
	r.mu.Unlock()
	if n > 0 {
		l.credit(n)
	}
}

// creditOnConnect grants a new link credit for every free slot: the server keeps credit per
// connection, so what the last one was owed is settled here.
func (r *runner) creditOnConnect(l link) {
	r.mu.Lock()
	r.uncredited = r.w.Capacity - r.running
	n := r.takeCreditLocked()
	r.mu.Unlock()
	if n > 0 {
		l.credit(n)
	}
}

func (r *runner) notifyFreed() {
	select {
	case r.freed <- struct{}{}:
	default:
	}
}

// pause holds credit back after a job given back untried: 1 s, then twice as long each time in
// a row, up to pauseMax.
func (r *runner) pause(rel *Release) {
	r.mu.Lock()
	r.pauses++
	d := backoff(r.pauses, time.Second, pauseMax)
	r.pausedUntil = time.Now().Add(d)
	r.mu.Unlock()
	if rel.Reason == ReleaseStartFailed {
		r.log.Error("a job could not start; it goes back to the queue, and this worker takes no job for a while",
			zap.String("code", "JOB_NOT_STARTED"), zap.String("reason", rel.Reason), zap.String("error", rel.Message), zap.Duration("for", d))
	} else {
		r.log.Warn("the handler gave a job back untried; it goes back to the queue, and this worker takes no job for a while",
			zap.String("reason", rel.Reason), zap.String("message", rel.Message), zap.Duration("for", d))
	}
	time.AfterFunc(d, func() {
		r.grantCredit()
		r.notifyFreed()
	})
}

// stopTask cancels the task holding lease, for why ("cancelled", "lost" or "stopping").
func (r *runner) stopTask(lease, why string) {
	r.mu.Lock()
	t := r.tasks[lease]
	r.mu.Unlock()
	if t != nil {
		t.cancelled.CompareAndSwap(nil, why)
		t.cancel()
	}
}

// start runs the handler for an assignment and reports the result.
func (r *runner) start(a wire.Frame) {
	job := &Job{ID: a.JobID, LeaseID: a.LeaseID, Queue: a.Queue, Type: a.JobType, Payload: a.Payload, Attempt: a.Attempt,
		Traceparent: a.Traceparent, nonce: a.Nonce, r: r}
	if a.LeaseExpiresAt != nil {
		job.LeaseExpiresAt = *a.LeaseExpiresAt
	}
	ctx, cancel := context.WithCancel(context.Background())
	now := time.Now()
	t := &task{job: job, ctx: ctx, cancel: cancel, heartbeat: seconds(a.HeartbeatSeconds), leaseTTL: policy.LeaseTTL(a.LeaseExpiresAt, now)}
	t.heard.Store(now.UnixNano())
	r.mu.Lock()
	if _, dup := r.tasks[a.LeaseID]; dup {
		r.mu.Unlock()
		cancel()
		return
	}
	r.tasks[a.LeaseID] = t
	stopping := r.stoppingLocked()
	if !stopping {
		r.running++
	}
	tighter := t.heartbeat > 0 && (r.heartbeatsEvery == 0 || t.heartbeat < r.heartbeatsEvery)
	r.mu.Unlock()
	if tighter {
		select {
		case r.tighter <- struct{}{}:
		default:
		}
	}
	if stopping { // it came as the worker stopped: give it back untried
		t.cancelled.Store("stopping")
		go r.report(t, nil, context.Canceled)
		return
	}
	select {
	case r.idle <- t:
	default:
		go r.serve(t)
	}
}

// serve runs t, then the tasks handed to it while it waits idle, if it is one of at most
// Capacity goroutines waiting.
func (r *runner) serve(t *task) {
	for {
		r.run(t)
		if r.parked.Add(1) > int32(r.w.Capacity) {
			r.parked.Add(-1)
			return
		}
		select {
		case t = <-r.idle:
			r.parked.Add(-1)
		case <-r.ended:
			r.parked.Add(-1)
			return
		}
	}
}

// run runs the handler for t and reports the result.
func (r *runner) run(t *task) {
	r.track(t) // here, not on the goroutine that reads the connection
	ctx, span := r.runSpan(t)
	out, err := r.w.Handler(ctx, t.job)
	// What the result is follows from whether the job was told to stop before its handler
	// returned: a stop or cancel that comes later finds the result made (stopTask).
	t.cancelled.CompareAndSwap(nil, "")
	if span != nil {
		endRunSpan(span, t, err)
	}
	r.mu.Lock()
	r.running--
	r.uncredited++
	r.mu.Unlock()
	r.notifyFreed()
	// The slot is free as soon as the handler returns: its credit goes with the result, in
	// the same write, and the server leases the next job as soon as it has the result; the
	// assignment leaves with the fsync that makes the result durable.
	r.report(t, out, err)
}

// report sends the job's result: a completion, a failure, or a release when the job was not
// (or not wholly) tried through no fault of its own. The task ends when the server has
// answered it (finish).
func (r *runner) report(t *task, out any, herr error) {
	j := t.job
	why, _ := t.cancelled.Load().(string)
	if why == "lost" {
		r.log.Warn("the lease was lost (expired, or the job was reassigned); the result is dropped",
			zap.String("job_id", j.ID), zap.String("lease_id", j.LeaseID))
		r.grantCredit()
		r.forget(t)
		return
	}
	f := wire.Frame{JobID: j.ID, LeaseID: j.LeaseID}
	if herr == nil && why != "stopping" {
		f, herr = r.completion(j, out)
	}
	switch rel := asRelease(herr); {
	case why == "stopping":
		// Told to stop once the stop's grace ran out: the job was cut short, whatever the
		// handler made of it (an output, an error), and goes back unspent.
		f.Type, f.Reason, f.Message = wire.FrameRelease, ReleaseWorkerStopping, "the worker stopped before the job finished"
	case herr == nil:
		r.mu.Lock()
		r.pauses = 0
		r.mu.Unlock()
	case rel != nil:
		f.Type, f.Reason, f.Message = wire.FrameRelease, cmp.Or(rel.Reason, "released"), rel.Message
		r.pause(rel)
	default:
		f = failFrame(j, herr, why == "cancelled")
	}
	f.Traceparent = j.Traceparent
	r.send(t, f)
}

// asRelease returns the *Release err is, or nil. (A function of its own: the target errors.As
// takes escapes, and a completion, the common case, need not pay for it.)
func asRelease(err error) *Release {
	if err == nil { // before rel, whose address escapes
		return nil
	}
	var rel *Release
	if !errors.As(err, &rel) {
		return nil
	}
	return rel
}

// completion is the complete frame for a handler's output, or the failure that output is.
func (r *runner) completion(j *Job, out any) (wire.Frame, error) {
	f := wire.Frame{Type: wire.FrameComplete, JobID: j.ID, LeaseID: j.LeaseID, Nonce: j.nonce}
	raw, err := outputOf(out)
	switch {
	case err != nil:
		return f, &Failure{Code: "bad_output", Message: err.Error()}
	case len(raw) > wire.OutputBytesMax:
		// Sent, it would be refused (413, or a WebSocket frame too big): say so instead.
		return f, &Failure{Code: "output_too_large", Message: fmt.Sprintf("the output is %d bytes of JSON; the limit is %d", len(raw), wire.OutputBytesMax)}
	}
	f.Output = raw
	if string(raw) == "null" { // what a handler returns most: hashed once
		f.OutputHash = nullOutputHash
	} else {
		f.OutputHash, _ = signing.OutputHash(raw)
	}
	if r.w.Key != nil {
		f.Signature = signing.SignCompletion(r.w.Key, j.ID, j.LeaseID, j.nonce, f.OutputHash)
	}
	return f, nil
}

// nullOutputHash is the hash of the output null (signing.OutputHash).
var nullOutputHash, _ = signing.OutputHash(json.RawMessage("null"))

// failFrame is the fail frame for a handler's error.
func failFrame(j *Job, herr error, cancelled bool) wire.Frame {
	retryable := true
	f := wire.Frame{Type: wire.FrameFail, JobID: j.ID, LeaseID: j.LeaseID, ErrorCode: "error", Message: herr.Error()}
	var fl *Failure
	switch {
	case cancelled:
		f.ErrorCode, f.Message, retryable = "cancelled", "cancelled at the server's request", false
	case errors.As(herr, &fl):
		f.ErrorCode, f.Message, retryable = fl.Code, fl.Message, fl.Retryable
	}
	f.Retryable = &retryable
	return f
}

// send reports f for t. Over WebSocket the handler's goroutine does not wait for the ack: the
// link's reader ends the task when it reads it, which spares a hand-off between goroutines on
// every job.
func (r *runner) send(t *task, f wire.Frame) {
	r.keep(t, f)
	r.mu.Lock()
	ws, async := r.link.(*wsLink)
	credit := 0
	if async {
		credit = r.takeCreditLocked()
	}
	r.mu.Unlock()
	if !async {
		r.reportAndWait(t, f)
		return
	}
	ws.requestAsync(f, credit, func(_ wire.Frame, err error) {
		if errors.Is(err, errLinkDown) {
			// The connection went away first: send it again on the next one, as request
			// does. The credit sent with it is settled when that one connects.
			go r.reportAndWait(t, f)
			return
		}
		r.finish(t, f, err)
	})
}

// reportAndWait sends a result over whichever link is up, waiting for one while disconnected,
// for as long as the lease may be valid (once that passed, for lastSendWait).
func (r *runner) reportAndWait(t *task, f wire.Frame) {
	ctx, cancel := context.WithDeadline(context.Background(), later(t.mayBeValid(), time.Now().Add(lastSendWait)))
	defer cancel()
	_, err := r.request(ctx, f)
	r.finish(t, f, err)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// keep writes the result to the worker's results dir, if it has one, before it is sent.
func (r *runner) keep(t *task, f wire.Frame) {
	if r.results == nil {
		return
	}
	p := pendingResult{Frame: f, LeaseTTL: t.leaseTTL, Heard: time.Unix(0, t.heard.Load()).UTC()}
	if err := r.results.save(p); err != nil {
		r.log.Error("the job's result could not be kept on disk; it is sent, but a restart before the server has it loses it",
			zap.String("code", "RESULT_NOT_KEPT"), zap.String("job_id", f.JobID), zap.Error(err))
		return
	}
	t.kept.Store(true)
}

// finish ends a task whose result the server answered, err saying what it refused (nil:
// taken), or why the answer never came, by the SDK's rules for kept results (policy.Sends): a
// result the server did not take for a reason that may pass is sent again, with backoff, for as
// long as the lease may be valid, and once more after that, so that a finished job is not run
// again for want of its result; a completion the server refused for what it is becomes the
// failure that names the reason, rather than being left to its lease's expiry.
func (r *runner) finish(t *task, f wire.Frame, err error) {
	j := t.job
	a := answerOf(err)
	if a.MayPass() {
		select {
		case <-r.ended: // Run returned: what is on disk goes at the next start
			return
		default:
		}
	}
	d := t.sends.After(a, f.Type, time.Now(), t.mayBeValid())
	switch d.Step {
	case policy.SendAgain:
		wait := backoff(d.Tries, policy.ResendMin, policy.ResendMax)
		r.log.Warn("the server did not take the job's result; sending it again", zap.String("job_id", j.ID),
			zap.String("report", f.Type), zap.Error(err), zap.Duration("in", wait), zap.Int("tries", d.Tries))
		r.resendAfter(wait, t, f)
		return
	case policy.GiveUp:
		r.log.Error("the server did not take the job's result before its lease surely expired; the job runs again elsewhere",
			zap.String("code", "RESULT_DROPPED"), zap.String("job_id", j.ID), zap.String("lease_id", j.LeaseID), zap.Error(err))
	}
	if err != nil {
		r.log.Warn("the server did not take the job's result",
			zap.String("job_id", j.ID), zap.String("lease_id", j.LeaseID), zap.String("report", f.Type), zap.Error(err))
	} else if ce := r.log.Check(zap.DebugLevel, "reported"); ce != nil {
		ce.Write(zap.String("job_id", j.ID), zap.String("lease_id", j.LeaseID), zap.String("report", f.Type))
	}
	var fail wire.Frame
	if d.Step == policy.SendFailure {
		fail = refusalFrame(j, d.Failure, err)
		r.keep(t, fail)
	} else if r.results != nil {
		if err := r.results.remove(j.LeaseID); err != nil {
			r.log.Error("a sent result could not be removed from disk; a restart sends it again, and the server answers it as before",
				zap.String("job_id", j.ID), zap.Error(err))
		}
	}
	if r.w.OnResult != nil {
		r.w.OnResult(j, f.Type, err)
	}
	if d.Step == policy.SendFailure {
		go r.reportAndWait(t, fail)
		return
	}
	r.forget(t)
}

// resendAfter sends f for t again once wait has passed. (A function of its own: a closure in
// finish that kept f would copy every result's frame to the heap, resent or not.)
func (r *runner) resendAfter(wait time.Duration, t *task, f wire.Frame) {
	time.AfterFunc(wait, func() { r.reportAndWait(t, f) })
}

// answerOf is what came of a send that returned err: a refusal (an *Error, whose code and
// status policy judges), or no answer at all.
func answerOf(err error) policy.Answer {
	if err == nil { // before e, whose address escapes: a result taken, the common case, need not pay for it
		return policy.Answer{}
	}
	var e *Error
	if errors.As(err, &e) {
		return policy.Answer{Code: e.Code, Status: e.Status}
	}
	return policy.Answer{NoAnswer: true}
}

// refusalFrame is the failure that replaces a completion the server refused for good (err, whose
// message it carries).
func refusalFrame(j *Job, r policy.Refusal, err error) wire.Frame {
	var e *Error
	errors.As(err, &e)
	return failFrame(j, &Failure{Code: r.Code, Message: e.Message, Retryable: r.Retryable}, false)
}

// forget removes an ended task.
func (r *runner) forget(t *task) {
	t.cancel()
	if r.results != nil {
		if err := r.results.untrack(t.job.LeaseID); err != nil {
			r.log.Error("a running job's record could not be removed; the next start gives its lease back, which the server refuses",
				zap.String("job_id", t.job.ID), zap.Error(err))
		}
	}
	r.mu.Lock()
	delete(r.tasks, t.job.LeaseID)
	r.mu.Unlock()
	r.notifyFreed()
}

// track keeps t's lease in ResultsDir while the job runs (runningJob).
func (r *runner) track(t *task) {
	if r.results == nil {
		return
	}
	j := t.job
	rj := runningJob{JobID: j.ID, LeaseID: j.LeaseID, LeaseTTL: t.leaseTTL, Heard: time.Unix(0, t.heard.Load()).UTC()}
	if err := r.results.track(rj); err != nil {
		r.log.Error("the running job could not be recorded; if this worker dies, a restart leaves its lease to expire",
			zap.String("job_id", j.ID), zap.Error(err))
	}
}

// startedProcess notes that the job's handler started a process group of its own, led by pid,
// which gets killGrace between SIGTERM and SIGKILL: a start after the worker died ends it.
func (j *Job) startedProcess(pid int, killGrace time.Duration) {
	r := j.r
	if r == nil || r.results == nil {
		return
	}
	p := identify(pid, killGrace)
	if p == nil {
		return // gone already
	}
	if err := r.results.trackProcess(j.LeaseID, p); err != nil {
		r.log.Error("the job's process could not be recorded; if this worker dies, a restart leaves it running",
			zap.String("job_id", j.ID), zap.Int("pgid", pid), zap.Error(err))
	}
}

// outputOf encodes a handler's output as JSON; nil is null.
func outputOf(out any) (json.RawMessage, error) {
	switch v := out.(type) {
	case nil:
		return json.RawMessage("null"), nil
	case json.RawMessage:
		if !json.Valid(v) {
			return nil, errors.New("the output is not valid JSON")
		}
		return v, checkValue("the output", v)
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return raw, checkValue("the output", raw)
}

// checkValue refuses, before it is sent, a value the server would refuse in a frame or a body
// (fastjson.Check): over WebSocket it closes the connection, and would again at every resend.
func checkValue(what string, raw json.RawMessage) error {
	if err := fastjson.Check(raw, wire.JSONDepthMax-1); err != nil {
		return fmt.Errorf("%s %v", what, err)
	}
	return nil
}

// checkKey compares the key the server holds for this worker with the runner's own: a worker
// registered with a key must sign with that key, or the server refuses every result.
func (r *runner) checkKey(registered string) error {
	switch {
	case registered == "" && r.publicKey != "":
		r.log.Warn("this worker registered no public key: the server does not check the results' signatures")
	case registered == "" || registered == r.publicKey:
	case r.publicKey == "":
		return fmt.Errorf("%w: this worker registered public key %s, so the server takes only results signed with its private key; give it the key (tether worker --key FILE)",
			errMisconfigured, registered)
	default:
		return fmt.Errorf("%w: this worker's private key is not the one whose public key it registered (%s); give it that key, or register anew",
			errMisconfigured, registered)
	}
	return nil
}

// heartbeats heartbeats every lease the worker holds until done: as often as the lease with the
// shortest interval needs (each assignment says its own), and every base otherwise; the first
// at once if atOnce (a new connection: its session adopts the leases it names, and a server
// that restarted releases at once those it finds the worker does not hold). It stops the jobs
// the server wants cancelled or no longer knows.
func (r *runner) heartbeats(l link, base time.Duration, done <-chan struct{}, atOnce bool) {
	if base <= 0 {
		base = heartbeatDefault
	}
	last := time.Now()
	if atOnce {
		last = time.Time{}
	}
	timer := time.NewTimer(base)
	defer timer.Stop()
	for {
		next := last.Add(r.heartbeatEvery(base))
		renew := r.renewDue()
		if !renew.IsZero() && renew.Before(next) {
			next = renew
		}
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case <-r.tighter:
			continue // a new lease, or a word on the token: reckon again from the last heartbeat
		case <-done:
			return
		}
		if renew := r.renewDue(); !renew.IsZero() && !time.Now().Before(renew) {
			r.renewToken(l)
			continue
		}
		last = time.Now()
		every := r.heartbeatEvery(base)
		ctx, cancel := context.WithTimeout(context.Background(), every)
		leases := r.leases()
		ack, err := l.request(ctx, wire.Frame{Type: wire.FrameHeartbeat, Leases: leases}, 0)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			// No answer in a heartbeat's time: the server is paused or cut off, and its
			// leases may be handed over meanwhile. Another server (or this one, later) will.
			r.log.Warn("the server did not answer a heartbeat; reconnecting", zap.Duration("within", every))
			if ws, ok := l.(*wsLink); ok {
				r.api.failover(ws.server, "") // the next connection starts elsewhere
			}
			l.drop()
			continue
		}
		if err != nil {
			continue
		}
		r.heard(last, leases, ack.Unknown)
		for _, id := range ack.Cancel {
			r.stopTask(id, "cancelled")
		}
		for _, id := range ack.Unknown {
			r.stopTask(id, "lost")
		}
		r.noteToken(ack)
	}
}

// heard notes that the server, at when, answered a heartbeat of leases, all valid but unknown.
func (r *runner) heard(when time.Time, leases, unknown []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range leases {
		if t := r.tasks[id]; t != nil && !slices.Contains(unknown, id) {
			t.heard.Store(when.UnixNano())
		}
	}
}

// heartbeatEvery is the heartbeat interval the leases held now need, which the heartbeat loop
// then waits on (heartbeatsEvery).
func (r *runner) heartbeatEvery(base time.Duration) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.heartbeatsEvery = policy.HeartbeatEvery(base, func(yield func(time.Duration) bool) {
		for _, t := range r.tasks {
			if !yield(t.heartbeat) {
				return
			}
		}
	})
	return r.heartbeatsEvery
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// stoppingLocked reports whether the worker stops: from the moment Run's context ends it grants
// no credit, and gives back untried any assignment that still reaches it. The context says so
// itself, with no goroutine to wait for, so whoever saw it end (the WebSocket link, closing)
// finds the worker stopping too. r.mu is held.
func (r *runner) stoppingLocked() bool { return r.stopping || r.runCtx.Err() != nil }

// stop ends a Run: no more credit; running jobs get the grace to finish, reporting over plain
// HTTP (the connection that brought work is closed, so nothing more comes); then the rest are
// stopped and released, and have DrainTimeout to say so. After a refusal for good (err) there
// is nobody to report to: the jobs are just stopped.
func (r *runner) stop(err error) {
	r.mu.Lock()
	r.stopping = true
	r.mu.Unlock()
	drain := r.w.DrainTimeout
	if drain <= 0 {
		drain = 10 * time.Second
	}
	if err != nil {
		for _, l := range r.leases() {
			r.stopTask(l, "lost")
		}
		r.waitIdle(drain, nil) // their commands are stopped before Run returns
		return
	}
	if r.busy() == 0 {
		return
	}
	l := &pollLink{api: r.api}
	r.setLink(l)
	done := make(chan struct{})
	defer close(done)
	go r.heartbeats(l, heartbeatDefault, done, false)
	r.log.Info("stopping: running jobs have their grace to finish", zap.Int("jobs", r.busy()), zap.Duration("grace", max(r.w.Grace, 0)))
	if !r.waitIdle(r.w.Grace, r.w.Hurry) {
		for _, l := range r.leases() {
			r.stopTask(l, "stopping")
		}
		// The stopped jobs report. After a second signal, a result kept on disk is not waited
		// for (a server that does not answer would hold the worker for DrainTimeout): the next
		// start sends it.
		left := r.busy
		select {
		case <-r.w.Hurry:
			left = r.unkept
		default:
		}
		r.waitFor(drain, nil, left)
	}
}

// waitIdle waits until no job is left, d passes or hurry closes, and reports whether none is.
func (r *runner) waitIdle(d time.Duration, hurry <-chan struct{}) bool {
	return r.waitFor(d, hurry, r.busy)
}

// waitFor waits until left counts none, d passes or hurry closes, and reports whether none is.
func (r *runner) waitFor(d time.Duration, hurry <-chan struct{}, left func() int) bool {
	deadline := time.NewTimer(max(d, 0))
	defer deadline.Stop()
	for left() > 0 {
		select {
		case <-r.freed:
		case <-deadline.C:
			return left() == 0
		case <-hurry:
			return left() == 0
		}
	}
	return true
}

// unkept counts the jobs not yet finished whose result is not kept in ResultsDir.
func (r *runner) unkept() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, t := range r.tasks {
		if !t.kept.Load() {
			n++
		}
	}
	return n
}

// runSpan starts the span of t's run under the trace context its assignment names, if it
// names one (nil span otherwise), and makes the job's Traceparent the span's when it is
// recorded.
func (r *runner) runSpan(t *task) (context.Context, trace.Span) {
	j := t.job
	if j.Traceparent == "" {
		return t.ctx, nil
	}
	tc := propagation.TraceContext{}
	ctx := tc.Extract(t.ctx, propagation.MapCarrier{"traceparent": j.Traceparent})
	ctx, span := r.tracer.Start(ctx, "tether.run", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		attribute.String("tether.job.id", j.ID), attribute.String("tether.job.type", j.Type), attribute.String("tether.queue", j.Queue),
		attribute.Int("tether.attempt", j.Attempt), attribute.String("tether.lease.id", j.LeaseID)))
	if span.IsRecording() {
		carrier := propagation.MapCarrier{}
		tc.Inject(ctx, carrier)
		j.Traceparent = carrier["traceparent"]
	}
	return ctx, span
}

// endRunSpan ends a run's span with the handler's outcome.
func endRunSpan(span trace.Span, t *task, herr error) {
	outcome := "succeeded"
	switch why, _ := t.cancelled.Load().(string); {
	case why != "":
		outcome = why
	case asRelease(herr) != nil:
		outcome = "released"
	case herr != nil:
		outcome = "failed"
		code := "error"
		var fl *Failure
		if errors.As(herr, &fl) {
			code = fl.Code
		}
		span.SetStatus(codes.Error, code)
	}
	span.SetAttributes(attribute.String("tether.outcome", outcome))
	span.End()
}
