package eventlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
)

// Event is what a producer appends: the log assigns its seq, time and hash.
type Event struct {
	Stream string
	Type   string
	Data   []byte // JSON; the log keeps a reference until the append is done, do not modify it

	// encoded says NewEvent made Data with json.Marshal, so it is valid JSON without a check.
	encoded bool
	// job, set by AppendPayloadsAsync and AppendPayloadsTo for an event of a job's stream
	// (JobOf), names the stream "job/" + job in place of Stream, so that the append builds no
	// string for it.
	job string
}

// stream is the event's stream name.
func (e *Event) stream() streamName {
	if e.job != "" {
		return streamName{head: jobStreamPrefix, tail: e.job}
	}
	return nameOf(e.Stream)
}

// Receipt says where an append landed: the seqs of its first and last records and the chain
// hash of the last one. A client can later prove the append with it (tether replay receipt).
type Receipt struct {
	First, Last uint64
	Hash        Hash
	Time        time.Time // the time stamped on every record of the append
}

// Head is the last durable record's position in the chain. The empty log's head is
// {Seq: 0, Hash: Genesis}.
type Head struct {
	Seq  uint64
	Hash Hash
	Time time.Time // zero for the empty log
}

// Limits on what one append may carry.
const (
	EventsPerAppendMax = 10_000
	// batchBytesMax bounds one Pebble batch, well under Pebble's large-batch threshold (half the
	// memtable), so a batch is an ordinary WAL record plus memtable insert.
	batchBytesMax = 4 << 20
)

// Options configure Open. The zero value is ready for production use on the OS filesystem.
type Options struct {
	// FS is the filesystem; tests use vfs.NewMem, vfs.NewCrashableMem or errorfs.
	FS vfs.FS
	// Clock stamps records; the simulator injects its virtual clock. Default time.Now.
	Clock func() time.Time
	// Logger receives Pebble's log lines. Default: no logging.
	Logger *zap.Logger
	// ReadOnly opens the log for reading only: appends and checkpoints fail with ErrReadOnly.
	ReadOnly bool
	// PendingBytesMax bounds the bytes of appends accepted but not yet durable; producers wait
	// beyond it. Default 64 MiB.
	PendingBytesMax int
	// MemTableSize is Pebble's memtable size. Default 8 MiB: Pebble keeps four or more WALs
	// of about this size (the live ones and those it recycles), which is disk the hot log pays
	// for whatever it holds; under `tether bench` 64 MiB cost 204 MiB of WAL, 16 MiB 92 (68
	// with the WAL prefilled 2 MiB at a time), 8 MiB 36-62.
	MemTableSize uint64
	// WALPrefill is how many bytes of zeros are written and synced ahead of the WAL writer at a
	// time, so that a commit's fsync overwrites and need not update the file's size (prefill.go).
	// Default 2 MiB on the OS filesystem: a WAL that Pebble recycles keeps its prefilled size,
	// which 8 MiB made 24 MiB where 2 MiB makes it 10. Off on other filesystems, where it would
	// save nothing and its goroutine would make the simulator's runs depend on scheduling.
	// Negative turns it off.
	WALPrefill int64
	// ArchiveDir is where sealed archive segments live (archive.go); reads of records older than
	// the hot log's anchor go there. Empty: no archive, and records never leave the hot log.
	ArchiveDir string
	// Companions names files the owner of the directory keeps there beside the log (the
	// server's admin-token): a directory that holds only those is still an empty one to make a
	// log in.
	Companions []string
	// Upstream, if set, is the replicated log the records live in (upstream.go); the store in
	// dir is this server's copy of it. Open checks that the copy is a prefix of the upstream and
	// catches up. Ignored with ReadOnly, which reads the copy as it is.
	Upstream Upstream
	// Lead, with Upstream, makes this log the upstream's one writer: Open fences the upstream,
	// and every append expects the last message this log knows of. Without Lead the log is a
	// follower: it takes no appends, and Follow copies what the leader appends.
	Lead bool
	// Rand draws the nonce of the leader's fence; nil: crypto/rand. (The simulator's is
	// seeded.)
	Rand io.Reader
	// Sleep waits between tries when the upstream does not answer; nil: time.Sleep. (The
	// simulator's waits on its virtual clock.)
	Sleep func(time.Duration)
	// OnStorageFault, if set, is told of every write to the store that the file system refuses
	// for good (a StorageFault: read-only, full, failing) before the error goes back to
	// Pebble. Pebble cannot go on past some of them: it panics, past recovery, when it cannot
	// create or close a WAL, and retries a flush that failed for ever, logging each try. So
	// the server stops there: it logs the fault once and exits. It may be called from several
	// goroutines at once. Nil: the error goes on to Pebble, and fails the log where Pebble
	// lets it.
	OnStorageFault func(*StorageFault)
}

