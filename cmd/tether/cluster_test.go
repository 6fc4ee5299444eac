package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/eventlog/jetstream/natstest"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

var clusterKills = flag.Int("cluster.kills", 20, "leader kills TestReplicatedLogUnderFaults makes")

// replicated is three tether servers on one stream of a three-node JetStream cluster. Each
// server reaches NATS through proxies of its own, so a test can partition it from NATS.
type replicated struct {
	t       *testing.T
	nats    *natstest.Cluster
	servers []*replica
}

type replica struct {
	dir, addr string
	proxies   []*natstest.Proxy
	p         *process
}

func (r *replica) url() string { return "http://" + r.addr }

func startReplicated(t *testing.T) *replicated {
	r := &replicated{t: t, nats: natstest.Start(t, 3)}
	for range 3 {
		s := &replica{dir: t.TempDir(), addr: freeAddr(t)}
		for _, n := range r.nats.Nodes {
			s.proxies = append(s.proxies, natstest.NewProxy(t, strings.TrimPrefix(n.URL(), "nats://")))
		}
		r.servers = append(r.servers, s)
	}
	for i := range r.servers {
		r.start(i)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, s := range r.servers {
				t.Logf("server %d (%s):\n%s", i, s.url(), tail(s.p.output()))
			}
		}
	})
	return r
}

// start starts server i, on its data dir and address.
func (r *replicated) start(i int) {
	s := r.servers[i]
	var hosts []string
	for _, p := range s.proxies {
		hosts = append(hosts, p.Addr())
	}
	s.p = startTether(r.t, nil, "server", "--data", s.dir, "--addr", s.addr, "--log", "nats://"+strings.Join(hosts, ",")+"/TETHER",
		"--leader-ttl", "1s", "--log-format", "json")
}

// kill kills server i at once.
func (r *replicated) kill(i int) {
	s := r.servers[i]
	_ = syscall.Kill(-s.p.cmd.Process.Pid, syscall.SIGKILL)
	s.p.wait(time.Minute)
}

func (r *replicated) urls() string {
	var us []string
	for _, s := range r.servers {
		us = append(us, s.url())
	}
	return strings.Join(us, ",")
}

// readyz answers server i's /readyz: its status and error code ("" when ready).
func readyz(url string) (status int, code string, leader string) {
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		return 0, "", ""
	}
	defer resp.Body.Close()
	var e wire.Error
	_ = json.NewDecoder(resp.Body).Decode(&e)
	leader, _ = e.Error.Details["leader"].(string)
	return resp.StatusCode, e.Error.Code, leader
}

// leader waits until exactly one server is ready and returns it.
func (r *replicated) leader() int {
	r.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ready := -1
		for i, s := range r.servers {
			if st, _, _ := readyz(s.url()); st == http.StatusOK {
				ready = i
			}
		}
		if ready >= 0 {
			return ready
		}
	}
	r.t.Fatal("no server became the leader in 60s")
	return -1
}

// load submits jobs from several producers until stopped, each under an idempotency key it
// repeats until the submit is acknowledged, and keeps the acknowledged ids.
type load struct {
	c    *client.Client
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	ids  map[string]bool
	errs map[string]int // refused or failed submits by what went wrong, each tried again
}

func startLoad(t *testing.T, c *client.Client, producers int) *load {
	l := &load{c: c, stop: make(chan struct{}), ids: map[string]bool{}, errs: map[string]int{}}
	for p := range producers {
		l.wg.Go(func() {
			for k := 0; ; k++ {
				key := fmt.Sprintf("p%d-%d", p, k)
				for {
					select {
					case <-l.stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					j, err := c.Submit(ctx, wire.SubmitRequest{Queue: "q", Type: "t", Payload: json.RawMessage(fmt.Sprintf(`{"key":%q}`, key)), IdempotencyKey: key})
					cancel()
					l.mu.Lock()
					if err == nil {
						l.ids[j.ID] = true
						l.mu.Unlock()
						break
					}
					var e *client.Error
					if errors.As(err, &e) {
						l.errs[e.Code]++
					} else {
						l.errs["transport"]++
					}
					l.mu.Unlock()
					time.Sleep(20 * time.Millisecond) // a failover is under way; the same key again
				}
			}
		})
	}
	return l
}

// grow waits until n more submits are acknowledged: the load runs between two faults.
func (l *load) grow(t *testing.T, n int) {
	l.mu.Lock()
	want := len(l.ids) + n
	l.mu.Unlock()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		l.mu.Lock()
		got := len(l.ids)
		l.mu.Unlock()
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the load acknowledged %d of %d more submits in 60s", got-want+n, n)
		}
	}
}

