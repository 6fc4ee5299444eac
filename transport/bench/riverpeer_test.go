package bench_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/transport/bench"
	"github.com/tetherhq/tether/transport/bench/pgtest"
)

// The River peer works every job it inserted on a real PostgreSQL with fsync on, leaves none
// behind, and refuses a database whose commits are not durable.
func TestRiverPeerBurnsDownEveryJob(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	url := pgtest.Start(t)
	ctx := runCtx(t)
	res, err := bench.RunRiver(ctx, bench.RiverConfig{URL: url, Jobs: 2000, Producers: 3, Concurrency: 100})
	if err != nil {
		t.Fatal(err)
	}
	if res.Jobs != 2000 || res.Errors != 0 || res.JobsPerSecond <= 0 || res.InsertPerSecond <= 0 || res.Batch != bench.BatchJobs || res.Capacity != 100 {
		t.Fatalf("%+v", res)
	}
	if db := res.Database; db == nil || db.Fsync != "on" || db.SynchronousCommit != "on" {
		t.Fatalf("database %+v", res.Database)
	}
	if res.Submit.P50 <= 0 || res.Elapsed <= 0 {
		t.Fatalf("%+v", res)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var left int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM river_job").Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d jobs left behind (%v)", left, err)
	}

	// A role's setting holds from its next session on, as the server's would after a reload.
	if _, err := conn.Exec(ctx, "ALTER ROLE bench SET synchronous_commit = off"); err != nil {
		t.Fatal(err)
	}
	_, err = bench.RunRiver(ctx, bench.RiverConfig{URL: url, Jobs: 10, Producers: 1, Concurrency: 1})
	if err == nil || !strings.Contains(err.Error(), "synchronous_commit off") {
		t.Fatalf("a database with synchronous_commit off: %v", err)
	}
}

// A PostgreSQL paused in the middle of the River peer's run fails it within its stall: the
// peer used to wait for completions for ever.
func TestRiverPeerStallsOnAPausedDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	url := pgtest.Start(t)
	ctx := runCtx(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() {
		_, err := bench.RunRiver(ctx, bench.RiverConfig{URL: url, Jobs: 1_000_000, Producers: 2, Concurrency: 10, Stall: time.Second, Setup: time.Second})
		ran <- err
	}()
	// Once River's table has jobs, pause the cluster: the postmaster and every backend.
	for n := 0; n == 0; {
		select {
		case err := <-ran:
			t.Fatalf("the run ended before the pause: %v", err)
		default:
		}
		if conn.QueryRow(ctx, "SELECT count(*) FROM (SELECT 1 FROM river_job LIMIT 1) j").Scan(&n) != nil {
			n = 0 // River's table is not there yet
		}
	}
	conn.Close(ctx)
	// This cluster's processes alone (other tests run clusters too): its postmaster, whose
	// pid heads postmaster.pid in its data dir, and the postmaster's children.
	_, dir, _ := strings.Cut(url, "?host=")
	head, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	postmaster, _, _ := strings.Cut(string(head), "\n")
	pause := func(sig syscall.Signal) {
		stats, _ := filepath.Glob("/proc/[0-9]*/stat")
		for _, stat := range stats {
			b, _ := os.ReadFile(stat)
			_, rest, _ := strings.Cut(string(b), ") ")
			fields := strings.Fields(rest) // state, ppid, ...
			pid := filepath.Base(filepath.Dir(stat))
			if pid == postmaster || len(fields) > 1 && fields[1] == postmaster {
				n, _ := strconv.Atoi(pid)
				_ = syscall.Kill(n, sig)
			}
		}
	}
	pause(syscall.SIGSTOP)
	defer pause(syscall.SIGCONT) // before pgtest stops the cluster
	err = <-ran
	t.Log(err)
	if err == nil || !(strings.Contains(err.Error(), "no job finished for 1s") || strings.Contains(err.Error(), "no answer within 1s")) {
		t.Fatalf("err = %v, want the stall named", err)
	}
}