func (o *Options) setDefaults() {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Sleep == nil {
		o.Sleep = time.Sleep
	}
	if o.PendingBytesMax <= 0 {
		o.PendingBytesMax = 64 << 20
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = 8 << 20
	}
	if o.WALPrefill == 0 && o.FS == vfs.Default {
		o.WALPrefill = 2 << 20
	}
}

// Log is the append-only, hash-chained event log. It is safe for concurrent use.
type Log struct {
	db    *pebble.DB
	dir   string
	popts *pebble.Options // what SaveCheckpoint writes its tables with
	// ingestTables numbers the tables SaveCheckpoint writes to ingest.
	ingestTables atomic.Uint64
	// ingestScratch is the last checkpoint's memory for its keys, or nil while one is saved.
	ingestScratch atomic.Pointer[ingestScratch]
	lock          *pebble.Lock // held from Open to Close when the store existed before Open
	opts          Options
	stats         *logStats

	mu sync.Mutex
	// work is signalled when pending gets a request or the log starts closing; space when
	// pendingBytes shrinks or the log fails.
	work, space  *sync.Cond
	pending      []*appendReq
	pendingBytes int   // bytes accepted and not yet durable (pending and in flight)
	closing      bool  // Close was called; no new appends
	err          error // sticky: the first write or sync failure, wrapped in ErrFailed
	durable      Head  // INVARIANT: every record with seq <= durable.Seq is fsynced
	advanced     chan struct{}
	failed       chan struct{}
	// abandoned is set when a Pebble write panicked. Pebble may still hold its commit mutex
	// then, and DB.Close would wait for it forever, so Close leaves the store alone.
	abandoned atomic.Bool

	// anchor is the last archived record: the hot log in Pebble holds anchor.Seq+1..head. It is
	// raised before the archived records leave Pebble, so a reader never misses them.
	anchor Head
	// arch is the archive's segments; nil without Options.ArchiveDir.
	arch *archive
	// archiving serialises Archive and DropSegments.
	archiving sync.Mutex

	// next is the last sequenced (not necessarily durable) record; only the sequencer goroutine
	// touches it after Open.
	next Head

	toSync chan inflight // sequencer → syncer, in seq order
	done   chan struct{} // closed when the syncer exits
	stop   chan struct{} // closed when Close starts; ends Follow

	// batchMax bounds one batch: batchBytesMax, or less if the upstream takes smaller messages.
	batchMax int
	// applyMu serialises the copying of upstream messages; upApplied is the last one in the
	// local store. upNext is the last one the sequencer published (its goroutine's alone).
	applyMu   sync.Mutex
	upApplied uint64
	upNext    uint64
	// leads is set while the log is the upstream's writer: from Open with Options.Lead, or once
	// Lead has promoted a follower; promoted (under applyMu) from the moment Lead starts.
	leads    atomic.Bool
	promoted bool
	// upInFlight counts, under mu, the messages the sequencer published that have not settled
	// (landed, or failed the log); the syncer counts each down and signals settled. The
	// sequencer publishes the next message only when none is in flight, after the one it now
	// knows (doc.go, "One writer"). parked says what the sequencer waits for, if it waits
	// (Pipeline).
	upInFlight int
	settled    *sync.Cond
	parked     parking
	// inHand counts the batches the sequencer handed to the syncer that it has not finished.
	inHand int
	// afterBatch, if set, is called after the dones of each batch (AfterEachBatch).
	afterBatch func()
}

// parking is what the sequencer waits for, if anything.
type parking int

const (
	running        parking = iota
	parkedForWork          // an append
	parkedToSettle         // the upstream to settle its last message
)

// appendReq is one Append or AppendAsync call on its way through the pipeline.
type appendReq struct {
	events  []Event
	one     [1]Event // events' array for an append of one event (AppendPayloadsAsync)
	bytes   int
	receipt Receipt
	done    func(Receipt, error) // or, for AppendPayloadsTo, to
	to      AppendDone
	start   time.Time // when it was handed over, for the append latency
}

// tell calls the request's done, or tells its AppendDone.
func (r *appendReq) tell(rc Receipt, err error) {
	if r.to != nil {
		r.to.Done(rc, err)
		return
	}
	r.done(rc, err)
}

// inflight is a Pebble batch applied to the memtable and WAL whose fsync is not yet confirmed.
type inflight struct {
	batch *pebble.Batch
	reqs  []*appendReq
	head  Head
	bytes int
	// With an upstream: the batch is not applied yet; published waits for the upstream to
	// take message msg.
	published func() (uint64, error)
	msg       uint64
	payload   []byte
	sent      time.Time
}

