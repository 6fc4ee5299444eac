package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/eventlog/jetstream/natstest"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// The chaos test (docs/design.md §10): three real nats-server processes in a JetStream cluster,
// three tether servers on one R3 stream, each reaching NATS through TCP proxies of its own (so it
// can be partitioned), a `tether worker` process whose command logs every run, and producers that
// submit under idempotency keys; then the faults operators meet, from outside.

var (
	chaosFull = flag.Bool("chaos.full", false, "make chaos: the long run, with the fault counts and the figures the README quotes")
	chaosSeed = flag.Uint64("chaos.seed", 0, "the seed of the pauses' lengths and the faults' order; 0: from the clock (printed)")
)

const chaosTTL = time.Second // every server's --leader-ttl

type chaosPlan struct {
	kills, pauses int
	// natsKills kills NATS nodes: first the election bucket's raft leader, then the
	// stream's.
	natsKills int
	// pausedStandbyKills kills the leader while the standby after it is paused;
	// pausedFirsts pauses the server first in every client's list, a standby and the
	// leader in turn (chaos_silent_test.go).
	pausedStandbyKills, pausedFirsts int
	// natsPauses pauses the stream's NATS leader for natsPause (chaos_storage_test.go).
	natsPauses int
}

func plan() chaosPlan {
	if *chaosFull {
		return chaosPlan{kills: 20, pauses: 20, natsKills: 4, pausedStandbyKills: 10, pausedFirsts: 10, natsPauses: 3}
	}
	return chaosPlan{kills: 3, pauses: 3, natsKills: 2, pausedStandbyKills: 1, pausedFirsts: 2, natsPauses: 1}
}

type replica struct {
	dir, addr string
	proxies   []*natstest.Proxy
	p         *process
}

func (r *replica) url() string { return "http://" + r.addr }

type chaos struct {
	t        *testing.T
	rng      *rand.Rand
	nats     *natsCluster
	servers  []*replica
	admin    string
	c        *client.Client
	apiKey   string         // acme's, c's
	adminC   *client.Client // with the admin token
	probe    *client.Client // submits as the CLI does, with RetryFor
	worker   *process
	runLog   string
	load     *load
	verifies int
	// all is every tether process the run started, for what they printed.
	all []*process
}

func startChaos(t *testing.T, seed uint64) *chaos {
	ch := &chaos{t: t, rng: rand.New(rand.NewPCG(seed, seed)), nats: startNATS(t, 3), admin: "chaos-admin-token-0123456789"}
	for range 3 {
		s := &replica{dir: t.TempDir(), addr: freeAddr(t)}
		for _, n := range ch.nats.nodes {
			s.proxies = append(s.proxies, natstest.NewProxy(t, fmt.Sprintf("127.0.0.1:%d", n.port)))
		}
		ch.servers = append(ch.servers, s)
	}
	for i := range ch.servers {
		ch.start(i)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, s := range ch.servers {
				t.Logf("server %d (%s):\n%s", i, s.url(), tail(s.p.output()))
			}
			if ch.worker != nil {
				t.Logf("worker:\n%s", tail(ch.worker.output()))
			}
		}
	})
	return ch
}

// start starts server i on its data dir, address and proxies.
func (ch *chaos) start(i int) {
	s := ch.servers[i]
	var hosts []string
	for _, p := range s.proxies {
		hosts = append(hosts, p.Addr())
	}
	s.p = startTether(ch.t, nil, "server", "--data", s.dir, "--addr", s.addr, "--log", "nats://"+strings.Join(hosts, ",")+"/TETHER",
		"--leader-ttl", chaosTTL.String(), "--auth", "token", "--admin-token", ch.admin, "--log-format", "json")
	ch.all = append(ch.all, s.p)
}

// stopLine is the line of a server's log that says why it stopped leading, if one does.
func stopLine(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, `"LEAD_LOST"`) || strings.Contains(line, `"EVENT_LOG_FAILED"`) || strings.Contains(line, "lost the lead") {
			return line
		}
	}
	return ""
}

// takeover says how long the last takeover in a server's log took: catching up, fencing and
// starting the broker on the standby's projections, and the whole from the election won.
func takeover(out string) string {
	var steps []string
	for _, step := range []struct{ msg, field string }{
		{"leading on the standby's projections", "took"}, {"leading the stream", "took"},
	} {
		took := "?"
		for _, line := range strings.Split(out, "\n") {
			var l map[string]any
			if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == step.msg {
				took = fmt.Sprint(l[step.field])
			}
		}
		steps = append(steps, step.msg+" "+took)
	}
	return strings.Join(steps, ", ")
}

