package client

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/transport/internal/frames"
	"github.com/tetherhq/tether/transport/internal/testtool"
	"github.com/tetherhq/tether/transport/wire"
)

// countedConn counts the writes that reach the socket.
type countedConn struct {
	net.Conn
	mu     sync.Mutex
	writes int
}

func (c *countedConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes++
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *countedConn) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes
}

// sentFrames is what a worker sent a raw server, read as strictly as the RFC reads a client.
type sentFrames struct {
	texts  []wire.Frame // every frame but credit
	credit int          // the credit granted, in all
}

// rawServer answers one WebSocket handshake by hand and reads what the client sends after it,
// until until says it has all it waits for; it returns it on the channel.
func rawServer(t *testing.T, until func(sentFrames) bool) (addr string, got <-chan sentFrames) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan sentFrames, 1)
	go func() {
		defer close(ch)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			t.Error(err)
			return
		}
		h := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
			base64.StdEncoding.EncodeToString(h[:]))
		var raw []byte
		var s sentFrames
		buf := make([]byte, 64<<10)
		for {
			n, rerr := br.Read(buf)
			fs, rest, err := testtool.ParseWSFrames(append(raw, buf[:n]...), true)
			if err != nil {
				t.Errorf("the worker's bytes are not valid WebSocket: %v", err)
				return
			}
			raw = append([]byte(nil), rest...)
			for _, f := range fs {
				var w wire.Frame
				if f.Opcode != testtool.OpText || json.Unmarshal(f.Payload, &w) != nil {
					t.Errorf("the worker sent %#x %q", f.Opcode, f.Payload)
					return
				}
				if w.Type == wire.FrameCredit {
					if w.N < 1 || w.N > actors.CapacityMax {
						t.Errorf("a credit frame grants %d", w.N)
					}
					s.credit += w.N
				} else {
					s.texts = append(s.texts, w)
				}
			}
			if until(s) || rerr != nil {
				ch <- s
				return
			}
		}
	}()
	return ln.Addr().String(), ch
}

// testLink is a wsLink to addr, its writes counted under its cork.
func testLink(t *testing.T, addr string) (*wsLink, *countedConn) {
	t.Helper()
	var counted *countedConn
	var cork *frames.Cork
	d := websocket.Dialer{NetDial: func(network, addr string) (net.Conn, error) {
		c, err := net.Dial(network, addr)
		if err != nil {
			return nil, err
		}
		counted = &countedConn{Conn: c}
		cork = &frames.Cork{Conn: counted}
		return cork, nil
	}}
	conn, _, err := d.Dial("ws://"+addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &wsLink{conn: conn, cork: cork, pending: map[string]ackFunc{}}, counted
}

// What is posted while a flush is under way leaves in the next write, all of it: the results in
// their order, and their credit in one frame after them.
func TestPostedFramesLeaveInOneWrite(t *testing.T) {
	addr, got := rawServer(t, func(s sentFrames) bool { return len(s.texts) == 10 && s.credit == 12 })
	l, counted := testLink(t, addr)
	l.flushing = true // a flush is under way: what is posted now waits for its next round
	for i := range 10 {
		l.post(wire.Frame{Type: wire.FrameComplete, Ref: fmt.Sprint(i), JobID: fmt.Sprint("job-", i), Output: json.RawMessage(`{"ok":true}`)}, 1,
			func(err error) { t.Errorf("result %d: %v", i, err) })
	}
	l.post(wire.Frame{}, 2, nil)
	before := counted.count()
	l.flushQueue()
	if n := counted.count() - before; n != 1 {
		t.Errorf("the flush made %d writes, want 1", n)
	}
	s := <-got
	for i, f := range s.texts {
		if f.Type != wire.FrameComplete || f.Ref != fmt.Sprint(i) {
			t.Errorf("frame %d is %s %q", i, f.Type, f.Ref)
		}
	}
	if len(s.texts) != 10 || s.credit != 12 {
		t.Errorf("the server got %d results and %d credit, want 10 and 12", len(s.texts), s.credit)
	}
	if l.flushing || len(l.queue) != 0 {
		t.Error("the link is left flushing, or with a queue")
	}
}

// Results posted from many goroutines at once all arrive, whole and each poster's in order,
// with every credit granted once (run it with -race).
func TestConcurrentPostsAllArrive(t *testing.T) {
	const posters, each = 50, 20
	addr, got := rawServer(t, func(s sentFrames) bool { return len(s.texts) == posters*each && s.credit == posters*each })
	l, _ := testLink(t, addr)
	var wg sync.WaitGroup
	for p := range posters {
		wg.Go(func() {
			for i := range each {
				l.post(wire.Frame{Type: wire.FrameEvent, Ref: fmt.Sprintf("%d-%d", p, i), JobID: strings.Repeat("j", p*40)}, 1,
					func(err error) { t.Errorf("frame %d-%d: %v", p, i, err) })
			}
		})
	}
	wg.Wait()
	s := <-got
	next := make([]int, posters)
	for _, f := range s.texts {
		var p, i int
		if _, err := fmt.Sscanf(f.Ref, "%d-%d", &p, &i); err != nil || i != next[p] {
			t.Fatalf("frame %q arrived out of its poster's order (next %v)", f.Ref, next)
		}
		next[p]++
	}
	if len(s.texts) != posters*each || s.credit != posters*each {
		t.Errorf("the server got %d frames and %d credit, want %d of each", len(s.texts), s.credit, posters*each)
	}
}

// A write that fails tells every frame of its batch, and the credit in a flush is split into
// frames the server takes.
func TestFailedWriteTellsEveryFrame(t *testing.T) {
	addr, got := rawServer(t, func(s sentFrames) bool { return s.credit == 2500 })
	l, _ := testLink(t, addr)
	l.post(wire.Frame{}, 2500, nil)
	if s := <-got; s.credit != 2500 {
		t.Fatalf("the server got %d credit, want 2500", s.credit)
	}
	if creditMax != actors.CapacityMax {
		t.Errorf("creditMax is %d, the server's actors.CapacityMax %d", creditMax, actors.CapacityMax)
	}
	_ = l.conn.Close()
	var told []error
	l.flushing = true
	for range 3 {
		l.post(wire.Frame{Type: wire.FrameComplete, JobID: "j"}, 1, func(err error) { told = append(told, err) })
	}
	l.flushQueue()
	if len(told) != 3 || told[0] == nil {
		t.Errorf("a failed write told %v, want an error for each of 3 frames", told)
	}
}
