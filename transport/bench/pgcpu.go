package bench

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// postgresCPU is the CPU (user and system) that the PostgreSQL cluster behind pool has used so
// far, its postmaster and every process it started (backends, WAL writer, checkpointer, ...),
// read from /proc, when that cluster runs on this machine: reached over a Unix socket or a
// loopback address, and its backend's pid a postgres process here. A process that ended
// between two readings takes its CPU with it; the peer's pooled backends live through a run.
func postgresCPU(ctx context.Context, pool *pgxpool.Pool) (time.Duration, bool) {
	var (
		pid  int
		addr *netip.Prefix // NULL over a Unix socket
	)
	if pool.QueryRow(ctx, "SELECT pg_backend_pid(), inet_server_addr()").Scan(&pid, &addr) != nil ||
		addr != nil && !addr.Addr().IsLoopback() {
		return 0, false
	}
	backend, ok := procStat(strconv.Itoa(pid))
	if !ok || backend.comm != "postgres" {
		return 0, false
	}
	postmaster := backend.ppid
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var sum time.Duration
	for _, dir := range dirs {
		name := filepath.Base(dir)
		if st, ok := procStat(name); ok && (st.ppid == postmaster || name == strconv.Itoa(postmaster)) {
			sum += st.cpu
		}
	}
	return sum, true
}

type procStatus struct {
	comm string
	ppid int
	cpu  time.Duration // utime + stime
}

// clockTicks is USER_HZ, the unit of /proc's times: 100 on every Linux Go runs on.
const clockTicks = 100

// procStat reads /proc/pid/stat: "pid (comm) state ppid ... utime stime ...", the times being
// the 14th and 15th fields.
func procStat(pid string) (procStatus, bool) {
	data, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return procStatus{}, false
	}
	open, end := bytes.IndexByte(data, '('), bytes.LastIndexByte(data, ')')
	if open < 0 || end < open {
		return procStatus{}, false
	}
	fields := bytes.Fields(data[end+1:]) // from the 3rd field, state
	if len(fields) < 13 {
		return procStatus{}, false
	}
	ppid, err1 := strconv.Atoi(string(fields[1]))
	utime, err2 := strconv.ParseInt(string(fields[11]), 10, 64)
	stime, err3 := strconv.ParseInt(string(fields[12]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return procStatus{}, false
	}
	return procStatus{comm: string(data[open+1 : end]), ppid: ppid, cpu: time.Duration(utime+stime) * time.Second / clockTicks}, true
}
