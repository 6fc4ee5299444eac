package client

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors/signing"
	"github.com/tetherhq/tether/transport/internal/frames"
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

	nonce string
	r     *runner
}

// Event appends an event (a log line, progress, any type) to the job's stream, where clients
// watching the job see it.
func (j *Job) Event(ctx context.Context, eventType string, data any) error {
	raw, err := json.Marshal(data)
	if err != nil {
		return err
	}
	_, err = j.r.request(ctx, wire.Frame{Type: wire.FrameEvent, JobID: j.ID, LeaseID: j.LeaseID, EventType: eventType, Data: raw})
	return err
}

// Handler runs one job and returns its output (any JSON-encodable value; json.RawMessage is
// sent as is) or an error. A *Failure says how the attempt failed; any other error fails it
// with code "error", retryable. ctx ends when the server asks to cancel the job, the lease is
// lost, or the worker stops.
type Handler func(ctx context.Context, job *Job) (output any, err error)

// Failure is a failed attempt with a code. Retryable false sends the job to the dead-letter
// queue at once.
type Failure struct {
	Code      string
	Message   string
	Retryable bool
}

func (f *Failure) Error() string { return f.Code + ": " + f.Message }

// Worker runs Handler for every job the server leases to it, up to Capacity at once. It
// connects over WebSocket and falls back to long-polling when the WebSocket cannot be opened
// or keeps failing; it reconnects with exponential backoff and jitter, heartbeats its leases,
// and signs completions with Key when set.
type Worker struct {
	Server   string // http(s)://host:port
	Token    string // the worker token from registration
	Capacity int    // jobs at once; 0: 1
	Handler  Handler
	Key      ed25519.PrivateKey // optional: signs every completion
	// Transport is "auto" (WebSocket, long-poll when it fails; the default), "websocket" or
	// "longpoll".
	Transport  string
	Logger     *zap.Logger
	HTTPClient *http.Client
	// DrainTimeout is how long a stopping worker lets cancelled jobs report before it closes
	// its connection; 0: 10 s.
	DrainTimeout time.Duration
	// OnConnect, if set, is called each time a connection is up, with its transport.
	OnConnect func(transport string)
	// OnResult, if set, is called once the server has answered a job's result: report is
	// "complete" or "fail", err what the server refused it with (nil: accepted). Over
	// WebSocket it runs on the goroutine that reads the connection, so it must not block.
	OnResult func(job *Job, report string, err error)
}

// errLinkDown is a request that could not be answered because its connection went away; the
// runner sends it again on the next one.
var errLinkDown = errors.New("tether: connection lost")

// Tunables of reconnection.
const (
	backoffMin       = 200 * time.Millisecond
	backoffMax       = 30 * time.Second
	wsFailuresMax    = 3               // WebSocket failures in a row before falling back
	longPollFor      = 5 * time.Minute // how long a fallback lasts before WebSocket is tried again
	shortLived       = 10 * time.Second
	pollWait         = 25 // seconds
	reportGiveUp     = 2 * time.Minute
	handshakeTimeout = 10 * time.Second
)

