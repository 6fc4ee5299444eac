// Package natstest starts NATS JetStream servers in the test's process, on loopback, with real
// file stores in temporary directories and sync_interval: always, as production should run
// them; and a TCP proxy that a test cuts to partition a client from NATS.
package natstest

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Cluster is a set of NATS servers that form one JetStream cluster (or a single server).
type Cluster struct {
	t     testing.TB
	Nodes []*Node
}

// Node is one NATS server. Kill and Restart keep its ports and its store.
type Node struct {
	opts *server.Options
	srv  *server.Server
}

// Start starts n servers (1, or 3 for a cluster) and waits until JetStream answers on them.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	clientPorts, clusterPorts := freePorts(t, n), freePorts(t, n)
	var routes []*url.URL
	for i := range n {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", clusterPorts[i])})
	}
	for i := range n {
		o := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: clientPorts[i],
			JetStream: true, StoreDir: t.TempDir(), SyncAlways: true, NoLog: true, NoSigs: true,
			MaxPayload: 8 << 20,
		}
		if n > 1 {
			// Clients reach the nodes only through the URLs they are given (a test's proxies),
			// not through the ones a cluster gossips.
			o.Cluster = server.ClusterOpts{Name: "tether-test", Host: "127.0.0.1", Port: clusterPorts[i], NoAdvertise: true}
			o.Routes = routes
		}
		c.Nodes = append(c.Nodes, &Node{opts: o})
	}
	for _, node := range c.Nodes {
		node.start(t)
	}
	t.Cleanup(c.Shutdown)
	c.WaitForMetaLeader()
	return c
}

// WaitForMetaLeader waits until the cluster has elected the leader of its JetStream meta group
// and every running node is current with it: until then JetStream's API does not answer.
func (c *Cluster) WaitForMetaLeader() {
	c.t.Helper()
	if len(c.Nodes) == 1 {
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		leaders, current, running := 0, 0, 0
		for _, n := range c.Nodes {
			if n.srv == nil {
				continue
			}
			running++
			if n.srv.JetStreamIsLeader() {
				leaders++
			}
			if n.srv.JetStreamIsCurrent() {
				current++
			}
		}
		if leaders == 1 && current == running {
			return
		}
		time.Sleep(20 * time.Millisecond) // polls a condition; no event tells it
	}
	c.t.Fatal("the JetStream cluster elected no meta leader in 30s")
}

func (n *Node) start(t testing.TB) {
	t.Helper()
	srv, err := server.NewServer(n.opts)
	if err != nil {
		t.Fatalf("nats server %s: %v", n.opts.ServerName, err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatalf("nats server %s did not start", n.opts.ServerName)
	}
	n.srv = srv
}

// URL is the client URL of the node.
func (n *Node) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.opts.Port) }

// Kill stops the node at once; its store stays for Restart.
func (n *Node) Kill() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

// Restart starts a killed node again on its ports and store.
func (n *Node) Restart(t testing.TB) { n.start(t) }

// Hosts is every node's host:port, comma-separated, as a tether --log URL takes them.
func (c *Cluster) Hosts() string {
	var hs []string
	for _, n := range c.Nodes {
		hs = append(hs, fmt.Sprintf("127.0.0.1:%d", n.opts.Port))
	}
	return strings.Join(hs, ",")
}

// LogURL is the tether --log URL of a stream on the cluster.
func (c *Cluster) LogURL(stream string) string { return "nats://" + c.Hosts() + "/" + stream }

// Shutdown stops every node.
func (c *Cluster) Shutdown() {
	for _, n := range c.Nodes {
		n.Kill()
	}
}

func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		_ = ln.Close()
	}
	return ports
}

// Proxy forwards TCP connections to a target until it is cut: a partition between its clients
// and the target; or, while it is paused, holds every byte: a target alive but silent.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns []net.Conn
	// resumed is closed when a pause ends; nil while not paused.
	resumed chan struct{}
}

// NewProxy listens on loopback and forwards every connection to target (host:port).
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target}
	go p.accept()
	t.Cleanup(func() { _ = ln.Close(); p.Cut() })
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every connection and refuses new ones, until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	if p.resumed != nil {
		close(p.resumed)
		p.resumed = nil
	}
}

// Heal lets connections through again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Pause holds every byte in both directions, on the connections open and on those it accepts
// meanwhile, until Resume: a target that is alive but does not answer (SIGSTOP, a VM freeze, a
// black hole), whose kernel still takes connections and data. What it held goes on after
// Resume. Cut ends a pause too.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resumed == nil {
		p.resumed = make(chan struct{})
	}
}

// Resume ends a pause.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resumed != nil {
		close(p.resumed)
		p.resumed = nil
	}
}

// pipe copies src to dst, holding each chunk while the proxy is paused.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			resumed := p.resumed
			p.mu.Unlock()
			if resumed != nil {
				<-resumed
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = in.Close()
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			_ = in.Close()
			continue
		}
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		go p.pipe(out, in)
		go p.pipe(in, out)
	}
}

// Server is the node's running server, nil while it is killed.
func (n *Node) Server() *server.Server { return n.srv }