// Open opens the log in dir, creating it if dir is missing or empty. It refuses a directory that
// holds something other than a tether log (ErrNotTetherLog), and a log whose last record does not
// chain from the one before it (ErrChainBroken).
func Open(dir string, opts Options) (*Log, error) {
	opts.setDefaults()
	l := &Log{opts: opts, stats: newLogStats()}
	base := opts.FS
	if opts.OnStorageFault != nil && !opts.ReadOnly {
		base = &faultFS{FS: base, fault: opts.OnStorageFault}
	}
	fs := countingFS{FS: base, stats: l.stats}
	if opts.WALPrefill > 0 && !opts.ReadOnly {
		fs.FS = prefillFS{FS: base, chunk: opts.WALPrefill}
	}
	if opts.ReadOnly {
		fs.FS = readOnlyLockFS{FS: base}
	}
	exists, err := checkDir(fs, dir, opts.ReadOnly, opts.Companions)
	if err != nil {
		return nil, err
	}
	var lock *pebble.Lock
	if exists {
		// Pebble would refuse a held store too, but with an error that does not say why; a
		// read-only open must refuse as well, because a server's store moves under it.
		if lock, err = pebble.LockDirectory(dir, fs); err != nil {
			if f, ok := AsStorageFault(err); ok {
				return nil, fmt.Errorf("eventlog: %s: %w", dir, f) // not another process: the disk
			}
			return nil, fmt.Errorf("%w: %s (is a tether server running on it?): %v", ErrInUse, dir, err)
		}
		l.lock = lock
	}
	popts := &pebble.Options{
		Lock:         lock,
		FS:           fs,
		Logger:       newPebbleLogger(opts.Logger.Named("pebble"), opts.Clock),
		ReadOnly:     opts.ReadOnly,
		MemTableSize: opts.MemTableSize,
	}
	for i := range popts.Levels {
		popts.Levels[i].Compression = func() *sstable.CompressionProfile { return hotLogCompression }
		popts.Levels[i].BlockSize = hotLogBlockSize
	}
	popts.Experimental.SpanPolicyFunc = keySpan // tables cut at spans (layout.go)
	// A checkpoint's table that overlaps no key of the store, only the bounds of a table in
	// the bottom level, goes into that level, the table split around it (checkpoint.go).
	popts.Experimental.IngestSplit = func() bool { return true }
	// Tables below L0 cut smaller than Pebble's, so a compaction rewrites less (layout.go).
	popts.TargetFileSizes[0], popts.TargetFileSizes[1] = l0TableSize, baseTableSize
	gate := newCompactionGate() // shut while Open runs (compactions.go)
	popts.Experimental.CompactionScheduler = gate
	popts.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy { return hotLogValueSeparation }
	if !opts.ReadOnly {
		// New stores get this Pebble's newest on-disk format. A read-only open must not ask
		// for it: ratcheting an older store's format is a write.
		popts.FormatMajorVersion = pebble.FormatNewest
	}
	db, err := pebble.Open(dir, popts)
	if err != nil {
		l.unlock()
		return nil, fmt.Errorf("eventlog: open %s: %w", dir, err)
	}
	l.db, l.dir, l.popts = db, dir, popts
	gate.release()
	if !opts.ReadOnly {
		l.removeIngestLeftovers()
	}
	if err := l.initFormat(); err != nil {
		_ = db.Close()
		l.unlock()
		return nil, err
	}
	if err := l.openArchive(); err != nil {
		_ = db.Close()
		l.unlock()
		return nil, err
	}
	head, err := l.recoverHead()
	if err != nil {
		l.arch.close()
		_ = db.Close()
		l.unlock()
		return nil, err
	}
	l.durable, l.next = head, head
	l.work, l.space = sync.NewCond(&l.mu), sync.NewCond(&l.mu)
	l.advanced, l.failed = make(chan struct{}), make(chan struct{})
	l.done, l.stop = make(chan struct{}), make(chan struct{})
	l.batchMax = batchBytesMax
	if opts.ReadOnly {
		close(l.done)
		return l, nil
	}
	if up := opts.Upstream; up != nil {
		l.batchMax = min(batchBytesMax, up.MaxPayload()-upstreamMessageSlack)
		ctx := context.Background()
		err := l.joinUpstream(ctx)
		if err == nil && opts.Lead {
			l.promoted = true
			err = l.lead(ctx)
		}
		if err != nil {
			l.arch.close()
			_ = db.Close()
			l.unlock()
			return nil, err
		}
		if !opts.Lead {
			return l, nil // no pipeline until Lead: Close closes done
		}
	}
	l.startPipeline()
	return l, nil
}

// startPipeline starts the sequencer and the syncer: the log takes appends from now on.
func (l *Log) startPipeline() {
	// The channel's capacity bounds how many batches may wait for their fsync; Pebble
	// group-commits those waits into as few fsyncs as the disk allows.
	l.toSync = make(chan inflight, 64)
	l.settled = sync.NewCond(&l.mu)
	l.leads.Store(l.opts.Upstream != nil)
	go l.sequence()
	go l.syncLoop()
}

