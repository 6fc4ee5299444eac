package audit

import (
	"context"
	"errors"
	"fmt"

	"github.com/tetherhq/tether/eventlog"
)

// ErrReceiptMismatch says the log holds the receipt's seq with another hash: the receipt was
// not issued by this log, or the log was changed since.
var ErrReceiptMismatch = errors.New("receipt does not match the log")

// CheckReceipt confirms that the receipt {seq, hash} is in the log: the record at seq has that
// hash, and the chain up to it holds, so the receipt vouches for every record before it too.
// The chain is checked from genesis, or, when the oldest segments were deleted on purpose, from
// the oldest record here (VerifyRunThrough says from where); an archive with any other record
// missing, or segments that do not chain, confirms nothing. It returns the record and where the
// check started.
func CheckReceipt(ctx context.Context, l *eventlog.Log, seq uint64, hash string) (eventlog.Record, eventlog.Head, error) {
	want, err := parseHash(hash)
	if err != nil {
		return eventlog.Record{}, eventlog.Head{}, fmt.Errorf("receipt hash: %w", err)
	}
	if problems := l.ArchiveProblems(); len(problems) > 0 {
		return eventlog.Record{}, eventlog.Head{}, fmt.Errorf("%w: the archive's segments do not chain to the log, so no receipt can be confirmed: %w", ErrGaps, errors.Join(problems...))
	}
	for _, g := range l.ArchiveGaps() {
		if !g.Pruned {
			return eventlog.Record{}, eventlog.Head{}, fmt.Errorf("%w: no receipt can be confirmed while %s", ErrGaps, gapsText([]Gap{{First: g.First, Last: g.Last, Why: g.Why}}))
		}
	}
	r, err := l.Get(seq)
	if err != nil {
		return eventlog.Record{}, eventlog.Head{}, err
	}
	if r.Hash != want {
		return r, eventlog.Head{}, fmt.Errorf("%w: seq %d has hash %s", ErrReceiptMismatch, seq, r.Hash)
	}
	start, err := VerifyRunThrough(ctx, l, seq, nil)
	return r, start, err
}

// VerifyRunThrough checks the chain up to seq, and on to the end of seq's segment if it is
// archived (which ties it to the next segment or the anchor), from as far back as the records
// here go without a gap: from genesis when nothing before seq is missing, else from the hash
// the segment after the last gap before seq states. It returns where it started, and the gaps
// before seq that are not pruned, which break the chain back to genesis (an error then).
func VerifyRunThrough(ctx context.Context, l *eventlog.Log, seq uint64, progress ProgressFunc) (eventlog.Head, error) {
	start := eventlog.Head{Hash: eventlog.Genesis}
	var holes []Gap
	for _, g := range l.ArchiveGaps() {
		if g.First > seq {
			break
		}
		if !g.Pruned {
			holes = append(holes, Gap{First: g.First, Last: g.Last, Why: g.Why})
		}
		start = l.RunStart(g.Last)
		if start.Seq != g.Last || g.Last >= seq {
			return start, fmt.Errorf("%w: no run of records here reaches seq %d", eventlog.ErrArchived, seq)
		}
	}
	through := seq
	for _, s := range l.Segments() {
		if s.First <= seq && seq <= s.Last {
			through = s.Last
		}
	}
	for r, err := range l.VerifiedFrom(ctx, start, through) {
		if err != nil {
			return start, err
		}
		progress.report(r.Seq, through, r.Seq == through)
	}
	if len(holes) > 0 {
		return start, fmt.Errorf("%w: the chain back to genesis is broken: %s", ErrGaps, gapsText(holes))
	}
	return start, nil
}
