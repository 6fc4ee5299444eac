package projections_test

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// history folds n finished jobs of tenant acme (in queues q0..q9), and, if live, as many again
// still queued, and if dead, as many dead letters, into a new Set.
func history(b *testing.B, n int, live, dead bool) *projections.Set {
	b.Helper()
	s := projections.New()
	at := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	seq := uint64(0)
	apply := func(p eventlog.Payload) {
		seq++
		if err := s.Apply(seq, at, p); err != nil {
			b.Fatal(err)
		}
	}
	for i := range n {
		id := fmt.Sprintf("01JOB%021d", i)
		apply(eventlog.JobSubmitted{JobID: id, Tenant: "acme", Queue: fmt.Sprintf("q%d", i%10), Type: "t", Payload: json.RawMessage(`{"n":1}`), MaxAttempts: 5, LeaseTTLMillis: 30000})
		apply(eventlog.JobLeased{JobID: id, LeaseID: "L" + id, WorkerID: "w", Nonce: "n", Attempt: 1, ExpiresAt: at})
		apply(eventlog.JobSucceeded{JobID: id, LeaseID: "L" + id, Attempt: 1, Output: json.RawMessage(`null`), OutputHash: "h"})
		if dead {
			apply(eventlog.JobSubmitted{JobID: "01DED" + id[5:], Tenant: "acme", Queue: fmt.Sprintf("q%d", i%10), Type: "t", MaxAttempts: 1, LeaseTTLMillis: 30000})
			apply(eventlog.JobLeased{JobID: "01DED" + id[5:], LeaseID: "LD" + id, WorkerID: "w", Nonce: "n", Attempt: 1, ExpiresAt: at})
			apply(eventlog.JobFailed{JobID: "01DED" + id[5:], LeaseID: "LD" + id, Attempt: 1, ErrorCode: "e"})
			apply(eventlog.JobDeadLettered{JobID: "01DED" + id[5:], Reason: eventlog.DeadMaxAttempts, Attempt: 1})
		}
		if live {
			apply(eventlog.JobSubmitted{JobID: fmt.Sprintf("01LIV%021d", i), Tenant: "acme", Queue: "q0", Type: "t", MaxAttempts: 5, LeaseTTLMillis: 30000})
		}
	}
	return s
}

// BenchmarkListPage measures one page of 50 of a tenant's jobs among 100,000 finished and
// 100,000 queued, as GET /v1/jobs asks for it: what a dashboard's poll holds the projections'
// read lock for.
func BenchmarkListPage(b *testing.B) {
	s := history(b, 100_000, true, false)
	now := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		f    projections.JobFilter
	}{
		{"all", projections.JobFilter{}},
		{"newest", projections.JobFilter{Newest: true}},
		{"succeeded", projections.JobFilter{Status: projections.StatusSucceeded, Newest: true}},
		{"queued", projections.JobFilter{Status: projections.StatusQueued}},
		{"queue", projections.JobFilter{Queue: "q3", Newest: true}},
		{"status+queue", projections.JobFilter{Status: projections.StatusSucceeded, Queue: "q3"}},
		{"cursor", projections.JobFilter{After: "01JOB000000000000000050000"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			f := tc.f
			f.Tenant, f.Limit = "acme", 50
			for b.Loop() {
				if page, _ := s.List(f, now); len(page) != 50 {
					b.Fatalf("a page of %d", len(page))
				}
			}
		})
	}
}

// BenchmarkQueues measures GET /v1/queues (and each /metrics scrape, once per tenant) with
// 100,000 finished jobs and 100,000 dead letters held.
func BenchmarkQueues(b *testing.B) {
	s := history(b, 100_000, false, true)
	now := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	for b.Loop() {
		if qs := s.Queues("acme", now); len(qs) != 10 || qs[0].Dead != 10_000 {
			b.Fatalf("%+v", qs)
		}
	}
}