func (l *load) end() map[string]bool {
	close(l.stop)
	l.wg.Wait()
	return l.ids
}

// runs records the jobs the worker runs, and any job that ran twice at once: two valid leases.
type runs struct {
	mu      sync.Mutex
	running map[string]string // job id → lease id
	twice   []string
}

func (r *runs) handle(ctx context.Context, j *client.Job) (any, error) {
	r.mu.Lock()
	if other, ok := r.running[j.ID]; ok {
		r.twice = append(r.twice, fmt.Sprintf("%s under %s and %s", j.ID, other, j.LeaseID))
	}
	r.running[j.ID] = j.LeaseID
	r.mu.Unlock()
	select {
	case <-time.After(5 * time.Millisecond):
	case <-ctx.Done():
	}
	r.mu.Lock()
	delete(r.running, j.ID)
	r.mu.Unlock()
	return map[string]any{"done": j.ID}, nil
}

// firstSubmit measures how long it takes, from now, until a submit is acknowledged.
func firstSubmit(t *testing.T, c *client.Client, key string) time.Duration {
	start := time.Now()
	for deadline := start.Add(60 * time.Second); time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Submit(ctx, wire.SubmitRequest{Queue: "q", Type: "t", IdempotencyKey: key})
		cancel()
		if err == nil {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond) // the next server, or the same one once it leads
	}
	t.Fatal("no submit was acknowledged for 60s")
	return 0
}

