package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tetherhq/tether/transport/wire"
)

// Chaos faults of the servers' storage and of a NATS server alive but silent: a standby's data
// dir on a full disk and on a read-only file system (real tmpfs mounts, so root only; without
// root the run says so and goes on without them), and the NATS node that leads the stream
// paused (SIGSTOP) for longer than JetStream takes to elect another.

// natsPause is how long pauseNATS freezes a NATS node: longer than the stream's raft group
// takes to elect another leader (4-9 s), as the run did.
const natsPause = 15 * time.Second

// signal sends sig to NATS node i.
func (c *natsCluster) signal(i int, sig syscall.Signal) {
	c.t.Helper()
	if err := syscall.Kill(-c.nodes[i].p.cmd.Process.Pid, sig); err != nil {
		c.t.Fatal(err)
	}
}

// startIn starts server i on dir instead of its own data dir.
func (ch *chaos) startIn(i int, dir string) {
	own := ch.servers[i].dir
	ch.servers[i].dir = dir
	ch.start(i)
	ch.servers[i].dir = own
}

// aStandby returns a server that stands by, and the leader.
func (ch *chaos) aStandby() (sb, lead int) {
	lead, _ = ch.leader()
	return (lead + 1) % len(ch.servers), lead
}

// waitStandby waits until server i answers as a standby.
func (ch *chaos) waitStandby(i int) {
	t := ch.t
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st, code, _ := readyz(ch.servers[i].url()); st == http.StatusServiceUnavailable && code == wire.CodeStandby {
			return
		}
		if time.Now().After(deadline) || ch.servers[i].p.wait(0) >= 0 {
			t.Fatalf("server %d did not stand by:\n%s", i, tail(ch.servers[i].p.output()))
		}
	}
}

// pauseNATS freezes the NATS node that leads the stream for natsPause, under load, and lets it
// go on: its raft group elects another leader, and no request of a tether server waits for the
// frozen node longer than a TTL before it is asked again (elsewhere, if the frozen node was its
// connection's). It measures the longest time without an acknowledged submit.
func (ch *chaos) pauseNATS(k int, fig *figures) {
	t := ch.t
	lead, _ := ch.leader()
	target := ch.nats.streamLeader("TETHER")
	if target < 0 {
		t.Fatalf("NATS pause %d: no node leads the stream", k)
	}
	bucketToo := ch.nats.streamLeader("KV_tether_leader_TETHER") == target
	paused := time.Now()
	ch.nats.signal(target, syscall.SIGSTOP)
	time.Sleep(natsPause) // the fault is its length
	ch.nats.signal(target, syscall.SIGCONT)
	ch.load.grow(t, 100)
	gap := ch.load.gap(paused, time.Now())
	fig.natsPauseGap = append(fig.natsPauseGap, gap)
	ch.nats.waitHealthy()
	now, _ := ch.leader()
	// When, after the pause began, the leader stopped and the next won, by their logs.
	since := func(i int, msg string) string {
		if at, ok := logTime(ch.servers[i].p.output(), msg, paused); ok {
			return "+" + at.Sub(paused).Round(time.Millisecond).String()
		}
		return "-"
	}
	t.Logf("NATS pause %d: node %d, the stream's leader (the bucket's too: %v), paused %s: %s without an acknowledged submit; the tether leader changed: %v (server %d stopped %s, server %d won %s, %s)",
		k, target, bucketToo, natsPause, gap.Round(time.Millisecond), now != lead, lead, since(lead, "no longer leading; stopping"),
		now, since(now, "won the election; catching up and fencing the stream"), takeover(ch.servers[now].p.output()))
	for i := range ch.servers {
		ch.restartIfStopped(i, 0)
	}
}

// logTime is the time of the first line of a JSON log with msg at or after since.
func logTime(out, msg string, since time.Time) (time.Time, bool) {
	for _, line := range strings.Split(out, "\n") {
		var l struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == msg && !l.Time.Before(since) {
			return l.Time, true
		}
	}
	return time.Time{}, false
}

// standbyDiskFull gives a standby a data dir on a disk that is all but full: it stops at once,
// with one line naming the file and ENOSPC and exit status 74, both when it copies the stream
// and when started again on the full disk, while the leader goes on. (It stayed NOT_READY for
// ever, logging about 93 STORAGE_ERROR lines a second with stack traces.)
func (ch *chaos) standbyDiskFull() {
	t := ch.t
	mnt, err := tryMountTmpfs(t, 32<<20)
	if err != nil {
		t.Logf("no full-disk fault: %v", err)
		return
	}
	sb, lead := ch.aStandby()
	_ = syscall.Kill(-ch.servers[sb].p.cmd.Process.Pid, syscall.SIGKILL)
	ch.servers[sb].p.wait(time.Minute)
	fillBut(t, mnt, 1<<20)
	dir := filepath.Join(mnt, "data")
	for _, when := range []string{"copying the stream", "started again on the full disk"} {
		ch.startIn(sb, dir)
		e := checkStorageStop(t, ch.servers[sb].p, "STORAGE_FULL", dir, "ENOSPC")
		t.Logf("server %d, a standby on a full disk, %s: exit %d, %q %s %s", sb, when, exitStorage, e.Msg, e.Op, e.Path)
	}
	ch.load.grow(t, 100)
	if now, _ := ch.leader(); now != lead {
		t.Fatalf("the leader changed from %d to %d while a standby's disk was full", lead, now)
	}
	ch.start(sb)
	ch.waitStandby(sb)
}

// standbyReadOnly puts a standby's data dir on a file system that becomes read-only while the
// standby is down: started again, it stops at once with one line naming the lock file and
// EROFS, exit status 74, not "log is in use by another process".
func (ch *chaos) standbyReadOnly() {
	t := ch.t
	mnt, err := tryMountTmpfs(t, 256<<20)
	if err != nil {
		t.Logf("no read-only fault: %v", err)
		return
	}
	sb, lead := ch.aStandby()
	_ = syscall.Kill(-ch.servers[sb].p.cmd.Process.Pid, syscall.SIGKILL)
	ch.servers[sb].p.wait(time.Minute)
	dir := filepath.Join(mnt, "data")
	ch.startIn(sb, dir)
	ch.waitStandby(sb) // a copy of the stream of its own, on the tmpfs
	_ = syscall.Kill(-ch.servers[sb].p.cmd.Process.Pid, syscall.SIGKILL)
	ch.servers[sb].p.wait(time.Minute)
	remountReadOnly(t, mnt)
	ch.startIn(sb, dir)
	e := checkStorageStop(t, ch.servers[sb].p, "STORAGE_READ_ONLY", dir, "EROFS")
	if strings.Contains(ch.servers[sb].p.output(), "in use") {
		t.Fatalf("a read-only file system said to be in use:\n%s", ch.servers[sb].p.output())
	}
	t.Logf("server %d, a standby on a read-only file system: exit %d, %q %s %s", sb, exitStorage, e.Msg, e.Op, e.Path)
	ch.load.grow(t, 100)
	if now, _ := ch.leader(); now != lead {
		t.Fatalf("the leader changed from %d to %d while a standby's disk was read-only", lead, now)
	}
	ch.start(sb)
	ch.waitStandby(sb)
}