// checkDir refuses a non-empty directory that holds no Pebble database, so that a mistyped
// --data flag never fills someone's home directory with Pebble files; companions do not count.
// It reports whether the directory holds a store already.
func checkDir(fs vfs.FS, dir string, readOnly bool, companions []string) (exists bool, err error) {
	names, err := fs.List(dir)
	names = slices.DeleteFunc(names, func(n string) bool { return slices.Contains(companions, n) })
	if err != nil || len(names) == 0 {
		switch {
		case readOnly && err != nil:
			return false, fmt.Errorf("%w: %s: %v", ErrNotTetherLog, dir, err)
		case readOnly:
			return false, fmt.Errorf("%w: %s is empty", ErrNotTetherLog, dir)
		}
		return false, nil // Pebble creates it, or reports why it cannot
	}
	desc, err := pebble.Peek(dir, fs)
	if err != nil {
		return false, fmt.Errorf("%w: %s: %v", ErrNotTetherLog, dir, err)
	}
	if !desc.Exists {
		return false, fmt.Errorf("%w: %s is not empty and holds no event log", ErrNotTetherLog, dir)
	}
	return true, nil
}

// unlock releases the directory lock Open took, once the store is closed.
func (l *Log) unlock() {
	if l.lock != nil {
		_ = l.lock.Close()
		l.lock = nil
	}
}

// initFormat checks the format marker, writing it into a brand-new store.
func (l *Log) initFormat() error {
	v, closer, err := l.db.Get([]byte(keyFormat))
	switch {
	case err == nil:
		marker := string(v)
		_ = closer.Close()
		if marker != formatMarker {
			return fmt.Errorf("%w: format marker %q, want %q", ErrNotTetherLog, marker, formatMarker)
		}
		return nil
	case !errors.Is(err, pebble.ErrNotFound):
		return fmt.Errorf("eventlog: read format marker: %w", err)
	}
	// No marker: only an empty store may become a log.
	it, err := l.db.NewIter(nil)
	if err != nil {
		return fmt.Errorf("eventlog: %w", err)
	}
	empty := !it.First()
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return fmt.Errorf("eventlog: %w", err)
	}
	if !empty || l.opts.ReadOnly {
		return fmt.Errorf("%w: the Pebble store has no tether format marker", ErrNotTetherLog)
	}
	return l.guard(func() error {
		return l.db.Set([]byte(keyFormat), []byte(formatMarker), pebble.Sync)
	})
}

// recoverHead finds the last record and checks that it chains from its predecessor, and that
// the first hot record chains from the anchor.
func (l *Log) recoverHead() (Head, error) {
	anchor := l.anchor
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte(prefixLog), UpperBound: logKeyEnd})
	if err != nil {
		return Head{}, fmt.Errorf("eventlog: %w", err)
	}
	defer it.Close()
	if !it.Last() {
		if err := it.Error(); err != nil {
			return Head{}, fmt.Errorf("eventlog: read head: %w", err)
		}
		return anchor, nil
	}
	last, err := decodeAt(it)
	if err != nil {
		return Head{}, err
	}
	if !it.First() {
		return Head{}, fmt.Errorf("eventlog: read the first hot record: %w", it.Error())
	}
	first, err := decodeAt(it)
	if err != nil {
		return Head{}, err
	}
	if first.Seq != anchor.Seq+1 || !first.ChainsFrom(anchor.Hash) {
		return Head{}, &ChainError{Seq: first.Seq, Reason: fmt.Sprintf("the first hot record does not chain from the anchor at seq %d", anchor.Seq)}
	}
	if last.Seq == first.Seq {
		return Head{Seq: last.Seq, Hash: last.Hash, Time: last.Time}, nil
	}
	if !it.Last() || !it.Prev() {
		return Head{}, &ChainError{Seq: last.Seq, Reason: fmt.Sprintf("seq %d is missing", last.Seq-1)}
	}
	before, err := decodeAt(it)
	if err != nil {
		return Head{}, err
	}
	if before.Seq != last.Seq-1 {
		return Head{}, &ChainError{Seq: last.Seq, Reason: fmt.Sprintf("seq %d is missing", last.Seq-1)}
	}
	if !last.ChainsFrom(before.Hash) {
		return Head{}, &ChainError{Seq: last.Seq, Reason: "the head record's hash does not match its contents"}
	}
	return Head{Seq: last.Seq, Hash: last.Hash, Time: last.Time}, nil
}

// decodeAt decodes the record under a log iterator and checks it against its key.
func decodeAt(it *pebble.Iterator) (Record, error) {
	seq, err := logKeySeq(it.Key())
	if err != nil {
		return Record{}, err
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return Record{}, fmt.Errorf("eventlog: read seq %d: %w", seq, err)
	}
	return decodeStored(seq, v)
}

