package broker

import (
	"context"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// ArchiveConfig says when records leave the hot log for sealed segments, and when segments go.
type ArchiveConfig struct {
	// Dir is where segments live; "": Dir/archive.
	Dir string
	// After is how old a record must be before it may leave the hot log (it must also be
	// covered by the newest checkpoint); 0: records stay hot for ever.
	After time.Duration
	// Keep is how long a segment stays after its last record was written; 0: for ever.
	Keep time.Duration
	// Every is how often the archiver looks; 0: a twelfth of After, from 1 s to 10 s. The hot
	// log holds After's worth of records plus up to a look's worth more.
	Every time.Duration
	// ScrubEvery is how often every segment is read whole against its checksum (scrub.go),
	// the first time at start; 0: never.
	ScrubEvery time.Duration
	// ScrubRate is the most bytes a second a scrub reads; 0: ScrubRateDefault.
	ScrubRate int64
}

// segmentRecordsMin is how many archivable records make a segment worth cutting at once; fewer
// wait until the oldest of them has waited another After, so a quiet server makes a segment
// per After, not one per look.
const segmentRecordsMin = 1 << 16

type archiveCounters struct{ sealed, dropped, failed atomic.Uint64 }

// archiveLoop runs the archiver until the broker closes.
func (b *Broker) archiveLoop() {
	defer b.archiver.Done()
	every := b.cfg.Archive.Every
	if every <= 0 {
		every = min(max(b.cfg.Archive.After/12, time.Second), 10*time.Second)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-b.closing; cancel() }()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-b.closing:
			return
		case <-t.C:
			b.archiveOnce(ctx)
		}
	}
}

// archiveOnce seals what may leave the hot log, then deletes the segments past Keep. A failure
// to seal leaves every record hot and is tried again at the next look; a failure to commit is
// the log's, and stops the server.
func (b *Broker) archiveOnce(ctx context.Context) {
	now := b.clock()
	if after := b.cfg.Archive.After; after > 0 {
		cutoff := now.Add(-after)
		to := b.elog.ArchivableTo(b.lastCheckpoint.Load(), cutoff)
		anchor := b.elog.Anchor().Seq
		if to > anchor && to-anchor < segmentRecordsMin {
			if first, err := b.elog.Get(anchor + 1); err != nil || first.Time.After(cutoff.Add(-after)) {
				to = anchor // not enough yet, and not waited long enough
			}
		}
		for to > b.elog.Anchor().Seq {
			if ctx.Err() != nil {
				return
			}
			start := time.Now()
			seg, err := b.elog.Archive(ctx, to)
			if ctx.Err() != nil {
				return // closing: the step rolled back
			}
			if err != nil {
				b.archive.failed.Add(1)
				b.log.Error("archiving failed; the records stay in the hot log", zap.String("code", "ARCHIVE_FAILED"), zap.Error(err))
				return
			}
			b.archive.sealed.Add(1)
			b.log.Info("archive segment sealed", zap.String("segment", seg.Name), zap.Uint64("records", seg.Records()),
				zap.Int64("bytes", seg.Bytes), zap.Duration("took", time.Since(start)))
		}
		if b.elog.Anchor().Seq > anchor {
			if err := b.elog.CompactArchived(ctx, anchor+1); err != nil && ctx.Err() == nil {
				b.log.Warn("compacting the archived range failed", zap.Error(err))
			}
		}
	}
	if keep := b.cfg.Archive.Keep; keep > 0 {
		dropped, err := b.elog.DropSegments(now.Add(-keep))
		for _, s := range dropped {
			b.archive.dropped.Add(1)
			b.log.Info("archive segment deleted: older than --archive-keep", zap.String("segment", s.Name),
				zap.Uint64("first_seq", s.First), zap.Uint64("last_seq", s.Last), zap.Time("last_time", s.LastTime))
		}
		if err != nil {
			b.archive.failed.Add(1)
			b.log.Error("deleting an old archive segment failed", zap.String("code", "ARCHIVE_FAILED"), zap.Error(err))
		}
	}
}

// ArchiveState is what the metrics report of the log's two parts, and what the archiver did
// since the process started.
type ArchiveState struct {
	HotBytes                uint64
	OldestHotSeq            uint64
	Segments                int
	ArchiveBytes            uint64
	Sealed, Dropped, Failed uint64
	// Damaged are the segments the scrubs found damaged and that are still there, by name.
	Damaged []DamagedSegment
	// ScrubPasses are the scrubs that read every segment; ScrubLastEnd is when the last ended
	// (zero: none yet), ScrubbedBytes what they read, ScrubEvery how often one begins (0: never).
	ScrubPasses   uint64
	ScrubLastEnd  time.Time
	ScrubbedBytes uint64
	ScrubEvery    time.Duration
}

// Archive reports the hot log and the archive.
func (b *Broker) Archive() ArchiveState {
	segs := b.elog.Segments()
	st := ArchiveState{HotBytes: b.elog.HotBytes(), OldestHotSeq: b.elog.Anchor().Seq + 1, Segments: len(segs),
		Sealed: b.archive.sealed.Load(), Dropped: b.archive.dropped.Load(), Failed: b.archive.failed.Load()}
	for _, s := range segs {
		st.ArchiveBytes += uint64(s.Bytes)
	}
	b.scrubReport(&st)
	return st
}
