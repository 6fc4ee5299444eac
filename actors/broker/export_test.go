package broker

import (
	"context"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// ArchiveOnce runs one look of the archiver now, for tests that drive the clock.
func (b *Broker) ArchiveOnce(ctx context.Context) { b.archiveOnce(ctx) }

// OpenWithTable is Open with the reader of the finished jobs' table wrapped, for tests that
// slow the disk down.
func OpenWithTable(cfg Config, wrap func(projections.Store) projections.Store) (*Broker, error) {
	cfg = cfg.withDefaults()
	elog, err := eventlog.Open(cfg.Dir, cfg.logOptions(false))
	if err != nil {
		return nil, err
	}
	b := newBroker(cfg, elog)
	set, err := b.rebuildProjections()
	if err != nil {
		_ = elog.Close()
		return nil, err
	}
	set.WrapStore(wrap)
	return b.start(set)
}

// LivenessEntries is how many workers the broker keeps a Liveness for.
func (b *Broker) LivenessEntries() int {
	b.live.mu.Lock()
	defer b.live.mu.Unlock()
	return len(b.live.workers)
}

// ScrubOnce runs one scrub of every segment now.
func (b *Broker) ScrubOnce(ctx context.Context) { b.scrubOnce(ctx) }
