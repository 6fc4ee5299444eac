package client

import (
	"context"
	"errors"
	"fmt"
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

	"github.com/tetherhq/tether/transport/internal/frames"
	"github.com/tetherhq/tether/transport/wire"
)

type wsLink struct {
	server  string // the server it is connected to
	conn    *websocket.Conn
	cork    *frames.Cork // under conn: frames sent together leave in one write
	reader  frames.Reader
	wmu     sync.Mutex // guards writes to conn, and encoder; taken before qmu
	encoder frames.Encoder
	qmu     sync.Mutex
	queue   []outgoing // frames posted and not yet taken by a flush, guarded by qmu
	spare   []outgoing // a buffer for the queue once a flush is done with it, guarded by qmu
	// flushing says that a goroutine is writing the queue (and takes what is posted meanwhile),
	// guarded by qmu. INVARIANT: while the queue is not empty, flushing is true.
	flushing bool
	mu       sync.Mutex
	pending  map[string]ackFunc // by ref; nil once the link is down
	ref      atomic.Uint64
}

// ackFunc receives the server's ack to a request, or errLinkDown if the link went away first.
type ackFunc func(ack wire.Frame, err error)

// outgoing is a frame posted for the link (none if its Type is empty) with the credit to grant
// with it, and what to tell if it could not be written.
type outgoing struct {
	f      wire.Frame
	credit int
	failed func(error) // nil: nobody waits to know
	err    error       // why it could not be written
}

// creditMax is the most credit one frame grants (the server's actors.CapacityMax): the credit a
// flush merges is split past it.
const creditMax = 1000

// flushRoundsMax is how many flushes in a row one poster writes for the others before it hands
// the role on to a goroutine of its own and goes back to its job.
const flushRoundsMax = 4

// post sends f (if its Type is set) and a grant of credit (if credit > 0) with whatever else is
// posted meanwhile, in one write: the first poster writes the queue until it is empty, and the
// others leave their frames to it and go on, so that the results of jobs that finish together
// leave in one write(2), their credit merged in one frame after them. It never waits for more:
// a frame posted to an idle link is written at once. failed, if not nil, is told if the frame
// could not be written (on the goroutine that wrote it, holding no lock of the link's).
func (l *wsLink) post(f wire.Frame, credit int, failed func(error)) {
	l.qmu.Lock()
	l.queue = append(l.queue, outgoing{f: f, credit: credit, failed: failed})
	if l.flushing {
		l.qmu.Unlock()
		return
	}
	l.flushing = true
	l.qmu.Unlock()
	l.flushQueue()
}

// flushQueue writes the queue until it is empty, for at most flushRoundsMax writes, then hands
// the rest on. It takes the queue once the connection is free to write, so that what is posted
// while a write is under way goes in the next one.
func (l *wsLink) flushQueue() {
	for range flushRoundsMax {
		l.wmu.Lock()
		l.qmu.Lock()
		batch := l.queue
		l.queue, l.spare = l.spare[:0], nil
		if len(batch) == 0 {
			l.flushing = false
			l.spare = batch
			l.qmu.Unlock()
			l.wmu.Unlock()
			return
		}
		l.qmu.Unlock()
		l.write(batch)
		l.wmu.Unlock()
		for _, o := range batch {
			if o.err != nil && o.failed != nil {
				o.failed(o.err)
			}
		}
		clear(batch) // keeps no output alive
		l.qmu.Lock()
		l.spare = batch[:0]
		l.qmu.Unlock()
	}
	go l.flushQueue()
}

// write writes batch, then the credit it grants, in one write to the connection, and sets the
// error of each frame that could not be written. The caller holds wmu.
func (l *wsLink) write(batch []outgoing) {
	_ = l.conn.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	l.cork.Cork()
	credit := 0
	var err error // the connection's: it fails every frame of the batch
	for i := range batch {
		o := &batch[i]
		credit += o.credit
		if o.f.Type == "" || err != nil {
			continue
		}
		if o.err = l.writeFrame(o.f); !errors.Is(o.err, errUnencodable) {
			err = o.err
		}
	}
	for credit > 0 && err == nil {
		n := min(credit, creditMax)
		err = l.writeFrame(wire.Frame{Type: wire.FrameCredit, N: n})
		credit -= n
	}
	if _, uerr := l.cork.Uncork(time.Now().Add(handshakeTimeout)); err == nil {
		err = uerr
	}
	if err != nil {
		for i := range batch {
			batch[i].err = err
		}
	}
}

