package transport

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/transport/internal/frames"
	"github.com/tetherhq/tether/transport/protocol"
	"github.com/tetherhq/tether/transport/wire"
)

// WebSocket limits and timings.
const (
	// FrameBytesMax caps one frame from a worker: a completion with the largest output.
	FrameBytesMax = actors.OutputBytesMax + envelopeBytes
	// PingInterval keeps NAT paths open and finds dead connections; a connection that sends
	// nothing, not even a pong, for ReadIdleTimeout is closed.
	PingInterval    = 20 * time.Second
	ReadIdleTimeout = 3 * PingInterval
	helloTimeout    = 10 * time.Second
	frameWriteWait  = 10 * time.Second
	// InFlightMax caps the operations of one connection the broker has not answered yet; the
	// server stops reading the connection until one is answered.
	InFlightMax = 256
)

var upgrader = websocket.Upgrader{
	ReadBufferSize:  4096,
	WriteBufferSize: 4096,
	// Workers are programs, not pages: they authenticate with a header a browser cannot set
	// on a WebSocket, so the origin proves nothing either way.
	CheckOrigin: func(*http.Request) bool { return true },
	Error: func(w http.ResponseWriter, _ *http.Request, status int, reason error) {
		code := wire.CodeBadHandshake
		if status == http.StatusMethodNotAllowed {
			code = wire.CodeMethodNotAllowed
		}
		writeError(w, errorf(code, "%v", reason))
	},
}

// connect serves GET /v1/worker/connect: the worker protocol over WebSocket (docs/design.md §5).
func (s *Server) connect(r *request) error {
	if !websocket.IsWebSocketUpgrade(r.Request) {
		return errorf(wire.CodeBadHandshake, "this endpoint speaks WebSocket; use POST /v1/worker/lease to long-poll")
	}
	hw := &corkingWriter{ResponseWriter: r.w}
	conn, err := upgrader.Upgrade(hw, r.Request, http.Header{RequestIDHeader: {r.Header.Get(RequestIDHeader)}})
	if err != nil {
		return nil // the upgrader answered
	}
	s.conns.Add(1)
	defer s.conns.Done()
	c := &wsConn{s: s, b: r.b, conn: conn, cork: hw.cork, worker: r.by.worker.ID, publicKey: r.by.worker.PublicKey, token: bearer(r.Request), log: s.log.With(zap.String("worker_id", r.by.worker.ID), zap.String("request_id", r.Header.Get(RequestIDHeader))),
		wake: make(chan struct{}, 1), readerDone: make(chan struct{}), inFlight: make(chan struct{}, InFlightMax),
		reader: frames.Reader{Check: func(data []byte) error { return checkJSON(data, "a frame") }}}
	c.serve()
	return nil
}

// corkingWriter hands the upgrader the hijacked connection under a cork, through which the
// connection's writer sends every frame queued at once in one write(2).
type corkingWriter struct {
	http.ResponseWriter
	cork *frames.Cork
}

func (w *corkingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("the response cannot be hijacked")
	}
	nc, brw, err := h.Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.cork = &frames.Cork{Conn: nc}
	return w.cork, brw, nil
}

type wsConn struct {
	s         *Server
	b         Core
	conn      *websocket.Conn
	cork      *frames.Cork // under conn: the writer's flushes
	worker    string
	publicKey string
	token     string // the worker token in force: the one it connected with, or its renewal
	log       *zap.Logger
	sess      *broker.Conn

	// outbox holds frames for the writer: acks pushed from actor goroutines, which must not
	// block. Its size is bounded by inFlight.
	mu         sync.Mutex
	outbox     []wire.Frame
	wake       chan struct{}
	readerDone chan struct{}
	inFlight   chan struct{}

	reader  frames.Reader  // the reader's
	encoder frames.Encoder // the writer's
	batch   []wire.Frame   // the writer's: the outbox it took
	sent    []sentAssign   // the writer's: the assignments in the flush it is making
}

// sentAssign is an assignment in a flush, and the offset in the flush at which its frame ends:
// it reached the worker's socket only if the flush wrote that far.
type sentAssign struct {
	a   actors.Assignment
	end int
}

