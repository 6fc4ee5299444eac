package projections_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/projectionstest"
)

// guardedStore is a table that fails the test when it is read while the lock is held.
type guardedStore struct {
	*projectionstest.Store
	t      *testing.T
	locked *bool
	reads  int
}

func (g *guardedStore) Get(key []byte) ([]byte, bool) {
	g.check()
	return g.Store.Get(key)
}

func (g *guardedStore) Scan(prefix, start []byte, reverse bool, fn func(key, value []byte) bool) {
	g.check()
	g.Store.Scan(prefix, start, reverse, fn)
}

func (g *guardedStore) check() {
	g.t.Helper()
	g.reads++
	if *g.locked {
		g.t.Fatal("the table was read under the lock")
	}
}

// churn drives a history of jobs through every status, and keeps what it takes to change it
// further with events that are valid then.
type churn struct {
	f                   folder
	r                   *rand.Rand
	at                  time.Time
	queued, leased      []string
	finished, dead, all []string
	n                   int
}

func (c *churn) step() {
	c.at = c.at.Add(time.Second)
	pick := func(ids *[]string) string {
		i := c.r.IntN(len(*ids))
		id := (*ids)[i]
		*ids = slices.Delete(*ids, i, i+1)
		return id
	}
	switch k := c.r.IntN(7); {
	case k == 0 || len(c.queued) == 0:
		c.n++
		// Ids grow as ULIDs do, so memory holds the newest jobs, and retention masks the oldest
		// of the table; now and then one lands among the stored ones.
		id := fmt.Sprintf("01J%017d%06d", c.n, c.n)
		if c.r.IntN(10) == 0 {
			id = fmt.Sprintf("01J%017d%06d", c.r.IntN(c.n), c.n)
		}
		var labels map[string]string
		if c.r.IntN(2) == 0 {
			labels = map[string]string{"gpu": "yes"}
		}
		c.f.must(c.at, eventlog.JobSubmitted{JobID: id, Tenant: "acme", Queue: fmt.Sprintf("q%d", c.r.IntN(3)), Type: "t", MaxAttempts: 1, Labels: labels})
		c.queued, c.all = append(c.queued, id), append(c.all, id)
	case k == 1:
		c.f.must(c.at, eventlog.JobCancelled{JobID: pick(&c.queued), Reason: "requested"})
	case k <= 3:
		id := pick(&c.queued)
		c.f.must(c.at, eventlog.JobLeased{JobID: id, LeaseID: "L" + id, WorkerID: "w", Attempt: 1, ExpiresAt: c.at.Add(time.Minute)})
		c.leased = append(c.leased, id)
	case k == 4 && len(c.leased) > 0:
		id := pick(&c.leased)
		c.f.succeed(c.at, id)
		c.finished = append(c.finished, id)
	case k == 5 && len(c.leased) > 0:
		id := pick(&c.leased)
		c.f.die(c.at, id)
		c.dead = append(c.dead, id)
	case k == 6 && len(c.dead) > 0 && c.r.IntN(2) == 0:
		id := pick(&c.dead)
		c.f.must(c.at, eventlog.JobRedriven{JobID: id, MaxAttempts: 2})
		c.queued = append(c.queued, id)
	case k == 6 && len(c.finished) > 0:
		id := c.finished[0] // the oldest, as retention takes them
		if c.r.IntN(4) == 0 {
			id = pick(&c.finished)
		} else {
			c.finished = c.finished[1:]
		}
		c.f.must(c.at, eventlog.JobExpired{JobID: id, Reason: eventlog.ExpiredDeleted})
	}
}

