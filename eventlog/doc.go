// Package eventlog is tether's append-only, hash-chained event log on Pebble, and the catalogue
// of events it holds. Every state change in tether is a record here; every view is a fold of it.
//
// # Records
//
// A record is an event (stream, type, JSON data) that the log has given a seq (global, gap-free,
// from 1), a time (the server clock when it was sequenced, never decreasing along the log) and a
// hash. Its encoding, format version 1, all integers big-endian:
//
//	offset  size  field
//	     0     1  version = 0x01
//	     1     8  seq
//	     9     8  time, Unix nanoseconds (two's complement)
//	    17     2  S = len(stream)           1..256
//	    19     2  T = len(type)             1..128
//	    21     4  D = len(data)             0..4 MiB
//	    25     S  stream, UTF-8, no NUL
//	  25+S     T  type, UTF-8, no NUL
//	25+S+T     D  data, JSON
//	25+S+T+D  32  hash
//
// The body is every byte before the hash. The hash is the chain:
//
//	hash(1) = SHA-256(Genesis  || body(1))
//	hash(n) = SHA-256(hash(n-1) || body(n))
//	Genesis = SHA-256("tether/eventlog/genesis/v1")
//
// so the hash of the head commits to every record before it, and a receipt {seq, hash} proves a
// record is in the log. Changing any byte of any record, dropping one, or reordering two breaks
// every hash from there on; Verify names the first bad seq.
//
// # Keys in Pebble
//
//	meta/format                      "tether.eventlog.v1"; written once, when the store is created
//	meta/anchor                      <seq: 8> <time: 8> <hash: 32>: the last archived record;
//	                                 absent until the first archiving ({0, Genesis})
//	meta/archive-floor               the anchor's layout: the last record of the segments
//	                                 --archive-keep deleted; absent until the first deletion
//	log/ <seq: 8 bytes BE>           the encoded record, hash included
//	idx/ <stream> 0x00 <seq: 8 BE>   empty; one per record, for reading a stream in order
//	ckpt/<name>                      <seq: 8 BE> <hash of record seq: 32> <snapshot bytes>
//	view/<key>                       a projection's table on disk (finished jobs and their
//	                                 indexes); its keys and values are the projection's
//	meta/upstream                    <message: 8> <seq: 8>: with an upstream, its last message
//	                                 that this copy holds, and the seq that message ends at
//
// INVARIANT: the log/ keys are exactly anchor+1..head, each holding the record of that seq, and
// the first of them chains from the anchor's hash.
// INVARIANT: every record 1..anchor is in a sealed segment that was verified before the batch
// that moved the anchor past it, unless --archive-keep (up to the floor) or an operator deleted
// it, and then only the oldest: the segments here run without a gap, each chaining from the one
// before, from the oldest here to the anchor. A log that may be written to does not open
// otherwise (ErrArchiveBroken); every read of a record no segment holds is a *GapError.
// INVARIANT: the floor is synced before the segment it names is removed.
// INVARIANT: a record and its idx/ key are written in the same Pebble batch.
// INVARIANT: a checkpoint's hash is the hash of the record at its seq.
// INVARIANT: the view/ keys change only in the one ingestion that saves a checkpoint
// (SaveCheckpoint: the checkpoint's key and its view writes, as tables taken in together), so
// they always cover exactly the records that the newest checkpoint covers.
// INVARIANT: records are written to Pebble's WAL in seq order, so what survives a crash is a
// prefix of the log.
//
// # Tables
//
// The keys are laid out for a log that is written once and read rarely (layout.go). Pebble cuts
// every table it writes at the end of a span: ckpt/, log/ and meta/ are one span each, idx/
// one per kind of stream (idx/job/, idx/worker/, ...), view/ one per first byte of a view key.
// Each span is appended at one end or a few (log/ at the head, idx/job/ and view/j at the
// newest jobs), so a flushed table overlaps only the last tables of its span below it, and a
// compaction leaves the rest of the log where it is. The tables below L0 are cut at 1 MiB in
// the base level (twice that a level down), a quarter of Pebble's size: idx/job/ is not
// appended at one end only, since every record of a job goes beside its first, and under a
// backlog each compaction rewrote the one table that held all of it (layout.go).
//
// A checkpoint's view writes do not pass through L0 when they need not (checkpoint.go). They
// are written as tables cut at the spans and, within a span, wherever the store holds a key
// between two of them: what a checkpoint adds past everything an index held (view/j, each of
// List's indexes, which share the span view/l, view/d) is a table that overlaps nothing, and
// Pebble puts it in the bottom level as it is, splitting the table there whose bounds (not
// keys) it falls within. Only the rest (late jobs, deletes, what a checkpoint replaces) goes
// into L0 in small tables, and a compaction merges each with the few tables it overlaps, not
// with a whole index. So what a checkpoint costs the disk does not grow with the history the
// views hold.
//
// Values of 256 bytes or more (records, view values) are separated: a flush writes them to a
// blob file beside its table, one blob file per table and so per span, and the table keeps a
// handle. Compactions move keys and handles; a record's bytes are compressed once (zstd, in the
// blob file) and rewritten only when Pebble rewrites a blob file that is spread too thin or
// mostly garbage. Archiving a run of records drops their tables' handles and, with them, whole
// blob files. Checkpoints and meta/ keep their values in their tables: a checkpoint is replaced
// at every save.
//
// None of this changes what a crash keeps. A checkpoint's tables, however many, go in one
// ingestion, which Pebble applies as one MANIFEST edit after syncing every table: a crash
// leaves all of them (the checkpoint and its view writes) or none, as with one table. The key
// layout itself did not change with the cuts, so a store of any earlier build opens as it is,
// and its tables are cut anew as compactions rewrite them. Every batch still goes whole into
// Pebble's WAL, with the records in it, and the rules below are about the WAL alone; a flush
// syncs its tables and blob files before the MANIFEST names them, and the WAL it replaces is
// removed only after that. Blob files need Pebble's format FormatValueSeparation: a store is opened
// for writing at FormatNewest (which is that), so an older store is ratcheted up at its first
// writable open; a read-only open reads it at the format it has.
//
// No compaction runs while Open runs (compactions.go): pebble.Open flushes what it replays from
// the WAL and then waits for every compaction running, so after a crash under load it used to
// finish the interrupted compaction of the base level before the log could be read. The
// compactions start once Open has returned; what they do, and what a crash keeps, is unchanged.
//
// # Ordering rules
//
//  1. Nothing is acknowledged before it is fsynced: Append returns, and AppendAsync's callback
//     (AppendPayloadsTo's AppendDone) runs, only after the fsync that covers the records has
//     returned without error.
//  2. Group commit: a single sequencer goroutine takes everything pending (up to 4 MiB) as one
//     Pebble batch, assigns seqs and hashes, and applies it without waiting for its fsync; Pebble
//     covers every batch whose WAL write finished by the time an fsync starts with that one
//     fsync. A syncer goroutine waits for each batch's fsync in seq order and only then
//     publishes and acknowledges it.
//     While an fsync is under way the sequencer yields once before it takes, so that what
//     arrives meanwhile goes into one batch rather than many.
//  3. Readers see only durable records. Pebble makes a batch readable before its fsync; every
//     read here is bounded by the durable head, which moves only after the fsync.
//  4. A failed write or fsync fails that batch and every later one, including batches whose own
//     fsync appeared to succeed, and the log refuses all further appends (ErrFailed). Failed is
//     closed so the server can stop: after a failed fsync the kernel may have dropped the dirty
//     pages, and only a restart that reads back what is really on disk is safe.
//  5. Appends from one goroutine are sequenced in call order, so an actor may pipeline: apply
//     its events to its own state, hand them over, and go on, as long as it waits for the
//     callback before anything that others can see.
//
// # Archive segments
//
// Records older than the server needs leave the hot log for sealed segment files in the
// archive directory (archive.go), one per run of records first..last, named
// seg-<first: 20 digits>-<last: 20 digits>.tseg. A segment, all integers big-endian:
//
//	frames        zstd frames, each of the records' bodies (the record without its hash), every
//	              body preceded by its length as a uvarint; a frame is cut at 256 KiB of bodies
//	frame table   per frame: first seq (8), offset in the file (8), chain hash before it (32)
//	stream table  per record, sorted: FNV-1a 64 of its stream (8), seq - first (4)
//	trailer       "TSEG\0v1\0", first, last, first time, last time (8 each), anchor hash (32),
//	              end hash (32), frame count (4), frame table offset (8), stream table offset (8)
//	checksum      SHA-256 of every byte before it (32)
//
// The hashes are not stored: a reader recomputes them from the anchor (or a frame's hash), so a
// segment costs its compressed bodies and 12 bytes of stream table per record. Archiving is
// two steps. SealSegment writes the segment to a .tmp file, syncs it, renames it, syncs the
// directory, and reads it back and verifies all of it against the hot log; CommitSegment then
// moves the anchor, DeleteRanges the log/ keys and deletes the idx/ keys in one synced batch.
// In-memory readers are sent to the segment before the batch, and a hot read that finds its
// record gone looks again at the anchor. At Open, a .tmp file is removed and a segment past the
// anchor whose records the hot log still holds (a step that did not commit) is removed.
//
// Open reads each segment's trailer only, so that it costs the same whatever the segments
// hold; a read checks a segment's checksum the first time it opens it. ScrubSegment reads one
// whole against its checksum at the pace its caller sets, for a scrub in the background (the
// broker's), which finds a damaged segment before a read does.
//
// # On an upstream
//
// With Options.Upstream (upstream.go) the records live in a replicated log, a JetStream stream,
// and the store here is this server's copy of it. Rule 1 then reads "durable" as "acknowledged
// by the upstream": the sequencer publishes each batch as one message, and the syncer waits for
// the acknowledgement, then writes the batch to Pebble without an fsync. So the copy is always a
// prefix of the upstream; a copy that lost its tail in a crash catches up at Open, and one that
// holds what the upstream does not is refused (ErrDiverged). A follower (no Lead) takes no
// appends and copies the leader's messages as they land (Follow). Log.Lead promotes a follower
// in place: Follow stops at its next message, the copy catches up and fences as Open with Lead
// would, and readers, subscriptions and views carry over, so a standby that wins the election
// keeps the projections it folded.
//
// # One writer
//
// The upstream stores a message only if its last message is the one the message names (after,
// a number: Nats-Expected-Last-Sequence). The leader keeps one message in flight: it publishes a
// message only once the one before it has settled, and names that one, which it knows is in the
// upstream because the upstream acknowledged it (or it read it back there). The next batch
// takes everything that arrived while the message was in flight, so one message at a time costs
// no throughput: the messages grow instead (group commit, rule 2).
//
// The rule, then: a message of writer W is stored only directly after W's own last stored
// message. Since numbers are never reused (the stream denies deletes and purges), "the last
// message is number p" and "message p is W's" together say "the last message is W's".
//
// A new leader B catches up to the upstream's last message c and publishes a fence after c: a
// message that carries no record, names the head it was published at, and a nonce of its own,
// so that no other fence is byte for byte the same. If anything landed after c meanwhile, the
// fence is refused, and B catches up and tries again.
//
// Why no message of a deposed leader A lands after B's fence: A's message m names A's last
// stored message p, which was stored before m was published. Once B's fence is stored, at f,
// everything stored before it has a lower number, so p < f, and the last message is at least f
// for ever: m is refused, however late it arrives, and so is every retry of m, which names p
// again. A publishes nothing after m until m settles, and m settles as refused: A's log fails
// with ErrFenced and it acknowledges nothing more. (If m lands before B's fence, the fence,
// which names the message B caught up to, is refused, and B catches up past m.) In every
// interleaving of A's in-flight and retried message with B's fence and appends, each message in
// the upstream follows the writer's own last message, so the records continue the chain
// (eventlogtest.DeposedWriter checks every such interleaving up to a bound, on a model and on
// real one- and three-node JetStream clusters, and the simulator checks it under faults).
//
// A number a pipelined writer predicts is not such a rule: with k messages in flight, A's k-th
// names p+k-1, which is B's own (k-1)-th message once B has appended that many, and lands after
// it, chained from records the upstream never got (the planted bug mutantPipelinePublishes).
// Nats-Expected-Last-Msg-Id would be exact, but JetStream 2.15 checks it only as each replica
// applies a message, and a replicated stream whose replicas refuse a message there stops
// (a "critical write error"): a deposed leader's refused publish would take the stream down.
//
// A publish whose answer was lost (a NATS server went away) or did not come within the
// upstream's Patience is settled by reading message p+1 back: its own payload there means it
// landed; another writer's, that it was fenced; none, that it may go again after p. No read on
// the way to lead (the last message's number, a message, the next message of a catch-up)
// waits longer than Patience either: it is asked again.
//
// # Opening
//
// Open creates a log in a missing or empty directory. It refuses a non-empty directory without a
// Pebble store and a Pebble store without the format marker (ErrNotTetherLog), and a store whose
// last record does not chain from the one before it (ErrChainBroken). Verify checks the rest.
package eventlog