func (c *wsConn) serve() {
	defer c.conn.Close()
	c.conn.SetReadLimit(FrameBytesMax)
	_ = c.conn.SetReadDeadline(time.Now().Add(helloTimeout))
	var hello wire.Frame
	err := c.read(&hello)
	var refused *apiError // checkJSON's: not UTF-8, a key twice, too deep, not I-JSON
	if errors.As(err, &refused) {
		c.closeWith(websocket.CloseInvalidFramePayloadData, refused.message)
		return
	}
	if err != nil || hello.Type != wire.FrameHello || hello.Capacity < 0 || hello.Capacity > actors.CapacityMax {
		c.closeWith(websocket.ClosePolicyViolation, "the first frame must be hello{capacity} with capacity 0..1000")
		return
	}
	ctx, cancel := contextFor(c.s.shutdown, helloTimeout)
	sess, err := c.b.Connect(ctx, c.worker, "websocket", hello.Capacity)
	cancel()
	if err != nil {
		e := toAPIError(err)
		c.closeWith(wire.CloseOf(e.code), e.message)
		return
	}
	c.sess = sess
	welcome := wire.Frame{Type: wire.FrameWelcome, WorkerID: c.worker, HeartbeatSeconds: sess.HeartbeatInterval.Seconds(), LeaseTTLSeconds: sess.LeaseTTL.Seconds(),
		PublicKey: c.publicKey}
	c.hintToken(&welcome)
	c.push(welcome)
	_ = c.conn.SetReadDeadline(time.Now().Add(ReadIdleTimeout))
	c.conn.SetPongHandler(func(string) error { return c.conn.SetReadDeadline(time.Now().Add(ReadIdleTimeout)) })
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	c.readLoop()
	close(c.readerDone)
	sess.Close()
	<-writerDone
	// What the session sent that the writer never wrote did not reach the worker: those jobs go
	// back to the queue with no attempt spent. The session's last frame closes the channel.
	for f := range sess.Frames {
		if a, ok := f.(actors.Assignment); ok {
			c.b.ReturnUndelivered(a)
		}
	}
}

func (c *wsConn) read(f *wire.Frame) error { return c.reader.Read(c.conn, f) }

func (c *wsConn) closeWith(code int, reason string) {
	if len(reason) > 120 { // a close frame's reason is at most 123 bytes, of UTF-8
		reason = strings.ToValidUTF8(reason[:120], "")
	}
	_ = c.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(frameWriteWait))
}

func (c *wsConn) push(f wire.Frame) {
	c.mu.Lock()
	c.outbox = append(c.outbox, f)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// writeLoop is the connection's one writer: acks and welcome from the outbox, assignments and
// cancel notices from the session, pings, and the close frame when the session ends.
func (c *wsConn) writeLoop() {
	ping := time.NewTicker(PingInterval)
	defer ping.Stop()
	for {
		select {
		case <-c.wake:
			if !c.flush(nil, true) {
				return
			}
		case f, ok := <-c.sess.Frames:
			if !c.flush(f, ok) {
				return
			}
		case <-ping.C:
			if c.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(frameWriteWait)) != nil {
				return
			}
		case <-c.readerDone:
			return
		}
	}
}

// flushBytesMax bounds one flush: past it, the frames still queued go in the next write.
const flushBytesMax = 256 << 10

// flush writes every frame queued for the connection, first (a frame from the session, if
// not nil; open false if the session's channel was found closed) and what the outbox and the
// session hold, in one write(2) per flushBytesMax, and reports whether the connection still
// works. It never waits for more frames: it writes as soon as the queues are empty. An
// assignment whose frame the write did not wholly send goes back to the queue. A frame that
// cannot go in (the connection failed, or the reader sent a close frame, after which gorilla
// takes no data frame) ends the flush, which still sends what it holds, a close frame among
// it, and then closes the connection.
func (c *wsConn) flush(first any, open bool) bool {
	for {
		c.cork.Cork()
		c.sent = c.sent[:0]
		more, end, ok := c.gather(first, open)
		first = nil
		n, err := c.cork.Uncork(time.Now().Add(frameWriteWait))
		if i := c.unsent(n); i < len(c.sent) {
			back := make([]actors.Assignment, 0, len(c.sent)-i)
			for _, s := range c.sent[i:] {
				back = append(back, s.a)
			}
			c.b.ReturnUndelivered(back...)
		}
		clear(c.sent) // keeps no payload alive
		if err != nil || !ok {
			_ = c.conn.Close()
			return false
		}
		if end != nil {
			code, text := closeCodeOf(end.Reason)
			c.closeWith(code, text)
			_ = c.conn.Close() // the reader sees it and ends
			return false
		}
		if !open {
			return false
		}
		if !more {
			return true
		}
	}
}

// unsent is the index of the first assignment of the flush that a write of n bytes did not
// wholly send.
func (c *wsConn) unsent(n int) int {
	for i, s := range c.sent {
		if s.end > n {
			return i
		}
	}
	return len(c.sent)
}

