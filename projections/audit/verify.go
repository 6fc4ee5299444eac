package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Open opens the log in dir for reading only, with its archive segments in dir/archive.
func Open(dir string) (*eventlog.Log, error) {
	return OpenWithArchive(dir, "")
}

// OpenWithArchive opens the log in dir for reading only, with its archive segments in
// archiveDir (empty: dir/archive).
func OpenWithArchive(dir, archiveDir string) (*eventlog.Log, error) {
	if archiveDir == "" {
		archiveDir = filepath.Join(dir, "archive")
	}
	return eventlog.Open(dir, eventlog.Options{ReadOnly: true, ArchiveDir: archiveDir})
}

// ProgressFunc is told how many records of how many a long walk has done, every few
// thousand records and once at the end. A nil ProgressFunc is told nothing.
type ProgressFunc func(done, total uint64)

const progressEvery = 16 << 10

func (p ProgressFunc) report(done, total uint64, force bool) {
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
	// CheckpointSeq is the seq of the checkpoint compared with the replay; 0 if there is none
	// (or it is of the empty log).
	CheckpointSeq uint64 `json:"checkpoint_seq"`
	// TableJobs is how many finished jobs the table saved with the checkpoint holds: compared
	// with the fold, and their indexes checked.
	TableJobs int `json:"table_jobs"`
	// CheckpointSkipped says why a stored checkpoint was not compared: it is of another format
	// (an older build's), which the server ignores too.
	CheckpointSkipped string `json:"checkpoint_skipped,omitempty"`
	// Segments is how many archive segments the walk read; AnchorSeq is the hot log's anchor
	// (the last archived record; 0 if nothing is archived).
	Segments  int    `json:"segments"`
	AnchorSeq uint64 `json:"anchor_seq"`
	// FromSeq is the last record the walk did not check because its segment is not here
	// (0: the walk started at genesis), and Unchecked says plainly what that left out.
	FromSeq   uint64 `json:"from_seq,omitempty"`
	Unchecked string `json:"unchecked,omitempty"`
	// Gaps are the runs of archived records that no segment here holds, and Runs the runs of
	// records between them that the walk checked, each from the hash the segment it starts
	// with states; both are empty when every record from genesis is here.
	Gaps []Gap `json:"gaps,omitempty"`
	Runs []Run `json:"runs,omitempty"`
	// Problems are what opening found wrong with the archive besides missing records:
	// segments that do not read, overlap, or do not chain.
	Problems []string `json:"problems,omitempty"`
}

// Gap is a run of archived records that is not here (eventlog.GapError). Pruned ones are the
// oldest records, deleted on purpose; any other is a failure of the audit.
type Gap struct {
	First  uint64 `json:"first"`
	Last   uint64 `json:"last"`
	Pruned bool   `json:"pruned"`
	Why    string `json:"why"`
}

// Run is a run of records the walk checked from a hash it could not check (the anchor of the
// oldest segment here after a gap), with what it found wrong there, if anything.
type Run struct {
	First  uint64 `json:"first"`
	Last   uint64 `json:"last"`
	Anchor string `json:"anchor"`
	Error  string `json:"error,omitempty"`
}

// ErrGaps says the log has records missing that were not deleted on purpose, or that what is
// here does not verify around them; Summary says which.
var ErrGaps = errors.New("archived records are missing")

// errCheckpointFormat marks a checkpoint of another format than this build's.
var errCheckpointFormat = errors.New("written by an earlier build in an older format; the server replays the log instead of loading it")

