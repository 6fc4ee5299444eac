package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// Faults of the chaos test in which a server is alive and silent (SIGSTOP: its kernel still
// takes connections, nothing answers them): a paused standby while the leader dies, and a
// paused server first in every client's list. A silent server must cost a client no more than
// one that is gone: the checks below fail where a client waited on it.

// silentWithin bounds, from the moment a server leads, how long the clients may take to work
// with it while another is silent: the figure for the worker, far above the hedge (1 s)
// and a standby's re-asks (100 ms) that bring them there.
const silentWithin = 3 * time.Second

// cliPatience is the CLI's Patience (client.Patience's default): a silent server first in its
// list cost each run that much, and a submit without a key failed with it.
const cliPatience = 10 * time.Second

// readyAt waits until server i answers /readyz 200 and returns when; it asks that server alone,
// so that a paused one does not slow the watch.
func (ch *chaos) readyAt(i int) time.Time {
	ch.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if st, _, _ := readyz(ch.servers[i].url()); st == http.StatusOK {
			return time.Now()
		}
	}
	ch.t.Fatalf("server %d did not lead in 60 s:\n%s", i, tail(ch.servers[i].p.output()))
	return time.Time{}
}

// settled restarts the servers that exited (a deposed leader does), waits until the others
// than the leader answer as standbys, and returns the leader: a fault here pauses a server
// that is running and standing by.
func (ch *chaos) settled() int {
	ch.t.Helper()
	for i := range ch.servers {
		ch.restartIfStopped(i, 0)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		lead, _ := ch.leader()
		standing := 0
		for i, s := range ch.servers {
			if st, code, _ := readyz(s.url()); i != lead && st == http.StatusServiceUnavailable && code == wire.CodeStandby {
				standing++
			}
		}
		if standing == len(ch.servers)-1 {
			return lead
		}
		if time.Now().After(deadline) {
			ch.t.Fatalf("the servers did not settle, one leading and the others standing by, in 60 s")
		}
	}
}

// readyBut waits until a server other than skip answers /readyz 200, and returns it and when;
// it does not ask skip, which may be paused.
func (ch *chaos) readyBut(skip int) (int, time.Time) {
	ch.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for i, s := range ch.servers {
			if st, _, _ := readyz(s.url()); i != skip && st == http.StatusOK {
				return i, time.Now()
			}
		}
	}
	ch.t.Fatalf("no server but %d led in 60 s", skip)
	return -1, time.Time{}
}

// ranAfter waits until the worker's log of runs has a job started at or after since, up to
// until, and returns when it started.
func (ch *chaos) ranAfter(since, until time.Time) (time.Time, bool) {
	for {
		if at, ok := firstRun(ch.runLog, since); ok {
			return at, true
		}
		if time.Now().After(until) {
			return time.Time{}, false
		}
		time.Sleep(10 * time.Millisecond) // polling another process's file
	}
}

// firstRun is the earliest start in a log of runs at or after since.
func firstRun(runLog string, since time.Time) (time.Time, bool) {
	f, err := os.Open(runLog)
	if err != nil {
		return time.Time{}, false
	}
	defer f.Close()
	var first time.Time
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 5 || fs[0] != "start" {
			continue
		}
		ns, err := strconv.ParseInt(fs[4], 10, 64)
		if at := time.Unix(0, ns); err == nil && !at.Before(since) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first, !first.IsZero()
}