// decodeStored decodes the value stored under log/<seq>; a value that does not decode, or that
// holds another seq, breaks the chain at seq.
func decodeStored(seq uint64, v []byte) (Record, error) {
	r, err := DecodeRecord(v)
	if err != nil {
		return Record{}, &ChainError{Seq: seq, Reason: err.Error()}
	}
	if r.Seq != seq {
		return Record{}, &ChainError{Seq: seq, Reason: fmt.Sprintf("record under key %d says seq %d", seq, r.Seq)}
	}
	return r, nil
}

// Append appends events atomically and returns once they are fsynced. If ctx ends first, Append
// returns ctx's error, but the events may still become durable: cancellation cannot withdraw
// them from the group commit they joined.
func (l *Log) Append(ctx context.Context, events ...Event) (Receipt, error) {
	if err := ctx.Err(); err != nil {
		return Receipt{}, err
	}
	type result struct {
		r   Receipt
		err error
	}
	ch := make(chan result, 1)
	l.AppendAsync(events, func(r Receipt, err error) { ch <- result{r, err} })
	select {
	case res := <-ch:
		return res.r, res.err
	case <-ctx.Done():
		return Receipt{}, ctx.Err()
	}
}

// AppendAsync hands events to the group commit without waiting. done is called exactly once:
// before AppendAsync returns if the events are invalid or the log is closed or failed;
// otherwise on the log's own goroutine, in seq order, once the events are fsynced or the
// append has failed. done must be quick and must not call the log's blocking methods.
// AppendAsync blocks only while the pending budget (Options.PendingBytesMax) is full.
//
// Successive AppendAsync calls from one goroutine are sequenced in call order. This is what
// lets an actor pipeline: decide, hand the events over, and take its next message at once.
func (l *Log) AppendAsync(events []Event, done func(Receipt, error)) {
	l.appendAsync(&appendReq{events: events, done: done})
}

// AppendPayloadsAsync is AppendAsync of catalogue payloads, each as an event of its own stream
// (NewEvent). An append of one event, the commonest (a submit, a lease, its end), takes one
// allocation for its request and its events together, where AppendAsync takes two.
func (l *Log) AppendPayloadsAsync(payloads []Payload, done func(Receipt, error)) {
	req := &appendReq{done: done}
	l.appendPayloads(req, payloads)
}

// AppendDone is told the outcome of an append made with AppendPayloadsTo, once, as
// AppendAsync's done is.
type AppendDone interface {
	Done(Receipt, error)
}

// AppendRequest is the memory of one append, which its caller provides (AppendPayloadsTo) in
// a struct of its own: an append then costs the caller's one allocation, where a done closure
// and the log's request are two. The log keeps it until it tells the outcome; it must not be
// handed to the log again.
type AppendRequest struct{ req appendReq }

// AppendPayloadsTo is AppendPayloadsAsync with the request in m and the outcome told to to.
func (l *Log) AppendPayloadsTo(m *AppendRequest, payloads []Payload, to AppendDone) {
	m.req = appendReq{to: to}
	l.appendPayloads(&m.req, payloads)
}

func (l *Log) appendPayloads(req *appendReq, payloads []Payload) {
	req.events = req.one[:0]
	if len(payloads) > len(req.one) {
		req.events = make([]Event, 0, len(payloads))
	}
	for _, p := range payloads {
		job, isJob := JobOf(p)
		stream := ""
		if !isJob || job == "" {
			stream = p.Stream()
		}
		e, err := NewEvent(stream, p)
		if err != nil {
			req.tell(Receipt{}, err)
			return
		}
		e.job = job
		req.events = append(req.events, e)
	}
	l.appendAsync(req)
}

func (l *Log) appendAsync(req *appendReq) {
	size, err := l.validate(req.events)
	if err != nil {
		req.tell(Receipt{}, err)
		return
	}
	l.mu.Lock()
	for l.err == nil && !l.closing && l.pendingBytes > 0 && l.pendingBytes+size > l.opts.PendingBytesMax {
		l.space.Wait()
	}
	switch {
	case l.err != nil:
		err = l.err
	case l.closing:
		err = ErrClosed
	}
	if err != nil {
		l.mu.Unlock()
		req.tell(Receipt{}, err)
		return
	}
	req.bytes, req.start = size, time.Now()
	l.pending = append(l.pending, req)
	l.pendingBytes += size
	if l.parked == parkedForWork {
		l.parked = running
	}
	l.work.Signal()
	l.mu.Unlock()
}

// Pipeline reports what the pipeline's goroutines are doing: whether the sequencer waits with
// nothing to do until someone else acts (for an append, or for the upstream to settle the
// message it published last), and how many batches the syncer has in hand. The simulator runs
// the goroutines one step at a time by waiting, between its own steps, until both wait on it.
func (l *Log) Pipeline() (sequencerWaits bool, inHand int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.parked != running, l.inHand
}

