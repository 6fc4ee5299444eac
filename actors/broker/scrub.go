package broker

import (
	"context"
	"errors"
	iofs "io/fs"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/tetherhq/tether/eventlog"
)

// The scrub: a background pass over every sealed archive segment that reads it whole against
// its checksum (eventlog.Log.ScrubSegment), so that a segment damaged on the disk since it was
// sealed is found, logged once and counted, not first met by a client's read that answers 410.
// It runs at start, beside the server and never before /readyz (start-up reads only the
// segments' trailers, whatever the archive's size), then every ArchiveConfig.ScrubEvery, at
// most ScrubRate bytes a second so that a large archive does not take the disk from the log's
// syncs.

// ScrubRateDefault is how many bytes a second a scrub reads when ArchiveConfig.ScrubRate is 0.
const ScrubRateDefault = 8 << 20

// scrubBurst is the most a scrub reads without waiting: a chunk of eventlog's and more.
const scrubBurst = 1 << 20

// DamagedSegment is an archive segment a scrub found damaged: its records do not read until a
// good copy (`tether replay verify --archive` checks one) is put back under the same name.
type DamagedSegment struct {
	Name        string
	First, Last uint64
	Reason      string
	FoundAt     time.Time
}

// scrubState is what the scrubs found and did since the process started.
type scrubState struct {
	mu      sync.Mutex
	damaged map[string]DamagedSegment // by name, while the segment is there and damaged
	passes  uint64
	lastEnd time.Time
	bytes   uint64
}

// scrubLoop runs a scrub now and then one every ScrubEvery after the last began (at once if it
// took longer), until the broker closes.
func (b *Broker) scrubLoop() {
	defer b.archiver.Done()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-b.closing; cancel() }()
	for {
		began := time.Now()
		b.scrubOnce(ctx)
		t := time.NewTimer(max(time.Until(began.Add(b.cfg.Archive.ScrubEvery)), 0))
		select {
		case <-b.closing:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// scrubOnce reads every segment the archive holds now, paced, and records what it finds: a
// segment found damaged is logged (ARCHIVE_DAMAGED) once, however many passes find it so; one
// found whole again, or gone, is forgotten.
func (b *Broker) scrubOnce(ctx context.Context) {
	rateBytes := b.cfg.Archive.ScrubRate
	if rateBytes <= 0 {
		rateBytes = ScrubRateDefault
	}
	limiter := rate.NewLimiter(rate.Limit(rateBytes), scrubBurst)
	pace := func(ctx context.Context, n int) error {
		if err := limiter.WaitN(ctx, n); err != nil {
			return err
		}
		b.scrub.mu.Lock()
		b.scrub.bytes += uint64(n)
		b.scrub.mu.Unlock()
		return nil
	}
	start := time.Now()
	segs := b.elog.Segments()
	for _, s := range segs {
		err := b.elog.ScrubSegment(ctx, s, pace)
		if ctx.Err() != nil {
			return // closing: the pass did not end
		}
		b.scrub.mu.Lock()
		was, known := b.scrub.damaged[s.Name]
		switch {
		case errors.Is(err, iofs.ErrNotExist):
			delete(b.scrub.damaged, s.Name) // deleted since the list was taken: nothing to read
		case err != nil && !known:
			d := DamagedSegment{Name: s.Name, First: s.First, Last: s.Last, Reason: damageReason(err), FoundAt: b.clock()}
			if b.scrub.damaged == nil {
				b.scrub.damaged = map[string]DamagedSegment{}
			}
			b.scrub.damaged[s.Name] = d
			b.log.Error("archive segment damaged: its records do not read until a good copy is put back under its name",
				zap.String("code", "ARCHIVE_DAMAGED"), zap.String("segment", s.Name), zap.Uint64("first_seq", s.First),
				zap.Uint64("last_seq", s.Last), zap.String("dir", b.cfg.Archive.Dir), zap.Error(err))
		case err == nil && known:
			delete(b.scrub.damaged, s.Name)
			b.log.Info("archive segment whole again", zap.String("segment", s.Name), zap.Time("damaged_since", was.FoundAt))
		}
		b.scrub.mu.Unlock()
	}
	b.scrub.mu.Lock()
	listed := map[string]bool{}
	for _, s := range segs {
		listed[s.Name] = true
	}
	maps.DeleteFunc(b.scrub.damaged, func(name string, _ DamagedSegment) bool { return !listed[name] })
	b.scrub.passes++
	b.scrub.lastEnd = b.clock()
	damaged := len(b.scrub.damaged)
	b.scrub.mu.Unlock()
	b.log.Info("archive scrubbed", zap.Int("segments", len(segs)), zap.Int("damaged", damaged), zap.Duration("took", time.Since(start)))
}

// damageReason is what is wrong with a segment, without the error's prefixes where it says so.
func damageReason(err error) string {
	var seg *eventlog.SegmentError
	if errors.As(err, &seg) {
		return seg.Reason
	}
	return strings.TrimPrefix(err.Error(), "eventlog: ")
}

// scrubReport is the scrub's part of ArchiveState.
func (b *Broker) scrubReport(st *ArchiveState) {
	b.scrub.mu.Lock()
	defer b.scrub.mu.Unlock()
	st.Damaged = slices.SortedFunc(maps.Values(b.scrub.damaged), func(x, y DamagedSegment) int { return strings.Compare(x.Name, y.Name) })
	st.ScrubPasses, st.ScrubLastEnd, st.ScrubbedBytes = b.scrub.passes, b.scrub.lastEnd, b.scrub.bytes
	st.ScrubEvery = b.cfg.Archive.ScrubEvery
}