// ackedAfter waits until the load has a submit acknowledged at or after since, up to until,
// and returns when.
func (l *load) ackedAfter(since, until time.Time) (time.Time, bool) {
	for {
		l.mu.Lock()
		var first time.Time
		for _, a := range l.acks {
			if !a.Before(since) && (first.IsZero() || a.Before(first)) {
				first = a
			}
		}
		l.mu.Unlock()
		if !first.IsZero() {
			return first, true
		}
		if time.Now().After(until) {
			return time.Time{}, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// absorb ends other and counts what it acknowledged as l's, for the checks at the end.
func (l *load) absorb(other *load) {
	ids := other.end()
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range ids {
		l.ids[id] = true
	}
	for code, n := range other.errs {
		l.errs[code] += n
	}
}

// firstIn is the list of the servers with server i first, the others in their order after it.
func (ch *chaos) firstIn(i int) string {
	var us []string
	for k := range ch.servers {
		us = append(us, ch.servers[(i+k)%len(ch.servers)].url())
	}
	return strings.Join(us, ",")
}

// cli runs a CLI command against servers and returns its output and how long it took; it fails
// the test unless it succeeds within the CLI's Patience.
func (ch *chaos) cli(servers string, args ...string) (string, time.Duration) {
	t := ch.t
	t.Helper()
	began := time.Now()
	out, errOut, code := tether(t, nil, append(args, "--server", servers, "--token", ch.apiKey)...)
	took := time.Since(began)
	if code != 0 || took >= cliPatience {
		t.Fatalf("tether %s with a silent server first: exit %d after %s\n%s", strings.Join(args, " "), code, took.Round(time.Millisecond), errOut)
	}
	return out, took
}

// pausedStandbyKill pauses (SIGSTOP) the standby that follows the leader in every client's list,
// kills the leader, and checks that the worker is connected to the other standby, and the load
// has a submit acknowledged there, within silentWithin of it leading, the paused one still
// paused; before, both waited on the paused one, which took their connections, until it was let
// go (41 s and 124 s in an operator's runs, 60 s here). When the worker runs jobs again is a
// figure: with a lease the dead leader appended and never delivered, the new leader holds one of
// the worker's slots until the lease expires (the server's item of the issue), and with every
// slot held so the worker, connected, runs nothing for a lease's time.
func (ch *chaos) pausedStandbyKill(k int, fig *figures) {
	t := ch.t
	lead := ch.settled()
	paused, next := (lead+1)%3, (lead+2)%3
	ps := ch.servers[paused].p
	ps.signal(t, syscall.SIGSTOP)
	killed := time.Now()
	_ = syscall.Kill(-ch.servers[lead].p.cmd.Process.Pid, syscall.SIGKILL)
	ch.servers[lead].p.wait(time.Minute)
	ready := ch.readyAt(next)
	connected, ok := ch.connectedAfter(killed)
	acked, ackOK := ch.load.ackedAfter(ready, ready.Add(20*time.Second))
	ran, ranOK := ch.ranAfter(ready, ready.Add(20*time.Second))
	ps.signal(t, syscall.SIGCONT)
	if !ok || !ackOK {
		t.Fatalf("paused standby %d: server %d killed, server %d led; with server %d paused, the worker connected: %v, the load had a submit acknowledged: %v\n%s",
			k, lead, next, paused, ok, ackOK, tail(ch.worker.output()))
	}
	conn, ack := max(connected.Sub(ready), 0), max(acked.Sub(ready), 0) // the test may see it ready after they did
	fig.standbyPausedConnect = append(fig.standbyPausedConnect, conn)
	fig.standbyPausedAck = append(fig.standbyPausedAck, ack)
	runs := "ran no job in the 20 s after (its slots held by leases it never got?)"
	if ranOK {
		fig.standbyPausedRun = append(fig.standbyPausedRun, max(ran.Sub(ready), 0))
		runs = fmt.Sprintf("ran a job %s after", max(ran.Sub(ready), 0).Round(time.Millisecond))
	}
	t.Logf("paused standby %d: server %d paused, server %d killed, server %d led (%s); the worker connected %s after, %s; the load's first submit was acknowledged %s after",
		k, paused, lead, next, takeover(ch.servers[next].p.output()), conn.Round(time.Millisecond), runs, ack.Round(time.Millisecond))
	if conn > silentWithin || ack > silentWithin {
		t.Fatalf("paused standby %d: the worker connected %s and the load had a submit acknowledged %s after the new leader led; want both within %s",
			k, conn.Round(time.Millisecond), ack.Round(time.Millisecond), silentWithin)
	}
	ch.start(lead)
}

// pausedFirst pauses (SIGSTOP) the server first in the lists of the CLI, a Go client's load and
// a worker started meanwhile: a standby (k even), or the leader (k odd). Each CLI run, a submit
// without a key among them, must cost less than the CLI's Patience (it cost one each, and the
// submit failed); the worker registers and runs its job. With the leader paused, the load's
// submits must be acknowledged within silentWithin of the new leader leading, the paused one
// still paused (they waited out the pause).
func (ch *chaos) pausedFirst(k int, fig *figures) {
	t := ch.t
	lead := ch.settled()
	target := (lead + 1) % 3
	if k%2 == 1 {
		target = lead
	}
	servers := ch.firstIn(target)
	l := startLoadKeyed(client.New(servers, ch.apiKey, nil), 2, fmt.Sprintf("first%d-", k))
	l.grow(t, 50)
	p := ch.servers[target].p
	paused := time.Now()
	p.signal(t, syscall.SIGSTOP)
	what := "a standby"
	if target == lead {
		what = "the leader"
		next, ready := ch.readyBut(target)
		acked, ok := l.ackedAfter(ready, ready.Add(20*time.Second))
		if !ok {
			p.signal(t, syscall.SIGCONT)
			t.Fatalf("paused first %d: the leader, server %d, paused first in the load's list, server %d led, and no submit was acknowledged in the 20 s after", k, target, next)
		}
		gap := max(acked.Sub(ready), 0)
		fig.leaderPausedAck = append(fig.leaderPausedAck, gap)
		t.Logf("paused first %d: the leader, server %d, paused; server %d led %s after the pause (%s); the load's first submit acknowledged %s after",
			k, target, next, ready.Sub(paused).Round(time.Millisecond), takeover(ch.servers[next].p.output()), gap.Round(time.Millisecond))
		if gap > silentWithin {
			p.signal(t, syscall.SIGCONT)
			t.Fatalf("paused first %d: the load's first submit was acknowledged %s after the new leader led; want within %s", k, gap.Round(time.Millisecond), silentWithin)
		}
	}
	// The CLI, with the paused server first: a submit without a key, a read.
	out, took := ch.cli(servers, "job", "submit", "--queue", "first", "--type", "t", "--json")
	var j wire.Job
	if err := json.Unmarshal([]byte(out), &j); err != nil || j.ID == "" {
		t.Fatalf("paused first %d: the CLI's submit printed %q: %v", k, out, err)
	}
	_, tookGet := ch.cli(servers, "job", "get", j.ID, "--json")
	fig.firstPausedCLI = append(fig.firstPausedCLI, took, tookGet)
	// A worker started now, with the paused server first, registers and runs that job.
	ctx := context.Background()
	enroll, err := ch.adminC.CreateEnrollToken(ctx, "acme", 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	w := startTether(t, nil, "worker", "--server", servers, "--token", enroll.Token, "--queue", "first", "--state-dir", filepath.Join(t.TempDir(), "state"),
		"--log-format", "json", "--", "sh", "-c", "cat > /dev/null; echo '{}'")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if got, err := ch.c.Get(ctx, j.ID); err == nil && got.Status == "succeeded" {
			break
		}
		if time.Now().After(deadline) {
			p.signal(t, syscall.SIGCONT)
			t.Fatalf("paused first %d: a worker started with %s paused first did not run its job in 30 s:\n%s", k, what, tail(w.output()))
		}
	}
	ran := time.Since(started)
	w.signal(t, syscall.SIGTERM)
	p.signal(t, syscall.SIGCONT)
	if code := w.wait(time.Minute); code != 0 {
		t.Fatalf("paused first %d: the worker exited %d:\n%s", k, code, tail(w.output()))
	}
	t.Logf("paused first %d: %s, server %d, paused first in every list: the CLI's submit took %s, its get %s; a worker started then ran its job %s later",
		k, what, target, took.Round(time.Millisecond), tookGet.Round(time.Millisecond), ran.Round(time.Millisecond))
	if target == lead {
		ch.restartIfStopped(lead, 15*time.Second)
	}
	ch.load.absorb(l)
}
