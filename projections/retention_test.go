package projections_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/projectionstest"
)

// folder applies events to a Set one at a time, each stamped at the time it is given.
type folder struct {
	t   *testing.T
	set *projections.Set
	// mirror, if set, folds the same events; a test flushes it.
	mirror *projections.Set
}

func (f folder) apply(at time.Time, events ...eventlog.Payload) error {
	f.t.Helper()
	for _, p := range events {
		err := f.set.Apply(f.set.Seq()+1, at, p)
		if f.mirror != nil {
			if merr := f.mirror.Apply(f.mirror.Seq()+1, at, p); (merr == nil) != (err == nil) {
				f.t.Fatalf("%s: the Set says %v, its flushed mirror %v", p.EventType(), err, merr)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (f folder) must(at time.Time, events ...eventlog.Payload) {
	f.t.Helper()
	if err := f.apply(at, events...); err != nil {
		f.t.Fatal(err)
	}
}

func (f folder) submit(at time.Time, id, tenant string, ttl time.Duration) {
	f.t.Helper()
	f.must(at, eventlog.JobSubmitted{JobID: id, Tenant: tenant, Queue: "q", Type: "t", MaxAttempts: 1, ResultTTLMillis: ttl.Milliseconds()},
		eventlog.JobLeased{JobID: id, LeaseID: "L" + id, WorkerID: "w", Attempt: 1, ExpiresAt: at.Add(time.Minute)})
}

func (f folder) succeed(at time.Time, id string) {
	f.t.Helper()
	f.must(at, eventlog.JobSucceeded{JobID: id, LeaseID: "L" + id, Attempt: 1})
}

func (f folder) die(at time.Time, id string) {
	f.t.Helper()
	f.must(at, eventlog.JobFailed{JobID: id, LeaseID: "L" + id, Attempt: 1, ErrorCode: "e"},
		eventlog.JobDeadLettered{JobID: id, Reason: eventlog.DeadMaxAttempts, Attempt: 1})
}

func expiries(es []projections.Expiry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.JobID+":"+e.Reason)
	}
	return out
}

// TestRetention drives the retention index through every kind of finished job: the server's
// retention, a job's own result TTL, dead letters by age and over the cap, a re-drive, an
// expiry, and a restore from a checkpoint, which must order them the same.
func TestRetention(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	f := folder{t: t, set: projections.New()}
	r := projections.Retention{Done: 10 * time.Minute, Dead: time.Hour, MaxDead: 2}

	f.submit(t0, "a", "acme", 0)
	f.submit(t0, "b", "acme", 30*time.Second)
	f.submit(t0, "live", "acme", time.Second)
	for _, id := range []string{"c", "d", "e"} {
		f.submit(t0, id, "x", 0)
	}
	f.succeed(t0.Add(time.Minute), "a")
	f.succeed(t0.Add(time.Minute), "b")
	f.die(t0.Add(2*time.Minute), "c")
	f.die(t0.Add(3*time.Minute), "d")
	f.die(t0.Add(4*time.Minute), "e")

	steps := []struct {
		name string
		now  time.Time
		want []string
		next time.Time
	}{
		{"before anything is due the cap already takes x's oldest dead letter", t0.Add(70 * time.Second), []string{"c:dead_cap"}, t0.Add(90 * time.Second)},
		{"the result TTL ends before the server's retention", t0.Add(5 * time.Minute), []string{"b:retention", "c:dead_cap"}, t0.Add(90 * time.Second)},
		{"then the retention", t0.Add(11 * time.Minute), []string{"b:retention", "c:dead_cap", "a:retention"}, t0.Add(90 * time.Second)},
	}
	for _, st := range steps {
		if got := expiries(f.set.Expirable(r, st.now, 10)); !slices.Equal(got, st.want) {
			t.Errorf("%s: Expirable = %v, want %v", st.name, got, st.want)
		}
		if next, ok := f.set.NextExpiry(r); !ok || !next.Equal(st.next) {
			t.Errorf("%s: NextExpiry = %v %v, want %v", st.name, next, ok, st.next)
		}
	}
	if got := expiries(f.set.Expirable(r, t0.Add(11*time.Minute), 2)); !slices.Equal(got, []string{"b:retention", "c:dead_cap"}) {
		t.Errorf("limit 2: %v", got)
	}
	if j, _ := f.set.Job("a"); !r.Expired(j, t0.Add(11*time.Minute)) || r.Expired(j, t0.Add(10*time.Minute)) {
		t.Error("a should read as expired from 11m (finished at 1m, retained 10m), not before")
	}
	if j, _ := f.set.Job("live"); r.Expired(j, t0.Add(24*time.Hour)) {
		t.Error("a live job never reads as expired")
	}

	if err := f.apply(t0.Add(12*time.Minute), eventlog.JobExpired{JobID: "live", Reason: eventlog.ExpiredDeleted}); err == nil {
		t.Error("a live job's job.expired was folded")
	}
	f.must(t0.Add(12*time.Minute), eventlog.JobExpired{JobID: "b", Reason: eventlog.ExpiredRetention},
		eventlog.JobExpired{JobID: "c", Reason: eventlog.ExpiredDeadCap},
		eventlog.JobRedriven{JobID: "d", MaxAttempts: 2})
	if _, ok := f.set.Job("b"); ok {
		t.Error("an expired job is still in the views")
	}
	if err := f.apply(t0.Add(12*time.Minute), eventlog.JobExpired{JobID: "b", Reason: eventlog.ExpiredDeleted}); err == nil {
		t.Error("a job expired twice")
	}
	f = folder{t: t, set: mustRestore(t, f.set)}
	if n := f.set.RetainedCount(); n != 2 {
		t.Errorf("RetainedCount = %d, want 2 (a, e)", n)
	}
	if got := expiries(f.set.Expirable(r, t0.Add(13*time.Minute), 10)); !slices.Equal(got, []string{"a:retention"}) {
		t.Errorf("after the expiries and the re-drive: %v", got)
	}
	if next, _ := f.set.NextExpiry(r); !next.Equal(t0.Add(11 * time.Minute)) {
		t.Errorf("NextExpiry = %v, want a's", next)
	}
	if c := f.set.Counters()["q"]; c.Expired != 2 {
		t.Errorf("expired counter = %d, want 2", c.Expired)
	}
	if qs := f.set.Queues("x", t0.Add(13*time.Minute)); len(qs) != 1 || qs[0].Dead != 1 {
		t.Errorf("x's queues %+v, want one dead letter (e): c expired and d was re-driven", qs)
	}
	if dl := f.set.DeadLetters("x"); len(dl) != 1 || dl[0].ID != "e" {
		t.Errorf("x's dead letters %v, want e", dl)
	}
	// Nothing is due under a policy that keeps everything but the cap.
	if got := f.set.Expirable(projections.Retention{}, t0.Add(1000*time.Hour), 10); len(got) != 0 {
		t.Errorf("a zero retention expired %v", expiries(got))
	}
}

// mustRestore round-trips a Set through its checkpoint, as a restart does.
func mustRestore(t *testing.T, s *projections.Set) *projections.Set {
	t.Helper()
	store := projectionstest.NewStore()
	b, err := store.Flush(s)
	if err != nil {
		t.Fatal(err)
	}
	r, err := projections.UnmarshalCheckpoint(b, store)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestListMatchesAScan checks List's indexes against the plain definition — filter every job,
// sort by id, cut at the cursor and the limit — over a seeded random history of two tenants
// with every status, scheduled jobs on both sides of now, and expiries: on a Set that holds
// every job in memory, on one that flushed to its table now and then while it folded, and on
// one restored from a table; ListOutside likewise.
func TestListMatchesAScan(t *testing.T) {
	const seed = 20261123
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, seed))
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	store := projectionstest.NewStore()
	f := folder{t: t, set: projections.New(), mirror: projections.NewOn(store)}
	var ids []string
	for i := range 600 {
		if i%50 == 49 {
			if _, err := store.Flush(f.mirror); err != nil {
				t.Fatal(err)
			}
		}
		id, tenant := fmt.Sprintf("01J%023d", r.IntN(1_000_000)*1000+i), []string{"acme", "other"}[r.IntN(2)]
		at := t0.Add(time.Duration(i) * time.Second)
		var labels map[string]string
		if n := r.IntN(3); n > 0 {
			labels = map[string]string{"gpu": fmt.Sprintf("g%d", n)}
		}
		f.must(at, eventlog.JobSubmitted{JobID: id, Tenant: tenant, Queue: fmt.Sprintf("q%d", r.IntN(3)), Type: fmt.Sprintf("t%d", r.IntN(2)), MaxAttempts: 1, Labels: labels})
		ids = append(ids, id)
		switch r.IntN(6) {
		case 0: // stays queued
		case 1:
			f.must(at, eventlog.JobScheduled{JobID: id, RunAt: t0.Add(time.Duration(r.IntN(1200)) * time.Second), Reason: "delay"})
		case 2:
			f.must(at, eventlog.JobLeased{JobID: id, LeaseID: "L" + id, WorkerID: "w", Attempt: 1, ExpiresAt: at})
		case 3:
			f.must(at, eventlog.JobLeased{JobID: id, LeaseID: "L" + id, WorkerID: "w", Attempt: 1, ExpiresAt: at})
			f.succeed(at, id)
			if r.IntN(3) == 0 {
				f.must(at, eventlog.JobExpired{JobID: id, Reason: eventlog.ExpiredDeleted})
			}
		case 4:
			f.must(at, eventlog.JobLeased{JobID: id, LeaseID: "L" + id, WorkerID: "w", Attempt: 1, ExpiresAt: at})
			f.die(at, id)
		case 5:
			f.must(at, eventlog.JobCancelled{JobID: id, Reason: "requested"})
		}
	}
	now := t0.Add(600 * time.Second)
	restored := mustRestore(t, f.set)
	statuses := []projections.Status{"", projections.StatusQueued, projections.StatusScheduled, projections.StatusLeased,
		projections.StatusSucceeded, projections.StatusFailed, projections.StatusCancelled}
	retention := projections.Retention{Done: 300 * time.Second}
	for range 400 {
		fl := projections.JobFilter{Tenant: []string{"acme", "other"}[r.IntN(2)], Status: statuses[r.IntN(len(statuses))], Limit: 1 + r.IntN(40), Newest: r.IntN(2) == 0}
		if r.IntN(2) == 0 {
			fl.Queue = fmt.Sprintf("q%d", r.IntN(3))
		}
		if r.IntN(3) == 0 {
			fl.Type = fmt.Sprintf("t%d", r.IntN(2))
		}
		if r.IntN(3) == 0 {
			fl.Label = fmt.Sprintf("gpu=g%d", r.IntN(3))
		}
		if r.IntN(3) == 0 {
			fl.After = ids[r.IntN(len(ids))]
		}
		if r.IntN(4) == 0 {
			fl.Retention = retention
		}
		var want []string
		for _, id := range ids {
			j, ok := f.set.Job(id)
			if !ok || j.Tenant != fl.Tenant || (fl.Queue != "" && j.Queue != fl.Queue) || (fl.Type != "" && j.Type != fl.Type) ||
				(fl.Label != "" && fl.Label != "gpu="+j.Labels["gpu"]) ||
				(fl.Status != "" && j.StatusAt(now) != fl.Status) || fl.Retention.Expired(j, now) ||
				(fl.After != "" && !fl.Newest && id <= fl.After) || (fl.After != "" && fl.Newest && id >= fl.After) {
				continue
			}
			want = append(want, id)
		}
		slices.Sort(want)
		if fl.Newest {
			slices.Reverse(want)
		}
		wantMore := len(want) > fl.Limit
		want = want[:min(len(want), fl.Limit)]
		for _, s := range []struct {
			name string
			set  *projections.Set
		}{{"in memory", f.set}, {"flushed now and then", f.mirror}, {"restored", restored}} {
			page, more := s.set.List(fl, now)
			outside, outsideMore := projections.ListOutside(func(fn func(*projections.Set)) { fn(s.set) }, fl, now)
			if got := jobIDs(page); !slices.Equal(got, want) || more != wantMore {
				t.Fatalf("%s: List(%+v) = %v (more %v), want %v (more %v)", s.name, fl, got, more, want, wantMore)
			}
			if got := jobIDs(outside); !slices.Equal(got, want) || outsideMore != wantMore {
				t.Fatalf("%s: ListOutside(%+v) = %v (more %v), want %v (more %v)", s.name, fl, got, outsideMore, want, wantMore)
			}
		}
	}
}

// A job that expired leaves a tombstone that names its tenant: in memory until a flush, in the
// table after, and read back from a checkpoint; a Set restored from a checkpoint of a build
// that kept none keeps tombstones from that checkpoint on, and a replay compared with it
// (KeepGoneFrom) writes the same fold.
func TestTombstonesOutliveTheJobs(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	store := projectionstest.NewStore()
	f := folder{t: t, set: projections.New(), mirror: projections.NewOn(store)}
	gone := func(s *projections.Set, id, tenant string) {
		t.Helper()
		if got, ok := s.Gone(id); tenant != "" && (!ok || got != tenant) || tenant == "" && ok {
			t.Errorf("Gone(%s) = %q %v, want %q", id, got, ok, tenant)
		}
	}
	f.submit(t0, "a", "acme", 0)
	f.succeed(t0, "a")
	f.submit(t0, "b", "beta", 0)
	f.succeed(t0, "b")
	if _, err := store.Flush(f.mirror); err != nil { // a and b finished: in the table
		t.Fatal(err)
	}
	f.must(t0, eventlog.JobExpired{JobID: "a", Reason: eventlog.ExpiredDeleted})
	for _, s := range []*projections.Set{f.set, f.mirror} {
		gone(s, "a", "acme")
		gone(s, "b", "")
		gone(s, "never", "")
	}
	oldCheckpoint, err := store.Flush(f.mirror) // a's tombstone: in the table
	if err != nil {
		t.Fatal(err)
	}
	f.must(t0, eventlog.JobExpired{JobID: "b", Reason: eventlog.ExpiredDeleted})
	for _, s := range []*projections.Set{f.set, f.mirror} {
		gone(s, "a", "acme")
		gone(s, "b", "beta")
	}
	want, _ := f.set.MarshalFold()
	if got, _ := f.mirror.MarshalFold(); string(got) != string(want) {
		t.Errorf("the fold of a flushed Set:\n%s\nof one that never flushed:\n%s", got, want)
	}
	if !strings.Contains(string(want), `{"gone":"a","tenant":"acme","seq":`) {
		t.Errorf("the fold has no tombstone of a:\n%s", want)
	}

	// The same checkpoint as an older build wrote it: no gone_from, and a table without a's
	// tombstone.
	older := strings.Replace(string(oldCheckpoint), `"gone_from":0,`, "", 1)
	table := projectionstest.NewStore()
	store.Scan(nil, nil, false, func(key, value []byte) bool {
		if key[0] != 'g' {
			table.Apply([]eventlog.ViewWrite{{Key: slices.Clone(key), Value: slices.Clone(value)}})
		}
		return true
	})
	restored, err := projections.UnmarshalCheckpoint([]byte(older), table)
	if err != nil || older == string(oldCheckpoint) {
		t.Fatalf("restoring an older checkpoint: %v (gone_from removed: %v)", err, older != string(oldCheckpoint))
	}
	if err := restored.Apply(restored.Seq()+1, t0, eventlog.JobExpired{JobID: "b", Reason: eventlog.ExpiredDeleted}); err != nil {
		t.Fatal(err)
	}
	gone(restored, "a", "") // expired before: the log's stream says so
	gone(restored, "b", "beta")
	replay := f.set
	replay.KeepGoneFrom(restored.GoneFrom())
	want, _ = replay.MarshalFold()
	if got, _ := restored.MarshalFold(); string(got) != string(want) {
		t.Errorf("the fold restored from an older checkpoint:\n%s\nof a replay kept from seq %d:\n%s", got, restored.GoneFrom(), want)
	}
	ckpt, err := store.Flush(f.mirror)
	if err != nil {
		t.Fatal(err)
	}
	back, err := projections.UnmarshalCheckpoint(ckpt, store)
	if err != nil {
		t.Fatal(err)
	}
	gone(back, "a", "acme")
	gone(back, "b", "beta")
}