// waitSettled waits until the messages the sequencer published have settled (all but a few,
// in the planted bug that pipelines).
func (l *Log) waitSettled() {
	window := 1
	if mutantPipelinePublishes {
		window = 4
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.upInFlight >= window {
		l.parked = parkedToSettle
		l.settled.Wait()
	}
	l.parked = running
}

// validate checks the envelope rules and returns the encoded size of the events.
func (l *Log) validate(events []Event) (int, error) {
	switch {
	case l.opts.ReadOnly:
		return 0, ErrReadOnly
	case l.opts.Upstream != nil && !l.leads.Load():
		return 0, ErrFollower
	}
	if len(events) == 0 || len(events) > EventsPerAppendMax {
		return 0, fmt.Errorf("%w: %d events in one append, want 1..%d", ErrInvalidEvent, len(events), EventsPerAppendMax)
	}
	size := 0
	for i, e := range events {
		stream := e.stream()
		if err := checkStream(stream); err != nil {
			return 0, fmt.Errorf("event %d: %w", i, err)
		}
		if err := checkName("type", e.Type, TypeLenMax); err != nil {
			return 0, fmt.Errorf("event %d: %w", i, err)
		}
		if len(e.Data) > DataLenMax {
			return 0, fmt.Errorf("event %d: %w: data is %d bytes, limit %d", i, ErrInvalidEvent, len(e.Data), DataLenMax)
		}
		if !e.encoded && !json.Valid(e.Data) {
			return 0, fmt.Errorf("event %d: %w: data is not valid JSON", i, ErrInvalidEvent)
		}
		size += encodedLen(stream, e.Type, e.Data) + idxKeyLen(stream)
	}
	if size > l.opts.PendingBytesMax {
		return 0, fmt.Errorf("%w: append of %d bytes exceeds the pending limit %d", ErrInvalidEvent, size, l.opts.PendingBytesMax)
	}
	if l.opts.Upstream != nil && size > l.batchMax {
		return 0, fmt.Errorf("%w: append of %d bytes exceeds the upstream's message limit %d", ErrInvalidEvent, size, l.batchMax)
	}
	return size, nil
}

// checkStream is checkName of a stream's name, which may come in two parts.
func checkStream(s streamName) error {
	if s.tail == "" {
		return checkName("stream", s.head, StreamLenMax)
	}
	if n := s.len(); n > StreamLenMax {
		return fmt.Errorf("%w: stream must be 1..%d bytes, got %d", ErrInvalidEvent, StreamLenMax, n)
	}
	if err := checkName("stream", s.head, StreamLenMax); err != nil {
		return err
	}
	return checkName("stream", s.tail, StreamLenMax)
}

func checkName(what, s string, max int) error {
	switch {
	case s == "" || len(s) > max:
		return fmt.Errorf("%w: %s must be 1..%d bytes, got %d", ErrInvalidEvent, what, max, len(s))
	case !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: %s must be UTF-8 without NUL", ErrInvalidEvent, what)
	}
	return nil
}

// sequence is the first pipeline stage: it takes everything pending, assigns seqs, times and
// hashes, and applies it as one Pebble batch without waiting for the fsync, then hands the batch
// to the syncer. While the syncer waits on one fsync, the next batch is already being built.
func (l *Log) sequence() {
	defer close(l.toSync)
	for {
		if len(l.toSync) > 0 {
			// An fsync is under way, and whatever we apply now waits for the next one anyway:
			// let more producers run first, so it goes in one batch instead of many.
			runtime.Gosched()
		}
		if l.opts.Upstream != nil {
			// The next message goes once the one before it has settled, after it; it takes
			// everything that arrived meanwhile.
			l.waitSettled()
		}
		reqs, size, ok := l.take()
		if !ok {
			return
		}
		if err := l.Err(); err != nil {
			l.finish(reqs, size, err)
			continue
		}
		batch, head, payload := l.build(reqs)
		f := inflight{batch: batch, reqs: reqs, head: head, bytes: size}
		if l.opts.Upstream != nil {
			// The batch goes to the local copy once the upstream has the message.
			l.mu.Lock()
			l.upInFlight++
			l.mu.Unlock()
			f.published = l.opts.Upstream.Publish(l.upNext, payload)
			l.upNext++
			f.msg, f.payload, f.sent = l.upNext, payload, time.Now()
		} else if err := l.guard(func() error { return l.db.ApplyNoSyncWait(batch, pebble.Sync) }); err != nil {
			l.fail(err)
			l.finish(reqs, size, l.Err())
			continue
		}
		l.next = head
		l.mu.Lock()
		l.inHand++
		l.mu.Unlock()
		l.toSync <- f
	}
}

// take waits for pending requests and removes up to batchBytesMax of them (at least one).
// It reports false once the log is closing and nothing is left.
func (l *Log) take() ([]*appendReq, int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.pending) == 0 {
		if l.closing {
			return nil, 0, false
		}
		l.parked = parkedForWork
		l.work.Wait()
	}
	l.parked = running
	n, size := 0, 0
	for n < len(l.pending) && (n == 0 || size+l.pending[n].bytes <= l.batchMax) {
		size += l.pending[n].bytes
		n++
	}
	reqs := make([]*appendReq, n)
	copy(reqs, l.pending)
	rest := copy(l.pending, l.pending[n:])
	clear(l.pending[rest:])
	l.pending = l.pending[:rest]
	return reqs, size, true
}

