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

// runWS serves one WebSocket connection until it breaks or ctx ends; connected says whether it
// got as far as the server's welcome.
func (r *runner) runWS(ctx context.Context) (connected bool, err error) {
	server := r.api.Server()
	u, err := wsURL(server)
	if err != nil {
		return false, err
	}
	defer func() {
		if !connected && err != nil {
			r.api.failoverErr(server, err)
		}
	}()
	var cork *corkConn
	dialer := websocket.Dialer{HandshakeTimeout: handshakeTimeout, Proxy: http.ProxyFromEnvironment, TLSClientConfig: r.w.TLSConfig,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			cork = &corkConn{Conn: c}
			return cork, nil
		}}
	conn, resp, err := dialer.DialContext(ctx, u, http.Header{"Authorization": {"Bearer " + r.api.tokenNow()}})
	switch {
	case err == nil:
	case resp != nil && resp.StatusCode >= 400:
		return false, errorOf(resp)
	case resp != nil:
		return false, fmt.Errorf("%w: the upgrade was answered %s", errWSRefused, resp.Status)
	case cork != nil && ctx.Err() == nil: // the address answered, the handshake did not
		return false, fmt.Errorf("%w: %w", errWSRefused, err)
	default:
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
	go r.heartbeats(l, seconds(welcome.HeartbeatSeconds), readDone)
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
	for {
		if err := l.reader.Read(conn, &f); err != nil {
			return true, err
		}
		_ = conn.SetReadDeadline(time.Now().Add(idle))
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