// TestListOutsideEqualsList checks ListOutside against List: for each of a seeded random set of
// filters, over a Set whose table holds most of a history and whose memory holds the rest,
// while events are folded between the looks ListOutside takes under the lock (as commits are
// between them on a server) and now and then a flush's writes land in the table (as a
// checkpoint's do; it ends after the call), its page is List's at its last look, and it never
// reads the table under the lock. JobOutside likewise.
func TestListOutsideEqualsList(t *testing.T) {
	const seed = 20261129
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, seed))
	var inLock bool
	table := &guardedStore{Store: projectionstest.NewStore(), t: t, locked: &inLock}
	c := &churn{f: folder{t: t, set: projections.NewOn(table)}, r: r, at: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	for range 3000 {
		c.step()
	}
	if _, err := table.Flush(c.f.set); err != nil {
		t.Fatal(err)
	}
	for range 1500 { // changed since the flush: memory masks their stored copies
		c.step()
	}
	statuses := []projections.Status{"", projections.StatusQueued, projections.StatusLeased,
		projections.StatusSucceeded, projections.StatusFailed, projections.StatusCancelled}
	looks, rounds := 0, 0
	for range 500 {
		fl := projections.JobFilter{Tenant: "acme", Status: statuses[r.IntN(len(statuses))], Limit: 1 + r.IntN(60), Newest: r.IntN(2) == 0,
			Live: r.IntN(8) == 0}
		if r.IntN(2) == 0 {
			fl.Queue = fmt.Sprintf("q%d", r.IntN(4)) // q3 has no job: a filter that skips every one
		}
		if r.IntN(4) == 0 {
			fl.Label = "gpu=yes"
		}
		if r.IntN(3) == 0 {
			fl.After = c.all[r.IntN(len(c.all))]
		}
		now := c.at
		calls := 0
		var flush *projections.Flush // written to the table between looks, ended after the call
		locked := func(fn func(*projections.Set)) {
			for range r.IntN(4) {
				c.step()
			}
			if flush == nil && r.IntN(8) == 0 {
				flush = c.f.set.BeginFlush()
				if err := table.Write(flush); err != nil {
					t.Fatal(err)
				}
			}
			calls++
			inLock = true
			defer func() { inLock = false }()
			fn(c.f.set)
		}
		page, more := projections.ListOutside(locked, fl, now)
		want, wantMore := c.f.set.List(fl, now)
		if got, w := jobIDs(page), jobIDs(want); !slices.Equal(got, w) || more != wantMore {
			t.Fatalf("ListOutside(%+v) = %v (more %v), List at its last look %v (more %v)", fl, got, more, w, wantMore)
		}
		for i := range page {
			if page[i].Status != want[i].Status || page[i].LastSeq != want[i].LastSeq {
				t.Fatalf("ListOutside(%+v): job %s as %s at seq %d, List has it as %s at seq %d", fl, page[i].ID, page[i].Status,
					page[i].LastSeq, want[i].Status, want[i].LastSeq)
			}
		}
		looks, rounds = looks+calls, rounds+1
		if flush != nil {
			c.f.set.EndFlush(flush)
			flush = nil
		}

		id := c.all[r.IntN(len(c.all))]
		j, ok := projections.JobOutside(locked, id)
		wj, wok := c.f.set.Job(id)
		if ok != wok || (ok && (j.Status != wj.Status || j.LastSeq != wj.LastSeq)) {
			t.Fatalf("JobOutside(%s) = %v %v, Job at its last look %v %v", id, j, ok, wj, wok)
		}
	}
	if table.reads == 0 {
		t.Fatal("no list read the table")
	}
	t.Logf("%d lists, %d looks under the lock, %d reads of the table", rounds, looks, table.reads)
}

