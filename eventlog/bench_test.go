package eventlog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/eventlog"
)

// benchData is a ~200-byte payload shaped like a job.leased event.
var benchData = []byte(`{"job_id":"01JD3X7Q8ZK4M2N5P6R7S8T9VW","lease_id":"01JD3X7Q8ZK4M2N5P6R7S8T9VX",` +
	`"worker_id":"01JD3X7Q8ZK4M2N5P6R7S8T9VY","nonce":"b3f1c2d4e5f60718","attempt":1,` +
	`"expires_at":"2026-11-21T12:00:30Z"}`)

// BenchmarkAppend measures durable appends on the real disk: each producer appends one ~200-byte
// event at a time and waits for its fsync, as a request handler would. b.N is the total number
// of events across producers. Metrics: events/s (durable), events/fsync (group commit at work:
// every fsync the filesystem performed, WAL, MANIFEST and tables included).
func BenchmarkAppend(b *testing.B) {
	for _, producers := range []int{1, 64, 512} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			l, err := eventlog.Open(b.TempDir(), eventlog.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = l.Close() }()
			stream := "job/01JD3X7Q8ZK4M2N5P6R7S8T9VW"
			var next atomic.Int64
			before := l.Stats()
			b.ReportAllocs()
			b.SetBytes(int64(len(benchData)))
			b.ResetTimer()
			var wg sync.WaitGroup
			for range producers {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if _, err := l.Append(context.Background(), eventlog.Event{Stream: stream, Type: "job.leased", Data: benchData}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			after := l.Stats()
			events := after.Events - before.Events
			if events != uint64(b.N) {
				b.Fatalf("%d events durable, want %d", events, b.N)
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(events)/float64(after.Batches-before.Batches), "events/batch")
			if syncs := after.Syncs - before.Syncs; syncs > 0 {
				b.ReportMetric(float64(events)/float64(syncs), "events/fsync")
			}
		})
	}
}