// errUnencodable is a frame that could not be encoded: it fails alone, and the link goes on.
var errUnencodable = errors.New("tether: a frame could not be encoded")

func (l *wsLink) writeFrame(f wire.Frame) error {
	data, err := l.encoder.Encode(f)
	if err != nil {
		return fmt.Errorf("%w: %w", errUnencodable, err)
	}
	return l.conn.WriteMessage(websocket.TextMessage, data)
}

// send writes f alone, now, and returns the error: the hello, before anything is posted.
func (l *wsLink) send(f wire.Frame) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	batch := []outgoing{{f: f}}
	l.write(batch)
	return batch[0].err
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
	ref := f.Ref // the closure keeps the ref, not the frame (which would then be copied to the heap)
	l.post(f, credit, func(err error) {
		if done := l.take(ref); done != nil {
			done(wire.Frame{}, fmt.Errorf("%w: %w", errLinkDown, err))
		}
	})
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

func (l *wsLink) credit(n int) { l.post(wire.Frame{}, n, nil) }

func (l *wsLink) drop() { _ = l.conn.Close() }

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

// errWSRefused is a WebSocket handshake that reached the server's address and did not become a
// WebSocket: answered with something else, or cut. Where plain HTTP works meanwhile, something
// on the way blocks WebSocket, and long-polling is the way round it.
var errWSRefused = errors.New("tether: the WebSocket handshake was refused")

// errWSCut is a handshake that the server's address cut without an answer: a proxy that drops
// upgrades, or a server dying as it took the connection. It counts as WebSocket refused, but
// first the other servers are tried.
var errWSCut = fmt.Errorf("%w: cut without an answer", errWSRefused)

// wsRefused reports whether a failed connection was WebSocket being refused, as opposed to the
// server being away, restarting or not ready yet (a network error, a 5xx, a 429), or refusing
// the worker itself.
func wsRefused(err error) bool {
	if errors.Is(err, errWSRefused) {
		return true
	}
	var e *Error
	return errors.As(err, &e) && e.Status < 500 && e.Status != http.StatusTooManyRequests && !permanent(err)
}

// closedRevoked reports whether the server closed the connection because the worker is revoked.
func closedRevoked(err error) bool {
	var ce *websocket.CloseError
	return errors.As(err, &ce) && ce.Code == wire.CloseWorkerRevoked
}

// upgraded is a WebSocket handshake that succeeded, with server.
type upgraded struct {
	conn   *websocket.Conn
	cork   *frames.Cork
	server string
}

// upgrade makes the WebSocket handshake with server, within ctx. It has no effect on the
// server: a handshake that is not followed by a hello takes no work.
func (r *runner) upgrade(ctx context.Context, server string) (upgraded, error) {
	u, err := wsURL(server)
	if err != nil {
		return upgraded{}, err
	}
	var cork *frames.Cork
	dialer := websocket.Dialer{Proxy: http.ProxyFromEnvironment, TLSClientConfig: r.w.TLSConfig,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{Timeout: dialTimeout}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			cork = &frames.Cork{Conn: c}
			return cork, nil
		}}
	conn, resp, err := dialer.DialContext(ctx, u, http.Header{"Authorization": {"Bearer " + r.api.tokenNow()}})
	if resp != nil {
		r.api.heardFrom(server)
	}
	switch {
	case err == nil:
		return upgraded{conn: conn, cork: cork, server: server}, nil
	case resp != nil && resp.StatusCode >= 400:
		return upgraded{}, errorOf(resp)
	case resp != nil:
		return upgraded{}, fmt.Errorf("%w: the upgrade was answered %s", errWSRefused, resp.Status)
	case cork != nil && !silent(err) && ctx.Err() == nil: // the address took the connection, and cut the handshake
		return upgraded{}, fmt.Errorf("%w: %w", errWSCut, err)
	}
	// Not reached, or silent: a server paused, frozen or hung takes the connection and never
	// answers; it is left like one that cannot be reached.
	return upgraded{}, err
}

