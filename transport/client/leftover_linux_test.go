package client

import (
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The processes a job left when its worker died are ended, and no others: a record proves its
// group is the job's by the leader's start time on this boot, or a member's environment naming
// the job's lease. Real processes, each in a group of its own.

// group starts sh -c script in a process group of its own, with the job's lease in its
// environment if lease is set, and returns it with its stdin; the group is killed when the
// test ends.
func group(t *testing.T, lease, script string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = os.Environ()
	if lease != "" {
		cmd.Env = append(cmd.Env, "TETHER_JOB_LEASE_ID="+lease)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	// The script says when its processes are all started.
	b := make([]byte, 6)
	if _, err := out.Read(b); err != nil || string(b) != "ready\n" {
		t.Fatalf("the group did not start: %q %v", b, err)
	}
	return cmd, in
}

// members lists the live processes of group pgid.
func members(pgid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			if pgrp, _, ok := procStat(pid); ok && pgrp == pgid {
				out = append(out, pid)
			}
		}
	}
	return out
}

const twoSleeps = `sleep 300 & echo ready; exec sleep 300`

func TestLeftoverGroupIsEnded(t *testing.T) {
	t.Parallel()
	cmd, _ := group(t, "L-ended", twoSleeps)
	p := identify(cmd.Process.Pid, 2*time.Second)
	if p == nil || p.PGID != cmd.Process.Pid || p.BootID == "" {
		t.Fatalf("identified %+v", p)
	}
	if n := endLeftover(p, "L-ended"); n != 2 {
		t.Fatalf("ended %d processes, want the leader and its child", n)
	}
	_ = cmd.Wait()
	if left := members(p.PGID); len(left) != 0 {
		t.Fatalf("processes %v of the group live on", left)
	}
}

// A group whose leader is gone, leaving a child behind: the child is the job's by its
// environment.
func TestLeftoverChildOfAGoneLeaderIsEnded(t *testing.T) {
	t.Parallel()
	cmd, in := group(t, "L-orphan", `sleep 300 </dev/null & echo ready; read -r line`)
	p := identify(cmd.Process.Pid, 2*time.Second)
	if p == nil {
		t.Fatal("the leader is gone before it was identified")
	}
	in.Close() // the leader exits and is reaped; its sleep lives on
	_ = cmd.Wait()
	if left := members(p.PGID); len(left) != 1 {
		t.Fatalf("members %v, want the child alone", left)
	}
	if n := endLeftover(p, "L-orphan"); n != 1 {
		t.Fatalf("ended %d processes, want the child", n)
	}
	if left := members(p.PGID); len(left) != 0 {
		t.Fatalf("processes %v of the group live on", left)
	}
}

// A record whose pid was given to another process since (another start time), or made on
// another boot, ends nothing: the processes there are not the job's.
func TestLeftoverRecordOfAnotherProcessEndsNothing(t *testing.T) {
	t.Parallel()
	stranger, _ := group(t, "", twoSleeps)
	p := identify(stranger.Process.Pid, time.Second)
	for name, rec := range map[string]jobProcess{
		"another start time": {PGID: p.PGID, Started: p.Started - 1, BootID: p.BootID, KillGrace: time.Second},
		"another boot":       {PGID: p.PGID, Started: p.Started, BootID: strings.Repeat("0", len(p.BootID)), KillGrace: time.Second},
	} {
		if n := endLeftover(&rec, "L-stranger"); n != 0 {
			t.Fatalf("%s: ended %d processes of a group that is not the job's", name, n)
		}
	}
	if left := members(p.PGID); len(left) != 2 {
		t.Fatalf("the stranger's group has %v, want its two processes alive", left)
	}
}

// A process that ignores SIGTERM gets SIGKILL once the kill grace is over.
func TestLeftoverThatIgnoresSIGTERMIsKilled(t *testing.T) {
	t.Parallel()
	cmd, _ := group(t, "L-stubborn", `trap '' TERM; echo ready; while :; do sleep 1; done`)
	p := identify(cmd.Process.Pid, 200*time.Millisecond)
	if n := endLeftover(p, "L-stubborn"); n < 1 {
		t.Fatalf("ended %d processes", n)
	}
	_ = cmd.Wait()
	if left := members(p.PGID); len(left) != 0 {
		t.Fatalf("processes %v of the group live on", left)
	}
}
