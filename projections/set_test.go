package projections_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/actorstest"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/projectionstest"
)

// workload runs a scripted day in a deterministic world that touches every fold: submits
// (delayed, idempotent, reserved), leases, progress, completions, failures with retries,
// expiries, dead letters, re-drives, cancels, quota changes, reservations and revocation.
func workload(t *testing.T) *actorstest.World {
	t.Helper()
	w := actorstest.New(7, time.Date(2026, 11, 21, 14, 0, 0, 0, time.UTC))
	call := func(to actors.Ref, msg any) any {
		r := w.Call("c", to, msg)
		if len(r) != 1 {
			t.Fatalf("%T: %d replies", msg, len(r))
		}
		return r[0]
	}
	acme := actors.TenantRef("acme")
	call(acme, actors.SetQuota{Tenant: "acme", MaxActive: new(100), MaxRunning: new(3)})
	res := call(acme, actors.Reserve{Tenant: "acme", TTL: time.Minute}).(actors.Reserved)
	call(acme, actors.Reserve{Tenant: "acme", TTL: time.Minute})
	key := call(acme, actors.CreateAPIKey{Tenant: "acme", KeyHash: "kh"}).(actors.Created)
	call(acme, actors.CreateAPIKey{Tenant: "acme", KeyHash: "kh2"})
	call(acme, actors.RevokeAPIKey{Tenant: "acme", KeyID: key.ID})
	enroll := call(acme, actors.CreateEnrollToken{Tenant: "acme", TokenHash: "eh", Uses: 2, ExpiresAt: w.Clock.Add(time.Hour)}).(actors.Created)
	reg := call(acme, actors.RegisterWorker{Tenant: "acme", Name: "w", Queues: []string{"a", "b"}, Capacity: 3, TokenHash: "h",
		ExpiresAt: w.Clock.Add(time.Hour), EnrollTokenID: enroll.ID}).(actors.Registered)
	var specs []actors.JobSpec
	for i := range 12 {
		specs = append(specs, actors.JobSpec{Queue: []string{"a", "b"}[i%2], Type: "t", Priority: i % 3, MaxAttempts: 2, LeaseTTL: 10 * time.Second,
			Payload: json.RawMessage(`{"i":` + string(rune('0'+i%10)) + `}`), Labels: map[string]string{"k": "v"}})
	}
	specs[0].IdempotencyKey, specs[1].Delay, specs[2].ReservationID = "key", time.Minute, res.ID
	call(acme, actors.Submit{Tenant: "acme", Jobs: specs})
	call(acme, actors.Submit{Tenant: "acme", Jobs: specs[:1]}) // an idempotent hit
	for _, q := range []string{"c", "d"} {
		call(actors.DispatcherRef(), actors.PauseQueue{Tenant: "acme", Queue: q, Paused: true})
	}
	call(actors.DispatcherRef(), actors.PauseQueue{Tenant: "acme", Queue: "d"}) // c stays paused
	w.Connect("s1", "sink", actors.OpenSession{WorkerID: reg.WorkerID, Transport: "websocket"})
	w.Send(actors.DispatcherRef(), actors.SessionCredit{SessionID: "s1", N: 3}, actorstest.External("sink"))
	for round := 0; round < 8; round++ {
		w.Run()
		for _, m := range w.Inbox("sink") {
			a, ok := m.(actors.Assignment)
			if !ok {
				continue
			}
			d := actors.DispatcherRef()
			call(d, actors.Progress{WorkerID: reg.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Kind: "log", Data: json.RawMessage(`"x"`)})
			switch round % 4 {
			case 0:
				call(d, actors.Complete{WorkerID: reg.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: json.RawMessage(`{"ok":1}`)})
			case 1:
				call(d, actors.Fail{WorkerID: reg.WorkerID, JobID: a.JobID, LeaseID: a.LeaseID, Code: "e", Retryable: true})
			case 2:
				call(d, actors.Cancel{Tenant: "acme", JobID: a.JobID})
			}
			w.Send(actors.DispatcherRef(), actors.SessionCredit{SessionID: "s1", N: 1}, actorstest.External("sink"))
		}
		w.Send(actors.SessionRef("s1"), actors.Heartbeat{}, actorstest.External("hb"))
		w.Advance(10 * time.Second)
	}
	for _, j := range w.Set.DeadLetters("acme") {
		call(acme, actors.Redrive{Tenant: "acme", JobID: j.ID})
	}
	call(acme, actors.RevokeWorker{Tenant: "acme", WorkerID: reg.WorkerID, By: "admin"})
	w.Advance(time.Hour)
	return w
}

