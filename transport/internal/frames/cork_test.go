package frames

import (
	"errors"
	"net"
	"testing"
	"time"
)

// recordConn records the writes and write deadlines that reach it; past budget bytes, a write
// is cut short.
type recordConn struct {
	net.Conn
	writes    []string
	deadlines []time.Time
	budget    int
}

func (c *recordConn) Write(p []byte) (int, error) {
	n := min(len(p), c.budget)
	c.budget -= n
	c.writes = append(c.writes, string(p[:n]))
	if n < len(p) {
		return n, errors.New("cut")
	}
	return n, nil
}

func (c *recordConn) SetWriteDeadline(t time.Time) error {
	c.deadlines = append(c.deadlines, t)
	return nil
}

// Corked, writes are held and leave in one write with the flush's deadline, not the deadline a
// writer set meanwhile; uncorked, writes and deadlines go straight through.
func TestCorkHoldsWritesAndDeadlines(t *testing.T) {
	rc := &recordConn{budget: 1 << 20}
	c := &Cork{Conn: rc}
	soon, flush, later := time.Unix(1, 0), time.Unix(2, 0), time.Unix(3, 0)
	_, _ = c.Write([]byte("hand"))
	c.Cork()
	_ = c.SetWriteDeadline(soon)
	_, _ = c.Write([]byte("ab"))
	_, _ = c.Write([]byte("cd"))
	if c.Held() != 4 || len(rc.writes) != 1 {
		t.Fatalf("corked: %d bytes held, %d writes made", c.Held(), len(rc.writes))
	}
	if n, err := c.Uncork(flush); n != 4 || err != nil {
		t.Fatalf("Uncork = %d, %v", n, err)
	}
	_ = c.SetWriteDeadline(later)
	_, _ = c.Write([]byte("ef"))
	if want := []string{"hand", "abcd", "ef"}; len(rc.writes) != 3 || rc.writes[1] != want[1] || rc.writes[2] != want[2] {
		t.Errorf("writes %q, want %q", rc.writes, want)
	}
	if len(rc.deadlines) != 2 || !rc.deadlines[0].Equal(flush) || !rc.deadlines[1].Equal(later) {
		t.Errorf("deadlines %v, want the flush's then the later one", rc.deadlines)
	}
	if n, err := c.Uncork(flush); n != 0 || err != nil || len(rc.writes) != 3 {
		t.Errorf("an empty flush wrote: %d, %v", n, err)
	}
}

// A flush cut short says how much of it was written.
func TestCorkSaysHowMuchLeft(t *testing.T) {
	rc := &recordConn{budget: 3}
	c := &Cork{Conn: rc}
	c.Cork()
	_, _ = c.Write([]byte("abcdef"))
	if n, err := c.Uncork(time.Time{}); n != 3 || err == nil {
		t.Errorf("Uncork = %d, %v; want 3 and an error", n, err)
	}
	if c.Held() != 0 {
		t.Error("a failed flush is held still")
	}
}

// A flush keeps the write deadline already set when it is at most a second earlier than the
// flush's own, and moves it otherwise: later by a second or more, earlier, or to none.
func TestCorkMovesTheDeadlineOnlyWhenItMatters(t *testing.T) {
	rc := &recordConn{budget: 1 << 20}
	c := &Cork{Conn: rc}
	base := time.Unix(100, 0)
	flush := func(deadline time.Time) {
		c.Cork()
		_, _ = c.Write([]byte("x"))
		if _, err := c.Uncork(deadline); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []time.Time{
		base,                             // set
		base.Add(10 * time.Millisecond),  // kept: 10 ms later
		base.Add(999 * time.Millisecond), // kept
		base.Add(time.Second),            // set: a second later
		base.Add(500 * time.Millisecond), // set: earlier
		{},                               // set: none
		{},                               // kept
		base.Add(2 * time.Second),        // set
	} {
		flush(d)
	}
	want := []time.Time{base, base.Add(time.Second), base.Add(500 * time.Millisecond), {}, base.Add(2 * time.Second)}
	if len(rc.deadlines) != len(want) {
		t.Fatalf("deadlines set %v, want %v", rc.deadlines, want)
	}
	for i := range want {
		if !rc.deadlines[i].Equal(want[i]) {
			t.Fatalf("deadlines set %v, want %v", rc.deadlines, want)
		}
	}
	_ = c.SetWriteDeadline(base.Add(time.Hour)) // uncorked: straight through, and known
	flush(base.Add(2 * time.Second))
	if last := rc.deadlines[len(rc.deadlines)-1]; !last.Equal(base.Add(2 * time.Second)) {
		t.Errorf("after a deadline set directly, the flush left %v", last)
	}
}
