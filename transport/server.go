package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/transport/dashboard"
	"github.com/tetherhq/tether/transport/openapi"
	"github.com/tetherhq/tether/transport/tracing"
	"github.com/tetherhq/tether/transport/wire"
)

// AuthMode says how clients and workers prove who they are.
type AuthMode string

const (
	// AuthNone: every client is tenant "default" with no key, workers register without an
	// enroll token, and /v1/admin is open. For loopback only.
	AuthNone AuthMode = "none"
	// AuthToken: clients need an API key, workers an enroll token to register, admins the
	// admin token.
	AuthToken AuthMode = "token"
)

// DefaultTenant is the tenant of every client under AuthNone.
const DefaultTenant = "default"

// AdminTokenLenMin is the shortest admin (or metrics) token a server takes.
const AdminTokenLenMin = 16

// Config configures a Server.
type Config struct {
	Auth AuthMode
	// AdminToken guards /v1/admin under AuthToken; it must be set then.
	AdminToken string
	// MetricsToken, if set, lets a scraper read /metrics under AuthToken without the admin
	// token. (MetricsHandler serves it with no credential, for a listener of its own.)
	MetricsToken string
	Logger       *zap.Logger
	// Clock is the server's clock for views (a scheduled job whose run_at passed reads as
	// queued); nil: time.Now. Decisions read the broker's clock, never this one.
	Clock func() time.Time
	// FlowBytesMax caps a flow file; 0: flowfile.BytesMaxDefault.
	FlowBytesMax int
	// Tracing, if set, makes the spans of submits and workers' reports and names each
	// attempt's span in its assignment; nil: off.
	Tracing *tracing.Tracer
}

// Server is the HTTP face of one broker. It serves /healthz from the start, and everything
// else answers 503 NOT_READY until Attach hands it a recovered broker.
type Server struct {
	cfg   Config
	log   *zap.Logger
	clock func() time.Time
	core  atomic.Pointer[Core]
	// standby, if set, describes the replicated log's leader while this server follows it.
	standby atomic.Pointer[func() Standby]
	// leading, if set, is this server's part as the replicated log's leader (SetLeading).
	leading atomic.Pointer[Leading]
	mux     *http.ServeMux
	ids     *requestIDs
	polls   pollSessions
	// shutdown is closed by Shutdown: event streams and long polls end.
	shutdown     chan struct{}
	shutdownOnce sync.Once
	conns        sync.WaitGroup // WebSocket connections
}

// NewServer returns a server with no broker attached.
func NewServer(cfg Config) (*Server, error) {
	switch cfg.Auth {
	case AuthNone:
	case AuthToken:
		if len(cfg.AdminToken) < AdminTokenLenMin {
			return nil, fmt.Errorf("transport: --auth token needs an admin token of at least %d characters", AdminTokenLenMin)
		}
		if cfg.MetricsToken != "" && len(cfg.MetricsToken) < AdminTokenLenMin {
			return nil, fmt.Errorf("transport: a metrics token has at least %d characters", AdminTokenLenMin)
		}
	default:
		return nil, errors.New("transport: auth mode is none or token")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	// A failed request's line says which request; a stack of the handler wrapper would not add
	// to it.
	s := &Server{cfg: cfg, log: cfg.Logger.Named("http").WithOptions(zap.AddStacktrace(zap.DPanicLevel)), clock: cfg.Clock, ids: newRequestIDs(), shutdown: make(chan struct{})}
	s.polls.sessions = map[string]*pollSession{}
	s.routes()
	return s, nil
}

// MetricsHandler serves GET /metrics with no credential, for a listener of its own (tether
// server --metrics-addr, on loopback). Like the API under AuthNone, it answers only to a
// loopback Host, so that a web page cannot read it by rebinding its own name.
func (s *Server) MetricsHandler() http.Handler {
	m := http.NewServeMux()
	m.Handle("GET /metrics", s.metricsHandler(authNone))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.ids.assign(w, r)
		if !loopbackHost(r.Host) {
			writeError(w, errorf(wire.CodeHostNotAllowed, "the metrics listener answers only to a loopback host, not %q", clip(r.Host)))
			return
		}
		m.ServeHTTP(w, r)
	})
}