// Verify walks the whole log from genesis: the hash chain, the seqs, the stream index, and the
// fold of every record into a fresh projections.Set, which it compares with the newest
// checkpoint when it reaches that checkpoint's seq. It returns the summary of a log that
// verifies, or the first failure (see BadSeq).
//
// Reading and hashing, decoding, and folding run as a pipeline on three goroutines, so a
// machine with more than one core verifies faster; the fold still sees the records in order.
// The fold keeps no index of its jobs (projections.NewUnindexedOn): nothing compares one, and
// the indexes of the checkpoint's table are checked against its jobs (CheckTable).
func Verify(ctx context.Context, l *eventlog.Log, progress ProgressFunc) (Summary, error) {
	sum := Summary{Types: map[string]uint64{}, Segments: len(l.Segments()), AnchorSeq: l.Anchor().Seq}
	if problems := l.ArchiveProblems(); len(problems) > 0 || len(l.ArchiveGaps()) > 0 {
		return verifyAround(ctx, l, sum, problems, progress)
	}
	// Loading a checkpoint of many jobs takes as long as a good part of the walk, so it loads
	// alongside; the fold compares when it reaches the checkpoint's seq if the checkpoint is in
	// by then, and otherwise replays up to that seq again at the end.
	loading := make(chan loadedCheckpoint, 1)
	go func() {
		c, err := l.LoadCheckpoint(projections.CheckpointName)
		if err == nil && projections.CheckpointOutdated(c.Data) {
			err = errCheckpointFormat
		}
		loading <- loadedCheckpoint{c, err}
	}()
	var ckpt *loadedCheckpoint
	compared := false
	set, err := newUnindexedFold()
	if err != nil {
		return sum, err
	}
	defer set.Close()
	total := l.Head().Seq
	fold := startFold(func(r eventlog.Record, p eventlog.Payload) error {
		if err := set.Apply(r, p); err != nil {
			return err
		}
		sum.Types[r.Type]++
		if ckpt == nil {
			select {
			case c := <-loading:
				ckpt = &c
			default:
			}
		}
		if ckpt != nil && ckpt.err == nil && r.Seq == ckpt.c.Seq {
			n, err := compareCheckpoint(l, set.Set, ckpt.c)
			if err != nil {
				return err
			}
			compared, sum.TableJobs = true, n
		}
		progress.report(r.Seq, total, false)
		return nil
	})
	audit, err := l.Audit(ctx, eventlog.Head{Hash: eventlog.Genesis}, fold.add)
	if foldErr := fold.finish(); err == nil || foldErr != nil {
		err = foldErr // a fold error is the first failure: the walk stopped because of it
	}
	if ckpt == nil {
		c := <-loading
		ckpt = &c
	}
	if inArchive(l, err) {
		// A segment that does not verify: check the rest around it, and report all of it.
		return verifyAround(ctx, l, Summary{Types: map[string]uint64{}, Segments: sum.Segments, AnchorSeq: sum.AnchorSeq}, nil, progress)
	}
	if err == nil {
		err = set.Settle()
	}
	if err != nil {
		return sum, err
	}
	switch {
	case errors.Is(ckpt.err, eventlog.ErrNotFound):
	case errors.Is(ckpt.err, errCheckpointFormat):
		sum.CheckpointSkipped = fmt.Sprintf("checkpoint at seq %d: %v", ckpt.c.Seq, ckpt.err)
	case errors.Is(ckpt.err, eventlog.ErrChainBroken):
		// The checkpoint names a seq whose hash is not the log's, or one beyond its head: the
		// log was changed or cut back under it, or it belongs to another log.
		return sum, &CheckpointError{Seq: BadSeq(ckpt.err), Reason: ckpt.err.Error()}
	case ckpt.err != nil:
		return sum, ckpt.err
	case !compared: // it came in after the fold had passed its seq, or its seq is 0
		at, _, err := StateAt(ctx, l, ckpt.c.Seq, nil)
		if err != nil {
			return sum, err
		}
		n, err := compareCheckpoint(l, at.Set, ckpt.c)
		at.Close()
		if err != nil {
			return sum, err
		}
		sum.CheckpointSeq, sum.TableJobs = ckpt.c.Seq, n
	default:
		sum.CheckpointSeq = ckpt.c.Seq
	}
	progress.report(audit.Head.Seq, total, true)
	sum.Records, sum.Streams = audit.Head.Seq, audit.Streams
	sum.HeadSeq, sum.HeadHash = audit.Head.Seq, audit.Head.Hash.String()
	sum.FirstTime, sum.LastTime = audit.FirstTime, audit.Head.Time
	sum.Jobs = set.StatusCounts(audit.Head.Time)
	return sum, nil
}