// gather writes the frames queued for the connection into the cork, first, if not nil, then
// the outbox's and the session's, until both are empty (more false) or the flush is full. It
// stops at the session's end, and returns it; ok is false if the connection failed.
func (c *wsConn) gather(first any, open bool) (more bool, end *actors.SessionEnded, ok bool) {
	if first != nil {
		if end, ok = c.writeSession(first); end != nil || !ok {
			return false, end, ok
		}
	}
	for open {
		took := false
		c.mu.Lock()
		c.batch = append(c.batch[:0], c.outbox...)
		clear(c.outbox)
		c.outbox = c.outbox[:0]
		c.mu.Unlock()
		for i, f := range c.batch {
			if !c.write(f) {
				clear(c.batch)
				return false, nil, false
			}
			c.batch[i] = wire.Frame{}
			took = true
		}
	session:
		for c.cork.Held() < flushBytesMax {
			select {
			case f, isOpen := <-c.sess.Frames:
				if !isOpen {
					return false, nil, true
				}
				if end, ok = c.writeSession(f); end != nil || !ok {
					return false, end, ok
				}
				took = true
			default:
				break session
			}
		}
		if !took {
			return false, nil, true
		}
		if c.cork.Held() >= flushBytesMax {
			return true, nil, true
		}
	}
	return false, nil, true
}

// writeSession writes one frame from the session into the cork; end is the session's end, which
// is not written here (its close frame follows the flush).
func (c *wsConn) writeSession(f any) (end *actors.SessionEnded, ok bool) {
	switch m := f.(type) {
	case actors.Assignment:
		written, ok := c.writeFrame(c.s.assignFrame(m))
		if written {
			c.sent = append(c.sent, sentAssign{a: m, end: c.cork.Held()})
		} else {
			c.b.ReturnUndelivered(m)
		}
		return nil, ok
	case actors.CancelNotice:
		return nil, c.write(protocol.CancelFrame(m))
	case actors.SessionEnded:
		return &m, true
	}
	return nil, true
}

// sessionCloses is the close code and text of a worker's WebSocket for each reason its session
// ends in the log (eventlog.SessionEndReasons); TestEveryEndHasACloseCode holds it to that list.
var sessionCloses = map[string]struct {
	code int
	text string
}{
	eventlog.EndedShutdown:         {websocket.CloseGoingAway, "the server is shutting down; reconnect later or elsewhere"},
	eventlog.EndedRevoked:          {wire.CloseWorkerRevoked, "the worker was revoked"},
	eventlog.EndedHeartbeatTimeout: {wire.CloseHeartbeatMissed, "no heartbeat for three intervals"},
	eventlog.EndedClosed:           {wire.CloseSessionReplaced, "the session was closed: a newer connection of this worker took over, or the server restarted the session"},
}

// closeCodeOf returns the close code and text for a session that ended for reason. A reason
// without a row (none today) closes normally, saying what it is, and claims nothing more.
func closeCodeOf(reason string) (int, string) {
	if c, ok := sessionCloses[reason]; ok {
		return c.code, c.text
	}
	return websocket.CloseNormalClosure, "the session ended: " + clip(reason)
}

// write writes one frame into the flush under way and reports whether the connection still
// works; written says whether the frame went into it (a frame that cannot be encoded is logged
// and skipped). The flush's Uncork sends it.
func (c *wsConn) write(f wire.Frame) bool {
	_, ok := c.writeFrame(f)
	return ok
}

func (c *wsConn) writeFrame(f wire.Frame) (written, ok bool) {
	data, err := c.encoder.Encode(f)
	if err != nil {
		c.log.Error("a frame could not be encoded", zap.String("code", "FRAME_UNENCODABLE"), zap.String("type", f.Type),
			zap.String("job_id", f.JobID), zap.Error(err))
		return false, true
	}
	if err := c.conn.WriteMessage(websocket.TextMessage, data); err != nil {
		return false, false // the flush sends what it holds (a close frame, say), then closes
	}
	return true, true
}

func (c *wsConn) readLoop() {
	var f wire.Frame // one for the connection: read resets it, and handle takes a copy
	deadline := frames.IdleDeadline{Idle: ReadIdleTimeout}
	for {
		if err := c.read(&f); err != nil {
			var syntax *json.SyntaxError
			var typ *json.UnmarshalTypeError
			var refused *apiError // checkJSON's
			switch {
			case errors.Is(err, websocket.ErrReadLimit):
				c.closeWith(websocket.CloseMessageTooBig, "a frame is larger than the limit")
			case errors.As(err, &syntax), errors.As(err, &typ):
				c.closeWith(websocket.CloseInvalidFramePayloadData, "a frame is not a JSON object of the worker protocol")
			case errors.As(err, &refused):
				c.closeWith(websocket.CloseInvalidFramePayloadData, refused.message)
			}
			return
		}
		deadline.Extend(c.conn)
		c.sess.Touch(c.s.clock())
		c.handle(f)
	}
}

