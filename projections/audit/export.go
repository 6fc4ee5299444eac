package audit

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tetherhq/tether/eventlog"
)

// ExportRecord is one line of an export: a record as the log holds it. Data is the record's
// JSON exactly as stored, byte for byte, so the hash can be recomputed from the line. The first
// line also carries PrevHash, the hash of the record before it (the genesis hash for seq 1), so
// that an export that starts mid-log verifies on its own.
type ExportRecord struct {
	Seq      uint64          `json:"seq"`
	Time     time.Time       `json:"time"`
	Stream   string          `json:"stream"`
	Type     string          `json:"type"`
	Data     json.RawMessage `json:"data"`
	Hash     string          `json:"hash"`
	PrevHash string          `json:"prev_hash,omitempty"`
}

// ExportRange checks the seqs an export asks for against a log whose head is head, and returns
// them with to 0 read as the head: a range that holds no record is an error, not an empty
// export.
func ExportRange(head, from, to uint64) (uint64, uint64, error) {
	from = max(from, 1)
	switch {
	case head == 0:
		return 0, 0, errors.New("audit: the log is empty: nothing to export")
	case to != 0 && to < from:
		return 0, 0, fmt.Errorf("audit: the range %d..%d is empty: --to comes before --from", from, to)
	case from > head:
		return 0, 0, fmt.Errorf("audit: --from %d is past the log's head, seq %d", from, head)
	case to > head:
		return 0, 0, fmt.Errorf("audit: --to %d is past the log's head, seq %d", to, head)
	case to == 0:
		to = head
	}
	return from, to, nil
}

// Export writes the records from..to (to 0: the head) to w as JSON Lines and returns how many
// it wrote. A range ExportRange refuses is an error.
func Export(ctx context.Context, l *eventlog.Log, w io.Writer, from, to uint64, progress ProgressFunc) (uint64, error) {
	from, to, err := ExportRange(l.Head().Seq, from, to)
	if err != nil {
		return 0, err
	}
	prev := eventlog.Genesis
	if from > 1 {
		r, err := l.Get(from - 1)
		var gap *eventlog.GapError
		switch start := l.RunStart(from - 1); {
		case errors.As(err, &gap) && start.Seq == from-1:
			r.Hash = start.Hash // the record before is not here: the hash its successor states
		case err != nil:
			return 0, err
		}
		prev = r.Hash
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	var n uint64
	var line []byte
	for r, err := range l.Range(from, to) {
		if err != nil {
			return n, err
		}
		if r.Seq%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return n, err
			}
		}
		line = appendExportLine(line[:0], r, prev, n == 0)
		if _, err := bw.Write(line); err != nil {
			return n, err
		}
		prev = r.Hash
		n++
		progress.report(n, to-from+1, false)
	}
	progress.report(n, to-from+1, true)
	return n, bw.Flush()
}

// ExportFile is Export to the file at path. A regular file (or a path not yet there) is
// written whole or not at all: the records go to a temporary file beside it, which is synced
// and renamed over path only once every record is in it, so a failed or interrupted export
// leaves path as it was. Anything else (/dev/stdout, a pipe, a terminal) is written in place,
// without a sync, which such files refuse.
func ExportFile(ctx context.Context, l *eventlog.Log, path string, from, to uint64, progress ProgressFunc) (uint64, error) {
	if _, _, err := ExportRange(l.Head().Seq, from, to); err != nil {
		return 0, err // before any file is made
	}
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return 0, err
		}
		n, err := Export(ctx, l, f, from, to, progress)
		return n, errors.Join(err, f.Close())
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	n, err := Export(ctx, l, tmp, from, to, progress)
	if err == nil {
		err = errors.Join(tmp.Chmod(exportFileMode), tmp.Sync())
	}
	if err = errors.Join(err, tmp.Close()); err != nil {
		return n, err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return n, err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the rename survives a power cut where the directory takes a sync
		d.Close()
	}
	return n, nil
}

// exportFileMode is an export's permissions, those os.Create gives under the usual umask: the
// temporary file it is written to starts at 0600.
const exportFileMode = 0o644