// Run runs the worker until ctx ends (then it cancels its jobs, lets them report for up to
// DrainTimeout, and returns nil) or the server refuses its token (an *Error).
func (w *Worker) Run(ctx context.Context) error {
	if w.Handler == nil {
		return errors.New("tether: Worker.Handler is nil")
	}
	if _, err := wsURL(w.Server); err != nil {
		return err
	}
	r := &runner{w: w, tasks: map[string]*task{}, linkUp: make(chan struct{}), freed: make(chan struct{}, 1),
		api: New(w.Server, w.Token, w.HTTPClient), log: w.Logger, idle: make(chan *task), ended: make(chan struct{})}
	defer close(r.ended)
	if r.log == nil {
		r.log = zap.NewNop()
	}
	if w.Capacity <= 0 {
		w.Capacity = 1
	}
	failures, wsFailures := 0, 0
	var pollUntil time.Time
	for ctx.Err() == nil {
		useWS := w.Transport == "websocket" || (w.Transport != "longpoll" && time.Now().After(pollUntil))
		began := time.Now()
		var connected bool
		var err error
		if useWS {
			connected, err = r.runWS(ctx)
		} else {
			connected, err = r.runPoll(ctx)
		}
		if permanent(err) {
			r.cancelAll()
			return err
		}
		if ctx.Err() != nil {
			break
		}
		lasted := time.Since(began) > shortLived
		if connected && lasted {
			failures = 0
		}
		if useWS {
			if connected && lasted {
				wsFailures = 0
			} else if wsFailures++; w.Transport != "websocket" && wsFailures >= wsFailuresMax {
				r.log.Warn("WebSocket keeps failing; long-polling for a while", zap.Error(err), zap.Duration("for", longPollFor))
				pollUntil, wsFailures, failures = time.Now().Add(longPollFor), 0, 0
				continue
			}
		}
		failures++
		d := backoff(failures, backoffMin, backoffMax)
		r.log.Info("disconnected; reconnecting", zap.Error(err), zap.Duration("in", d))
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	r.cancelAll()
	return nil
}

// permanent reports whether err means the token will never work: reconnecting is pointless.
func permanent(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden
	}
	var ce *websocket.CloseError
	return errors.As(err, &ce) && ce.Code == wire.CloseWorkerRevoked
}

// backoff is the delay before attempt n (from 1): exponential from min, capped at max, with
// jitter over its upper half so that many workers do not come back in step.
func backoff(n int, lo, hi time.Duration) time.Duration {
	d := hi
	if n < 30 {
		d = min(hi, lo<<(n-1))
	}
	return d/2 + rand.N(d/2+1)
}

// runner is the state of a running Worker that outlives connections: its jobs.
type runner struct {
	w   *Worker
	api *Client
	log *zap.Logger

	mu    sync.Mutex
	tasks map[string]*task // by lease id, from assignment until the result is acknowledged
	// running counts the handlers running; the rest of the capacity is free. uncredited counts
	// the slots freed since the server was last granted credit for them.
	running, uncredited int
	link                link          // nil while disconnected
	linkUp              chan struct{} // closed when a link is set, replaced when it goes
	freed               chan struct{} // a handler returned or a job finished reporting

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
	// cancelled is why the server wants the job stopped: "cancelled" (a client asked) or
	// "lost" (the lease is no longer this worker's).
	cancelled atomic.Value
}