func (c *wsConn) ack(ref string, err error) wire.Frame {
	if err == nil {
		return protocol.Ack(ref, nil)
	}
	e := toAPIError(err)
	return protocol.Ack(ref, &actors.Rejection{Code: actors.Code(e.code), Message: e.message, Details: e.details})
}

func invalid(format string, args ...any) error {
	return errorf(actors.CodeInvalidArgument, format, args...)
}

// handle acts on one frame. Operations the broker answers later are sent now, in frame order,
// and acknowledged from the broker's callback; the reader goes on meanwhile.
func (c *wsConn) handle(f wire.Frame) {
	switch f.Type {
	case wire.FrameCredit:
		if f.N < 1 || f.N > actors.CapacityMax {
			c.push(c.ack(f.Ref, invalid("credit n must be 1..%d", actors.CapacityMax)))
			return
		}
		c.sess.Credit(f.N)
		if f.Ref != "" {
			c.push(c.ack(f.Ref, nil))
		}
	case wire.FrameHeartbeat:
		if len(f.Leases) > actors.CapacityMax {
			c.push(c.ack(f.Ref, invalid("a heartbeat lists at most %d leases", actors.CapacityMax)))
			return
		}
		c.inFlight <- struct{}{}
		ref := f.Ref // the callbacks keep the ref, not the frame
		c.sess.HeartbeatAsync(f.Leases, func(ack actors.HeartbeatAck, err error) {
			a := c.ack(ref, err)
			a.Cancel, a.Unknown = ack.CancelRequested, ack.Unknown
			if err == nil {
				c.hintToken(&a)
			}
			c.done(a)
		})
	case wire.FrameRenew:
		c.inFlight <- struct{}{}
		go c.renew(f.Ref) // a call into the tenant's actor: the reader goes on meanwhile
	case wire.FrameEvent, wire.FrameComplete, wire.FrameFail, wire.FrameRelease:
		op, err := protocol.WorkerOp(c.worker, f.JobID, f)
		if err != nil {
			c.push(c.ack(f.Ref, err))
			return
		}
		c.inFlight <- struct{}{}
		ref := f.Ref
		reported := c.s.reported(f, c.worker)
		c.b.WorkerOp(op, func(n int, rc actors.Receipt, err error) {
			reported(err)
			a := c.ack(ref, err)
			if err == nil {
				a.Number, a.Receipt = n, new(receipt(rc))
			}
			c.done(a)
		})
	default:
		c.push(c.ack(f.Ref, invalid("frame type %q is not one a worker sends after hello", clip(f.Type))))
	}
}

// hintToken adds to f what the worker should know of its token (tokenHint).
func (c *wsConn) hintToken(f *wire.Frame) {
	var w projections.Worker
	c.b.Read(func(s *projections.Set) { w, _ = s.Worker(c.worker) })
	expires, renewIn := tokenHint(w, c.s.clock())
	f.TokenExpiresAt, f.TokenRenewSeconds = &expires, &renewIn
}

// renew renews the worker's token and acks with the new one, which the connection then holds.
func (c *wsConn) renew(ref string) {
	c.mu.Lock()
	presented := c.token
	c.mu.Unlock()
	var w projections.Worker
	c.b.Read(func(s *projections.Set) { w, _ = s.Worker(c.worker) })
	ctx, cancel := contextFor(c.s.shutdown, renewTimeout)
	rt, err := c.b.RenewWorkerToken(ctx, w, presented)
	cancel()
	a := c.ack(ref, err)
	if err == nil {
		c.mu.Lock()
		c.token = rt.Token
		c.mu.Unlock()
		a.WorkerToken, a.TokenExpiresAt, a.Receipt = rt.Token, &rt.ExpiresAt, new(receipt(rt.Receipt))
	}
	c.done(a)
}

// renewTimeout bounds a token renewal over the WebSocket.
const renewTimeout = 30 * time.Second

// done pushes the ack of an operation the broker answered and frees its in-flight slot.
func (c *wsConn) done(a wire.Frame) {
	c.push(a)
	<-c.inFlight
}
