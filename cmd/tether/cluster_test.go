package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/transport/wire"
)

// Servers resumed from a pause (SIGSTOP, SIGCONT), as real processes: a deposed leader never
// answers /readyz that it leads, and a standby never names a leader it has not read since.

// readyzAnswer is one answer of a server's /readyz, and when it came.
type readyzAnswer struct {
	at     time.Time
	status int
	leader string // a standby's details.leader
}

// readyzProbe asks a server's /readyz from several goroutines, back to back, and keeps every
// answer: while the server is paused, their requests wait in its listen queue and are answered
// the moment it goes on, before and while its timers fire.
type readyzProbe struct {
	mu      sync.Mutex
	answers []readyzAnswer
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

func probeReadyz(url string, askers int) *readyzProbe {
	ctx, cancel := context.WithCancel(context.Background())
	p := &readyzProbe{stop: cancel}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: askers}}
	for range askers {
		p.wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
				resp, err := hc.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						time.Sleep(time.Millisecond) // refused (the server exited): do not spin
					}
					continue
				}
				var e wire.Error
				_ = json.NewDecoder(resp.Body).Decode(&e)
				resp.Body.Close()
				leader, _ := e.Error.Details["leader"].(string)
				p.mu.Lock()
				p.answers = append(p.answers, readyzAnswer{at: time.Now(), status: resp.StatusCode, leader: leader})
				p.mu.Unlock()
			}
		})
	}
	return p
}

// end stops asking and returns the answers that came at or after since.
func (p *readyzProbe) end(since time.Time) []readyzAnswer {
	p.stop()
	p.wg.Wait()
	var out []readyzAnswer
	for _, a := range p.answers {
		if !a.at.Before(since) {
			out = append(out, a)
		}
	}
	return out
}

// pair is two tether servers on one stream of a single NATS server, leader first.
type pair struct {
	t       *testing.T
	nats    *natsCluster
	dirs    []string
	addrs   []string
	servers []*process
}

func startPair(t *testing.T) *pair {
	p := &pair{t: t, nats: startNATS(t, 1)}
	for i := range 2 {
		p.dirs = append(p.dirs, t.TempDir())
		p.addrs = append(p.addrs, freeAddr(t))
		p.servers = append(p.servers, nil)
		p.start(i)
		if i == 0 {
			p.waitReady(0)
		}
	}
	p.waitStandby(1, p.url(0))
	return p
}

func (p *pair) url(i int) string { return "http://" + p.addrs[i] }

func (p *pair) start(i int) {
	p.servers[i] = startTether(p.t, nil, "server", "--data", p.dirs[i], "--addr", p.addrs[i],
		"--log", "nats://"+p.nats.hosts()+"/TETHER", "--nats-replicas", "1", "--leader-ttl", chaosTTL.String(), "--log-format", "json")
}

func (p *pair) waitReady(i int) {
	p.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, _, _ := readyz(p.url(i)); st == http.StatusOK {
			return
		}
		if time.Now().After(deadline) || p.servers[i].wait(0) >= 0 {
			p.t.Fatalf("server %d did not lead:\n%s", i, tail(p.servers[i].output()))
		}
	}
}

func (p *pair) waitStandby(i int, leader string) {
	p.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, code, l := readyz(p.url(i)); st == http.StatusServiceUnavailable && code == wire.CodeStandby && l == leader {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("server %d is not a standby naming %s:\n%s", i, leader, tail(p.servers[i].output()))
		}
	}
}

// keyAbsent waits until the election's key has expired.
func (p *pair) keyAbsent() {
	p.t.Helper()
	nc, err := nats.Connect(p.nats.hosts())
	if err != nil {
		p.t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, "tether_leader_TETHER")
	if err != nil {
		p.t.Fatal(err)
	}
	for ; ctx.Err() == nil; time.Sleep(20 * time.Millisecond) {
		if _, err := kv.Get(ctx, "leader"); errors.Is(err, jetstream.ErrKeyNotFound) {
			return
		}
	}
	p.t.Fatal("the election's key did not expire in 30 s")
}

