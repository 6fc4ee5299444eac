package transporttest

import (
	"net"
	"testing"
)

// Silent listens on a port of its own and takes every connection without ever answering: a
// paused server, or another program on the port. accepted has a send for each connection it
// took (up to 64 unread). The listener and the connections close when the test ends.
func Silent(t testing.TB) (addr string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	took := make(chan struct{}, 64)
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			select {
			case took <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String(), took
}