// verifyAround verifies what can be verified of a log whose archive lacks records, or whose
// segments do not load, chain or verify (problems): each run of records that is here, from the
// hash its first segment states, and the stream index. A run that fails in a segment goes on
// from the next segment, so that one missing or damaged segment does not hide another. The fold
// needs every record from genesis, so the projections are not checked. It fails (ErrGaps)
// unless the only records missing are the oldest, deleted on purpose, and everything here
// verifies.
func verifyAround(ctx context.Context, l *eventlog.Log, sum Summary, problems []error, progress ProgressFunc) (Summary, error) {
	head := l.Head()
	total := head.Seq
	gaps := l.ArchiveGaps()
	failed := len(problems) > 0
	for _, p := range problems {
		sum.Problems = append(sum.Problems, p.Error())
	}
	for _, g := range gaps {
		sum.Gaps = append(sum.Gaps, Gap{First: g.First, Last: g.Last, Pruned: g.Pruned, Why: g.Why})
		failed = failed || !g.Pruned
	}
	segs := l.Segments()
	segmentOf := func(seq uint64) (eventlog.SegmentInfo, bool) {
		i := slices.IndexFunc(segs, func(s eventlog.SegmentInfo) bool { return s.First <= seq && seq <= s.Last })
		if i < 0 {
			return eventlog.SegmentInfo{}, false
		}
		return segs[i], true
	}
	start := eventlog.Head{Hash: eventlog.Genesis}
	for {
		if i := slices.IndexFunc(gaps, func(g *eventlog.GapError) bool { return g.First == start.Seq+1 }); i >= 0 {
			if gaps[i].Last >= total {
				break
			}
			if start = l.RunStart(gaps[i].Last); start.Seq != gaps[i].Last {
				return sum, fmt.Errorf("%w: no run of records starts after seq %d", ErrGaps, gaps[i].Last)
			}
			continue
		}
		end := total
		if i := slices.IndexFunc(gaps, func(g *eventlog.GapError) bool { return g.First > start.Seq }); i >= 0 {
			end = gaps[i].First - 1
		}
		run := Run{First: start.Seq + 1, Last: start.Seq, Anchor: start.Hash.String()}
		visit := func(r eventlog.Record) error {
			if sum.Records == 0 {
				sum.FirstTime = r.Time
			}
			sum.Types[r.Type]++
			sum.Records++
			run.Last = r.Seq
			progress.report(r.Seq, total, false)
			return nil
		}
		var err error
		if end == total { // the run that reaches the head: the hot log and its index too
			var audit eventlog.AuditSummary
			audit, err = l.Audit(ctx, start, visit)
			sum.Streams, sum.LastTime = audit.Streams, audit.Head.Time
		} else {
			for r, rerr := range l.VerifiedFrom(ctx, start, end) {
				if err = rerr; err != nil {
					break
				}
				_ = visit(r)
			}
		}
		if ctx.Err() != nil {
			return sum, ctx.Err()
		}
		if err == nil {
			sum.Runs = append(sum.Runs, run)
			if end == total {
				break
			}
			start = eventlog.Head{Seq: end} // a gap follows, and says where to go on from
			continue
		}
		// Go on from the segment after the one that failed; a failure in the hot log or its
		// index ends the walk.
		run.Error, failed = err.Error(), true
		sum.Runs = append(sum.Runs, run)
		seg, inSeg := segmentOf(run.Last + 1)
		if !inSeg {
			break
		}
		if start = l.RunStart(seg.Last); start.Seq != seg.Last {
			start = eventlog.Head{Seq: seg.Last} // a gap follows
		}
	}
	progress.report(total, total, true)
	sum.HeadSeq, sum.HeadHash = head.Seq, head.Hash.String()
	sum.Unchecked = "the projections and the checkpoint, which need every record from genesis"
	if failed {
		return sum, fmt.Errorf("%w or do not verify: %s", ErrGaps, describeFailures(sum))
	}
	return sum, nil
}

// inArchive reports whether err is a failure of the archive: a segment that does not read or
// verify, a record no segment holds, or a chain that breaks at an archived seq.
func inArchive(l *eventlog.Log, err error) bool {
	var chain *eventlog.ChainError
	switch {
	case err == nil:
		return false
	case errors.Is(err, eventlog.ErrCorruptSegment), errors.Is(err, eventlog.ErrArchived):
		return true
	case errors.As(err, &chain):
		return chain.Seq <= l.Anchor().Seq
	}
	return false
}

// describeFailures lists the holes and the runs that did not verify, for the error.
func describeFailures(sum Summary) string {
	var parts []string
	for _, g := range sum.Gaps {
		if !g.Pruned {
			parts = append(parts, fmt.Sprintf("records %d..%d are not here: %s", g.First, g.Last, g.Why))
		}
	}
	for _, r := range sum.Runs {
		if r.Error != "" {
			parts = append(parts, r.Error)
		}
	}
	parts = append(parts, sum.Problems...)
	return strings.Join(parts, "; ")
}

type loadedCheckpoint struct {
	c   eventlog.Checkpoint
	err error
}

