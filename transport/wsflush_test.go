package transport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/transport/internal/frames"
	"github.com/tetherhq/tether/transport/internal/testtool"
	"github.com/tetherhq/tether/transport/protocol"
	"github.com/tetherhq/tether/transport/wire"
)

// serverSocket is the server's end of a test WebSocket: what its flushes wrote, syscall by
// syscall, to the hijacked connection.
type serverSocket struct {
	net.Conn
	mu     sync.Mutex
	writes int
	budget int // bytes it will still write; past it, a write is cut short and fails
}

var errCut = errors.New("the connection was cut")

func (s *serverSocket) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.writes++
	n := min(len(p), s.budget)
	s.budget -= n
	s.mu.Unlock()
	if _, err := s.Conn.Write(p[:n]); err != nil {
		return 0, err
	}
	if n < len(p) {
		return n, errCut
	}
	return n, nil
}

func (s *serverSocket) counts() (writes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

type hijackTo struct {
	http.ResponseWriter
	sock *serverSocket
}

func (h *hijackTo) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := h.ResponseWriter.(http.Hijacker).Hijack()
	if err == nil {
		h.sock.Conn = nc
	}
	return h.sock, brw, err
}

// returned is a Core that records the assignments given back.
type returned struct {
	Core
	mu   sync.Mutex
	back []actors.Assignment
}

func (r *returned) ReturnUndelivered(as ...actors.Assignment) {
	r.mu.Lock()
	r.back = append(r.back, as...)
	r.mu.Unlock()
}

// tap is the client's end: every byte the server sent, as read off the socket.
type tap struct {
	net.Conn
	mu  sync.Mutex
	buf bytes.Buffer
}

func (t *tap) Read(p []byte) (int, error) {
	n, err := t.Conn.Read(p)
	t.mu.Lock()
	t.buf.Write(p[:n])
	t.mu.Unlock()
	return n, err
}

// received parses what the server sent after its handshake, strictly (testtool.ParseWSFrames).
func (t *tap) received(tb testing.TB) (fs []testtool.WSFrame, rest []byte) {
	tb.Helper()
	t.mu.Lock()
	b := bytes.Clone(t.buf.Bytes())
	t.mu.Unlock()
	_, body, ok := bytes.Cut(b, []byte("\r\n\r\n"))
	if !ok {
		tb.Fatal("no handshake in what the server sent")
	}
	fs, rest, err := testtool.ParseWSFrames(body, false)
	if err != nil {
		tb.Fatalf("the server's bytes are not valid WebSocket: %v", err)
	}
	return fs, rest
}

// flushPair is a wsConn over a real upgraded connection, with its session's frames in the
// test's hands, and a gorilla client reading from it.
type flushPair struct {
	c      *wsConn
	frames chan any
	sock   *serverSocket
	core   *returned
	client *websocket.Conn
	tap    *tap
}

func newFlushPair(t *testing.T) *flushPair {
	t.Helper()
	p := &flushPair{frames: make(chan any, 4096), sock: &serverSocket{budget: 1 << 30}, core: &returned{}}
	ready := make(chan *wsConn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hw := &corkingWriter{ResponseWriter: &hijackTo{ResponseWriter: w, sock: p.sock}}
		conn, err := upgrader.Upgrade(hw, r, nil)
		if err != nil {
			t.Error(err)
			ready <- nil
			return
		}
		ready <- &wsConn{s: &Server{}, b: p.core, conn: conn, cork: hw.cork, log: zap.NewNop(), sess: &broker.Conn{Frames: p.frames},
			wake: make(chan struct{}, 1), readerDone: make(chan struct{})}
	}))
	t.Cleanup(srv.Close)
	d := websocket.Dialer{NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		p.tap = &tap{Conn: c}
		return p.tap, nil
	}}
	client, _, err := d.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	p.client = client
	if p.c = <-ready; p.c == nil {
		t.FailNow()
	}
	t.Cleanup(func() { p.c.conn.Close() })
	return p
}

func assignment(i, payloadBytes int) actors.Assignment {
	payload, _ := json.Marshal(map[string]string{"pad": strings.Repeat("é", payloadBytes/2)})
	return actors.Assignment{JobID: fmt.Sprintf("job-%d", i), LeaseID: fmt.Sprintf("lease-%d", i), Nonce: "n", Queue: "q", JobType: "t",
		Payload: payload, Attempt: 1, LeaseExpiresAt: time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC), HeartbeatInterval: time.Second}
}