// A leader paused past its TTL, while the standby takes over, answers no /readyz with 200 once
// it goes on: not before its first tick, not while the renewal that finds the other's claim is
// in flight. It stops, as a deposed leader does. (Before, it answered 200 for 52-70 ms beside
// the new leader in 4 of 9 pauses.)
func TestPausedLeaderNeverSaysItLeadsBesideTheNewOne(t *testing.T) {
	if testing.Short() {
		t.Skip("real NATS and tether processes")
	}
	p := startPair(t)
	for round := range 3 {
		old, next := round%2, (round+1)%2
		probe := probeReadyz(p.url(old), 8)
		p.servers[old].signal(t, syscall.SIGSTOP)
		p.waitReady(next)
		resumed := time.Now()
		p.servers[old].signal(t, syscall.SIGCONT)
		if code := p.servers[old].wait(30 * time.Second); code < 0 {
			t.Fatalf("round %d: the paused leader did not stop once it went on:\n%s", round, tail(p.servers[old].output()))
		}
		answers := probe.end(resumed)
		for _, a := range answers {
			if a.status == http.StatusOK {
				t.Fatalf("round %d: the deposed leader answered /readyz 200 %s after it went on, beside the new leader", round, a.at.Sub(resumed))
			}
		}
		if len(answers) == 0 {
			t.Fatalf("round %d: the deposed leader answered no /readyz after it went on", round)
		}
		t.Logf("round %d: server %d, paused, deposed: %d answers after SIGCONT, none 200", round, old, len(answers))
		p.start(old)
		p.waitStandby(old, p.url(next))
	}
}

// A standby paused while the leader dies names no leader once it goes on until it has read the
// key again, and never the dead one: the key expired meanwhile. (Before, it named the dead
// leader until it took over.)
func TestPausedStandbyNamesNoDeadLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("real NATS and tether processes")
	}
	p := startPair(t)
	dead := p.url(0)
	p.servers[1].signal(t, syscall.SIGSTOP)
	_ = syscall.Kill(-p.servers[0].cmd.Process.Pid, syscall.SIGKILL)
	p.servers[0].wait(time.Minute)
	p.keyAbsent()
	probe := probeReadyz(p.url(1), 8)
	time.Sleep(100 * time.Millisecond) // the probe's requests reach the paused server's listen queue
	resumed := time.Now()
	p.servers[1].signal(t, syscall.SIGCONT)
	p.waitReady(1)
	answers := probe.end(resumed)
	standby := 0
	for _, a := range answers {
		if a.leader == dead {
			t.Fatalf("the resumed standby named the dead leader %s, %s after it went on", dead, a.at.Sub(resumed))
		}
		if a.status == http.StatusServiceUnavailable {
			standby++
		}
	}
	if standby == 0 {
		t.Fatalf("no answer of the resumed standby before it led (%d answers)", len(answers))
	}
	t.Logf("%d answers as a standby after SIGCONT, none naming the dead leader", standby)
}

// A standby serves /metrics of its own (it answered 503 STANDBY): that it is a standby and how
// far its copy is behind the stream; the leader says it leads.
func TestStandbyServesItsMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("real NATS and tether processes")
	}
	p := startPair(t)
	scrape := func(i int) string {
		resp, err := http.Get(p.url(i) + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("server %d's /metrics: %d %s", i, resp.StatusCode, body)
		}
		return string(body)
	}
	mustContain(t, "the leader's /metrics", scrape(0), `tether_role{role="leader"} 1`)
	mustContain(t, "the standby's /metrics", scrape(1), `tether_role{role="standby"} 1`, "tether_standby_lag_records 0\n",
		"tether_standby_lag_seconds 0\n", "tether_standby_head_seq ", "process_resident_memory_bytes ")
}