// compareCheckpoint checks that set, folded up to c's seq, is what c and the table saved with
// it hold: the checkpoint's live state and every finished job in the table, compared as the
// fold they make (projections.WriteFold) one buffer at a time, and the table's indexes against
// its jobs.
func compareCheckpoint(l *eventlog.Log, set *projections.Set, c eventlog.Checkpoint) (tableJobs int, err error) {
	differs := &CheckpointError{Seq: c.Seq, Reason: "the stored projections differ from a replay of the log up to it"}
	stored, err := projections.UnmarshalCheckpoint(c.Data, l.Views())
	if err != nil {
		return 0, &CheckpointError{Seq: c.Seq, Reason: err.Error()}
	}
	pr, pw := io.Pipe()
	written := make(chan struct{})
	go func() {
		defer close(written)
		pw.CloseWithError(stored.WriteFold(pw))
	}()
	defer func() { pr.Close(); <-written }() // the writer reads the log, which closes after
	// A checkpoint of a build that kept no tombstones has them only from its seq on.
	set.KeepGoneFrom(stored.GoneFrom())
	same := &sameAs{want: pr}
	if err := set.WriteFold(same); err != nil {
		if errors.Is(err, errDiffers) {
			return 0, differs
		}
		return 0, err
	}
	if !same.atEnd() {
		return 0, differs
	}
	n, err := stored.CheckTable()
	if err != nil {
		return 0, &CheckpointError{Seq: c.Seq, Reason: err.Error()}
	}
	return n, nil
}

// errDiffers stops writing a fold at its first difference from the stored one.
var errDiffers = errors.New("differs")

// sameAs is a writer that compares what is written with what want reads.
type sameAs struct {
	want io.Reader
	buf  []byte
}

func (s *sameAs) Write(p []byte) (int, error) {
	if cap(s.buf) < len(p) {
		s.buf = make([]byte, len(p))
	}
	b := s.buf[:len(p)]
	if _, err := io.ReadFull(s.want, b); err != nil || !bytes.Equal(p, b) {
		return 0, errDiffers
	}
	return len(p), nil
}

// atEnd reports whether want has nothing more.
func (s *sameAs) atEnd() bool {
	n, err := s.want.Read(make([]byte, 1))
	return n == 0 && err == io.EOF
}

// fold decodes batches of records on two goroutines, taking turns, and applies them in order
// on a third.
type fold struct {
	batch   []eventlog.Record
	sent    int                       // batches handed to the decoders
	decode  [2]chan []eventlog.Record // batch n goes to decoder n%2
	stopped chan struct{}             // closed when apply fails
	done    chan struct{}             // closed when the applier has finished
	err     error                     // the applier's failure; read after stopped or done is closed
}

type decoded struct {
	records  []eventlog.Record
	payloads []eventlog.Payload
	err      error // a record that does not decode, the last of the batch to be applied
}

const foldBatch = 256

func startFold(apply func(eventlog.Record, eventlog.Payload) error) *fold {
	f := &fold{stopped: make(chan struct{}), done: make(chan struct{})}
	var out [2]chan decoded
	for i := range f.decode {
		f.decode[i], out[i] = make(chan []eventlog.Record, 4), make(chan decoded, 4)
		go decodeBatches(f.decode[i], out[i])
	}
	go func() {
		defer close(f.done)
		for n := 0; ; n++ {
			d, ok := <-out[n%2]
			if !ok {
				return
			}
			if f.err != nil {
				continue // drain
			}
			for i, p := range d.payloads {
				if f.err = apply(d.records[i], p); f.err != nil {
					break
				}
			}
			if f.err == nil {
				f.err = d.err
			}
			if f.err != nil {
				close(f.stopped)
			}
		}
	}()
	return f
}

func decodeBatches(in <-chan []eventlog.Record, out chan<- decoded) {
	defer close(out)
	for recs := range in {
		d := decoded{records: recs, payloads: make([]eventlog.Payload, 0, len(recs))}
		for _, r := range recs {
			p, err := eventlog.Decode(r.Type, r.Data)
			if err != nil {
				d.err = &FoldError{Seq: r.Seq, Err: err}
				break
			}
			d.payloads = append(d.payloads, p)
		}
		out <- d
	}
}

// add takes the next record; it reports the applier's failure, which stops the walk.
func (f *fold) add(r eventlog.Record) error {
	f.batch = append(f.batch, r)
	if len(f.batch) < foldBatch {
		return nil
	}
	return f.flush()
}

func (f *fold) flush() error {
	if len(f.batch) > 0 {
		select {
		case f.decode[f.sent%2] <- f.batch:
			f.sent++
		case <-f.stopped:
			return f.err
		}
		f.batch = make([]eventlog.Record, 0, foldBatch)
	}
	select {
	case <-f.stopped:
		return f.err
	default:
		return nil
	}
}

// finish folds what is left and waits for the fold; it returns the fold's failure, if any.
func (f *fold) finish() error {
	_ = f.flush()
	close(f.decode[0])
	close(f.decode[1])
	<-f.done
	return f.err
}
