package client

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// procStat reads process pid's group and start time (clock ticks since boot) from
// /proc/PID/stat; ok is false if there is no such process or it is a zombie, past ending.
func procStat(pid int) (pgrp int, started uint64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid pgrp ... starttime is the 22nd field; comm may hold spaces and
	// parentheses, so the fields are counted from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0, 0, false
	}
	pgrp, err1 := strconv.Atoi(f[2])
	started, err2 := strconv.ParseUint(f[19], 10, 64)
	return pgrp, started, err1 == nil && err2 == nil
}

// bootID names this boot of the machine: start times count from it.
var bootID = sync.OnceValue(func() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
})

// identify is the record of the process group pid leads (a command just started in a group of
// its own), nil if it is gone already.
func identify(pid int, killGrace time.Duration) *jobProcess {
	_, started, ok := procStat(pid)
	if !ok {
		return nil
	}
	return &jobProcess{PGID: pid, Started: started, BootID: bootID(), KillGrace: killGrace}
}

// jobPIDs lists the live processes of p's group that are the job's: its leader while it is the
// very process the job started (same start time, same boot), and any member whose environment
// names the job's lease (TETHER_JOB_LEASE_ID, which JobEnv gives the command and its children
// inherit). A process given a pid or group id of the job's after the job's were gone is
// neither. leader says whether the leader is there: then every member is the job's, for a group
// id is not given again while its leader lives.
func jobPIDs(p *jobProcess, lease string) (leader bool, pids []int) {
	if p.BootID == "" || p.BootID != bootID() {
		return false, nil // the machine restarted since: every process of the job is gone
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false, nil
	}
	mark := []byte("\x00TETHER_JOB_LEASE_ID=" + lease + "\x00")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		pgrp, started, ok := procStat(pid)
		if !ok || pgrp != p.PGID {
			continue
		}
		if pid == p.PGID && started == p.Started {
			leader = true
			pids = append(pids, pid)
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && bytes.Contains(append([]byte{0}, env...), mark) {
			pids = append(pids, pid)
		}
	}
	return leader, pids
}

// leftoverPoll is how often the end of a leftover's processes is looked for.
const leftoverPoll = 50 * time.Millisecond

// endLeftover ends what a job left running when its worker died: SIGTERM to its processes,
// SIGKILL to those left after its kill grace, and returns once none is left (or, past SIGKILL,
// after killWaitMax) with how many there were.
func endLeftover(p *jobProcess, lease string) int {
	leader, pids := jobPIDs(p, lease)
	found := len(pids)
	signal := func(sig syscall.Signal) {
		if leader { // the whole group, forks since the look included
			_ = syscall.Kill(-p.PGID, sig)
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, sig)
		}
	}
	if found == 0 {
		return 0
	}
	signal(syscall.SIGTERM)
	term := time.Now().Add(p.KillGrace)
	killed := false
	poll := time.NewTicker(leftoverPoll) // another process's end, which nothing here is told of
	defer poll.Stop()
	for range poll.C {
		if leader, pids = jobPIDs(p, lease); len(pids) == 0 {
			return found
		}
		found = max(found, len(pids))
		switch {
		case !killed && time.Now().After(term):
			signal(syscall.SIGKILL)
			killed, term = true, time.Now().Add(killWaitMax)
		case killed && time.Now().After(term):
			return found
		}
	}
	return found
}

// killWaitMax bounds the wait for processes sent SIGKILL to be gone (one in uninterruptible
// sleep, on a hung disk, may take longer).
const killWaitMax = 5 * time.Second

// canEndLeftovers says whether this platform can tell a job's processes from others.
const canEndLeftovers = true