// Attach makes the server serve b, once b has recovered.
func (s *Server) Attach(b Core) { s.core.Store(&b) }

// Detach stops serving the broker at once, before it closes: from now on every API call and
// /readyz get 503 STANDBY, naming the leader as standby says, so clients go there rather than
// wait for a broker that no longer leads. Requests already in flight finish on the broker.
func (s *Server) Detach(standby func() Standby) {
	s.SetStandby(standby)
	s.leading.Store(nil)
	s.core.Store(nil)
}

// Standby says where a hot standby stands: the URL clients reach the leader at (empty while
// no one leads, or the leader gave none) and how far the standby has followed the log.
type Standby struct {
	Leader  string
	HeadSeq uint64
	// Lag, if set, asks the replicated log how far the standby's copy is behind it, for its
	// /metrics.
	Lag func(context.Context) (eventlog.Lag, error)
}

// SetStandby makes the server answer as a hot standby while no broker is attached: /readyz
// and every API call get 503 STANDBY with the leader's URL. f is asked on each answer.
func (s *Server) SetStandby(f func() Standby) { s.standby.Store(&f) }

// Leading is a leader's part in a replicated log, as /readyz shows it: Claim is what it wrote to
// the election's key (a standby that finds the key expired asks the leader's /readyz, and
// holds off if the leader answers 200 with the claim it last saw); Healthy says whether NATS
// still answers it, and /readyz answers 503 UNAVAILABLE when it does not.
type Leading struct {
	Claim   any
	Healthy func() error
}

// SetLeading makes /readyz show this server as the replicated log's leader.
func (s *Server) SetLeading(l Leading) { s.leading.Store(&l) }

// standbyError is the answer of a standby, or nil when the server is not one.
func (s *Server) standbyError() *apiError {
	p := s.standby.Load()
	if p == nil || *p == nil {
		return nil
	}
	st := (*p)()
	e := errorf(wire.CodeStandby, "this server is a hot standby; the leader takes requests")
	e.details = map[string]any{"head_seq": st.HeadSeq}
	if st.Leader != "" {
		e.details["leader"] = st.Leader
		e.message += " at " + st.Leader
		e.header = http.Header{wire.LeaderHeader: {st.Leader}}
	}
	return e
}

// loaded is the attached Core, or nil while the broker is recovering.
func (s *Server) loaded() Core {
	if p := s.core.Load(); p != nil {
		return *p
	}
	return nil
}

// Shutdown ends the event streams and long polls the server holds open, so http.Server's
// Shutdown does not wait for them. WebSocket sessions end when the broker closes: each is told
// "going away" (1001). The order is Shutdown, http.Server.Shutdown, Broker.Close, Wait.
func (s *Server) Shutdown() {
	s.shutdownOnce.Do(func() { close(s.shutdown) })
}