// readFrames reads n frames with gorilla's reader and returns them.
func (p *flushPair) readFrames(t *testing.T, n int) []wire.Frame {
	t.Helper()
	var r frames.Reader
	out := make([]wire.Frame, n)
	for i := range out {
		if err := r.Read(p.client, &out[i]); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	return out
}

// Every frame queued for a connection when its writer wakes leaves in one write(2), small and
// large frames alike (a frame past the WebSocket write buffer is written by gorilla in two
// pieces), acks from the outbox first, then the session's frames in their order; gorilla's
// reader and a strict reader of the RFC read them all, whole.
func TestFlushWritesEveryQueuedFrameInOneWrite(t *testing.T) {
	p := newFlushPair(t)
	for i := range 5 {
		p.c.push(protocol.Ack(fmt.Sprint(i), nil))
	}
	sizes := []int{10, 200, 9000, 70000, 30}
	for i, n := range sizes {
		p.frames <- assignment(i, n)
	}
	p.frames <- actors.CancelNotice{JobID: "job-0", LeaseID: "lease-0"}
	before := p.sock.counts()
	if !p.c.flush(nil, true) {
		t.Fatal("the flush failed")
	}
	if got := p.sock.counts() - before; got != 1 {
		t.Errorf("the flush made %d writes, want 1", got)
	}
	got := p.readFrames(t, 5+len(sizes)+1)
	for i := range 5 {
		if got[i].Type != wire.FrameAck || got[i].Ref != fmt.Sprint(i) {
			t.Errorf("frame %d is %s %q, want ack %d", i, got[i].Type, got[i].Ref, i)
		}
	}
	for i := range sizes {
		if f := got[5+i]; f.Type != wire.FrameAssign || f.JobID != fmt.Sprintf("job-%d", i) || !json.Valid(f.Payload) {
			t.Errorf("frame %d is %s %s, want the assignment of job-%d", 5+i, f.Type, f.JobID, i)
		}
	}
	if f := got[len(got)-1]; f.Type != wire.FrameCancel {
		t.Errorf("the last frame is %s, want cancel", f.Type)
	}
	if fs, rest := p.tap.received(t); len(fs) != len(got) || len(rest) != 0 {
		t.Errorf("the strict reader read %d frames and %d bytes more, want %d frames", len(fs), len(rest), len(got))
	}
	if len(p.core.back) != 0 {
		t.Errorf("%d assignments written went back to the queue", len(p.core.back))
	}
}

// A flush bigger than flushBytesMax goes in as few writes as the bound allows, and all of it.
func TestFlushIsBounded(t *testing.T) {
	p := newFlushPair(t)
	const n, size = 40, 20000 // 800 kB: four writes of at most flushBytesMax
	for i := range n {
		p.frames <- assignment(i, size)
	}
	before := p.sock.counts()
	if !p.c.flush(nil, true) {
		t.Fatal("the flush failed")
	}
	if got, want := p.sock.counts()-before, (n*size+flushBytesMax-1)/flushBytesMax+1; got < 2 || got > want {
		t.Errorf("the flush made %d writes, want 2..%d", got, want)
	}
	for i, f := range p.readFrames(t, n) {
		if f.JobID != fmt.Sprintf("job-%d", i) {
			t.Fatalf("frame %d is job %s", i, f.JobID)
		}
	}
}

// A write cut short sends the frames before the cut whole, and gives back to the queue exactly
// the assignments it did not send whole: at every byte of the flush.
func TestFlushCutShortGivesBackWhatDidNotLeave(t *testing.T) {
	const n = 4
	var size int
	{
		var e frames.Encoder
		for i := range n {
			data, _ := e.Encode(protocol.AssignFrame(assignment(i, 100)))
			size += 2 + len(data)
			if len(data) > 125 {
				size += 2
			}
		}
	}
	for cut := 0; cut < size; cut++ {
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			p := newFlushPair(t)
			for i := range n {
				p.frames <- assignment(i, 100)
			}
			p.sock.mu.Lock()
			p.sock.budget = cut
			p.sock.mu.Unlock()
			if p.c.flush(nil, true) {
				t.Fatal("a flush cut short reported success")
			}
			_, _ = io.Copy(io.Discard, p.tap) // what arrived before the server closed its end
			fs, _ := p.tap.received(t)
			whole := len(fs)
			if len(p.core.back) != n-whole {
				t.Fatalf("cut at %d: %d frames arrived whole and %d assignments went back, want %d", cut, whole, len(p.core.back), n-whole)
			}
			for i, a := range p.core.back {
				if a.JobID != fmt.Sprintf("job-%d", whole+i) {
					t.Errorf("cut at %d: gave back %s at %d", cut, a.JobID, i)
				}
			}
		})
	}
}