func (ch *chaos) urls() string {
	var us []string
	for _, s := range ch.servers {
		us = append(us, s.url())
	}
	return strings.Join(us, ",")
}

func (ch *chaos) logURL() string { return "nats://" + ch.nats.hosts() + "/TETHER" }

// readyz answers a server's /readyz: its status, and the error code and the leader it names.
func readyz(url string) (status int, code string, leader string) {
	hc := http.Client{Timeout: time.Second}
	resp, err := hc.Get(url + "/readyz")
	if err != nil {
		return 0, "", ""
	}
	defer resp.Body.Close()
	var e wire.Error
	_ = json.NewDecoder(resp.Body).Decode(&e)
	leader, _ = e.Error.Details["leader"].(string)
	return resp.StatusCode, e.Error.Code, leader
}

// leader waits until a server is ready (leads) and returns it, and when it saw it ready.
func (ch *chaos) leader() (int, time.Time) {
	ch.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for i, s := range ch.servers {
			if s.p.wait(0) >= 0 {
				continue
			}
			if st, _, _ := readyz(s.url()); st == http.StatusOK {
				return i, time.Now()
			}
		}
	}
	ch.t.Fatal("no server led in 60 s")
	return -1, time.Time{}
}

// verify runs `tether replay verify --log`: the stream's chain, from genesis.
func (ch *chaos) verify(after string) {
	ch.t.Helper()
	out, errOut, code := tether(ch.t, nil, "replay", "verify", "--log", ch.logURL())
	if code != 0 {
		ch.t.Fatalf("replay verify --log after %s: exit %d\n%s%s", after, code, out, errOut)
	}
	ch.verifies++
}

// restartIfStopped restarts server i if it exited (a deposed leader does), and reports
// whether it had.
func (ch *chaos) restartIfStopped(i int, within time.Duration) bool {
	p := ch.servers[i].p
	select {
	case <-p.done:
	case <-time.After(within):
		return false
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 1 {
		ch.t.Logf("server %d exited %d (%s)", i, code, p.cmd.ProcessState)
	}
	ch.start(i)
	return true
}

// load submits jobs from several producers until stopped, each under an idempotency key it
// repeats until the submit is acknowledged, and keeps the acknowledged ids and when.
type load struct {
	c    *client.Client
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	ids  map[string]bool
	acks []time.Time
	errs map[string]int // refused or failed submits by what went wrong, each tried again
}

func startLoad(c *client.Client, producers int) *load { return startLoadKeyed(c, producers, "p") }

// startLoadKeyed is startLoad with its idempotency keys under prefix, so that several loads
// make jobs of their own.
func startLoadKeyed(c *client.Client, producers int, prefix string) *load {
	l := &load{c: c, stop: make(chan struct{}), ids: map[string]bool{}, errs: map[string]int{}}
	for p := range producers {
		l.wg.Go(func() {
			for k := 0; ; k++ {
				key := fmt.Sprintf("%s%d-%d", prefix, p, k)
				for {
					select {
					case <-l.stop:
						return
					case <-time.After(2 * time.Millisecond): // a steady load, not a flood
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					j, err := c.Submit(ctx, wire.SubmitRequest{Queue: "q", Type: "t", Payload: json.RawMessage(fmt.Sprintf(`{"key":%q}`, key)), IdempotencyKey: key})
					cancel()
					l.mu.Lock()
					if err == nil {
						l.ids[j.ID] = true
						l.acks = append(l.acks, time.Now())
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
				}
			}
		})
	}
	return l
}

// grow waits until n more submits are acknowledged: the load runs between two faults.
func (l *load) grow(t *testing.T, n int) {
	t.Helper()
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
			t.Fatalf("the load acknowledged %d of %d more submits in 60 s", got-want+n, n)
		}
	}
}

// gap is the longest time without an acknowledged submit between from and to.
func (l *load) gap(from, to time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	last, longest := from, time.Duration(0)
	for _, a := range l.acks {
		if a.Before(from) || a.After(to) {
			continue
		}
		longest = max(longest, a.Sub(last))
		last = a
	}
	return max(longest, to.Sub(last))
}

func (l *load) end() map[string]bool {
	close(l.stop)
	l.wg.Wait()
	return l.ids
}

// firstSubmit measures how long it takes, from since, until a submit is acknowledged. It
// submits as the CLI does: one call, under an idempotency key, which the client tries again
// across a failover (RetryFor) from server to server.
func (ch *chaos) firstSubmit(key string, since time.Time) time.Duration {
	ch.t.Helper()
	for deadline := since.Add(60 * time.Second); time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := ch.probe.Submit(ctx, wire.SubmitRequest{Queue: "probe", Type: "t", IdempotencyKey: key})
		cancel()
		if err == nil {
			return time.Since(since)
		}
		ch.t.Logf("probe submit %s: %v", key, err)
		time.Sleep(50 * time.Millisecond) // not a failover's answer: do not spin on it
	}
	ch.t.Fatal("no submit was acknowledged for 60 s")
	return 0
}

