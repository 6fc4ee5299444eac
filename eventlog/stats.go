package eventlog

import (
	"sync/atomic"
	"time"
)

// Stats are what the log has done since Open, for metrics and benchmarks.
type Stats struct {
	Events  uint64 // records made durable by this process
	Batches uint64 // Pebble batches they were committed in
	// Syncs are the fsyncs the filesystem performed (WAL, MANIFEST and tables); with an
	// upstream, the messages the upstream acknowledged as durable, which is what a commit
	// waits for there.
	Syncs uint64

	// AppendSeconds: from an append's hand-over to its completion (durable or failed).
	AppendSeconds Histogram
	// BatchEvents: events per committed batch; what group commit achieves.
	BatchEvents Histogram
	// SyncSeconds: each fsync the filesystem performed; with an upstream, each message from its
	// publish to its acknowledgement.
	SyncSeconds Histogram
}

// Histogram is a snapshot of a distribution in Prometheus's shape: Counts[i] is how many
// observations were at most Bounds[i] (cumulative), Count how many there were in all, Sum their
// total.
type Histogram struct {
	Bounds []float64
	Counts []uint64
	Count  uint64
	Sum    float64
}

// Bucket bounds. Latencies run from a page-cache write (tens of µs) to a stalled disk (seconds).
var (
	latencyBounds = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}
	batchBounds   = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192}
)

// histogram records observations without locks: one atomic add per bucket and one for the sum.
// Values are integers in unit (nanoseconds, or events); snapshots scale them.
type histogram struct {
	bounds []uint64 // in unit
	unit   float64  // seconds (or events) per integer
	counts []atomic.Uint64
	sum    atomic.Uint64
}

func newHistogram(bounds []float64, unit float64) *histogram {
	h := &histogram{unit: unit, counts: make([]atomic.Uint64, len(bounds)+1)}
	for _, b := range bounds {
		h.bounds = append(h.bounds, uint64(b/unit+0.5))
	}
	return h
}

func (h *histogram) observe(v uint64) {
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(v)
}

func (h *histogram) observeDuration(d time.Duration) { h.observe(uint64(max(d, 0))) }

func (h *histogram) snapshot() Histogram {
	s := Histogram{Bounds: make([]float64, len(h.bounds)), Counts: make([]uint64, len(h.bounds))}
	for i, b := range h.bounds {
		s.Bounds[i] = float64(b) * h.unit
		s.Count += h.counts[i].Load()
		s.Counts[i] = s.Count
	}
	s.Count += h.counts[len(h.bounds)].Load()
	s.Sum = float64(h.sum.Load()) * h.unit
	return s
}

// logStats are the log's live recorders; syncs are counted by the filesystem wrapper (fs.go).
// The events and batches made durable are batchEvents' sum and count.
type logStats struct {
	appends     *histogram
	batchEvents *histogram
	syncs       *histogram
}

func newLogStats() *logStats {
	return &logStats{
		appends:     newHistogram(latencyBounds, 1e-9),
		batchEvents: newHistogram(batchBounds, 1),
		syncs:       newHistogram(latencyBounds, 1e-9),
	}
}

func (s *logStats) observeSync(start time.Time) { s.syncs.observeDuration(time.Since(start)) }

// Stats returns the log's counters and distributions.
func (l *Log) Stats() Stats {
	syncs, batches := l.stats.syncs.snapshot(), l.stats.batchEvents.snapshot()
	return Stats{
		Events:        l.stats.batchEvents.sum.Load(), // exact, where the snapshot's Sum is a float
		Batches:       batches.Count,
		Syncs:         syncs.Count,
		AppendSeconds: l.stats.appends.snapshot(),
		BatchEvents:   batches,
		SyncSeconds:   syncs,
	}
}

// DiskBytes is the space the store takes on disk: tables, WAL and MANIFEST.
func (l *Log) DiskBytes() uint64 { return l.db.Metrics().DiskSpaceUsage() }