// build encodes the requests' events into one Pebble batch, writing each record straight into
// the batch's memory. With an upstream it also returns the message: the records one after
// another.
func (l *Log) build(reqs []*appendReq) (*pebble.Batch, Head, []byte) {
	head := l.next
	now := l.opts.Clock().UnixNano()
	if last := head.Time.UnixNano(); !head.Time.IsZero() && now < last {
		now = last // the log's time never runs backwards, even when the clock does
	}
	stamp := time.Unix(0, now).UTC()
	batch := l.db.NewBatch()
	var payload []byte
	for _, r := range reqs {
		r.receipt.First, r.receipt.Time = head.Seq+1, stamp
		for _, e := range r.events {
			head.Seq++
			stream := e.stream()
			op := batch.SetDeferred(len(prefixLog)+8, encodedLen(stream, e.Type, e.Data))
			putLogKey(op.Key, head.Seq)
			head.Hash = encodeRecord(op.Value, head.Hash, head.Seq, now, stream, e.Type, e.Data)
			if l.opts.Upstream != nil {
				payload = append(payload, op.Value...)
			}
			_ = op.Finish()
			idx := batch.SetDeferred(idxKeyLen(stream), 0)
			putIdxKey(idx.Key, stream, head.Seq)
			_ = idx.Finish()
		}
		r.receipt.Last, r.receipt.Hash = head.Seq, head.Hash
	}
	head.Time = stamp
	if l.opts.Upstream != nil {
		_ = batch.Set([]byte(keyUpstream), upstreamPos(l.upNext+1, head.Seq), nil)
	}
	return batch, head, payload
}

// syncLoop is the second pipeline stage: it waits for each batch's fsync in order, publishes
// the new durable head, and only then completes the appends.
func (l *Log) syncLoop() {
	defer close(l.done)
	for f := range l.toSync {
		var err error
		if f.published != nil {
			err = l.settle(f)
		} else {
			err = f.batch.SyncWait()
		}
		_ = f.batch.Close()
		l.mu.Lock()
		if err != nil && l.err == nil {
			l.failLocked(err)
		}
		// A batch behind a failed one is never acknowledged, even if its own sync returned nil:
		// what is durable must stay a prefix of what was acknowledged.
		if err = l.err; err == nil {
			l.stats.batchEvents.observe(f.head.Seq - f.reqs[0].receipt.First + 1)
			l.advanceLocked(f.head)
		}
		if f.published != nil {
			l.upInFlight--
			if l.parked == parkedToSettle {
				l.parked = running
			}
			l.settled.Signal()
		}
		after := l.afterBatch
		l.mu.Unlock()
		l.finish(f.reqs, f.bytes, err)
		if after != nil {
			after()
		}
		l.mu.Lock()
		l.inHand--
		l.mu.Unlock()
	}
}

// settle waits for the upstream to take a batch's message, then writes the batch to the local
// copy. The local write is not synced: the upstream holds the records, and a copy that lost its
// tail catches up at the next Open.
func (l *Log) settle(f inflight) error {
	seq, err := f.published()
	if err != nil {
		seq, err = l.settlePublish(f.msg, f.payload, err)
	}
	switch {
	case err != nil:
		return fmt.Errorf("upstream: %w", err)
	case seq != f.msg:
		return fmt.Errorf("%w: the upstream took the batch as message %d, not %d", ErrFenced, seq, f.msg)
	case l.Err() != nil:
		return nil // never acknowledged; syncLoop reports the failure
	}
	l.stats.observeSync(f.sent)
	if err := l.guard(func() error { return l.db.Apply(f.batch, pebble.NoSync) }); err != nil {
		return err
	}
	l.applyMu.Lock()
	l.upApplied = f.msg
	l.applyMu.Unlock()
	return nil
}

// advanceLocked makes head the durable head and wakes its waiters; l.mu is held.
func (l *Log) advanceLocked(head Head) {
	l.durable = head
	close(l.advanced)
	l.advanced = make(chan struct{})
}

// AfterEachBatch sets f to be called on the log's goroutine after it has called the dones of
// the appends of one group commit (or of a batch that failed), so that a caller can act once
// per group: the cells runtime tells an actor of all its appends that one fsync made durable
// in one message. The dones of durable appends are all called on that goroutine. Call it
// before the first append.
func (l *Log) AfterEachBatch(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.afterBatch = f
}