// connectedAfter is when the worker's log first says it connected at or after since.
func (ch *chaos) connectedAfter(since time.Time) (time.Time, bool) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		sc := bufio.NewScanner(strings.NewReader(ch.worker.output()))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var line struct {
				Time time.Time `json:"time"`
				Msg  string    `json:"msg"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "connected" && !line.Time.Before(since) {
				return line.Time, true
			}
		}
	}
	return time.Time{}, false
}

// figures collects what the run measured.
type figures struct {
	failover, reconnect, pauseGap, natsGap, natsPauseGap []time.Duration
	takeovers, natsFailovers                             int
	// standbyPausedConnect, standbyPausedRun and standbyPausedAck: from the new leader's
	// readiness to the worker's connection, its next run and the load's next acknowledged
	// submit, a standby paused; firstPausedCLI: one CLI request, a server paused first in its
	// list; leaderPausedAck: from the new leader's readiness to the load's next acknowledged
	// submit, the leader paused first in its list.
	standbyPausedConnect, standbyPausedRun, standbyPausedAck, firstPausedCLI, leaderPausedAck []time.Duration
}

func summary(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("n=%d min %s p50 %s p90 %s max %s", len(s), r(s[0]), r(s[len(s)/2]), r(s[len(s)*9/10]), r(s[len(s)-1]))
}

// TestChaos runs the replicated log under the faults operators meet: the leader killed, the
// leader paused (SIGSTOP) for one to three TTLs and resumed, NATS nodes killed (the election
// bucket's raft leader and the stream's) and restarted, the stream's NATS leader paused, the
// leader cut off from NATS, servers started with settings that differ from the cluster's, a
// standby's data dir full and read-only (as root). After every fault the stream's chain
// verifies. At the end every acknowledged submit succeeded, no job ran under two leases at once
// (the worker's log of runs and the log's leases), and a job ran twice only after its lease
// expired. make test runs a short plan; make chaos the long one (-chaos.full) whose figures the
// README quotes.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("real NATS and tether processes under faults")
	}
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("chaos seed %d (-chaos.seed %d reproduces the pauses' lengths)", seed, seed)
	pl := plan()
	ch := startChaos(t, seed)
	lead, _ := ch.leader()
	t.Logf("server %d leads", lead)

	// A standby answers 503 STANDBY and names the leader.
	standby := (lead + 1) % 3
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, code, leader := readyz(ch.servers[standby].url())
		if st == http.StatusServiceUnavailable && code == wire.CodeStandby && leader == ch.servers[lead].url() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby's /readyz: %d %s leader %q", st, code, leader)
		}
	}

	ctx := context.Background()
	admin := client.New(ch.urls(), ch.admin, nil)
	admin.RetryFor = 30 * time.Second
	ch.adminC = admin
	key, err := admin.CreateAPIKey(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	enroll, err := admin.CreateEnrollToken(ctx, "acme", 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ch.c, ch.apiKey = client.New(ch.urls(), key.Key, nil), key.Key
	ch.probe = client.New(ch.urls(), key.Key, nil)
	ch.probe.RetryFor = 30 * time.Second // the CLI's --retry-for is 15 s

	dir := t.TempDir()
	ch.runLog = filepath.Join(dir, "runs.log")
	script := filepath.Join(dir, "job.sh")
	if err := os.WriteFile(script, []byte(`#!/bin/sh
printf 'start %s %s %s %s\n' "$TETHER_JOB_ID" "$TETHER_JOB_LEASE_ID" "$TETHER_JOB_ATTEMPT" "$(date +%s%N)" >> "$RUNLOG"
cat > /dev/null
printf 'end %s %s %s %s\n' "$TETHER_JOB_ID" "$TETHER_JOB_LEASE_ID" "$TETHER_JOB_ATTEMPT" "$(date +%s%N)" >> "$RUNLOG"
echo '{"ok":true}'
`), 0o755); err != nil {
		t.Fatal(err)
	}
	ch.worker = startTether(t, []string{"RUNLOG=" + ch.runLog}, "worker", "--server", ch.urls(), "--token", enroll.Token,
		"--queue", "q,probe", "--capacity", "8", "--state-dir", filepath.Join(dir, "state"), "--log-format", "json", "--", "sh", script)
	if _, ok := ch.connectedAfter(time.Time{}); !ok {
		t.Fatalf("the worker did not connect:\n%s", tail(ch.worker.output()))
	}
	ch.load = startLoad(ch.c, 2)
	ch.load.grow(t, 100)

	var fig figures
	faults := slices.Concat(slices.Repeat([]string{"kill"}, pl.kills), slices.Repeat([]string{"pause"}, pl.pauses))
	ch.rng.Shuffle(len(faults), func(i, j int) { faults[i], faults[j] = faults[j], faults[i] })
	for k, fault := range faults {
		switch fault {
		case "kill":
			ch.killLeader(k, &fig)
		case "pause":
			ch.pauseLeader(k, &fig)
		}
		ch.verify(fmt.Sprintf("fault %d (%s)", k, fault))
		ch.load.grow(t, 100)
	}
	for k := range pl.pausedStandbyKills {
		ch.pausedStandbyKill(k, &fig)
		ch.verify(fmt.Sprintf("paused standby %d", k))
		ch.load.grow(t, 100)
	}
	for k := range pl.pausedFirsts {
		ch.pausedFirst(k, &fig)
		ch.verify(fmt.Sprintf("paused first %d", k))
		ch.load.grow(t, 100)
	}
	for k := range pl.natsKills {
		ch.killNATS(k, &fig)
		ch.verify(fmt.Sprintf("NATS kill %d", k))
		ch.load.grow(t, 100)
	}
	for k := range pl.natsPauses {
		ch.pauseNATS(k, &fig)
		ch.verify(fmt.Sprintf("NATS pause %d", k))
		ch.load.grow(t, 100)
	}
	ch.partitionLeader(&fig)
	ch.verify("the partition")
	ch.load.grow(t, 100)
	ch.mismatched()
	ch.load.grow(t, 100)
	ch.standbyLost()
	ch.load.grow(t, 100)
	ch.standbyDiskFull()
	ch.load.grow(t, 100)
	ch.standbyReadOnly()
	ch.load.grow(t, 100)
	ch.quorumLost()
	ch.verify("the lost quorum")
	ch.load.grow(t, 100)
	ch.powerLost()
	ch.verify("the power cut")
	ch.load.grow(t, 100)

	acked := ch.load.end()
	t.Logf("%d submits acknowledged; submits tried again: %v", len(acked), ch.load.errs)
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		pending := 0
		for id := range acked {
			j, err := ch.c.Get(ctx, id)
			switch {
			case isCode(err, "JOB_NOT_FOUND"):
				t.Fatalf("acknowledged job %s is gone", id)
			case err != nil || j.Status != "succeeded":
				pending++
			}
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acknowledged jobs did not succeed in 3 minutes", pending, len(acked))
		}
	}
	ch.worker.signal(t, syscall.SIGTERM)
	if code := ch.worker.wait(time.Minute); code != 0 {
		t.Fatalf("the worker exited %d:\n%s", code, tail(ch.worker.output()))
	}
	ch.verify("the end")
	for _, p := range ch.all {
		if out := p.output(); strings.Contains(out, "ACTOR_PANIC") || strings.Contains(out, "panic:") {
			t.Fatalf("a server panicked:\n%s", tail(out))
		}
	}
	out, errOut, code := tether(t, nil, "replay", "export", "--log", ch.logURL())
	if code != 0 {
		t.Fatalf("replay export --log: exit %d\n%s", code, errOut)
	}
	checkOneLease(t, out)
	checkRuns(t, ch.runLog, out)

	t.Logf("leader killed (SIGKILL), kill to the first acknowledged submit: %s", summary(fig.failover))
	t.Logf("worker reconnected, after the new leader was ready: %s", summary(fig.reconnect))
	t.Logf("leader paused %d times (1-3 TTL): %d taken over, the chain verified after each; longest without an acknowledged submit: %s",
		pl.pauses, fig.takeovers, summary(fig.pauseGap))
	t.Logf("standby paused and leader killed %d times: the worker connected %s, ran a job %s, the load's submit was acknowledged %s, after the new leader was ready",
		pl.pausedStandbyKills, summary(fig.standbyPausedConnect), summary(fig.standbyPausedRun), summary(fig.standbyPausedAck))
	t.Logf("server paused first in every list %d times: one CLI request took %s; with the leader paused, the load's submit was acknowledged %s after the new leader was ready",
		pl.pausedFirsts, summary(fig.firstPausedCLI), summary(fig.leaderPausedAck))
	t.Logf("NATS node killed %d times: %d tether failovers; longest without an acknowledged submit: %s", pl.natsKills, fig.natsFailovers, summary(fig.natsGap))
	t.Logf("the stream's NATS leader paused %d times for %s: longest without an acknowledged submit: %s", pl.natsPauses, natsPause, summary(fig.natsPauseGap))
	t.Logf("replay verify --log passed %d times", ch.verifies)
}

// killLeader kills the leader (SIGKILL) and measures the failover: to the first acknowledged
// submit, and to the worker's reconnect once the new leader is ready.
func (ch *chaos) killLeader(k int, fig *figures) {
	t := ch.t
	lead, _ := ch.leader()
	killed := time.Now()
	_ = syscall.Kill(-ch.servers[lead].p.cmd.Process.Pid, syscall.SIGKILL)
	ch.servers[lead].p.wait(time.Minute)
	d := ch.firstSubmit(fmt.Sprintf("probe-kill-%d", k), killed)
	fig.failover = append(fig.failover, d)
	next, ready := ch.leader()
	if connected, ok := ch.connectedAfter(killed); ok {
		after := max(connected.Sub(ready), 0) // the test may see it ready after the worker did
		fig.reconnect = append(fig.reconnect, after)
		t.Logf("fault %d: server %d killed; a submit was acknowledged %s later; server %d led (%s); the worker reconnected %s after it was ready",
			k, lead, d.Round(time.Millisecond), next, takeover(ch.servers[next].p.output()), after.Round(time.Millisecond))
	} else {
		t.Fatalf("fault %d: the worker did not reconnect after the leader was killed:\n%s", k, tail(ch.worker.output()))
	}
	ch.start(lead)
}

// pauseLeader freezes the leader (SIGSTOP) for one to three TTLs and lets it go on (SIGCONT)
// with everything it had in flight. A standby may have taken over meanwhile: then the old
// leader's appends are refused, and it stops.
func (ch *chaos) pauseLeader(k int, fig *figures) {
	t := ch.t
	lead, _ := ch.leader()
	p := ch.servers[lead].p
	d := chaosTTL + time.Duration(ch.rng.Int64N(int64(2*chaosTTL)))
	paused := time.Now()
	p.signal(t, syscall.SIGSTOP)
	time.Sleep(d) // the pause itself: the fault is its length
	p.signal(t, syscall.SIGCONT)
	ch.firstSubmit(fmt.Sprintf("probe-pause-%d", k), time.Now())
	fig.pauseGap = append(fig.pauseGap, ch.load.gap(paused, time.Now()))
	next, _ := ch.leader()
	// It must stop; how soon is the machine's: a clean-clone CI on a loaded 2-core VM once saw
	// the deposed server print its last line and the process not reaped 4 s later.
	stopped := ch.restartIfStopped(lead, 15*time.Second)
	if next != lead {
		fig.takeovers++
		if !stopped {
			t.Fatalf("fault %d: server %d was paused %s, server %d took over, and the paused one did not stop:\n%s", k, lead, d, next, tail(p.output()))
		}
	}
	t.Logf("fault %d: server %d paused for %s; server %d leads (the paused one stopped: %v) %s", k, lead, d.Round(time.Millisecond), next, stopped, stopLine(p.output()))
}

// killNATS kills a NATS node, the election bucket's raft leader first, then the stream's, under
// load, and restarts it: the tether leader goes on (no failover) where the stream still answers.
func (ch *chaos) killNATS(k int, fig *figures) {
	t := ch.t
	lead, _ := ch.leader()
	const bucket = "KV_tether_leader_TETHER"
	target, what := ch.nats.streamLeader(bucket), "the election bucket's leader"
	if k%2 == 1 {
		target, what = ch.nats.streamLeader("TETHER"), "the stream's leader"
	} else if target >= 0 && target == ch.nats.streamLeader("TETHER") {
		// The bucket's alone: move its raft leader off the stream's first.
		target = ch.nats.stepDown(bucket, target)
	}
	if target < 0 {
		t.Fatalf("NATS kill %d: no node leads %s", k, what)
	}
	streamToo := ch.nats.streamLeader("TETHER") == target
	killed := time.Now()
	ch.nats.kill(target)
	ch.load.grow(t, 100)
	gap := ch.load.gap(killed, time.Now())
	fig.natsGap = append(fig.natsGap, gap)
	ch.nats.start(target)
	ch.nats.waitHealthy()
	now, _ := ch.leader()
	failover := now != lead || ch.servers[lead].p.wait(0) >= 0
	if failover {
		fig.natsFailovers++
	}
	t.Logf("NATS kill %d: node %d (%s; the stream's too: %v) killed; %s without an acknowledged submit; the tether leader changed: %v",
		k, target, what, streamToo, gap.Round(time.Millisecond), failover)
	ch.restartIfStopped(lead, 0)
}

// partitionLeader cuts the leader off from NATS: a standby takes over, and the old leader stops.
func (ch *chaos) partitionLeader(fig *figures) {
	t := ch.t
	lead, _ := ch.leader()
	for _, p := range ch.servers[lead].proxies {
		p.Cut()
	}
	cut := time.Now()
	d := ch.firstSubmit("probe-partition", cut)
	t.Logf("the leader, server %d, cut off from NATS: a submit was acknowledged %s later", lead, d.Round(time.Millisecond))
	if code := ch.servers[lead].p.wait(30 * time.Second); code <= 0 {
		t.Fatalf("the partitioned leader did not stop (exit %d):\n%s", code, tail(ch.servers[lead].p.output()))
	}
	for _, p := range ch.servers[lead].proxies {
		p.Heal()
	}
	ch.start(lead)
}

// mismatched starts servers whose settings differ from the cluster's on its stream: each
// refuses to start, naming the difference, and never leads.
func (ch *chaos) mismatched() {
	t := ch.t
	lead, _ := ch.leader()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--auth", "none", "--nats-replicas", "1", "--leader-ttl", "5s"}, `auth is "none" here and "token" in the cluster`},
		{[]string{"--auth", "token", "--admin-token", "another-admin-token-0123", "--leader-ttl", chaosTTL.String()}, "admin_token"},
		{[]string{"--auth", "token", "--admin-token", ch.admin, "--leader-ttl", "5s"}, "leader_ttl"},
	} {
		args := append([]string{"server", "--data", t.TempDir(), "--addr", freeAddr(t), "--log", ch.logURL(), "--log-format", "json"}, tc.args...)
		p := startTether(t, nil, args...)
		if code := p.wait(30 * time.Second); code <= 0 {
			t.Fatalf("a server started with %v did not refuse to start (exit %d):\n%s", tc.args, code, tail(p.output()))
		}
		refused := ""
		for _, l := range jsonLog(t, p.output()) {
			if l.Code == "SERVER_FAILED" {
				refused = l.Error
			}
		}
		mustContain(t, "the refusal", refused, tc.want)
	}
	if now, _ := ch.leader(); now != lead {
		t.Fatalf("the leader changed from %d to %d while mismatched servers started", lead, now)
	}
}

// standbyLost kills a standby and wipes its disk (a tether's disk dies): nothing is visible,
// and it comes back with a new copy of the stream.
func (ch *chaos) standbyLost() {
	t := ch.t
	lead, _ := ch.leader()
	sb := (lead + 1) % len(ch.servers)
	s := ch.servers[sb]
	_ = syscall.Kill(-s.p.cmd.Process.Pid, syscall.SIGKILL)
	s.p.wait(time.Minute)
	if err := os.RemoveAll(s.dir); err != nil {
		t.Fatal(err)
	}
	ch.load.grow(t, 100)
	ch.start(sb)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st, code, _ := readyz(s.url()); st == http.StatusServiceUnavailable && code == wire.CodeStandby {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a standby with a new disk did not come back as a standby:\n%s", tail(s.p.output()))
		}
	}
	if now, _ := ch.leader(); now != lead {
		t.Fatalf("the leader changed from %d to %d while a standby died", lead, now)
	}
	t.Logf("a standby killed and its disk wiped: the leader went on; it came back as a standby with a new copy")
}

// quorumLost kills two NATS nodes of three: appends wait, and the leader stops once JetStream
// has answered nothing for 15 s; with the nodes back, a leader takes requests again, and
// nothing acknowledged is lost.
func (ch *chaos) quorumLost() {
	t := ch.t
	lead, _ := ch.leader()
	ch.nats.kill(1)
	ch.nats.kill(2)
	lost := time.Now()
	if code := ch.servers[lead].p.wait(45 * time.Second); code <= 0 {
		t.Fatalf("the leader did not stop without a NATS quorum (exit %d):\n%s", code, tail(ch.servers[lead].p.output()))
	}
	t.Logf("two NATS nodes of three killed: the leader stopped after %s", time.Since(lost).Round(time.Millisecond))
	ch.nats.start(1)
	ch.nats.start(2)
	ch.nats.waitHealthy()
	ch.start(lead)
	for i := range ch.servers {
		ch.restartIfStopped(i, 0)
	}
	d := ch.firstSubmit("probe-quorum", time.Now())
	t.Logf("the quorum back: a submit was acknowledged %s later", d.Round(time.Millisecond))
}

// powerLost kills every tether and every NATS node at once, and starts them again.
func (ch *chaos) powerLost() {
	t := ch.t
	for _, s := range ch.servers {
		_ = syscall.Kill(-s.p.cmd.Process.Pid, syscall.SIGKILL)
		s.p.wait(time.Minute)
	}
	for i := range ch.nats.nodes {
		ch.nats.kill(i)
	}
	for i := range ch.nats.nodes {
		ch.nats.start(i)
	}
	ch.nats.waitHealthy()
	for i := range ch.servers {
		ch.start(i)
	}
	d := ch.firstSubmit("probe-power", time.Now())
	t.Logf("everything killed and started again: a submit was acknowledged %s after the restart", d.Round(time.Millisecond))
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

// checkRuns reads the worker's log of runs: no job ran under two leases at once, and a job ran
// again only under a new lease whose predecessor the log says ended without a result (expired
// or given back).
func checkRuns(t *testing.T, runLog, export string) {
	t.Helper()
	data, err := os.ReadFile(runLog)
	if err != nil {
		t.Fatal(err)
	}
	type run struct {
		lease      string
		start, end int64
	}
	runs := map[string][]*run{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 {
			t.Fatalf("run log line %q", line)
		}
		at, _ := strconv.ParseInt(f[4], 10, 64)
		switch f[0] {
		case "start":
			runs[f[1]] = append(runs[f[1]], &run{lease: f[2], start: at})
		case "end":
			for _, r := range runs[f[1]] {
				if r.lease == f[2] {
					r.end = at
				}
			}
		}
	}
	// The leases that ended without a result, by the log.
	ended := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(export))
	sc.Buffer(nil, 8<<20)
	for sc.Scan() {
		var rec struct {
			Type string
			Data struct {
				LeaseID string `json:"lease_id"`
			}
		}
		if json.Unmarshal(sc.Bytes(), &rec) == nil && (rec.Type == "job.lease_expired" || rec.Type == "job.lease_released") {
			ended[rec.Data.LeaseID] = rec.Type
		}
	}
	twice := 0
	for job, rs := range runs {
		for i, a := range rs {
			for _, b := range rs[i+1:] {
				if a.lease != b.lease && a.start < b.end && b.start < a.end {
					t.Errorf("job %s ran under leases %s and %s at once", job, a.lease, b.lease)
				}
			}
			if i > 0 {
				twice++
				if prev := rs[i-1]; ended[prev.lease] == "" && prev.lease != a.lease {
					t.Errorf("job %s ran again under %s though its lease %s never expired", job, a.lease, prev.lease)
				}
			}
		}
	}
	t.Logf("the worker ran %d jobs; %d ran again after their lease expired or was given back", len(runs), twice)
}

func isCode(err error, code string) bool {
	var e *client.Error
	return errors.As(err, &e) && e.Code == code
}

func tail(s string) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}
