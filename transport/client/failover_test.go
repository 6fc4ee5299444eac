package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// fake is a stand-in server that counts the API requests it gets (not /readyz, which a client
// of several servers asks first) and answers them with handle, or /readyz as ready says.
type fake struct {
	*httptest.Server
	hits  atomic.Int32
	mu    sync.Mutex
	paths []string
}

func newFake(t *testing.T, ready func() bool, handle http.HandlerFunc) *fake {
	f := &fake{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			if ready() {
				w.WriteHeader(http.StatusOK)
				return
			}
			answerError(w, http.StatusServiceUnavailable, "STANDBY", "")
			return
		}
		f.hits.Add(1)
		f.mu.Lock()
		f.paths = append(f.paths, r.Method+" "+r.URL.Path)
		f.mu.Unlock()
		handle(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func answerError(w http.ResponseWriter, status int, code, leader string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	details := "{}"
	if leader != "" {
		details = `{"leader":"` + leader + `"}`
	}
	_, _ = w.Write([]byte(`{"error":{"code":"` + code + `","message":"m","details":` + details + `}}`))
}

func answerJob(w http.ResponseWriter, id string) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"id":"` + id + `","status":"queued"}`))
}

// silentServer takes connections and reads requests, /readyz too, and never answers one until
// the test ends: a paused process, a frozen VM, a hung disk, as a client sees them.
func silentServer(t *testing.T) *fake {
	release := make(chan struct{})
	f := &fake{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.paths = append(f.paths, r.Method+" "+r.URL.Path)
		f.mu.Unlock()
		<-release
	}))
	t.Cleanup(f.Close)
	t.Cleanup(func() { close(release) }) // before Close, which waits for the handlers
	return f
}

func (f *fake) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.paths...)
}

// pausableLeader is a leader stand-in that answers j1, and once paused is set answers nothing,
// /readyz neither, until the test ends.
func pausableLeader(t *testing.T) (*fake, *atomic.Bool) {
	paused, release := new(atomic.Bool), make(chan struct{})
	silentWhilePaused := func() bool {
		if paused.Load() {
			<-release
		}
		return true
	}
	f := newFake(t, silentWhilePaused, func(w http.ResponseWriter, r *http.Request) {
		silentWhilePaused()
		answerJob(w, "j1")
	})
	t.Cleanup(func() { close(release) }) // before f.Close, which waits for the handlers
	return f, paused
}

func never() bool  { return false }
func always() bool { return true }

// A client of several servers moves off one it cannot reach and off a standby, to the leader
// the standby names, and stays there; a request that reached a server and failed there is not
// sent again.
func TestClientFindsTheLeader(t *testing.T) {
	leader := newFake(t, never, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/jobs/broken" {
			answerError(w, http.StatusInternalServerError, "INTERNAL", "")
			return
		}
		answerJob(w, "j1")
	})
	standby := newFake(t, never, func(w http.ResponseWriter, r *http.Request) {
		answerError(w, http.StatusServiceUnavailable, "STANDBY", leader.URL)
	})
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // its address refuses connections

	c := client.New(gone.URL+","+standby.URL+","+leader.URL, "", nil)
	ctx := context.Background()
	j, err := c.Submit(ctx, wire.SubmitRequest{Queue: "q", Type: "t"})
	if err != nil || j.ID != "j1" {
		t.Fatalf("submit through a dead server and a standby: %+v, %v", j, err)
	}
	if c.Server() != leader.URL || standby.hits.Load() != 1 || leader.hits.Load() != 1 {
		t.Fatalf("the client talks to %s after %d standby and %d leader hits; want the leader after 1 and 1", c.Server(), standby.hits.Load(), leader.hits.Load())
	}
	if _, err := c.Get(ctx, "broken"); err == nil || leader.hits.Load() != 2 || c.Server() != leader.URL {
		t.Fatalf("a failure on the leader: %v after %d leader hits, now on %s; want it returned, sent once, the client staying", err, leader.hits.Load(), c.Server())
	}
}

// With RetryFor, a request safe to repeat goes on across a failover while no server takes it
// (standbys that know no leader yet, a server starting); one that is not safe is answered at
// once, after a round of the servers.
func TestClientRetriesSafeRequestsAcrossAFailover(t *testing.T) {
	var hits atomic.Int32
	var promoted atomic.Bool // the second server leads once the first is asked enough
	standby := newFake(t, never, func(w http.ResponseWriter, r *http.Request) {
		if hits.Load() >= 10 { // two rounds of both servers, and a wait, after the first submit
			promoted.Store(true)
		}
		hits.Add(1)
		answerError(w, http.StatusServiceUnavailable, "STANDBY", "")
	})
	next := newFake(t, never, func(w http.ResponseWriter, r *http.Request) {
		if !promoted.Load() {
			hits.Add(1)
			answerError(w, http.StatusServiceUnavailable, "NOT_READY", "")
			return
		}
		answerJob(w, "j1")
	})

	c := client.New(standby.URL+","+next.URL, "", nil)
	c.RetryFor = time.Minute
	ctx := context.Background()
	if _, err := c.Submit(ctx, wire.SubmitRequest{Queue: "q", Type: "t"}); err == nil || hits.Load() != 4 {
		t.Fatalf("a submit without an idempotency key: %v after %d tries; want it refused after two rounds of both", err, hits.Load())
	}
	j, err := c.Submit(ctx, wire.SubmitRequest{Queue: "q", Type: "t", IdempotencyKey: "k"})
	if err != nil || j.ID != "j1" || !promoted.Load() {
		t.Fatalf("a submit under a key: %+v %v", j, err)
	}
	if _, err := c.Get(ctx, "j1"); err != nil || c.Server() != next.URL {
		t.Fatalf("a read: %v, on %s", err, c.Server())
	}
}

// A client's first request finds the leader among its servers whatever hangs: a silent server
// first in the list is asked /readyz with the others, and nothing else. So a submit that may
// not be sent twice (no idempotency key) goes to the leader at once, however long the silent
// server's Patience.
func TestClientStartsAtTheLeaderPastASilentServer(t *testing.T) {
	silent := silentServer(t)
	leader := newFake(t, always, func(w http.ResponseWriter, r *http.Request) { answerJob(w, "j1") })
	standby := newFake(t, never, func(w http.ResponseWriter, r *http.Request) {
		answerError(w, http.StatusServiceUnavailable, "STANDBY", leader.URL)
	})
	for _, order := range [][]string{{silent.URL, standby.URL, leader.URL}, {silent.URL, leader.URL, standby.URL}} {
		c := client.New(strings.Join(order, ","), "", nil)
		c.Patience = time.Hour // the test's deadline ends it first if the submit waits on the silent server
		j, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t"})
		if err != nil || j.ID != "j1" || c.Server() != leader.URL {
			t.Fatalf("servers %v: a submit without a key: %+v, %v, on %s", order, j, err, c.Server())
		}
	}
	for _, got := range silent.seen() {
		if got != "GET /readyz" {
			t.Fatalf("the silent server was asked %v; want /readyz alone", silent.seen())
		}
	}
	if standby.hits.Load() != 0 {
		t.Fatalf("the standby got %d requests; the leader was known before the first", standby.hits.Load())
	}
}

// A leader that stops answering (paused) while the client talks to it: a request safe to
// repeat goes to the other servers too after HedgeAfter, asks them again while they stand by,
// and is taken by the one that takes over as soon as it leads, the paused leader still silent
// and its Patience far off; the client talks to the new leader from then on. A request that is
// not safe to repeat is sent to the paused leader alone, fails after Patience, and the client
// moves off it.
func TestClientGoesOnPastAPausedLeader(t *testing.T) {
	old, paused := pausableLeader(t)
	var asked atomic.Int32
	var promoted atomic.Bool
	next := newFake(t, never, func(w http.ResponseWriter, r *http.Request) {
		if promoted.Load() {
			answerJob(w, "j2")
			return
		}
		if asked.Add(1) == 3 { // it takes over after the hedged request has asked it thrice
			promoted.Store(true)
		}
		answerError(w, http.StatusServiceUnavailable, "STANDBY", old.URL)
	})

	c := client.New(old.URL+","+next.URL, "", nil)
	c.Patience, c.HedgeAfter = time.Hour, 50*time.Millisecond
	if j, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t", IdempotencyKey: "k0"}); err != nil || j.ID != "j1" {
		t.Fatalf("a submit before the pause: %+v %v", j, err)
	}
	paused.Store(true)
	j, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t", IdempotencyKey: "k1"})
	if err != nil || j.ID != "j2" || c.Server() != next.URL || asked.Load() != 3 {
		t.Fatalf("a submit under a key while the leader is paused: %+v %v, on %s after %d asks of the standby", j, err, c.Server(), asked.Load())
	}

	// HedgeAfter long: the leader answered just before its pause, as a busy client's does.
	c = client.New(old.URL+","+next.URL, "", nil)
	c.Patience, c.HedgeAfter = 200*time.Millisecond, time.Hour
	paused.Store(false)
	if _, err := c.Get(ctx(t), "j1"); err != nil || c.Server() != old.URL {
		t.Fatalf("a read before the pause: %v on %s", err, c.Server())
	}
	paused.Store(true)
	before := next.hits.Load()
	_, err = c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t"})
	if !errors.Is(err, context.DeadlineExceeded) || next.hits.Load() != before || c.Server() != next.URL {
		t.Fatalf("a submit without a key to the paused leader: %v, %d requests to the other server, then on %s; want the timeout, none, and the other",
			err, next.hits.Load()-before, c.Server())
	}
}

// A watch whose first server is silent streams from the leader.
func TestWatchPastASilentServer(t *testing.T) {
	silent := silentServer(t)
	leader := newFake(t, always, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("id: 1\nevent: job.submitted\ndata: {\"number\":1,\"type\":\"job.submitted\"}\n\nevent: done\ndata: {\"status\":\"succeeded\"}\n\n"))
	})
	c := client.New(silent.URL+","+leader.URL, "", nil)
	c.Patience = time.Hour
	var got []string
	status, err := c.Watch(ctx(t), "j1", 0, func(e wire.Event) error {
		got = append(got, e.Type)
		return nil
	})
	if err != nil || status != "succeeded" || len(got) != 1 {
		t.Fatalf("watch: %q %v, events %v", status, err, got)
	}
}

// tcpProxy forwards connections to a server until it is killed: then its address refuses
// them, as a dead process's does, or, dying, takes them and cuts them at once, as a process
// being killed may. Paused, it takes connections and passes nothing back, on them or on those
// it forwarded: a stopped process, as its clients see it; the server behind it loses those it
// forwarded, as a leader replaced while paused holds nothing of the new leader's.
type tcpProxy struct {
	ln       net.Listener
	mu       sync.Mutex
	cond     *sync.Cond
	conns    []net.Conn
	upstream []net.Conn
	dying    bool
	paused   bool
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln}
	p.cond = sync.NewCond(&p.mu)
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			dying, paused := p.dying, p.paused
			p.conns = append(p.conns, in)
			p.mu.Unlock()
			switch {
			case dying:
				_ = in.Close()
				continue
			case paused:
				continue // taken, never answered
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				_ = in.Close()
				continue
			}
			p.mu.Lock()
			p.conns, p.upstream = append(p.conns, out), append(p.upstream, out)
			p.mu.Unlock()
			go p.pipe(out, in)
			go p.pipe(in, out)
		}
	}()
	t.Cleanup(func() { p.kill(false) })
	return p
}

// pipe copies src to dst until either fails; while the proxy is paused it passes nothing on,
// and leaves dst open.
func (p *tcpProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	defer func() {
		p.mu.Lock()
		for p.paused {
			p.cond.Wait()
		}
		p.mu.Unlock()
		_ = dst.Close()
	}()
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		for p.paused {
			p.cond.Wait()
		}
		p.mu.Unlock()
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *tcpProxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *tcpProxy) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = true
	for _, c := range p.upstream {
		_ = c.Close()
	}
}

// kill cuts every connection; the address then refuses new ones, or if dying takes and cuts them.
func (p *tcpProxy) kill(dying bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dying, p.paused = dying, false
	p.cond.Broadcast()
	if !dying {
		_ = p.ln.Close()
	}
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// A worker whose leader dies (its address refusing connections, or still taking them and
// cutting them) or pauses, while the next server in its list is silent (paused), reconnects to
// the server that takes over, as soon as it leads, and runs jobs there, the silent one still
// silent: its handshake there is hedged, not waited out. A paused leader is left when a
// heartbeat goes unanswered (a lease of 5 s is heartbeaten every 1.7 s).
func TestWorkerGoesOnPastASilentServer(t *testing.T) {
	for _, end := range []string{"dead", "dying", "paused"} {
		t.Run(end, func(t *testing.T) {
			real := serve(t)
			old := newTCPProxy(t, strings.TrimPrefix(real, "http://"))
			silent := silentServer(t)
			realURL, _ := url.Parse(real)
			var promoted atomic.Bool
			next := newFake(t, promoted.Load, func(w http.ResponseWriter, r *http.Request) {
				if !promoted.Load() {
					answerError(w, http.StatusServiceUnavailable, "STANDBY", old.url())
					return
				}
				httputil.NewSingleHostReverseProxy(realURL).ServeHTTP(w, r)
			})

			c := client.New(real, "", nil)
			reg, err := c.RegisterWorker(ctx(t), wire.RegisterRequest{Name: "w", Queues: []string{"q"}, Capacity: 2})
			if err != nil {
				t.Fatal(err)
			}
			ran, hold := make(chan string, 2), make(chan struct{})
			runCtx, stop := context.WithCancel(ctx(t))
			defer stop()
			w := &client.Worker{Server: old.url() + "," + silent.URL + "," + next.URL, Token: reg.WorkerToken, Capacity: 2, Logger: zaptest.NewLogger(t),
				Handler: func(ctx context.Context, j *client.Job) (any, error) {
					ran <- j.ID
					if string(j.Payload) == `"hold"` {
						select {
						case <-hold:
						case <-ctx.Done():
						}
					}
					return nil, nil
				}}
			done := make(chan error, 1)
			go func() { done <- w.Run(runCtx) }()
			runs := func(what, payload string) {
				t.Helper()
				j, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t", Payload: json.RawMessage(payload), LeaseTTLSeconds: 5})
				if err != nil {
					t.Fatal(err)
				}
				select {
				case id := <-ran:
					if id != j.ID {
						t.Fatalf("%s: ran %s, want %s", what, id, j.ID)
					}
				case <-ctx(t).Done():
					t.Fatalf("%s: job %s did not run", what, j.ID)
				}
			}
			runs("on the first leader", `"hold"`) // a lease held: heartbeats every 1.7 s
			switch end {
			case "paused":
				old.pause()
			default:
				old.kill(end == "dying")
			}
			promoted.Store(true)
			took := time.Now()
			runs("after the leader ended, the next server silent", `"go"`)
			close(hold)
			// Waiting on the silent server costs its whole handshake timeout (10 s); going
			// past it, a hedge (1 s), a standby's re-asks (100 ms), and for a paused leader
			// up to two heartbeats' time to find it silent.
			if d := time.Since(took); d > 8*time.Second {
				t.Fatalf("a job ran %s after the new leader led; the worker waited on a silent server", d.Round(time.Millisecond))
			}
			t.Logf("a job ran %s after the new leader led", time.Since(took).Round(time.Millisecond))
			for _, got := range silent.seen() {
				if got != "GET /readyz" && got != "GET /v1/worker/connect" {
					t.Fatalf("the silent server was asked %v", silent.seen())
				}
			}
			stop()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A request that may not be sent twice goes only to a server that answered within HedgeAfter:
// past a leader silent since (paused), the client asks every server's /readyz first, and a
// standby that names the silent leader is the answer, at once, instead of the request waiting
// out its Patience on the silent leader; once another leads, the request goes there.
func TestUnsafeRequestsGoOnlyWhereAnswered(t *testing.T) {
	old, paused := pausableLeader(t)
	var promoted atomic.Bool
	next := newFake(t, promoted.Load, func(w http.ResponseWriter, r *http.Request) {
		if !promoted.Load() {
			answerError(w, http.StatusServiceUnavailable, "STANDBY", old.URL)
			return
		}
		answerJob(w, "j2")
	})
	c := client.New(old.URL+","+next.URL, "", nil)
	c.Patience, c.HedgeAfter = time.Hour, 100*time.Millisecond
	if _, err := c.Get(ctx(t), "j1"); err != nil || c.Server() != old.URL {
		t.Fatalf("a read before the pause: %v on %s", err, c.Server())
	}
	paused.Store(true)
	time.Sleep(150 * time.Millisecond) // the fault: the leader has not answered for longer than HedgeAfter
	oldHits := old.hits.Load()
	_, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t"})
	var e *client.Error
	if !errors.As(err, &e) || e.Code != "STANDBY" || old.hits.Load() != oldHits {
		t.Fatalf("a submit without a key, the leader silent and no other leading: %v, %d requests to the silent leader; want STANDBY, none",
			err, old.hits.Load()-oldHits)
	}
	promoted.Store(true)
	if j, err := c.Submit(ctx(t), wire.SubmitRequest{Queue: "q", Type: "t"}); err != nil || j.ID != "j2" || old.hits.Load() != oldHits {
		t.Fatalf("a submit without a key once another leads: %+v %v, %d requests to the silent leader", j, err, old.hits.Load()-oldHits)
	}
}
