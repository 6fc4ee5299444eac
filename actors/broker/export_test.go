package broker

import (
	"context"

	"github.com/tetherhq/tether/projections"
)

// ArchiveOnce runs one look of the archiver now, for tests that drive the clock.
func (b *Broker) ArchiveOnce(ctx context.Context) { b.archiveOnce(ctx) }

// OpenWithTable is Open with the reader of the finished jobs' table wrapped, for tests that
// slow the disk down.
func OpenWithTable(cfg Config, wrap func(projections.Store) projections.Store) (*Broker, error) {
	return open(cfg, wrap)
}

// LivenessEntries is how many workers the broker keeps a Liveness for.
func (b *Broker) LivenessEntries() int {
	b.live.mu.Lock()
	defer b.live.mu.Unlock()
	return len(b.live.workers)
}

// ScrubOnce runs one scrub of every segment now.
func (b *Broker) ScrubOnce(ctx context.Context) { b.scrubOnce(ctx) }
