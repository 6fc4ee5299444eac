package eventlog

import (
	"bytes"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// How the store lays its keys out in Pebble's tables (doc.go, "Tables").
//
// Pebble cuts every table it writes, by a flush or a compaction, at the end of each span
// keySpan names, so that no table holds keys of two spans. Each span is appended at one end
// or a few: log/ at its head, idx/job/ at the newest jobs, view/j at the newest finished jobs.
// A table of one flush then overlaps, in the level below, only the last table of its span
// (or a few), and the older tables are left where they are; without the cut, a flush's one
// table ran from ckpt/ to view/ and every compaction into the base level rewrote every log/
// and idx/ table between.

// keySpan is Pebble's SpanPolicyFunc: the span that start is in ends at end (exclusive).
//
//	ckpt/, log/, meta/          one span each
//	idx/<kind>/                 one span per kind of stream (job/, worker/, tenant/, ...)
//	view/<b>                    one span per first byte of a view key (a table of the
//	                            projection's: j, l, d, ...)
//
// A key outside these (none is written) ends its span at the end of its first segment.
func keySpan(start []byte) (policy pebble.SpanPolicy, end []byte, err error) {
	slash := bytes.IndexByte(start, '/')
	if slash < 0 {
		return spanPolicy(start), prefixEnd(start), nil
	}
	top := start[:slash+1]
	rest := start[slash+1:]
	switch string(top) {
	case prefixIdx:
		if kind := bytes.IndexByte(rest, '/'); kind >= 0 {
			return spanPolicy(start), prefixEnd(start[:slash+1+kind+1]), nil
		}
	case prefixView:
		if len(rest) > 0 {
			return spanPolicy(start), prefixEnd(start[:slash+2]), nil
		}
	}
	return spanPolicy(start), prefixEnd(top), nil
}

// spanPolicy keeps the values of ckpt/ and meta/ in their tables. A checkpoint is replaced at
// every save: in a blob file its old value would be garbage that holds the file (and whatever
// else is in it) until a rewrite; in a table it goes at the next compaction of its span.
func spanPolicy(start []byte) pebble.SpanPolicy {
	if bytes.HasPrefix(start, []byte(prefixCkpt)) || bytes.HasPrefix(start, []byte("meta/")) {
		return pebble.SpanPolicy{ValueStoragePolicy: pebble.ValueStorageLowReadLatency}
	}
	return pebble.SpanPolicy{}
}

// hotLogValueSeparation moves every value of hotLogSeparateMin bytes or more (records, view
// values) out of the tables into blob files when a flush writes them, and compactions then
// carry their handles (about a dozen bytes) instead of the bytes: a record is compressed once,
// in its blob file, and rewritten only if Pebble rewrites the blob file. A blob file is cut
// with its table, so it holds one span's values: the records of one flush are in files of their
// own, which go whole when archiving deletes them.
//
// MaxBlobReferenceDepth bounds how many blob files one table's values may be spread over
// before a compaction rewrites them together (10, Pebble's and CockroachDB's figure); a span
// appended in order reaches it seldom. TargetGarbageRatio and RewriteMinimumAge say when a blob
// file whose values are mostly deleted (view values past retention beside live ones) is
// rewritten to give the space back.
var hotLogValueSeparation = pebble.ValueSeparationPolicy{
	Enabled:               true,
	MinimumSize:           hotLogSeparateMin,
	MaxBlobReferenceDepth: 10,
	RewriteMinimumAge:     5 * time.Minute,
	TargetGarbageRatio:    0.2,
}

const hotLogSeparateMin = 256

// The tables a compaction writes into the base level (the first below L0; L6 while the store
// is small) are cut at baseTableSize, and each level below at twice the one above; flushes into
// L0 at l0TableSize (Pebble's own figure). A compaction of L0 rewrites every table of the base
// level that its keys fall among, whole: idx/job/, where each job's later records go beside its
// first, under a backlog of jobs submitted before any ran, was one table in the base level
// (Pebble's 4 MiB), rewritten at each compaction of L0 as the workers went down the backlog
// (ten times, 1.7 to 3.6 MB, in a 300,000-job burn-down, then again in L5, 0.6 to 2.3 MB).
// Cut at 1 MiB, a compaction rewrites the tables where the workers are, and the burn-down's
// compactions wrote 72 bytes a job instead of 133-140 (256 KiB: 50, but four times the tables
// of Pebble's default at every level, and Pebble keeps 1,000 of them open).
const (
	l0TableSize   = 2 << 20
	baseTableSize = 1 << 20
)
