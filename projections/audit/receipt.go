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
// hash, and the chain from genesis up to it holds, so the receipt vouches for every record
// before it too. It returns the record.
func CheckReceipt(ctx context.Context, l *eventlog.Log, seq uint64, hash string) (eventlog.Record, error) {
	want, err := parseHash(hash)
	if err != nil {
		return eventlog.Record{}, fmt.Errorf("receipt hash: %w", err)
	}
	r, err := l.Get(seq)
	if err != nil {
		return eventlog.Record{}, err
	}
	if r.Hash != want {
		return r, fmt.Errorf("%w: seq %d has hash %s", ErrReceiptMismatch, seq, r.Hash)
	}
	return r, VerifyThrough(ctx, l, seq, nil)
}

// VerifyThrough checks the chain from genesis up to seq, so that what a reader was shown of
// the records up to seq is what the chain vouches for.
func VerifyThrough(ctx context.Context, l *eventlog.Log, seq uint64, progress Progress) error {
	for r, err := range l.Verified(ctx, seq) {
		if err != nil {
			return err
		}
		progress.report(r.Seq, seq, r.Seq == seq)
	}
	return nil
}

// VerifyRunThrough checks the chain up to seq from as far back as the records here go without
// a gap: from genesis when nothing before seq is missing, else from the hash the segment after
// the last gap before seq states. It returns where it started, and the gaps before seq that
// are not pruned, which break the chain back to genesis (an error then).
func VerifyRunThrough(ctx context.Context, l *eventlog.Log, seq uint64, progress Progress) (eventlog.Head, error) {
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
	for r, err := range l.VerifiedFrom(ctx, start, seq) {
		if err != nil {
			return start, err
		}
		progress.report(r.Seq, seq, r.Seq == seq)
	}
	if len(holes) > 0 {
		return start, fmt.Errorf("%w: the chain back to genesis is broken: %s", ErrGaps, gapsText(holes))
	}
	return start, nil
}
