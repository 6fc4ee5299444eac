package frames

import (
	"net"
	"sync"
	"time"
)

// Cork is a net.Conn under a WebSocket connection whose writes can be held back and sent as
// one write(2): a writer corks it, writes every frame it has through the WebSocket connection
// (which frames them, and holds its own lock across each frame's writes), and uncorks it, so
// that the frames queued for a connection leave in one syscall. Uncorked, a write goes straight
// through: the handshake, and control frames written while nothing is corked, are not delayed.
//
// A control frame another goroutine writes while the cork is in (a pong, a close) is held
// with the rest, after the frames before it: every Write is one whole buffer of the WebSocket
// connection's, taken under mu, and the WebSocket connection's own lock keeps a frame's
// buffers together, so the bytes on the wire are whole frames in the order they were written.
//
// INVARIANT: nothing writes to Conn but Write and Uncork, under mu; a write deadline set
// while the cork is in is the flush's (Uncork's), not the caller's, because the bytes leave in
// the flush.
type Cork struct {
	net.Conn
	mu     sync.Mutex
	corked bool
	held   []byte
	// deadline is the write deadline Conn has, as set through the Cork.
	deadline time.Time
}

// Write holds p back while the cork is in, and writes it otherwise.
func (c *Cork) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corked {
		c.held = append(c.held, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// SetWriteDeadline sets the deadline of the writes that go straight through; while the cork is
// in, it does nothing: what is written now leaves with the flush, by Uncork's deadline. It waits
// for a flush in flight, so that a flush keeps its own deadline to the end.
func (c *Cork) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corked {
		return nil
	}
	return c.setWriteDeadline(t)
}

// setWriteDeadline sets Conn's write deadline; c.mu is held.
func (c *Cork) setWriteDeadline(t time.Time) error {
	c.deadline = t
	return c.Conn.SetWriteDeadline(t)
}

// SetDeadline sets the read deadline, and the write deadline as SetWriteDeadline does.
func (c *Cork) SetDeadline(t time.Time) error {
	if err := c.Conn.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// Cork holds back the writes that follow, until Uncork.
func (c *Cork) Cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

// Held is the number of bytes held back since Cork: the offset at which the next write would
// start in the flush.
func (c *Cork) Held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.held)
}

// Uncork sends what was held back, in one write with the given deadline (none if zero), and
// lets later writes through. A deadline already set less than idleSlack before the one given
// stands: moving it is a change to the runtime's timers, and a connection that writes many
// times a second would move it on every flush for nothing. It returns how many of the held
// bytes were written: every byte when err is nil, fewer when it is not.
func (c *Cork) Uncork(deadline time.Time) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	if len(c.held) == 0 {
		return 0, nil
	}
	var err error
	if early := deadline.Sub(c.deadline); deadline.IsZero() != c.deadline.IsZero() || early < 0 || early >= idleSlack {
		err = c.setWriteDeadline(deadline)
	}
	n := 0
	if err == nil {
		n, err = c.Conn.Write(c.held)
	}
	if cap(c.held) > keepMax {
		c.held = nil // a large output passed through; do not keep its buffer
	} else {
		c.held = c.held[:0]
	}
	return n, err
}