// link is one connection to the server: WebSocket or long-poll.
type link interface {
	// request sends an event, complete, fail or heartbeat, with credit for n more jobs if n > 0,
	// and returns the server's ack.
	request(ctx context.Context, f wire.Frame, credit int) (wire.Frame, error)
	// credit lets the server lease n more jobs (a long-poll link asks when it polls instead).
	credit(n int)
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

// request sends f over the current link, waiting for one while disconnected and resending
// after a reconnect (the server treats a repeated completion as the same one). Credit for the
// slots freed since the last grant goes with it; a new link grants its own at connect.
func (r *runner) request(ctx context.Context, f wire.Frame) (wire.Frame, error) {
	for {
		r.mu.Lock()
		l, up := r.link, r.linkUp
		credit := 0
		if l != nil {
			credit, r.uncredited = r.uncredited, 0
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

func (r *runner) free() int {
	r.mu.Lock()
	defer r.mu.Unlock()
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
	l, n := r.link, r.uncredited
	if l != nil {
		r.uncredited = 0
	}
	r.mu.Unlock()
	if l != nil && n > 0 {
		l.credit(n)
	}
}

// creditOnConnect grants a new link credit for every free slot: the server keeps credit per
// connection, so what the last one was owed is settled here.
func (r *runner) creditOnConnect(l link) {
	r.mu.Lock()
	n := r.w.Capacity - r.running
	r.uncredited = 0
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

// stop cancels the task holding lease, for why ("cancelled" or "lost").
func (r *runner) stop(lease, why string) {
	r.mu.Lock()
	t := r.tasks[lease]
	r.mu.Unlock()
	if t != nil {
		t.cancelled.CompareAndSwap(nil, why)
		t.cancel()
	}
}

func (r *runner) cancelAll() {
	for _, l := range r.leases() {
		r.stop(l, "stopping")
	}
}

// drain cancels every task and waits up to DrainTimeout for them to report.
func (r *runner) drain() {
	r.cancelAll()
	d := r.w.DrainTimeout
	if d <= 0 {
		d = 10 * time.Second
	}
	deadline := time.After(d)
	for r.busy() > 0 {
		select {
		case <-r.freed:
		case <-deadline:
			return
		}
	}
}

// start runs the handler for an assignment and reports the result.
func (r *runner) start(a wire.Frame) {
	job := &Job{ID: a.JobID, LeaseID: a.LeaseID, Queue: a.Queue, Type: a.JobType, Payload: a.Payload, Attempt: a.Attempt, nonce: a.Nonce, r: r}
	if a.LeaseExpiresAt != nil {
		job.LeaseExpiresAt = *a.LeaseExpiresAt
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &task{job: job, ctx: ctx, cancel: cancel}
	r.mu.Lock()
	if _, dup := r.tasks[a.LeaseID]; dup {
		r.mu.Unlock()
		cancel()
		return
	}
	r.tasks[a.LeaseID] = t
	r.running++
	r.mu.Unlock()
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
	out, err := r.w.Handler(t.ctx, t.job)
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

// report sends the job's result. The task ends when the server has answered it (finish).
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
	if herr == nil {
		raw, err := outputOf(out)
		if err != nil {
			herr = &Failure{Code: "bad_output", Message: err.Error(), Retryable: false}
		} else {
			f.Type, f.Nonce, f.Output = wire.FrameComplete, j.nonce, raw
			f.OutputHash, _ = signing.OutputHash(raw)
			if r.w.Key != nil {
				f.Signature = signing.SignCompletion(r.w.Key, j.ID, j.LeaseID, j.nonce, f.OutputHash)
			}
		}
	}
	if herr != nil {
		retryable := true
		f.Type, f.ErrorCode, f.Message = wire.FrameFail, "error", herr.Error()
		var fl *Failure
		switch {
		case why == "cancelled":
			f.ErrorCode, f.Message, retryable = "cancelled", "cancelled at the server's request", false
		case errors.As(herr, &fl):
			f.ErrorCode, f.Message, retryable = fl.Code, fl.Message, fl.Retryable
		}
		f.Retryable = &retryable
	}
	// Over WebSocket the handler's goroutine does not wait for the ack: the link's reader ends
	// the task when it reads it, which spares a hand-off between goroutines on every job.
	r.mu.Lock()
	ws, async := r.link.(*wsLink)
	credit := 0
	if async {
		credit, r.uncredited = r.uncredited, 0
	}
	r.mu.Unlock()
	if !async {
		r.reportAndWait(t, f)
		return
	}
	ws.requestAsync(f, credit, func(ack wire.Frame, err error) {
		if errors.Is(err, errLinkDown) {
			// The connection went away first: send it again on the next one, as request
			// does. The credit sent with it is settled when that one connects.
			go r.reportAndWait(t, f)
			return
		}
		r.finish(t, f, err)
	})
}

// reportAndWait sends a result over whichever link is up, waiting for one while disconnected.
func (r *runner) reportAndWait(t *task, f wire.Frame) {
	ctx, cancel := context.WithTimeout(context.Background(), reportGiveUp)
	defer cancel()
	_, err := r.request(ctx, f)
	r.finish(t, f, err)
}

// finish ends a task whose result the server answered, err saying what it refused (nil:
// taken), or why the answer never came.
func (r *runner) finish(t *task, f wire.Frame, err error) {
	j := t.job
	if err != nil {
		r.log.Warn("the server did not take the job's result",
			zap.String("job_id", j.ID), zap.String("lease_id", j.LeaseID), zap.String("report", f.Type), zap.Error(err))
	} else if ce := r.log.Check(zap.DebugLevel, "reported"); ce != nil {
		ce.Write(zap.String("job_id", j.ID), zap.String("lease_id", j.LeaseID), zap.String("report", f.Type))
	}
	if r.w.OnResult != nil {
		r.w.OnResult(j, f.Type, err)
	}
	r.forget(t)
}

// forget removes an ended task.
func (r *runner) forget(t *task) {
	t.cancel()
	r.mu.Lock()
	delete(r.tasks, t.job.LeaseID)
	r.mu.Unlock()
	r.notifyFreed()
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
		return v, nil
	}
	return json.Marshal(out)
}

// ---- WebSocket -------------------------------------------------------------------------------

type wsLink struct {
	conn    *websocket.Conn
	cork    *corkConn // under conn: frames sent together leave in one write
	reader  frames.Reader
	wmu     sync.Mutex // guards writes to conn, and encoder
	encoder frames.Encoder
	mu      sync.Mutex
	pending map[string]ackFunc // by ref; nil once the link is down
	ref     atomic.Uint64
}

// ackFunc receives the server's ack to a request, or errLinkDown if the link went away first.
type ackFunc func(ack wire.Frame, err error)

// send writes f, and a grant of credit if credit > 0, in one write to the connection.
func (l *wsLink) send(f wire.Frame, credit int) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	_ = l.conn.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	l.cork.cork()
	err := l.write(f)
	if err == nil && credit > 0 {
		err = l.write(wire.Frame{Type: wire.FrameCredit, N: credit})
	}
	if uerr := l.cork.uncork(); err == nil {
		err = uerr
	}
	return err
}

func (l *wsLink) write(f wire.Frame) error {
	data, err := l.encoder.Encode(f)
	if err != nil {
		return err
	}
	return l.conn.WriteMessage(websocket.TextMessage, data)
}

// requestAsync sends f with a new ref, and a grant of credit if credit > 0, and calls done
// exactly once: with the ack, on the link's reader goroutine, or with errLinkDown. It returns
// the ref.
func (l *wsLink) requestAsync(f wire.Frame, credit int, done ackFunc) string {
	f.Ref = strconv.FormatUint(l.ref.Add(1), 10)
	l.mu.Lock()
	up := l.pending != nil
	if up {
		l.pending[f.Ref] = done
	}
	l.mu.Unlock()
	if !up {
		done(wire.Frame{}, errLinkDown)
		return f.Ref
	}
	if err := l.send(f, credit); err != nil {
		if done := l.take(f.Ref); done != nil {
			done(wire.Frame{}, fmt.Errorf("%w: %w", errLinkDown, err))
		}
	}
	return f.Ref
}

func (l *wsLink) request(ctx context.Context, f wire.Frame, credit int) (wire.Frame, error) {
	type answer struct {
		ack wire.Frame
		err error
	}
	ch := make(chan answer, 1)
	ref := l.requestAsync(f, credit, func(ack wire.Frame, err error) { ch <- answer{ack, err} })
	select {
	case a := <-ch:
		return a.ack, a.err
	case <-ctx.Done():
		l.take(ref)
		return wire.Frame{}, ctx.Err()
	}
}

func (l *wsLink) credit(n int) { _ = l.send(wire.Frame{Type: wire.FrameCredit, N: n}, 0) }

// take removes and returns the callback waiting for ref, nil if it is not waiting any more.
func (l *wsLink) take(ref string) ackFunc {
	l.mu.Lock()
	defer l.mu.Unlock()
	done := l.pending[ref]
	delete(l.pending, ref)
	return done
}

// deliver hands an ack to the request waiting for it.
func (l *wsLink) deliver(a wire.Frame) {
	done := l.take(a.Ref)
	if done == nil {
		return
	}
	var err error
	if a.OK != nil && !*a.OK && a.Error != nil {
		err = &Error{Status: wire.StatusOf(a.Error.Code), Code: a.Error.Code, Message: a.Error.Message, Details: a.Error.Details}
	}
	done(a, err)
}

// fail answers every request still waiting with errLinkDown; later ones get it at once.
func (l *wsLink) fail() {
	l.mu.Lock()
	waiting := l.pending
	l.pending = nil
	l.mu.Unlock()
	for _, done := range waiting {
		done(wire.Frame{}, errLinkDown)
	}
}

// wsURL turns the server's http(s) URL into the worker endpoint's ws(s) URL.
func wsURL(server string) (string, error) {
	u, err := url.Parse(strings.TrimRight(server, "/"))
	if err != nil {
		return "", err
	}
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("tether: server URL %q is not http(s)", server)
	}
	u.Path += "/v1/worker/connect"
	return u.String(), nil
}

// runWS serves one WebSocket connection until it breaks; connected says whether it got as
// far as the server's welcome.
func (r *runner) runWS(ctx context.Context) (connected bool, err error) {
	u, _ := wsURL(r.w.Server) // checked by Run
	var cork *corkConn
	dialer := websocket.Dialer{HandshakeTimeout: handshakeTimeout, Proxy: http.ProxyFromEnvironment,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			cork = &corkConn{Conn: c}
			return cork, nil
		}}
	conn, resp, err := dialer.DialContext(ctx, u, http.Header{"Authorization": {"Bearer " + r.w.Token}})
	if err != nil {
		if resp != nil && resp.StatusCode >= 400 {
			return false, errorOf(resp)
		}
		return false, err
	}
	defer conn.Close()
	conn.SetReadLimit(64 << 20)
	l := &wsLink{conn: conn, cork: cork, pending: map[string]ackFunc{}}
	if err := l.send(wire.Frame{Type: wire.FrameHello, Capacity: r.w.Capacity}, 0); err != nil {
		return false, err
	}
	_ = conn.SetReadDeadline(time.Now().Add(handshakeTimeout))
	var welcome wire.Frame
	if err := l.reader.Read(conn, &welcome); err != nil {
		return false, err
	}
	if welcome.Type != wire.FrameWelcome {
		return false, fmt.Errorf("tether: the server answered hello with %q", welcome.Type)
	}
	idle := 3 * time.Minute // the server pings every 20 s
	_ = conn.SetReadDeadline(time.Now().Add(idle))
	conn.SetPingHandler(func(data string) error {
		_ = conn.SetReadDeadline(time.Now().Add(idle))
		return conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(handshakeTimeout))
	})
	r.setLink(l)
	if r.w.OnConnect != nil {
		r.w.OnConnect("websocket")
	}
	r.log.Info("connected", zap.String("transport", "websocket"), zap.String("worker_id", welcome.WorkerID))
	r.creditOnConnect(l)
	readDone := make(chan struct{})
	go r.heartbeats(l, time.Duration(welcome.HeartbeatSeconds*float64(time.Second)), readDone)
	go func() {
		select {
		case <-ctx.Done():
			r.drain()
			l.wmu.Lock()
			_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "worker stopping"), time.Now().Add(time.Second))
			l.wmu.Unlock()
			_ = conn.Close()
		case <-readDone:
		}
	}()
	defer func() {
		r.clearLink(l) // before fail: a result it sends back must not find this link again
		l.fail()
		close(readDone)
	}()
	var f wire.Frame // one for the connection: Read resets it, and nothing keeps it
	for {
		if err := l.reader.Read(conn, &f); err != nil {
			return true, err
		}
		_ = conn.SetReadDeadline(time.Now().Add(idle))
		switch f.Type {
		case wire.FrameAssign:
			r.start(f)
		case wire.FrameCancel:
			r.stop(f.LeaseID, "cancelled")
		case wire.FrameAck:
			l.deliver(f)
		}
	}
}