// BenchmarkCheckpoint measures saving and restoring the projections of 100,000 finished jobs,
// what start-up and the periodic checkpoint pay.
func BenchmarkCheckpoint(b *testing.B) {
	const jobs = 100_000
	s := history(b, jobs, false, false)
	var data []byte
	b.Run("marshal", func(b *testing.B) {
		for b.Loop() {
			data, _ = s.MarshalCheckpoint()
		}
		b.ReportMetric(float64(len(data))/jobs, "bytes/job")
	})
	b.Run("begin", func(b *testing.B) {
		for b.Loop() {
			s.BeginFlush()
		}
	})
	b.Run("unmarshal", func(b *testing.B) {
		for b.Loop() {
			if _, err := projections.UnmarshalCheckpoint(data, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkExpirableFlows is the retention sweep's look at the flows: 100,000 ended flows in
// memory (a week of them at 10,000 a day and then some), none due, as between expiries.
func BenchmarkExpirableFlows(b *testing.B) {
	s := projections.New()
	at := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	seq := uint64(0)
	apply := func(p eventlog.Payload) {
		seq++
		if err := s.Apply(seq, at, p); err != nil {
			b.Fatal(err)
		}
	}
	step := []eventlog.FlowStep{{Name: "a", JobTemplate: eventlog.JobTemplate{Queue: "q", Type: "t", MaxAttempts: 1, LeaseTTLMillis: 30000}}}
	for i := range 100_000 {
		id := fmt.Sprintf("01FLW%021d", i)
		apply(eventlog.FlowSubmitted{FlowID: id, Tenant: "acme", Name: "f", Steps: step})
		apply(eventlog.FlowStepSkipped{FlowID: id, Step: "a", Reason: eventlog.SkippedFlowCancelled})
		apply(eventlog.FlowEnded{FlowID: id, Status: eventlog.FlowCancelled})
	}
	r := projections.Retention{Done: 7 * 24 * time.Hour}
	b.ResetTimer()
	for b.Loop() {
		if due := s.ExpirableFlows(r, at.Add(time.Hour), 256); len(due) != 0 {
			b.Fatalf("%d due", len(due))
		}
	}
}

// BenchmarkTombstoneDiskBytes measures what the table's tombstone of an expired job costs on
// disk (README, "Retention"): 100,000 jobs a batch, ids as the server makes them (ULIDs 1 ms
// apart), expired and flushed into a log's table as a checkpoint is, and the data dir's growth
// divided among them.
func BenchmarkTombstoneDiskBytes(b *testing.B) {
	const batch = 100_000
	dir := b.TempDir()
	l, err := eventlog.Open(dir, eventlog.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Append(b.Context(), eventlog.Event{Stream: "job/x", Type: "t", Data: []byte(`{}`)}); err != nil {
		b.Fatal(err)
	}
	entropy := ulid.Monotonic(rand.New(rand.NewSource(1)), 0)
	at := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	before := dirBytes(b, dir)
	n := 0
	for b.Loop() {
		s := projections.New()
		seq := uint64(0)
		apply := func(p eventlog.Payload) {
			seq++
			if err := s.Apply(seq, at, p); err != nil {
				b.Fatal(err)
			}
		}
		for range batch {
			at = at.Add(time.Millisecond)
			id := ulid.MustNew(ulid.Timestamp(at), entropy).String()
			apply(eventlog.JobSubmitted{JobID: id, Tenant: "acme", Queue: "q", Type: "t", MaxAttempts: 1, LeaseTTLMillis: 30000})
			apply(eventlog.JobCancelled{JobID: id})
			apply(eventlog.JobExpired{JobID: id, Reason: eventlog.ExpiredRetention})
		}
		writes, err := s.BeginSpill().Writes()
		if err != nil {
			b.Fatal(err)
		}
		if err := l.SaveCheckpoint("bench", 1, []byte("{}"), writes...); err != nil {
			b.Fatal(err)
		}
		n += batch
	}
	b.ReportMetric(float64(dirBytes(b, dir)-before)/float64(n), "disk-bytes/tombstone")
}

// dirBytes is the size of the files under dir.
func dirBytes(b *testing.B, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			info, ierr := d.Info()
			if ierr == nil {
				n += info.Size()
			}
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkCheckpointSave measures what the periodic checkpoint of a server costs a job that
// finished since the last one: BeginFlush, Encode, the log's SaveCheckpoint (the table's writes
// and the live state, ingested) and EndFlush, on a log whose table grows with each checkpoint,
// as a server's does. Each op is one checkpoint of finished jobs (3 events each, a
// tether bench job's shape: ids as the server makes them, no labels), beside live jobs that
// stay queued. It reports ns, allocations and bytes ingested per finished job.
func BenchmarkCheckpointSave(b *testing.B) {
	for _, tc := range []struct {
		name           string
		finished, live int
	}{
		{"finished=5000/live=60", 5000, 60},
		{"finished=5000/live=5000", 5000, 5000},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l, err := eventlog.Open(b.TempDir(), eventlog.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			if _, err := l.Append(b.Context(), eventlog.Event{Stream: "job/x", Type: "t", Data: []byte(`{}`)}); err != nil {
				b.Fatal(err)
			}
			s := projections.NewOn(l.Views())
			entropy := ulid.Monotonic(rand.New(rand.NewSource(1)), 0)
			at := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
			seq := uint64(0)
			apply := func(p eventlog.Payload) {
				seq++
				if err := s.Apply(seq, at, p); err != nil {
					b.Fatal(err)
				}
			}
			newID := func() string {
				at = at.Add(100 * time.Microsecond)
				return ulid.MustNew(ulid.Timestamp(at), entropy).String()
			}
			submit := func(id string) {
				apply(eventlog.JobSubmitted{JobID: id, Tenant: "default", Queue: "bench", Type: "noop", Payload: json.RawMessage(`{"sent":1796000000000000000}`), MaxAttempts: 3, LeaseTTLMillis: 30000})
			}
			for range tc.live {
				submit(newID())
			}
			var ingested uint64
			var cpu time.Duration
			ingestedNow := func() (n uint64) {
				for _, lv := range l.StorageStats().Levels {
					n += lv.IngestedBytes
				}
				return n
			}
			for b.Loop() {
				b.StopTimer()
				for range tc.finished {
					id := newID()
					submit(id)
					apply(eventlog.JobLeased{JobID: id, LeaseID: "L" + id, WorkerID: "w1", Nonce: "n", Attempt: 1, ExpiresAt: at.Add(30 * time.Second)})
					apply(eventlog.JobSucceeded{JobID: id, LeaseID: "L" + id, Attempt: 1, Output: json.RawMessage(`{"ok":true}`), OutputHash: "h"})
				}
				before := ingestedNow()
				cpu0 := cpuTime(b)
				b.StartTimer()
				f := s.BeginFlush()
				data, writes, err := f.Encode()
				if err != nil {
					b.Fatal(err)
				}
				if err := l.SaveCheckpoint(projections.CheckpointName, 1, data, writes...); err != nil {
					b.Fatal(err)
				}
				s.EndFlush(f)
				b.StopTimer()
				cpu += cpuTime(b) - cpu0
				ingested += ingestedNow() - before
				b.StartTimer()
			}
			jobs := float64(b.N * tc.finished)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/jobs, "ns/job")
			b.ReportMetric(float64(cpu.Nanoseconds())/jobs, "cpu-ns/job")
			b.ReportMetric(float64(ingested)/jobs, "ingested-bytes/job")
		})
	}
}

// cpuTime is the CPU time the process has used, user and system: a checkpoint's own work and
// Pebble's on its behalf, without the waits for the disk that its wall time holds.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
