package bench_test

import (
	"strings"
	"testing"

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
