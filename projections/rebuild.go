package projections

import (
	"errors"
	"fmt"

	"github.com/tetherhq/tether/eventlog"
)

// Rebuild is how a server gets its projections when it starts on a log: the newest checkpoint,
// then every record after it. A checkpoint that is missing starts from the empty Set; one that
// cannot be read or decoded, or that disagrees with its own seq, is reported to unusable and the
// whole log is replayed instead. It returns the Set and the seq of the checkpoint it started
// from (0 when none). The runtime and the simulator both start this way.
func Rebuild(l *eventlog.Log, unusable func(error)) (*Set, uint64, error) {
	s := New()
	ck, err := l.LoadCheckpoint(CheckpointName)
	switch {
	case err == nil:
		if restored, err := UnmarshalCheckpoint(ck.Data); err != nil {
			unusable(err)
		} else if restored.Seq() != ck.Seq {
			unusable(fmt.Errorf("projections: checkpoint at seq %d holds a Set at seq %d", ck.Seq, restored.Seq()))
		} else {
			s = restored
		}
	case !errors.Is(err, eventlog.ErrNotFound):
		unusable(err)
	}
	from := s.Seq()
	for r, err := range l.Range(from+1, 0) {
		if err != nil {
			return nil, 0, err
		}
		if err := s.ApplyRecord(r); err != nil {
			return nil, 0, err
		}
	}
	return s, from, nil
}