// A pong the server's reader writes while the writer's cork is in leaves in the flush, whole,
// between the frames written before and after it.
func TestPongInAFlushIsWhole(t *testing.T) {
	p := newFlushPair(t)
	before := p.sock.counts()
	p.c.cork.Cork()
	p.c.write(protocol.Ack("before", nil))
	if err := p.client.WriteControl(websocket.PingMessage, []byte("are you there"), time.Now().Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := p.client.WriteMessage(websocket.TextMessage, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	// The server's reader answers the ping on its way to the message after it.
	if _, _, err := p.c.conn.NextReader(); err != nil {
		t.Fatal(err)
	}
	p.c.write(protocol.Ack("after", nil))
	if _, err := p.c.cork.Uncork(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := p.sock.counts() - before; got != 1 {
		t.Errorf("the flush made %d writes, want 1", got)
	}
	p.readFrames(t, 2) // and the pong on the way
	fs, _ := p.tap.received(t)
	if len(fs) != 3 || fs[0].Opcode != testtool.OpText || fs[1].Opcode != testtool.OpPong || string(fs[1].Payload) != "are you there" ||
		fs[2].Opcode != testtool.OpText {
		t.Errorf("the server sent %+v, want text, pong, text", fs)
	}
}

// Pings the client sends while the server flushes are answered by pongs that the strict reader
// finds whole, between whole frames, with the payloads sent, in order (run it with -race: the
// cork is shared by the writer and the reader's pongs).
func TestPongsDuringFlushesStayWhole(t *testing.T) {
	p := newFlushPair(t)
	go func() { // the server's reader, whose ping handler writes the pongs
		for {
			if _, _, err := p.c.conn.NextReader(); err != nil {
				return
			}
		}
	}()
	const pings, batches, perBatch = 200, 100, 20
	done := make(chan error, 1)
	go func() {
		var r frames.Reader
		var f wire.Frame
		for range batches * perBatch {
			if err := r.Read(p.client, &f); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	go func() {
		for i := range pings {
			if err := p.client.WriteControl(websocket.PingMessage, []byte(fmt.Sprint("ping ", i)), time.Now().Add(10*time.Second)); err != nil {
				return
			}
		}
	}()
	for b := range batches {
		for i := range perBatch {
			p.frames <- assignment(b*perBatch+i, 50*i)
		}
		if !p.c.flush(nil, true) {
			t.Fatal("a flush failed")
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	fs, _ := p.tap.received(t)
	var assigns, got int
	for _, f := range fs {
		switch f.Opcode {
		case testtool.OpText:
			assigns++
		case testtool.OpPong:
			if want := fmt.Sprint("ping ", got); string(f.Payload) != want {
				t.Fatalf("pong %d says %q, want %q", got, f.Payload, want)
			}
			got++
		}
	}
	if assigns != batches*perBatch {
		t.Errorf("%d assignments arrived, want %d", assigns, batches*perBatch)
	}
}

// A close frame the reader writes into a flush leaves with the frames before it, none after it:
// an assignment behind it goes back to the queue, and the worker reads the close code.
func TestCloseInAFlushLeavesLast(t *testing.T) {
	p := newFlushPair(t)
	p.c.cork.Cork()
	p.c.write(protocol.Ack("before", nil))
	p.c.closeWith(websocket.CloseMessageTooBig, "a frame is larger than the limit") // the reader's
	p.frames <- assignment(1, 10)
	if p.c.flush(nil, true) {
		t.Fatal("a flush after a close frame reported the connection working")
	}
	got := p.readFrames(t, 1)
	if got[0].Ref != "before" {
		t.Errorf("the worker read %+v, want the ack before the close", got[0])
	}
	var f wire.Frame
	var r frames.Reader
	var ce *websocket.CloseError
	if err := r.Read(p.client, &f); !errors.As(err, &ce) || ce.Code != websocket.CloseMessageTooBig {
		t.Errorf("after the ack the worker read %v, want the close frame", err)
	}
	if len(p.core.back) != 1 || p.core.back[0].JobID != "job-1" {
		t.Errorf("went back to the queue: %+v, want job-1", p.core.back)
	}
}
