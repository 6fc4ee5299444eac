package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Open opens the log in dir for reading only.
func Open(dir string) (*eventlog.Log, error) {
	return eventlog.Open(dir, eventlog.Options{ReadOnly: true})
}

// Progress is told how many records of how many a long walk has done, every few
// thousand records and once at the end. A nil Progress is told nothing.
type Progress func(done, total uint64)

const progressEvery = 16 << 10

func (p Progress) report(done, total uint64, force bool) {
	if p != nil && (force || done%progressEvery == 0) {
		p(done, total)
	}
}

// FoldError says the projections could not fold the record at Seq: an event the lifecycle does
// not allow there, or one that does not decode.
type FoldError struct {
	Seq uint64
	Err error
}

func (e *FoldError) Error() string { return fmt.Sprintf("seq %d does not fold: %v", e.Seq, e.Err) }
func (e *FoldError) Unwrap() error { return e.Err }

// CheckpointError says the stored checkpoint at Seq is not what a replay up to Seq gives.
type CheckpointError struct {
	Seq    uint64
	Reason string
}

func (e *CheckpointError) Error() string {
	return fmt.Sprintf("checkpoint at seq %d: %s", e.Seq, e.Reason)
}

// BadSeq returns the seq an audit error names, or 0 if it names none.
func BadSeq(err error) uint64 {
	var chain *eventlog.ChainError
	var fold *FoldError
	var ckpt *CheckpointError
	switch {
	case errors.As(err, &chain):
		return chain.Seq
	case errors.As(err, &fold):
		return fold.Seq
	case errors.As(err, &ckpt):
		return ckpt.Seq
	}
	return 0
}

// Summary is what Verify found.
type Summary struct {
	Records   uint64    `json:"records"`
	Streams   uint64    `json:"streams"`
	HeadSeq   uint64    `json:"head_seq"`
	HeadHash  string    `json:"head_hash"`
	FirstTime time.Time `json:"first_time,omitzero"`
	LastTime  time.Time `json:"last_time,omitzero"`
	// Jobs counts jobs by status as of the last record's time.
	Jobs map[projections.Status]int `json:"jobs"`
	// Types counts records by event type.
	Types map[string]uint64 `json:"types"`
	// CheckpointSeq is the seq of the checkpoint compared with the replay, 0 if there is none.
	CheckpointSeq uint64 `json:"checkpoint_seq"`
}

// Verify walks the whole log from genesis: the hash chain, the seqs, the stream index, and the
// fold of every record into a fresh projections.Set, which it compares with the newest
// checkpoint when it reaches that checkpoint's seq. It returns the summary of a log that
// verifies, or the first failure (see BadSeq).
func Verify(ctx context.Context, l *eventlog.Log, progress Progress) (Summary, error) {
	sum := Summary{Types: map[string]uint64{}}
	ckpt, err := l.LoadCheckpoint(projections.CheckpointName)
	var hasCkpt bool
	switch {
	case err == nil:
		hasCkpt = true
	case errors.Is(err, eventlog.ErrNotFound):
	case errors.Is(err, eventlog.ErrChainBroken):
		// The checkpoint names a seq whose hash is not the log's: the log was changed or cut
		// back under it, or it belongs to another log.
		return sum, &CheckpointError{Seq: BadSeq(err), Reason: err.Error()}
	default:
		return sum, err
	}
	set := projections.New()
	compare := func() error {
		got, err := set.MarshalCheckpoint()
		if err != nil {
			return err
		}
		if !bytes.Equal(got, ckpt.Data) {
			return &CheckpointError{Seq: ckpt.Seq, Reason: "the stored projections differ from a replay of the log up to it"}
		}
		sum.CheckpointSeq = ckpt.Seq
		return nil
	}
	if hasCkpt && ckpt.Seq == 0 {
		if err := compare(); err != nil {
			return sum, err
		}
	}
	total := l.Head().Seq
	audit, err := l.Audit(ctx, func(r eventlog.Record) error {
		if err := set.ApplyRecord(r); err != nil {
			return &FoldError{Seq: r.Seq, Err: err}
		}
		sum.Types[r.Type]++
		if hasCkpt && r.Seq == ckpt.Seq {
			if err := compare(); err != nil {
				return err
			}
		}
		progress.report(r.Seq, total, false)
		return nil
	})
	if err != nil {
		return sum, err
	}
	progress.report(audit.Head.Seq, total, true)
	sum.Records, sum.Streams = audit.Head.Seq, audit.Streams
	sum.HeadSeq, sum.HeadHash = audit.Head.Seq, audit.Head.Hash.String()
	sum.FirstTime, sum.LastTime = audit.FirstTime, audit.Head.Time
	sum.Jobs = set.StatusCounts(audit.Head.Time)
	return sum, nil
}
