package client

import (
	"net"
	"sync"
)

// corkConn is a net.Conn whose writes can be held back and sent as one, so that a result and
// the credit for the slot it frees leave in one TCP write and the server reads them with one
// syscall. Uncorked, a write goes straight through: the WebSocket handshake and control frames
// written while nothing is corked are not delayed.
type corkConn struct {
	net.Conn
	mu     sync.Mutex
	corked bool
	held   []byte
}

func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corked {
		c.held = append(c.held, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *corkConn) cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

// uncork sends what was held back, in one write.
func (c *corkConn) uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	if len(c.held) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.held)
	if cap(c.held) > 64<<10 {
		c.held = nil // a large output passed through; do not keep its buffer
	} else {
		c.held = c.held[:0]
	}
	return err
}