// TestReplicatedLogUnderFaults runs three tether servers on a replicated stream of a three-node
// JetStream cluster under a steady load of submits and a worker, and kills the leader again and
// again, kills a NATS node, partitions the leader from NATS, and restarts everything. Then every
// acknowledged submit is there and succeeded, no job ran under two leases at once, and the
// stream replays and verifies.
func TestReplicatedLogUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("three NATS nodes and three servers under faults")
	}
	r := startReplicated(t)
	lead := r.leader()
	t.Logf("server %d leads", lead)

	// A standby answers 503 STANDBY and names the leader.
	standby := (lead + 1) % 3
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, code, leader := readyz(r.servers[standby].url())
		if st == http.StatusServiceUnavailable && code == wire.CodeStandby && leader == r.servers[lead].url() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby's /readyz: %d %s leader %q\n%s", st, code, leader, tail(r.servers[standby].p.output()))
		}
	}

	c := client.New(r.urls(), "", nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg, err := c.RegisterWorker(ctx, wire.RegisterRequest{Name: "w", Queues: []string{"q"}, Capacity: 16})
	if err != nil {
		t.Fatal(err)
	}
	rs := &runs{running: map[string]string{}}
	worker := &client.Worker{Server: r.urls(), Token: reg.WorkerToken, Capacity: 16, Handler: rs.handle}
	workerDone := make(chan error, 1)
	go func() { workerDone <- worker.Run(ctx) }()
	l := startLoad(t, c, 4)

	var failovers []time.Duration
	for k := range *clusterKills {
		lead = r.leader()
		r.kill(lead)
		d := firstSubmit(t, c, fmt.Sprintf("probe-kill-%d", k))
		failovers = append(failovers, d)
		t.Logf("kill %d: server %d killed at %s; a submit was acknowledged %s later", k, lead, time.Now().Add(-d).Format("15:04:05.000"), d)
		r.start(lead)
		l.grow(t, 200)
	}

	// A NATS node dies under load, and comes back.
	r.nats.Nodes[1].Kill()
	firstSubmit(t, c, "probe-nats-down")
	l.grow(t, 200)
	r.nats.Nodes[1].Restart(t)
	r.nats.WaitForMetaLeader()
	l.grow(t, 200)

	// The leader is cut off from NATS: a standby takes over, and the old leader stops.
	lead = r.leader()
	for _, p := range r.servers[lead].proxies {
		p.Cut()
	}
	partitioned := time.Now()
	firstSubmit(t, c, "probe-partition")
	t.Logf("partitioned leader: a standby took submits after %s", time.Since(partitioned))
	if code := r.servers[lead].p.wait(30 * time.Second); code <= 0 {
		t.Fatalf("the partitioned leader did not stop (exit %d):\n%s", code, tail(r.servers[lead].p.output()))
	}
	// It stops when an append in flight fails, or when it cannot renew its lead.
	if out := r.servers[lead].p.output(); !strings.Contains(out, "LEAD_LOST") && !strings.Contains(out, "EVENT_LOG_FAILED") {
		t.Fatalf("the partitioned leader stopped for another reason:\n%s", tail(out))
	}
	for _, p := range r.servers[lead].proxies {
		p.Heal()
	}
	r.start(lead)
	l.grow(t, 200)

	// Everything restarts: the tethers, then NATS.
	for i := range r.servers {
		r.kill(i)
	}
	r.nats.Shutdown()
	for _, n := range r.nats.Nodes {
		n.Restart(t)
	}
	r.nats.WaitForMetaLeader()
	for i := range r.servers {
		r.start(i)
	}
	firstSubmit(t, c, "probe-restart")
	l.grow(t, 200)

	acked := l.end()
	t.Logf("%d submits acknowledged; submits tried again: %v", len(acked), l.errs)
	// Every acknowledged submit is there, and every job finishes.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		pending := 0
		for id := range acked {
			j, err := c.Get(ctx, id)
			switch {
			case err != nil && isCode(err, "JOB_NOT_FOUND"):
				t.Fatalf("acknowledged job %s is gone", id)
			case err != nil || j.Status != "succeeded":
				pending++
			}
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acknowledged jobs did not succeed in 2 minutes", pending, len(acked))
		}
	}
	cancel()
	<-workerDone
	rs.mu.Lock()
	if len(rs.twice) > 0 {
		t.Fatalf("jobs ran under two leases at once: %v", rs.twice)
	}
	rs.mu.Unlock()

	// The stream replays and verifies, and no job was leased while another lease of it was
	// current.
	logURL := "nats://" + r.nats.Hosts() + "/TETHER"
	out, errOut, code := tether(t, nil, "replay", "verify", "--log", logURL)
	if code != 0 {
		t.Fatalf("replay verify --log: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = tether(t, nil, "replay", "export", "--log", logURL)
	if code != 0 {
		t.Fatalf("replay export --log: exit %d\n%s", code, errOut)
	}
	checkOneLease(t, out)

	sort.Slice(failovers, func(i, j int) bool { return failovers[i] < failovers[j] })
	if len(failovers) > 0 {
		t.Logf("failover over %d leader kills, kill to the first acknowledged submit: min %s, median %s, max %s", len(failovers),
			failovers[0].Round(time.Millisecond), failovers[len(failovers)/2].Round(time.Millisecond), failovers[len(failovers)-1].Round(time.Millisecond))
	}
}

// checkOneLease reads an export and fails if a job was leased while a lease of it was current.
func checkOneLease(t *testing.T, export string) {
	t.Helper()
	current := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(export))
	sc.Buffer(nil, 8<<20)
	records := 0
	for sc.Scan() {
		var rec struct {
			Seq  uint64
			Type string
			Data struct {
				JobID   string `json:"job_id"`
				LeaseID string `json:"lease_id"`
			}
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("export line %q: %v", sc.Text(), err)
		}
		records++
		switch rec.Type {
		case "job.leased":
			if l, ok := current[rec.Data.JobID]; ok {
				t.Fatalf("seq %d leases job %s under %s while lease %s is current", rec.Seq, rec.Data.JobID, rec.Data.LeaseID, l)
			}
			current[rec.Data.JobID] = rec.Data.LeaseID
		case "job.succeeded", "job.failed", "job.lease_expired", "job.lease_released", "job.cancelled", "job.dead_lettered", "job.retry_scheduled":
			delete(current, rec.Data.JobID)
		}
	}
	if records == 0 {
		t.Fatal("the export holds no record")
	}
}

func isCode(err error, code string) bool {
	var e *client.Error
	return errors.As(err, &e) && e.Code == code
}

func tail(s string) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}