// finish completes requests and returns their bytes to the pending budget.
func (l *Log) finish(reqs []*appendReq, size int, err error) {
	l.mu.Lock()
	l.pendingBytes -= size
	l.space.Broadcast()
	l.mu.Unlock()
	for _, r := range reqs {
		l.stats.appends.observeDuration(time.Since(r.start))
		if err != nil {
			r.tell(Receipt{}, err)
		} else {
			r.tell(r.receipt, nil)
		}
	}
}

// guard runs a Pebble write and turns a panic into an error. Pebble panics with the error itself
// when a commit meets a WAL that has already failed, and calls our Fatalf logger, which panics,
// when a commit fails; either way the store can take no more writes, and the caller fails the
// log.
func (l *Log) guard(write func() error) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		l.abandoned.Store(true)
		if e, ok := r.(error); ok {
			err = fmt.Errorf("pebble write: %w", e)
		} else {
			err = fmt.Errorf("pebble write: %v", r)
		}
	}()
	return write()
}

// fail records the first storage failure; from then on nothing more is acknowledged.
func (l *Log) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.failLocked(err)
	}
}

func (l *Log) failLocked(err error) {
	l.err = fmt.Errorf("%w: %w", ErrFailed, err)
	l.opts.Logger.Error("event log failed; no further appends will be acknowledged", zap.String("code", "EVENT_LOG_FAILED"),
		zap.Uint64("durable_seq", l.durable.Seq), zap.Error(err))
	close(l.failed)
	l.space.Broadcast()
}

// Err returns the failure that stopped the log, or nil.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Failed is closed when a write or fsync fails. The server watches it and stops.
func (l *Log) Failed() <-chan struct{} { return l.failed }

// Head returns the durable head.
func (l *Log) Head() Head {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.durable
}

// WaitDurable blocks until the record at seq is durable, the log fails, or ctx ends.
func (l *Log) WaitDurable(ctx context.Context, seq uint64) error {
	for {
		l.mu.Lock()
		durable, advanced, err := l.durable.Seq, l.advanced, l.err
		l.mu.Unlock()
		switch {
		case durable >= seq:
			return nil
		case err != nil:
			return err
		}
		select {
		case <-advanced:
		case <-l.failed:
		case <-l.done:
			return ErrClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops taking appends, commits what was already accepted, and closes the store.
// Appends accepted before Close complete normally; later ones get ErrClosed. After a failure
// that left Pebble unable to close, Close returns the failure and leaves the store to the
// process's exit.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closing = true
	if l.parked == parkedForWork {
		l.parked = running
	}
	l.work.Broadcast()
	l.space.Broadcast()
	follower := l.opts.Upstream != nil && !l.leads.Load() && !l.opts.ReadOnly
	l.mu.Unlock()
	close(l.stop)
	if follower {
		l.applyMu.Lock() // a Follow in the middle of a message finishes it
		close(l.done)
		l.applyMu.Unlock()
	}
	<-l.done
	if l.abandoned.Load() {
		return l.Err()
	}
	l.archiving.Lock() // an archiving step in progress finishes first
	defer l.archiving.Unlock()
	l.arch.close()
	err := l.guard(l.db.Close)
	l.unlock()
	return err
}

// The hot log is mostly records that differ in a few ids, nonces and hashes. Under `tether
// bench` at saturation, with --retain 1m --archive-after 1m, the tables held (log, index and
// views, per hot record, a minute in):
//
//	Snappy, 4 KiB blocks (at the end of a run)              262 B
//	Pebble's "balanced" profile (zstd 1, adaptive), 16 KiB  175-184 B
//	zstd 1 throughout, 16 KiB                               150 B
//	zstd 1 throughout, 32 KiB                               140 B
//
// The adaptive profile falls back to MinLZ for a block where zstd does not save a fifth more,
// which on these records it often does not quite: that cost a sixth of the tables. Blocks stay
// at 16 KiB because the server reads one on its commit path: each job.expired it applies reads
// the finished job from the views, and those blocks are rarely cached. With 32 KiB blocks
// those reads took a fifth of the server's CPU under the soak.
//
// Since values of 256 bytes or more are separated (layout.go), this profile and block size
// compress the records and view values once, in the blob files a flush writes, and the tables
// (keys and handles) at every level. That cost 2-4 % of disk (`tether bench`, one server, the
// data dir at the end: 40,000 jobs 56 → 57 MB, --fill 100000 83 → 86 MB) and took the zstd
// over cgo from about 47 to 13 µs per job.
var hotLogCompression = func() *sstable.CompressionProfile {
	p := *sstable.BalancedCompression
	p.Name = "tether-hot-log"
	p.AdaptiveReductionCutoffPercent = 0
	return &p
}()

const hotLogBlockSize = 16 << 10