func jobIDs(jobs []*projections.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// countingStore counts the entries of the table that reads visit, and the reads (each a seek
// in Pebble, which decompresses a block).
type countingStore struct {
	*projectionstest.Store
	visited, reads int
}

func (c *countingStore) Get(key []byte) ([]byte, bool) {
	c.visited++
	c.reads++
	return c.Store.Get(key)
}

func (c *countingStore) Scan(prefix, start []byte, reverse bool, fn func(key, value []byte) bool) {
	c.reads++
	c.Store.Scan(prefix, start, reverse, func(key, value []byte) bool {
		c.visited++
		return fn(key, value)
	})
}

// A list whose filters skip most of the table reads about the entries their indexes share, not
// every job one of them matches: over 10,000 succeeded jobs, 10 of them in queue "other", a
// page of succeeded jobs of a queue with none, failed jobs of the busy queue, and the succeeded
// jobs of "other" each visit a few dozen entries. (A list walked one index and read every job
// it matched to test the others: 20,000 entries, 4 s over 500,000 jobs on a server, all of it
// under the lock that commits wait for.) Where the filters agree, as on the busy queue, the
// walk reads the other index a part at a time, not with a seek for each job: seeks, each a
// block decompressed, made such a page 3.7 times as slow as reading every job.
func TestListSkippingTheHistoryReadsLittle(t *testing.T) {
	table := &countingStore{Store: projectionstest.NewStore()}
	f := folder{t: t, set: projections.NewOn(table)}
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var other, busy []string
	for i := range 10_000 {
		id, queue := fmt.Sprintf("01J%023d", i), "q"
		if i%1000 == 500 {
			queue, other = "other", append(other, id)
		} else {
			busy = append(busy, id)
		}
		f.must(at, eventlog.JobSubmitted{JobID: id, Tenant: "acme", Queue: queue, Type: "t", MaxAttempts: 1},
			eventlog.JobLeased{JobID: id, LeaseID: "L" + id, WorkerID: "w", Attempt: 1, ExpiresAt: at.Add(time.Minute)})
		f.succeed(at, id)
	}
	if _, err := table.Flush(f.set); err != nil {
		t.Fatal(err)
	}
	if n := f.set.InMemory(); n != 0 {
		t.Fatalf("%d jobs in memory after the flush, want every one in the table", n)
	}
	locked := func(fn func(*projections.Set)) { fn(f.set) }
	for _, tc := range []struct {
		f    projections.JobFilter
		want []string
		// seeksMax bounds the reads besides a Get of each job of the page: a seek to each
		// next entry the indexes share, and one to read a part of the other index.
		seeksMax int
	}{
		{projections.JobFilter{Status: projections.StatusSucceeded, Queue: "elsewhere"}, nil, 3},
		{projections.JobFilter{Status: projections.StatusFailed, Queue: "q"}, nil, 3},
		{projections.JobFilter{Status: projections.StatusSucceeded, Queue: "other"}, other, 2*len(other) + 3},
		{projections.JobFilter{Status: projections.StatusSucceeded, Queue: "q"}, busy[:50], 3},
	} {
		tc.f.Tenant, tc.f.Limit = "acme", 50
		table.visited, table.reads = 0, 0
		page, more := projections.ListOutside(locked, tc.f, at)
		if got := jobIDs(page); !slices.Equal(got, tc.want) || more != (len(tc.want) == 50) {
			t.Fatalf("%+v: %v (more %v), want %v", tc.f, got, more, tc.want)
		}
		if table.visited > 100+3*len(page) {
			t.Errorf("%+v: %d entries of the table visited for a page of %d", tc.f, table.visited, len(page))
		}
		if seeks := table.reads - len(page); seeks > tc.seeksMax {
			t.Errorf("%+v: %d reads of the table besides the page's %d jobs, want %d at most", tc.f, seeks, len(page), tc.seeksMax)
		}
		t.Logf("status=%s&queue=%s: %d entries visited, %d reads", tc.f.Status, tc.f.Queue, table.visited, table.reads)
	}
}

// ListOutside walks memory's part in the smallest index a job of the list is in, and keeps to
// the jobs of each of the list's statuses: live jobs of a small queue among many queued ones
// are each listed once.
func TestListOutsideWalksTheSmallestIndex(t *testing.T) {
	f := folder{t: t, set: projections.NewOn(projectionstest.NewStore())}
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	submit := func(id, queue string) {
		f.must(at, eventlog.JobSubmitted{JobID: id, Tenant: "acme", Queue: queue, Type: "t", MaxAttempts: 1})
	}
	for i := range 200 {
		submit(fmt.Sprintf("01J%023d", i), "busy")
	}
	for i := range 5 {
		id := fmt.Sprintf("01K%023d", i)
		submit(id, "small")
		if i < 3 {
			f.must(at, eventlog.JobLeased{JobID: id, LeaseID: "L" + id, WorkerID: "w", Attempt: 1, ExpiresAt: at.Add(time.Minute)})
		}
	}
	locked := func(fn func(*projections.Set)) { fn(f.set) }
	for _, fl := range []projections.JobFilter{
		{Live: true, Queue: "small"},
		{Live: true, Queue: "small", Newest: true},
		{Status: projections.StatusQueued, Queue: "small"},
		{Status: projections.StatusLeased, Queue: "busy"},
	} {
		fl.Tenant, fl.Limit = "acme", 50
		page, more := projections.ListOutside(locked, fl, at)
		want, wantMore := f.set.List(fl, at)
		if got, w := jobIDs(page), jobIDs(want); !slices.Equal(got, w) || more != wantMore {
			t.Fatalf("ListOutside(%+v) = %v (more %v), List %v (more %v)", fl, got, more, w, wantMore)
		}
	}
}