// benchLog makes a log of 100,000 ~200-byte records (benchRecords) in a temporary directory,
// all in the hot log, or all but the last 4,000 in archive segments.
func benchLog(b *testing.B, archived bool) *eventlog.Log {
	b.Helper()
	dir := b.TempDir()
	l, err := eventlog.Open(dir, eventlog.Options{ArchiveDir: filepath.Join(dir, "archive")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	batch := make([]eventlog.Event, 1000)
	for i := range batch {
		batch[i] = eventlog.Event{Stream: fmt.Sprintf("job/%06d", i), Type: "job.leased", Data: benchData}
	}
	for range benchRecords / len(batch) {
		if _, err := l.Append(context.Background(), batch...); err != nil {
			b.Fatal(err)
		}
	}
	for archived && l.Anchor().Seq < benchRecords-4000 {
		if _, err := l.Archive(context.Background(), benchRecords-4000); err != nil {
			b.Fatal(err)
		}
	}
	return l
}

const benchRecords = 100_000

// BenchmarkVerify measures walking and checking the whole chain, the path of Log.Verify: each
// op verifies benchLog's log, all in the hot log or mostly archived.
func BenchmarkVerify(b *testing.B) {
	for _, archived := range []bool{false, true} {
		b.Run(fmt.Sprintf("archived=%v", archived), func(b *testing.B) {
			l := benchLog(b, archived)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				head, err := l.Verify(context.Background())
				if err != nil || head.Seq != benchRecords {
					b.Fatalf("verify: head %d, %v", head.Seq, err)
				}
			}
			b.ReportMetric(float64(benchRecords)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkAudit measures Audit, the walk `tether replay verify` makes (the chain, the stream
// index, and each archive segment's checksum and stream table), over benchLog's mostly
// archived log.
func BenchmarkAudit(b *testing.B) {
	l := benchLog(b, true)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		sum, err := l.Audit(context.Background(), eventlog.Head{Hash: eventlog.Genesis}, func(eventlog.Record) error { return nil })
		if err != nil || sum.Head.Seq != benchRecords {
			b.Fatalf("audit: head %d, %v", sum.Head.Seq, err)
		}
	}
	b.ReportMetric(float64(benchRecords)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkDecode decodes the events every job has, as a replay does: a job submitted by a
// client, one a schedule fired (schedule_id set), one a flow submitted, and its lease, success
// and expiry. The scheduled and flow submits show whether a field added to the catalogue
// reached the decoder without reflection: one that did not costs several times as much.
func BenchmarkDecode(b *testing.B) {
	for _, c := range []struct{ name, typ, data string }{
		{"submitted", "job.submitted", `{"job_id":"01M86F6YBEWB6CAA7V165W7T06","tenant":"default","queue":"bench","type":"noop","payload":{"sent":1795513612654150279},"priority":0,"max_attempts":5,"lease_ttl_ms":30000}`},
		{"submitted-scheduled", "job.submitted", `{"job_id":"01M86F6YBEWB6CAA7V165W7T06","tenant":"default","queue":"bench","type":"noop","payload":{"sent":1795513612654150279},"priority":0,"max_attempts":5,"lease_ttl_ms":30000,"schedule_id":"sch_01M86F5CDRT0W2CHE5S3WGNA1N"}`},
		{"submitted-flow", "job.submitted", `{"job_id":"01M86F6YBEWB6CAA7V165W7T06","tenant":"default","queue":"bench","type":"noop","payload":{"sent":1795513612654150279},"priority":0,"max_attempts":5,"lease_ttl_ms":30000,"flow_id":"01M86F5CDRT0W2CHE5S3WGNA1N","flow_step":"train"}`},
		{"leased", "job.leased", string(benchData)},
		{"succeeded", "job.succeeded", `{"job_id":"01M86F6YBCT811C5KWX15NDXSF","lease_id":"01M86F6YBDSRBQW1DESYHA7DMA","attempt":1,"output":null,"output_hash":"7423"}`},
		{"expired", "job.expired", `{"job_id":"01M86F6YBCT811C5KWX15NDXSF","reason":"retention"}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			data := []byte(c.data)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := eventlog.Decode(c.typ, data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkNewEvent: the events of every job, encoded by NewEvent (encode.go, no reflection)
// and by json.Marshal, side by side.
func BenchmarkNewEvent(b *testing.B) {
	at := time.Date(2026, 11, 26, 11, 0, 0, 123_000_000, time.UTC)
	for _, p := range []eventlog.Payload{
		eventlog.JobSubmitted{JobID: "01KB0Y3X2Q7S9V1W3Y5Z7A9C1E", Tenant: "default", Queue: "bench", Type: "noop",
			Payload: json.RawMessage(`{"n":1234,"name":"resize"}`), MaxAttempts: 3, LeaseTTLMillis: 30000},
		eventlog.JobLeased{JobID: "01KB0Y3X2Q7S9V1W3Y5Z7A9C1E", LeaseID: "01KB0Y3X2RZ4K8M2P6R0T4W8Y2", WorkerID: "01KB0Y1AAAAAAAAAAAAAAAAAAA",
			SessionID: "01KB0Y1BBBBBBBBBBBBBBBBBBB", Nonce: "9f86d081884c7d659a2feaa0c55ad015", Attempt: 1, ExpiresAt: at},
		eventlog.JobSucceeded{JobID: "01KB0Y3X2Q7S9V1W3Y5Z7A9C1E", LeaseID: "01KB0Y3X2RZ4K8M2P6R0T4W8Y2", Attempt: 1,
			Output: json.RawMessage(`{"ok":true}`), OutputHash: "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"},
	} {
		b.Run(p.EventType()+"/NewEvent", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := eventlog.NewEvent("job/x", p); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(p.EventType()+"/json.Marshal", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := json.Marshal(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
