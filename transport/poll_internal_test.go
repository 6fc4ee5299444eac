package transport

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tetherhq/tether/actors/broker"
)

// connectStalls is a broker whose sessions take as long to open as the test likes: an fsync that
// stalls.
type connectStalls struct {
	Core
	began, resume chan struct{}
}

func (c *connectStalls) Connect(ctx context.Context, _, _ string, _ int) (*broker.Conn, error) {
	close(c.began)
	select {
	case <-c.resume:
	case <-ctx.Done():
	}
	return nil, errors.New("the log stopped")
}

// A long-poll worker's request that gives up while another of its requests opens the session
// (an fsync) returns at once: the session's mutex is not held across the broker's Connect. (It
// was, and the request waited for the fsync, however long, whatever its context said.)
func TestPollSessionOpensWithNoLockHeld(t *testing.T) {
	t.Parallel()
	polls := &pollSessions{sessions: map[string]*pollSession{}}
	ps := polls.acquire("w1")
	b := &connectStalls{began: make(chan struct{}), resume: make(chan struct{})}
	opened := make(chan error, 1)
	go func() {
		_, _, err := ps.session(context.Background(), b)
		opened <- err
	}()
	<-b.began
	gaveUp, cancel := context.WithCancel(context.Background())
	cancel()
	answered := make(chan error, 1)
	go func() {
		_, _, err := polls.acquire("w1").session(gaveUp, b)
		answered <- err
	}()
	select {
	case err := <-answered:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the request that gave up: %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a request that gave up still waits for another's session to open")
	}
	close(b.resume)
	if err := <-opened; err == nil {
		t.Fatal("the session opened on a log that stopped")
	}
}
