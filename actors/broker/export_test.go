package broker

import "context"

// ArchiveOnce runs one look of the archiver now, for tests that drive the clock.
func (b *Broker) ArchiveOnce(ctx context.Context) { b.archiveOnce(ctx) }

// ScrubOnce runs one scrub of every segment now.
func (b *Broker) ScrubOnce(ctx context.Context) { b.scrubOnce(ctx) }
