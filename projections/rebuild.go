package projections

import (
	"errors"
	"fmt"

	"github.com/tetherhq/tether/eventlog"
)

// rebuildFlushAt is how many finished jobs a Rebuild holds in memory before it flushes them to
// the table: replaying a long log (an older build's, or after an unusable checkpoint) costs
// memory for what is live and this many jobs, not for the whole history.
const rebuildFlushAt = 10_000

// Rebuild is how a server gets its projections when it starts on a log: the newest checkpoint
// and the table saved with it, then every record after it. A checkpoint that is missing starts
// from the empty Set; one that cannot be read or decoded, or that disagrees with its own seq, is
// reported to unusable and the whole log is replayed instead, into a table cleared first (on a
// read-only log, into memory alone), saving a checkpoint every rebuildFlushAt finished jobs on
// the way. It returns the Set and the seq of the newest checkpoint when it is done (0 when
// none). The runtime and the simulator both start this way.
func Rebuild(l *eventlog.Log, unusable func(error)) (*Set, uint64, error) {
	var s *Set
	ck, err := l.LoadCheckpoint(CheckpointName)
	switch {
	case err == nil:
		if restored, err := UnmarshalCheckpoint(ck.Data, l.Views()); err != nil {
			unusable(err)
		} else if restored.Seq() != ck.Seq {
			unusable(fmt.Errorf("projections: checkpoint at seq %d holds a Set at seq %d", ck.Seq, restored.Seq()))
		} else {
			s = restored
		}
	case !errors.Is(err, eventlog.ErrNotFound):
		unusable(err)
	}
	writable := true
	if s == nil {
		// Whatever table is there belongs to no checkpoint this fold can start from.
		switch err := l.ClearViews(CheckpointName); {
		case errors.Is(err, eventlog.ErrReadOnly):
			writable = false
			s = New()
		case err != nil:
			return nil, 0, err
		default:
			s = NewOn(l.Views())
		}
	}
	from := s.Seq()
	for r, err := range l.Range(from+1, 0) {
		if err != nil {
			return nil, 0, err
		}
		if err := s.ApplyRecord(r); err != nil {
			return nil, 0, err
		}
		if writable && len(s.dirty) >= rebuildFlushAt {
			if err := s.BeginFlush().Save(l, s); err != nil {
				return nil, 0, err
			}
			from = s.Seq()
		}
	}
	return s, from, nil
}

// Save encodes the flush, saves it as the newest checkpoint with its table in one batch, and
// ends it on s, the Set it began on; the caller holds whatever guards s for the last step.
func (f *Flush) Save(l *eventlog.Log, s *Set) error {
	if err := f.Write(l); err != nil {
		return err
	}
	s.EndFlush(f)
	return nil
}

// Write encodes the flush and saves it as the newest checkpoint with its table, in one batch.
func (f *Flush) Write(l *eventlog.Log) error {
	data, writes, err := f.Encode()
	if err != nil {
		return err
	}
	return l.SaveCheckpoint(CheckpointName, f.Seq(), data, writes...)
}
