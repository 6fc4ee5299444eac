package eventlog_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/tetherhq/tether/eventlog"
)

// BenchmarkAudit measures Audit, the walk `tether replay verify` makes (the chain, the stream
// index, and each archive segment's checksum and stream table), over 100,000 ~200-byte
// records, all but the last 4,000 in archive segments.
func BenchmarkAudit(b *testing.B) {
	const records = 100_000
	dir := b.TempDir()
	l, err := eventlog.Open(dir, eventlog.Options{ArchiveDir: filepath.Join(dir, "archive")})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	batch := make([]eventlog.Event, 1000)
	for i := range batch {
		batch[i] = eventlog.Event{Stream: fmt.Sprintf("job/%06d", i), Type: "job.leased", Data: benchData}
	}
	for range records / len(batch) {
		if _, err := l.Append(context.Background(), batch...); err != nil {
			b.Fatal(err)
		}
	}
	for l.Anchor().Seq < records-4000 {
		if _, err := l.Archive(context.Background(), records-4000); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		sum, err := l.Audit(context.Background(), eventlog.Head{Hash: eventlog.Genesis}, func(eventlog.Record) error { return nil })
		if err != nil || sum.Head.Seq != records {
			b.Fatalf("audit: head %d, %v", sum.Head.Seq, err)
		}
	}
	b.ReportMetric(float64(records)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