// appendExportLine writes the line by hand: encoding/json would compact and re-escape Data,
// and the hash is over Data's stored bytes.
func appendExportLine(b []byte, r eventlog.Record, prev eventlog.Hash, first bool) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, r.Seq, 10)
	b = append(b, `,"time":"`...)
	b = r.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","stream":`...)
	b = appendJSONString(b, r.Stream)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, r.Type)
	b = append(b, `,"data":`...)
	if len(r.Data) == 0 {
		b = append(b, "null"...) // never written by the server; keeps the line valid JSON
	}
	b = append(b, r.Data...)
	b = append(b, `,"hash":"`...)
	b = hex.AppendEncode(b, r.Hash[:])
	b = append(b, '"')
	if first {
		b = append(b, `,"prev_hash":"`...)
		b = hex.AppendEncode(b, prev[:])
		b = append(b, '"')
	}
	return append(b, "}\n"...)
}

func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

// ExportSummary is what VerifyExport found in a file whose chain holds.
type ExportSummary struct {
	Records  uint64 `json:"records"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	// Anchor is the hash the first record chains from: the genesis hash when the export starts
	// at seq 1; otherwise the file's word for it, to check against the log or a receipt.
	Anchor      string `json:"anchor"`
	FromGenesis bool   `json:"from_genesis"`
	HeadHash    string `json:"head_hash"`
}

// ExportLineMax bounds one line of an export: a record's data is at most eventlog.DataLenMax.
const ExportLineMax = 2*eventlog.DataLenMax + 1<<16

// VerifyExport re-verifies an export's chain without the log: seqs consecutive, each hash the
// SHA-256 of its predecessor's hash and the record's contents. A failure is an
// *eventlog.ChainError naming the seq (or, for a line that does not parse, its line number).
func VerifyExport(ctx context.Context, r io.Reader) (ExportSummary, error) {
	var sum ExportSummary
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), ExportLineMax)
	var prev eventlog.Hash
	for line := 1; sc.Scan(); line++ {
		if line%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return sum, err
			}
		}
		var x ExportRecord
		if err := json.Unmarshal(sc.Bytes(), &x); err != nil {
			return sum, fmt.Errorf("line %d: %w", line, err)
		}
		hash, err := parseHash(x.Hash)
		if err != nil {
			return sum, fmt.Errorf("line %d (seq %d): hash: %w", line, x.Seq, err)
		}
		if line == 1 {
			if prev, err = parseHash(x.PrevHash); err != nil {
				return sum, fmt.Errorf("line 1 (seq %d): prev_hash: %w", x.Seq, err)
			}
			if x.Seq == 1 && prev != eventlog.Genesis {
				return sum, &eventlog.ChainError{Seq: 1, Reason: "the first record does not chain from the genesis hash"}
			}
			sum.FirstSeq, sum.Anchor, sum.FromGenesis = x.Seq, prev.String(), x.Seq == 1
		} else if x.Seq != sum.LastSeq+1 {
			return sum, &eventlog.ChainError{Seq: sum.LastSeq + 1, Reason: fmt.Sprintf("record is missing (line %d holds seq %d)", line, x.Seq)}
		}
		rec := eventlog.Record{Seq: x.Seq, Time: x.Time, Stream: x.Stream, Type: x.Type, Data: x.Data, Hash: hash}
		if !rec.ChainsFrom(prev) {
			return sum, &eventlog.ChainError{Seq: x.Seq, Reason: "hash does not match the record's contents and its predecessor"}
		}
		prev, sum.LastSeq = hash, x.Seq
		sum.Records++
	}
	if err := sc.Err(); err != nil {
		return sum, err
	}
	if sum.Records == 0 {
		return sum, errors.New("the export holds no records")
	}
	sum.HeadHash = prev.String()
	return sum, nil
}

func parseHash(s string) (eventlog.Hash, error) {
	var h eventlog.Hash
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(h) {
		return h, fmt.Errorf("%q is not a 64-digit hex SHA-256", s)
	}
	copy(h[:], b)
	return h, nil
}