// wsMovesOn reports whether a failed handshake leaves the worker to try another server: one
// that cannot be reached, is silent, cut the handshake, is a standby or starting, or
// unavailable; not one that answers WebSocket with a refusal (a proxy's doing: long-polling is
// the way round it) or refuses the worker itself.
func wsMovesOn(err error) bool {
	return errors.Is(err, errWSCut) || !wsRefused(err) && !permanent(err) && failoverAnswer(err)
}

// runWS serves one WebSocket connection until it breaks or ctx ends; connected says whether it
// got as far as the server's welcome. The handshake is made as a request safe to repeat is
// sent (servers.go): hedged over the servers, the first to upgrade wins, and for a
// handshake's time the servers that stand by are asked again every 100 ms, so that the worker
// is on the new leader as soon as it leads.
func (r *runner) runWS(ctx context.Context) (connected bool, err error) {
	r.api.findLeader(ctx, true)
	rules := raceRules{safe: true, moveOn: wsMovesOn, retryFor: handshakeTimeout, patience: handshakeTimeout, hedgeAfter: r.api.hedgeAfter()}
	up, err := race(ctx, r.api, rules, r.upgrade, func(u upgraded) { u.conn.Close() })
	if err != nil {
		return false, err
	}
	conn, cork, server := up.conn, up.cork, up.server
	defer func() {
		if !connected && err != nil && silent(err) { // upgraded, then stopped answering
			r.api.failover(server, "")
		}
	}()
	defer conn.Close()
	conn.SetReadLimit(64 << 20)
	l := &wsLink{server: server, conn: conn, cork: cork, pending: map[string]ackFunc{}}
	if err := l.send(wire.Frame{Type: wire.FrameHello, Capacity: r.w.Capacity}); err != nil {
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
	if err := r.checkKey(welcome.PublicKey); err != nil {
		return false, err
	}
	r.noteToken(welcome)
	idle := 3 * time.Minute // the server pings every 20 s
	_ = conn.SetReadDeadline(time.Now().Add(idle))
	conn.SetPingHandler(func(data string) error {
		_ = conn.SetReadDeadline(time.Now().Add(idle))
		return conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(handshakeTimeout))
	})
	r.setLink(l)
	if r.w.OnConnect != nil {
		r.w.OnConnect(TransportWebSocket)
	}
	r.log.Info("connected", zap.String("transport", TransportWebSocket), zap.String("worker_id", welcome.WorkerID))
	r.creditOnConnect(l)
	readDone := make(chan struct{})
	go r.heartbeats(l, seconds(welcome.HeartbeatSeconds), readDone, true)
	go func() {
		select {
		case <-ctx.Done():
			// A stopping worker takes no more work: closing the socket ends its credit. It reads
			// on until the server's close answers its own, so that an assignment the server wrote
			// before it is read and given back (the runner is stopping), not lost in a buffer;
			// whatever the server could not write, it puts back itself. Results go over plain
			// HTTP.
			l.wmu.Lock()
			_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "worker stopping"), time.Now().Add(time.Second))
			l.wmu.Unlock()
			_ = conn.SetReadDeadline(time.Now().Add(handshakeTimeout))
		case <-readDone:
		}
	}()
	defer func() {
		r.clearLink(l) // before fail: a result it sends back must not find this link again
		l.fail()
		close(readDone)
	}()
	var f wire.Frame // one for the connection: Read resets it, and nothing keeps it
	deadline := frames.IdleDeadline{Idle: idle}
	for {
		if err := l.reader.Read(conn, &f); err != nil {
			return true, err
		}
		deadline.Extend(conn)
		switch f.Type {
		case wire.FrameAssign:
			r.start(f)
		case wire.FrameCancel:
			r.stopTask(f.LeaseID, "cancelled")
		case wire.FrameAck:
			l.deliver(f)
		}
	}
}