// Wait waits until every WebSocket connection has closed, or ctx ends.
func (s *Server) Wait(ctx context.Context) {
	done := make(chan struct{})
	go func() { s.conns.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// Ready implements Readiness; a standby answers 503 STANDBY (standbyError).
func (s *Server) Ready() error {
	b := s.loaded()
	if b == nil {
		if e := s.standbyError(); e != nil {
			return e
		}
		return errors.New("recovering: the projections are being rebuilt from the log")
	}
	if err := b.Err(); err != nil {
		return err
	}
	if l := s.leading.Load(); l != nil {
		if err := l.Healthy(); err != nil {
			return errorf(actors.CodeUnavailable, "this server leads the replicated log, but %v", err)
		}
	}
	return nil
}

// Status implements Readiness.
func (s *Server) Status() any {
	b := s.loaded()
	head, st := b.Head(), b.LogStats()
	status := map[string]any{"status": "ready", "head_seq": head.Seq, "head_hash": head.Hash.String(), "events": st.Events, "fsyncs": st.Syncs,
		"auth": s.cfg.Auth} // the dashboard asks for a key up front under "token
	if l := s.leading.Load(); l != nil {
		status["leader"] = l.Claim
	}
	return status
}

// ServeHTTP serves the API; a path or method that matches no route gets the JSON error shape.
// Every answer carries an X-Request-Id.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.ids.assign(w, r)
	if e := s.checkSite(r); e != nil {
		writeError(w, e)
		return
	}
	h, pattern := s.mux.Handler(r)
	if pattern == "" {
		rec := &statusOnly{header: w.Header()}
		h.ServeHTTP(rec, r)
		if rec.status == http.StatusMethodNotAllowed {
			writeError(w, errorf(wire.CodeMethodNotAllowed, "%s is not allowed on %s", r.Method, r.URL.Path))
			return
		}
		writeError(w, errorf(wire.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
		return
	}
	if r.RequestURI != "*" && !strings.Contains(pattern, "{") {
		// What the mux's ServeHTTP would do, without matching the request a second time: a
		// pattern without wildcards gives the handler no path values, only itself.
		r.Pattern = pattern
		h.ServeHTTP(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// statusOnly records the status the mux would answer an unmatched request with.
type statusOnly struct {
	header http.Header
	status int
}

func (s *statusOnly) Header() http.Header         { return s.header }
func (s *statusOnly) Write(b []byte) (int, error) { return len(b), nil }
func (s *statusOnly) WriteHeader(code int)        { s.status = code }

func (s *Server) routes() {
	m := http.NewServeMux()
	ops := OpsHandler(s)
	m.Handle("GET /healthz", ops)
	m.Handle("GET /readyz", ops)
	m.Handle("GET /metrics", s.metricsHandler(authMetrics))
	dash := dashboard.Handler() // it speaks the API below, with the caller's own key
	m.Handle("GET /{$}", dash)
	m.Handle("GET /ui/", dash)
	m.HandleFunc("GET /v1/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openapi.Document())
	})

	m.Handle("POST /v1/jobs", s.api(authClient, s.submit))
	m.Handle("POST /v1/jobs/batch", s.api(authClient, s.submitBatch))
	m.Handle("POST /v1/jobs/cancel", s.api(authClient, s.cancelMatching))
	m.Handle("POST /v1/jobs/retry", s.api(authClient, s.redriveMatching))
	m.Handle("GET /v1/jobs", s.api(authClient, s.listJobs))
	m.Handle("GET /v1/jobs/{id}", s.api(authClient, s.getJob))
	m.Handle("POST /v1/jobs/{id}/cancel", s.api(authClient, s.cancelJob))
	m.Handle("POST /v1/jobs/{id}/retry", s.api(authClient, s.retryJob))
	m.Handle("DELETE /v1/jobs/{id}", s.api(authClient, s.deleteJob))
	m.Handle("POST /v1/dead-letters/purge", s.api(authClient, s.purgeDead))
	m.Handle("GET /v1/jobs/{id}/events", s.api(authClient, s.jobEvents))
	m.Handle("GET /v1/jobs/{id}/explain", s.api(authClient, s.explainJob))
	m.Handle("POST /v1/reservations", s.api(authClient, s.reserve))
	m.Handle("POST /v1/reservations/{id}/release", s.api(authClient, s.release))
	m.Handle("GET /v1/quota", s.api(authClient, s.quota))
	m.Handle("GET /v1/queues", s.api(authClient, s.queues))
	m.Handle("POST /v1/queues/{name}/pause", s.api(authClient, s.pauseQueue(true)))
	m.Handle("POST /v1/queues/{name}/resume", s.api(authClient, s.pauseQueue(false)))
	m.Handle("PUT /v1/queues/{name}/limits", s.api(authClient, s.queueLimits(false)))
	m.Handle("DELETE /v1/queues/{name}/limits", s.api(authClient, s.queueLimits(true)))
	m.Handle("GET /v1/workers", s.api(authClient, s.workers))
	m.Handle("GET /v1/archive", s.api(authClientOrAdmin, s.archive))
	m.Handle("GET /v1/rate-limits", s.api(authClient, s.rateLimits))
	m.Handle("GET /v1/rate-limits/{name}", s.api(authClient, s.getRateLimit))
	m.Handle("PUT /v1/rate-limits/{name}", s.api(authClient, s.setRateLimit))
	m.Handle("DELETE /v1/rate-limits/{name}", s.api(authClient, s.deleteRateLimit))
	m.Handle("POST /v1/flows", s.apiWith(authClient, flowBody, s.submitFlow))
	m.Handle("GET /v1/flows", s.api(authClient, s.listFlows))
	m.Handle("GET /v1/flows/{id}", s.api(authClient, s.getFlow))
	m.Handle("GET /v1/flows/{id}/events", s.api(authClient, s.flowEvents))
	m.Handle("POST /v1/flows/{id}/cancel", s.api(authClient, s.cancelFlow))
	m.Handle("POST /v1/schedules", s.api(authClient, s.createSchedule))
	m.Handle("GET /v1/schedules", s.api(authClient, s.listSchedules))
	m.Handle("GET /v1/schedules/{id}", s.api(authClient, s.getSchedule))
	m.Handle("DELETE /v1/schedules/{id}", s.api(authClient, s.deleteSchedule))
	m.Handle("POST /v1/schedules/{id}/pause", s.api(authClient, s.pauseSchedule(true)))
	m.Handle("POST /v1/schedules/{id}/resume", s.api(authClient, s.pauseSchedule(false)))

	m.Handle("POST /v1/workers/register", s.api(authEnroll, s.register))
	m.Handle("DELETE /v1/workers/{id}", s.api(authClientOrAdmin, s.revokeWorker))
	m.Handle("GET /v1/worker/connect", s.api(authWorker, s.connect))
	m.Handle("POST /v1/worker/lease", s.api(authWorker, s.pollLease))
	m.Handle("POST /v1/worker/heartbeat", s.api(authWorker, s.pollHeartbeat))
	m.Handle("POST /v1/worker/token", s.api(authWorker, s.renewToken))
	m.Handle("POST /v1/worker/jobs/{id}/events", s.api(authWorker, s.workerEvent))
	m.Handle("POST /v1/worker/jobs/{id}/complete", s.api(authWorker, s.workerComplete))
	m.Handle("POST /v1/worker/jobs/{id}/fail", s.api(authWorker, s.workerFail))
	m.Handle("POST /v1/worker/jobs/{id}/release", s.api(authWorker, s.workerRelease))

	m.Handle("POST /v1/admin/api-keys", s.api(authAdmin, s.createAPIKey))
	m.Handle("DELETE /v1/admin/api-keys/{id}", s.api(authAdmin, s.revokeAPIKey))
	m.Handle("POST /v1/admin/enroll-tokens", s.api(authAdmin, s.createEnrollToken))
	m.Handle("PUT /v1/admin/tenants/{tenant}/quota", s.api(authAdmin, s.setQuota))
	m.Handle("PATCH /v1/admin/tenants/{tenant}/quota", s.api(authAdmin, s.setQuota))
	m.Handle("POST /v1/admin/tenants/{tenant}/queues/{name}/pause", s.api(authAdmin, s.pauseQueue(true)))
	m.Handle("POST /v1/admin/tenants/{tenant}/queues/{name}/resume", s.api(authAdmin, s.pauseQueue(false)))
	m.Handle("PUT /v1/admin/tenants/{tenant}/queues/{name}/limits", s.api(authAdmin, s.queueLimits(false)))
	m.Handle("DELETE /v1/admin/tenants/{tenant}/queues/{name}/limits", s.api(authAdmin, s.queueLimits(true)))
	m.Handle("GET /v1/admin/tenants/{tenant}/rate-limits", s.api(authAdmin, s.rateLimits))
	m.Handle("GET /v1/admin/tenants/{tenant}/rate-limits/{name}", s.api(authAdmin, s.getRateLimit))
	m.Handle("PUT /v1/admin/tenants/{tenant}/rate-limits/{name}", s.api(authAdmin, s.setRateLimit))
	m.Handle("DELETE /v1/admin/tenants/{tenant}/rate-limits/{name}", s.api(authAdmin, s.deleteRateLimit))
	s.mux = m
}

// NewHTTPServer returns an http.Server for h with every timeout and size limit set. Streams
// (SSE, long polls, WebSockets) extend their own deadlines as they go.
func NewHTTPServer(h http.Handler, log *zap.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    HeaderBytesMax,
		ErrorLog:          zap.NewStdLog(log.Named("http")),
	}
}

// HeaderBytesMax caps a request's headers.
const HeaderBytesMax = 16 << 10

// LimitListener accepts at most n connections at once; the next waits until one closes.
func LimitListener(ln net.Listener, n int) net.Listener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n)}
}

type limitListener struct {
	net.Listener
	sem chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	l.sem <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