// heartbeats sends the leases the worker holds every interval until done, and stops the jobs
// the server wants cancelled or no longer knows.
func (r *runner) heartbeats(l link, every time.Duration, done <-chan struct{}) {
	if every <= 0 {
		every = 10 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-done:
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		ack, err := l.request(ctx, wire.Frame{Type: wire.FrameHeartbeat, Leases: r.leases()}, 0)
		cancel()
		if err != nil {
			continue
		}
		for _, id := range ack.Cancel {
			r.stop(id, "cancelled")
		}
		for _, id := range ack.Unknown {
			r.stop(id, "lost")
		}
	}
}

// ---- long-poll -------------------------------------------------------------------------------

type pollLink struct{ api *Client }

func (l *pollLink) credit(int) {}

// request ignores credit: a long-poll link asks for work when it polls.
func (l *pollLink) request(ctx context.Context, f wire.Frame, _ int) (wire.Frame, error) {
	ok := true
	ack := wire.Frame{Type: wire.FrameAck, OK: &ok}
	path := "/v1/worker/jobs/" + url.PathEscape(f.JobID)
	var err error
	switch f.Type {
	case wire.FrameEvent:
		var out wire.EventAck
		_, err = l.api.do(ctx, http.MethodPost, path+"/events", wire.EventRequest{LeaseID: f.LeaseID, EventType: f.EventType, Data: f.Data}, &out)
		ack.Number, ack.Receipt = out.Number, &out.Receipt
	case wire.FrameComplete:
		var out wire.Done
		_, err = l.api.do(ctx, http.MethodPost, path+"/complete", wire.CompleteRequest{LeaseID: f.LeaseID, Nonce: f.Nonce, Output: f.Output,
			OutputHash: f.OutputHash, Signature: f.Signature}, &out)
		ack.Receipt = &out.Receipt
	case wire.FrameFail:
		var out wire.Done
		_, err = l.api.do(ctx, http.MethodPost, path+"/fail", wire.FailRequest{LeaseID: f.LeaseID, ErrorCode: f.ErrorCode, Message: f.Message,
			Retryable: f.Retryable}, &out)
		ack.Receipt = &out.Receipt
	case wire.FrameHeartbeat:
		var out wire.HeartbeatResponse
		_, err = l.api.do(ctx, http.MethodPost, "/v1/worker/heartbeat", wire.HeartbeatRequest{Leases: f.Leases}, &out)
		ack.Cancel, ack.Unknown, ack.HeartbeatSeconds = out.Cancel, out.Unknown, out.HeartbeatSeconds
	default:
		return wire.Frame{}, fmt.Errorf("tether: long-poll cannot send %q", f.Type)
	}
	var apiErr *Error
	if err != nil && !errors.As(err, &apiErr) && ctx.Err() == nil {
		return wire.Frame{}, fmt.Errorf("%w: %w", errLinkDown, err)
	}
	return ack, err
}

// runPoll long-polls for work until a request fails; connected says whether a poll succeeded.
func (r *runner) runPoll(ctx context.Context) (connected bool, err error) {
	l := &pollLink{api: r.api}
	done := make(chan struct{})
	defer close(done)
	for {
		if ctx.Err() != nil {
			r.drain()
			r.clearLink(l)
			return connected, nil
		}
		n := r.free()
		if n <= 0 {
			select {
			case <-r.freed:
			case <-ctx.Done():
			}
			continue
		}
		var out wire.Assignments
		wait := float64(pollWait)
		if !connected {
			wait = 0 // the first poll only finds out whether the server answers
		}
		status, err := r.api.do(ctx, http.MethodPost, "/v1/worker/lease", wire.LeaseRequest{Max: n, WaitSeconds: wait}, &out)
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			r.clearLink(l)
			return connected, err
		}
		if !connected {
			connected = true
			r.setLink(l)
			if r.w.OnConnect != nil {
				r.w.OnConnect("longpoll")
			}
			r.log.Info("connected", zap.String("transport", "longpoll"))
			go r.heartbeats(l, 10*time.Second, done)
		}
		if status == http.StatusOK {
			for _, a := range out.Assignments {
				r.start(a)
			}
		}
	}
}
