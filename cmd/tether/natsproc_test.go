package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A NATS JetStream cluster of real nats-server processes, built from the module go.mod names,
// as an operator runs one: a config file each, file stores, sync_interval: always.

// buildNATS builds nats-server once for the tests that run it.
var buildNATS = sync.OnceValues(func() (string, error) {
	bin, err := buildBinary() // makes binDir
	if err != nil {
		return "", err
	}
	out := filepath.Join(filepath.Dir(bin), "nats-server")
	if b, err := exec.Command("go", "build", "-o", out, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build nats-server: %v\n%s", err, b)
	}
	return out, nil
})

type natsNode struct {
	name, conf     string
	port, httpPort int
	p              *natsProc
}

type natsProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

type natsCluster struct {
	t     *testing.T
	nodes []*natsNode
}

// startNATS starts n nodes in one cluster (one alone: a single server) and waits until
// JetStream is healthy on each.
func startNATS(t *testing.T, n int) *natsCluster {
	t.Helper()
	c := &natsCluster{t: t}
	var routes []string
	clusterPorts := make([]int, n)
	for i := range n {
		clusterPorts[i] = freePort(t)
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", clusterPorts[i]))
	}
	dir := t.TempDir()
	for i := range n {
		node := &natsNode{name: fmt.Sprintf("n%d", i+1), port: freePort(t), httpPort: freePort(t)}
		node.conf = filepath.Join(dir, node.name+".conf")
		conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
max_payload: 8MB
jetstream { store_dir: %q, sync_interval: always }
`, node.name, node.port, node.httpPort, filepath.Join(dir, node.name))
		if n > 1 { // one node alone is no cluster: it would wait for a quorum of its routes
			conf += fmt.Sprintf(`cluster {
  name: chaos
  listen: 127.0.0.1:%d
  routes: [%s]
  no_advertise: true
}
`, clusterPorts[i], strings.Join(routes, ", "))
		}
		if err := os.WriteFile(node.conf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, node)
	}
	for i := range c.nodes {
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.kill(i)
		}
	})
	c.waitHealthy()
	return c
}

func freePort(t *testing.T) int {
	addr := freeAddr(t)
	port, _ := strconv.Atoi(addr[strings.LastIndex(addr, ":")+1:])
	return port
}

func (c *natsCluster) start(i int) {
	c.t.Helper()
	bin, err := buildNATS()
	if err != nil {
		c.t.Fatal(err)
	}
	n := c.nodes[i]
	p := &natsProc{cmd: exec.Command(bin, "-c", n.conf), done: make(chan struct{})}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	n.p = p
}

// kill kills node i at once (SIGKILL); its store stays for start.
func (c *natsCluster) kill(i int) {
	n := c.nodes[i]
	if n.p == nil {
		return
	}
	_ = syscall.Kill(-n.p.cmd.Process.Pid, syscall.SIGKILL)
	<-n.p.done
	n.p = nil
}

// waitHealthy waits until every running node says JetStream is healthy (/healthz).
func (c *natsCluster) waitHealthy() {
	c.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		healthy := true
		for _, n := range c.nodes {
			if n.p == nil {
				continue
			}
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", n.httpPort))
			if err == nil {
				resp.Body.Close()
			}
			healthy = healthy && err == nil && resp.StatusCode == http.StatusOK
		}
		if healthy {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatal("the NATS cluster was not healthy in 60 s")
		}
	}
}

// hosts is every node's host:port, comma-separated.
func (c *natsCluster) hosts() string {
	var hs []string
	for _, n := range c.nodes {
		hs = append(hs, fmt.Sprintf("127.0.0.1:%d", n.port))
	}
	return strings.Join(hs, ",")
}

// streamLeader returns the node that leads the raft group of stream (a KV bucket is the stream
// KV_<bucket>), as the nodes' monitoring says, or -1.
func (c *natsCluster) streamLeader(stream string) int {
	for _, n := range c.nodes {
		if n.p == nil {
			continue
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/jsz?accounts=true&streams=true", n.httpPort))
		if err != nil {
			continue
		}
		var jsz struct {
			Accounts []struct {
				Streams []struct {
					Name    string `json:"name"`
					Cluster struct {
						Leader string `json:"leader"`
					} `json:"cluster"`
				} `json:"stream_detail"`
			} `json:"account_details"`
		}
		err = json.NewDecoder(resp.Body).Decode(&jsz)
		resp.Body.Close()
		if err != nil {
			continue
		}
		for _, a := range jsz.Accounts {
			for _, s := range a.Streams {
				if s.Name != stream || s.Cluster.Leader == "" {
					continue
				}
				for i, node := range c.nodes {
					if node.name == s.Cluster.Leader {
						return i
					}
				}
			}
		}
	}
	return -1
}

// stepDown asks the raft leader of stream, node from, to step down, and returns the node that
// leads it after, once it is another.
func (c *natsCluster) stepDown(stream string, from int) int {
	c.t.Helper()
	nc, err := nats.Connect(c.hosts())
	if err != nil {
		c.t.Fatal(err)
	}
	defer nc.Close()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if now := c.streamLeader(stream); now >= 0 && now != from {
			return now
		}
		_, _ = nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, 2*time.Second)
	}
	c.t.Fatalf("the raft leader of %s did not move off node %d", stream, from)
	return -1
}
