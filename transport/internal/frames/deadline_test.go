package frames

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// deadlineConn records the read deadlines set on it.
type deadlineConn struct {
	net.Conn
	mu  sync.Mutex
	set []time.Time
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.set = append(c.set, t)
	c.mu.Unlock()
	return nil
}

// A read deadline is moved once, not once a frame, for frames read within a second, and it
// is then Idle past the frame that moved it.
func TestIdleDeadlineMovesOnceASecond(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, err := (&websocket.Upgrader{}).Upgrade(w, r, nil); err == nil {
			_, _, _ = c.ReadMessage() // until the client closes
			c.Close()
		}
	}))
	defer srv.Close()
	var dc *deadlineConn
	dialer := websocket.Dialer{NetDial: func(network, addr string) (net.Conn, error) {
		c, err := net.Dial(network, addr)
		dc = &deadlineConn{Conn: c}
		return dc, err
	}}
	conn, _, err := dialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dc.mu.Lock()
	dc.set = nil // the handshake's
	dc.mu.Unlock()
	d := IdleDeadline{Idle: time.Minute}
	before := time.Now()
	for range 1000 {
		d.Extend(conn)
	}
	dc.mu.Lock()
	set := append([]time.Time(nil), dc.set...)
	dc.mu.Unlock()
	// A thousand calls take far less than a second; on a stalled machine, one more move.
	if len(set) < 1 || len(set) > 2 {
		t.Fatalf("1000 frames moved the deadline %d times, want 1 (2 if a second passed)", len(set))
	}
	if got := set[0].Sub(before); got < time.Minute || got > time.Minute+time.Second*10 {
		t.Errorf("the deadline is %s after the first frame, want Idle (1m)", got)
	}
}