func replay(t *testing.T, recs []actorstest.Record, s *projections.Set) *projections.Set {
	t.Helper()
	for _, r := range recs {
		// Through the log's encoding, as `tether replay` and start-up read it.
		e, err := eventlog.NewEvent(r.Payload.Stream(), r.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ApplyRecord(eventlog.Record{Seq: r.Seq, Time: r.Time, Type: e.Type, Data: e.Data}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func encode(t *testing.T, s *projections.Set) []byte {
	t.Helper()
	b, err := s.MarshalFold()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLiveEqualsReplay(t *testing.T) {
	t.Parallel()
	w := workload(t)
	types := map[string]bool{}
	for _, r := range w.Log {
		types[r.Payload.EventType()] = true
	}
	for _, want := range []string{"job.scheduled", "job.progress", "job.succeeded", "job.retry_scheduled", "job.lease_expired",
		"job.dead_lettered", "job.redriven", "job.cancel_requested", "job.cancelled", "tenant.reservation_consumed",
		"tenant.reservation_expired", "worker.revoked", "worker.session_ended", "tenant.api_key_revoked", "tenant.enroll_token_used",
		"tenant.queue_paused", "tenant.queue_resumed"} {
		if !types[want] {
			t.Errorf("the workload never logs %s", want)
		}
	}
	full := replay(t, w.Log, projections.New())
	if live, re := encode(t, w.Set), encode(t, full); !bytes.Equal(live, re) {
		t.Fatalf("live projections differ from a replay:\nlive   %s\nreplay %s", live, re)
	}
}

func TestCheckpointPlusTailEqualsReplay(t *testing.T) {
	t.Parallel()
	w := workload(t)
	want := encode(t, replay(t, w.Log, projections.New()))
	for k := 0; k <= len(w.Log); k++ {
		// Flushed at k, as a checkpoint does, and restored from it, as a restart does.
		store := projectionstest.NewStore()
		head := replay(t, w.Log[:k], projections.NewOn(store))
		ckpt, err := store.Flush(head)
		if err != nil {
			t.Fatal(err)
		}
		restored, err := projections.UnmarshalCheckpoint(ckpt, store)
		if err != nil {
			t.Fatal(err)
		}
		if got := encode(t, replay(t, w.Log[k:], restored)); !bytes.Equal(got, want) {
			t.Fatalf("checkpoint at seq %d plus the tail differs from a full replay", k)
		}
		// The flushed Set folds on from its table and memory alike.
		if got := encode(t, replay(t, w.Log[k:], head)); !bytes.Equal(got, want) {
			t.Fatalf("a Set flushed at seq %d and folded on differs from a full replay", k)
		}
	}
}

// A flush runs while the Set goes on: begun at k, saved some records later and ended in parts
// with records folded between them, then restored from, it gives what a full replay gives, and
// so does the Set that went on.
func TestFlushInFlightEqualsReplay(t *testing.T) {
	t.Parallel()
	w := workload(t)
	want := encode(t, replay(t, w.Log, projections.New()))
	for k := 0; k <= len(w.Log); k++ {
		for _, lag := range []int{1, 3, 10} {
			end := min(k+lag, len(w.Log))
			store := projectionstest.NewStore()
			// An earlier flush, so that the one in flight replaces stored jobs, and what changed
			// since for the one in flight.
			s := replay(t, w.Log[:k/2], projections.NewOn(store))
			if _, err := store.Flush(s); err != nil {
				t.Fatal(err)
			}
			replay(t, w.Log[k/2:k], s)
			f := s.BeginFlush()
			replay(t, w.Log[k:end], s)
			if err := store.Write(f); err != nil {
				t.Fatal(err)
			}
			restored, err := projections.UnmarshalCheckpoint(store.Checkpoint(), store)
			if err != nil {
				t.Fatal(err)
			}
			// Ended a job at a time, a record folded between the parts, as a runtime may.
			rest := w.Log[end:]
			for !s.EndFlushPart(f, 1) {
				if len(rest) > 0 {
					replay(t, rest[:1], s)
					rest = rest[1:]
				}
			}
			if got := encode(t, replay(t, w.Log[k:], restored)); !bytes.Equal(got, want) {
				t.Fatalf("a flush begun at seq %d and saved at %d, plus the tail, differs from a full replay", k, end)
			}
			if got := encode(t, replay(t, rest, s)); !bytes.Equal(got, want) {
				t.Fatalf("a Set whose flush ran from seq %d to %d and ended in parts differs from a full replay", k, end)
			}
			if _, err := s.CheckTable(); err != nil {
				t.Fatalf("after a flush from seq %d to %d: %v", k, end, err)
			}
			// The next flush replaces what this one stored, index keys and all.
			if _, err := store.Flush(s); err != nil {
				t.Fatal(err)
			}
			if _, err := s.CheckTable(); err != nil {
				t.Fatalf("after a flush from seq %d to %d and the next: %v", k, end, err)
			}
			if got := encode(t, s); !bytes.Equal(got, want) {
				t.Fatalf("after a flush from seq %d to %d and the next, the Set differs from a full replay", k, end)
			}
		}
	}
}

func TestApplyRefusesGaps(t *testing.T) {
	t.Parallel()
	s := projections.New()
	if err := s.Apply(2, time.Now(), eventlog.TenantQuotaSet{Tenant: "a"}); err == nil {
		t.Fatal("seq 2 applied to the empty set")
	}
	if err := s.Apply(1, time.Now(), eventlog.JobLeased{JobID: "nope"}); err == nil {
		t.Fatal("a lease of an unknown job applied")
	}
	if _, err := projections.UnmarshalCheckpoint([]byte(`{"version":"v0"}`), nil); err == nil {
		t.Fatal("a checkpoint of another version restored")
	}
}

func TestQueries(t *testing.T) {
	t.Parallel()
	w := workload(t)
	s, now := w.Set, w.Clock
	all, more := s.List(projections.JobFilter{Tenant: "acme", Limit: 5}, now)
	if len(all) != 5 || !more {
		t.Fatalf("first page: %d jobs, more=%v", len(all), more)
	}
	rest, more := s.List(projections.JobFilter{Tenant: "acme", After: all[4].ID}, now)
	if more || len(all)+len(rest) != jobCount(s) || rest[0].ID <= all[4].ID {
		t.Fatalf("second page: %d jobs, more=%v, of %d", len(rest), more, jobCount(s))
	}
	newest, more := s.List(projections.JobFilter{Tenant: "acme", Limit: 5, Newest: true}, now)
	older, _ := s.List(projections.JobFilter{Tenant: "acme", After: newest[4].ID, Newest: true}, now)
	if !more || len(newest)+len(older) != jobCount(s) || newest[0].ID != rest[len(rest)-1].ID || older[0].ID >= newest[4].ID || older[len(older)-1].ID != all[0].ID {
		t.Fatalf("newest first: pages of %d and %d, more=%v", len(newest), len(older), more)
	}
	if other, _ := s.List(projections.JobFilter{Tenant: "other"}, now); len(other) != 0 {
		t.Fatal("another tenant lists acme's jobs")
	}
	byStatus := map[projections.Status]int{}
	for _, j := range append(all, rest...) {
		byStatus[j.StatusAt(now)]++
	}
	succeeded, _ := s.List(projections.JobFilter{Tenant: "acme", Status: projections.StatusSucceeded}, now)
	if len(succeeded) != byStatus[projections.StatusSucceeded] || len(succeeded) == 0 {
		t.Fatalf("%d succeeded listed, %d counted", len(succeeded), byStatus[projections.StatusSucceeded])
	}
	depth, dead := 0, 0
	for _, q := range s.Queues("acme", now) {
		depth += q.Depth + q.Scheduled + q.Leased
		dead += q.Dead
	}
	if depth != byStatus[projections.StatusQueued]+byStatus[projections.StatusScheduled]+byStatus[projections.StatusLeased] ||
		dead != byStatus[projections.StatusFailed] || len(s.DeadLetters("acme")) != dead {
		t.Fatalf("queues: %+v; statuses %v", s.Queues("acme", now), byStatus)
	}
	ws := s.Workers("acme")
	if len(ws) != 1 || ws[0].Status != "revoked" || len(s.Workers("other")) != 0 {
		t.Fatalf("workers %+v", ws)
	}
	q := s.Tenant("acme")
	if q.MaxActive != 100 || q.Active != byStatus[projections.StatusQueued]+byStatus[projections.StatusScheduled]+byStatus[projections.StatusLeased] || len(q.Reservations) != 0 {
		t.Fatalf("quota %+v; statuses %v", q, byStatus)
	}
	c := s.Counters()
	if c["a"].Submitted+c["b"].Submitted != uint64(jobCount(s)) || c["a"].Succeeded+c["b"].Succeeded != uint64(byStatus[projections.StatusSucceeded]) {
		t.Fatalf("counters %+v", c)
	}
}

// The same seed gives the same log, IDs and all: the behaviours depend on nothing but their
// Env, which the simulator relies on.
func TestWorldIsDeterministic(t *testing.T) {
	t.Parallel()
	first := workload(t)
	for range 3 {
		again := workload(t)
		if len(again.Log) != len(first.Log) {
			t.Fatalf("%d records, then %d", len(first.Log), len(again.Log))
		}
		for i := range first.Log {
			a, _ := json.Marshal(first.Log[i].Payload)
			b, _ := json.Marshal(again.Log[i].Payload)
			if !bytes.Equal(a, b) || !first.Log[i].Time.Equal(again.Log[i].Time) {
				t.Fatalf("seq %d differs:\n%s\n%s", i+1, a, b)
			}
		}
	}
}

func jobCount(s *projections.Set) int {
	n := 0
	for _, c := range s.StatusCounts(time.Time{}) {
		n += c
	}
	return n
}

// A Set that keeps no index, spilling as `tether replay verify` does (a spill's writes land
// while later records fold, before it ends), folds what a full replay folds; its Store holds
// jobs and nothing else; and a query that needs an index panics rather than answer from none.
func TestUnindexedSpillsEqualReplay(t *testing.T) {
	t.Parallel()
	w := workload(t)
	want := encode(t, replay(t, w.Log, projections.New()))
	for _, every := range []int{1, 2, 5} {
		store := projectionstest.NewStore()
		s := projections.NewUnindexedOn(store)
		var spill *projections.Flush
		var writes []eventlog.ViewWrite
		end := func() {
			if spill != nil {
				store.Apply(writes)
				s.EndFlush(spill)
			}
		}
		stored := 0
		for i := range w.Log {
			replay(t, w.Log[i:i+1], s)
			if i%every == 0 {
				end()
				spill = s.BeginSpill()
				var err error
				if writes, err = spill.Writes(); err != nil {
					t.Fatal(err)
				}
				stored = max(stored, store.Len())
			}
		}
		end()
		if got := encode(t, s); !bytes.Equal(got, want) {
			t.Fatalf("spilling every %d records, the unindexed fold differs from a full replay:\n got %s\nwant %s", every, got, want)
		}
		if stored == 0 {
			t.Fatalf("spilling every %d records, nothing was ever stored", every)
		}
		store.Scan(nil, nil, false, func(key, _ []byte) bool {
			if key[0] != 'j' {
				t.Fatalf("the unindexed Set's table holds %q", key)
			}
			return true
		})
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Expirable answered without an index")
		}
	}()
	projections.NewUnindexedOn(projectionstest.NewStore()).Expirable(projections.Retention{Done: time.Hour}, time.Now(), 10)
}

// A flush's table writes come in a few ascending runs (the deletes, then the puts, each index's
// keys together in id order), not one job's keys after another's: the log sorts a checkpoint's
// keys by merging the runs they come in, which costs n·log2(runs) comparisons. The jobs here are
// of two tenants, three queues and two labels each, and some are expired after their first
// flush, so the second flush deletes their keys and writes their tombstones.
func TestFlushWritesComeInFewRuns(t *testing.T) {
	store := projectionstest.NewStore()
	s := projections.NewOn(store)
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	seq := uint64(0)
	apply := func(p eventlog.Payload) {
		t.Helper()
		seq++
		at = at.Add(time.Millisecond)
		if err := s.Apply(seq, at, p); err != nil {
			t.Fatal(err)
		}
	}
	id := func(i int) string { return fmt.Sprintf("01JOB%021d", i) }
	runs := func(writes []eventlog.ViewWrite) int {
		n := 1
		for i := 1; i < len(writes); i++ {
			if bytes.Compare(writes[i-1].Key, writes[i].Key) > 0 {
				n++
			}
		}
		return n
	}
	finish := func(from, to int) {
		for i := from; i < to; i++ {
			apply(eventlog.JobSubmitted{JobID: id(i), Tenant: fmt.Sprintf("t%d", i%2), Queue: fmt.Sprintf("q%d", i%3), Type: "t",
				Labels: map[string]string{"a": fmt.Sprint(i % 4), "b": "x"}, MaxAttempts: 1, LeaseTTLMillis: 30000})
			apply(eventlog.JobLeased{JobID: id(i), LeaseID: "L" + id(i), WorkerID: "w", Nonce: "n", Attempt: 1, ExpiresAt: at.Add(time.Minute)})
			if i%5 == 0 {
				apply(eventlog.JobFailed{JobID: id(i), LeaseID: "L" + id(i), Attempt: 1, ErrorCode: "e"})
				apply(eventlog.JobDeadLettered{JobID: id(i), Reason: eventlog.DeadMaxAttempts, Attempt: 1})
			} else {
				apply(eventlog.JobSucceeded{JobID: id(i), LeaseID: "L" + id(i), Attempt: 1, Output: json.RawMessage(`null`), OutputHash: "h"})
			}
		}
	}
	finish(0, 300)
	f := s.BeginFlush()
	writes, err := f.Writes()
	if err != nil {
		t.Fatal(err)
	}
	if n := runs(writes); n > 2 {
		t.Errorf("the first flush's %d writes come in %d ascending runs, want the jobs' rows and their index keys", len(writes), n)
	}
	store.Apply(writes)
	s.EndFlush(f)

	for i := 0; i < 300; i += 7 {
		apply(eventlog.JobExpired{JobID: id(i), Reason: eventlog.ExpiredRetention})
	}
	finish(300, 600)
	if writes, err = s.BeginSpill().Writes(); err != nil {
		t.Fatal(err)
	}
	if n := runs(writes); n > 4 {
		t.Errorf("the second flush's %d writes come in %d ascending runs, want the deletes' and the puts' two each", len(writes), n)
	}
}
