package eventlog

import (
	"errors"
	"fmt"
)

// Sentinel errors. Callers match them with errors.Is; the messages carry the details.
var (
	// ErrNotTetherLog is returned by Open for a directory that holds something other than a
	// tether event log (another Pebble database, or unrelated files).
	ErrNotTetherLog = errors.New("eventlog: not a tether event log")
	// ErrCorruptRecord is returned when stored bytes do not decode as a record.
	ErrCorruptRecord = errors.New("eventlog: corrupt record")
	// ErrChainBroken is returned when the hash chain or the seq order does not hold; the
	// error is a *ChainError that names the first bad seq.
	ErrChainBroken = errors.New("eventlog: hash chain broken")
	// ErrFailed is returned by every append after a write or fsync failed. The log never
	// acknowledges anything after such a failure; the process should stop.
	ErrFailed = errors.New("eventlog: log failed")
	// ErrClosed is returned by operations on a closed log.
	ErrClosed = errors.New("eventlog: log closed")
	// ErrInvalidEvent is returned by Append for an event that breaks the envelope's rules
	// (empty or oversize stream or type, data that is not JSON or is too large).
	ErrInvalidEvent = errors.New("eventlog: invalid event")
	// ErrNotFound is returned for a seq or checkpoint that is not in the durable log.
	ErrNotFound = errors.New("eventlog: not found")
	// ErrUnknownType is returned by Decode for an event type that is not in the catalogue.
	ErrUnknownType = errors.New("eventlog: unknown event type")
	// ErrReadOnly is returned by writes to a log opened read-only.
	ErrReadOnly = errors.New("eventlog: log is read-only")
	// ErrInUse is returned by Open when another process (or another Log in this one) holds the
	// store, typically a running server. A read-only open is refused too: the store would move
	// under it.
	ErrInUse = errors.New("eventlog: log is in use by another process")
	// ErrArchived is returned for a record that has left the hot log for an archive segment
	// that is not there (copied elsewhere, deleted by --archive-keep, or never given); the
	// error is a *GapError that names the records and why.
	ErrArchived = errors.New("eventlog: record is archived and its segment is not here")
	// ErrCorruptSegment is returned for an archive segment that is not what it says it is; the
	// error is a *SegmentError that names the file.
	ErrCorruptSegment = errors.New("eventlog: corrupt archive segment")
)

// ChainError names the first record at which the log stops being a valid chain.
type ChainError struct {
	Seq    uint64 // the first bad seq
	Reason string
}

func (e *ChainError) Error() string {
	return fmt.Sprintf("eventlog: hash chain broken at seq %d: %s", e.Seq, e.Reason)
}

// Unwrap makes errors.Is(err, ErrChainBroken) hold.
func (e *ChainError) Unwrap() error { return ErrChainBroken }

// GapError names a run of archived records, First..Last, that no segment here holds. Pruned
// ones are the oldest records, deleted on purpose: by --archive-keep (up to the floor it
// records) or by an operator who removed the oldest segments. Any other gap is a hole that
// should not be there: a segment lost, moved or never copied.
type GapError struct {
	First, Last uint64
	Pruned      bool
	ByKeep      bool   // pruned by --archive-keep (the floor), not by an operator
	Why         string // in words: "deleted by --archive-keep", "no segment holds them between ..."
}

func (e *GapError) Error() string {
	return fmt.Sprintf("eventlog: records %d..%d are archived in segments that are not here: %s", e.First, e.Last, e.Why)
}

// Unwrap makes errors.Is(err, ErrArchived) hold.
func (e *GapError) Unwrap() error { return ErrArchived }
