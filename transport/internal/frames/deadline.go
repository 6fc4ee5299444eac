package frames

import (
	"time"

	"github.com/gorilla/websocket"
)

// idleSlack is how stale a read deadline IdleDeadline may leave: it moves the deadline only
// once the last move is this old.
const idleSlack = time.Second

// IdleDeadline keeps a connection's read deadline Idle past the last frame read, less at most
// idleSlack. Moving a deadline is a change to the runtime's timers, under their lock: once a
// second, not once a frame, is all a timeout of seconds or minutes needs. It is the reader's,
// not safe for concurrent use; a deadline set elsewhere (a pong's, a close's) stands until the
// next move.
type IdleDeadline struct {
	Idle  time.Duration
	moved time.Time // when Extend last moved it
}

// Extend moves the deadline to Idle from now, unless it moved less than idleSlack ago.
func (d *IdleDeadline) Extend(conn *websocket.Conn) {
	now := time.Now()
	if now.Sub(d.moved) < idleSlack {
		return
	}
	d.moved = now
	_ = conn.SetReadDeadline(now.Add(d.Idle))
}