// HotBytes estimates the space the hot log's records and stream index take on disk.
func (l *Log) HotBytes() uint64 {
	n, err := l.db.EstimateDiskUsage([]byte(prefixIdx), logKeyEnd) // idx/ and log/ are adjacent
	if err != nil {
		return 0
	}
	return n
}

// StorageStats is what Pebble did with the store since Open, and what the store holds now:
// what a job costs the disk beyond its own records (flushes, compactions, the checkpoints'
// ingestions), for metrics and benchmarks. It is read from Pebble's metrics, which take a lock
// of Pebble's: a scrape's figure, not the commit path's.
type StorageStats struct {
	// WALBytesIn is the bytes of the batches written to the WAL; WALBytesWritten the bytes of
	// the WAL files, with their framing and padding.
	WALBytesIn, WALBytesWritten uint64
	// Flushes, Compactions and Ingestions count what Pebble finished; an ingestion is a
	// checkpoint's tables taken in (SaveCheckpoint).
	Flushes, Compactions, Ingestions uint64
	// CompactionSeconds is the time compactions took, added up.
	CompactionSeconds float64
	// CompactionDebtBytes is Pebble's estimate of what compactions must still write to bring
	// the levels into shape.
	CompactionDebtBytes uint64
	// ReadAmp is how many tables (L0's sublevels and the other levels that hold any) a read
	// that finds nothing must look in.
	ReadAmp int
	// BlobFiles and BlobBytes are the blob files that hold the separated values (layout.go).
	BlobFiles, BlobBytes uint64
	// Levels are L0..L6.
	Levels [7]LevelStats
}

// LevelStats is one level of the LSM.
type LevelStats struct {
	Tables, TableBytes int64 // the tables the level holds now, and their size
	// FlushedBytes: tables and blob files flushes wrote into the level (L0 alone).
	FlushedBytes uint64
	// CompactedBytes: tables and blob files compactions wrote into the level; ReadBytes what
	// they read of the level's own tables to do it.
	CompactedBytes, ReadBytes uint64
	// IngestedTables and IngestedBytes: the checkpoints' tables that ingestion put in the
	// level; the lower the level, the less Pebble rewrites them later.
	IngestedTables, IngestedBytes uint64
}

// CompactedBytes is what compactions wrote into every level.
func (s StorageStats) CompactedBytes() (n uint64) {
	for _, l := range s.Levels {
		n += l.CompactedBytes
	}
	return n
}

// StorageStats returns what Pebble reports of the store.
func (l *Log) StorageStats() StorageStats {
	m := l.db.Metrics()
	s := StorageStats{
		WALBytesIn:          m.WAL.BytesIn,
		WALBytesWritten:     m.WAL.BytesWritten,
		Flushes:             uint64(m.Flush.Count),
		Compactions:         uint64(m.Compact.Count),
		Ingestions:          m.Ingest.Count,
		CompactionSeconds:   m.Compact.Duration.Seconds(),
		CompactionDebtBytes: m.Compact.EstimatedDebt,
		ReadAmp:             m.ReadAmp(),
		BlobFiles:           m.BlobFiles.LiveCount,
		BlobBytes:           m.BlobFiles.LiveSize,
	}
	for i := range s.Levels {
		lm := &m.Levels[i]
		s.Levels[i] = LevelStats{
			Tables:       lm.TablesCount,
			TableBytes:   lm.TablesSize,
			FlushedBytes: lm.TableBytesFlushed + lm.BlobBytesFlushed,
			// Pebble counts a flush's blob files as compacted too (compaction.go, where it
			// takes a flush for a compaction): they are the flush's alone here.
			CompactedBytes: lm.TableBytesCompacted + lm.BlobBytesCompacted - lm.BlobBytesFlushed,
			ReadBytes:      lm.TableBytesRead,
			IngestedTables: lm.TablesIngested,
			IngestedBytes:  lm.TableBytesIngested,
		}
	}
	return s
}
