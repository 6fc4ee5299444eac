package eventlog

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"
)

// Upstream is a replicated log that holds the records when one machine is not enough: a NATS
// JetStream stream (package eventlog/jetstream). With Options.Upstream the Pebble store in the
// directory becomes this server's copy of it, and a record is durable once the upstream has
// acknowledged it, not once the local WAL is synced.
//
// The upstream holds messages numbered from 1 without gaps, never removed or renumbered. A
// message is one group commit: the encoded records of a batch, one after another, each with its
// hash, exactly as the local store keeps them. A leader's first message is a fence that carries
// no record (fencePayload).
//
// The acceptance rule, which the upstream itself applies: a message is stored only if the
// upstream's last message is the one numbered after. A leader publishes one message at a time,
// and after is always its own previous message, which the upstream has acknowledged: so a
// message is stored only directly after the message its writer last knew, never after another
// writer's (see doc.go, "One writer").
type Upstream interface {
	// Publish appends one message, which the upstream must refuse with ErrFenced unless its
	// last message is after (0: the upstream is empty). The returned wait blocks until the
	// message is durable (replicated and synced) and returns its number, or the reason it is
	// not, or that its fate is unknown (the answer was lost, or did not come within Patience):
	// then the log reads it back.
	Publish(after uint64, payload []byte) (wait func() (uint64, error))
	// Last returns the number of the upstream's last message, 0 when it is empty.
	Last(ctx context.Context) (uint64, error)
	// Get returns one message, ErrNotFound when there is none at seq.
	Get(ctx context.Context, seq uint64) ([]byte, error)
	// Read calls visit with every message from seq `from` on, in order, as they arrive, until
	// ctx ends or visit or the upstream fails.
	Read(ctx context.Context, from uint64, visit func(seq uint64, payload []byte) error) error
	// MaxPayload is the largest message the upstream takes.
	MaxPayload() int
	// Patience is the longest the log waits for any one answer of the upstream before it asks
	// again (maybe of another server of it): a publish's, a read's, the next message of a
	// catch-up. The server's is the leader TTL, so that a takeover never waits longer than
	// that on one request that went unanswered.
	Patience() time.Duration
}

var (
	// ErrFenced says another writer appended to the upstream after the last message this log
	// knew of: this server no longer leads, and its appends are refused.
	ErrFenced = errors.New("eventlog: another server appended to the upstream first; this one no longer leads")
	// ErrFollower is returned by appends to a log that follows an upstream it does not lead.
	ErrFollower = errors.New("eventlog: this copy follows the upstream and takes no appends")
	// ErrDiverged says the local copy holds what the upstream does not: it was made from
	// another stream, or the stream was reset. Move the directory away to make a new copy.
	ErrDiverged = errors.New("eventlog: the local copy does not match the upstream")
)

// keyUpstream holds where the local copy stands in the upstream: <message: 8> <record seq: 8>,
// both big-endian, written in the same batch as the message's records.
const keyUpstream = "meta/upstream"

// upstreamMessageSlack is what a message carries besides its records (the protocol's headers),
// kept out of the batch budget.
const upstreamMessageSlack = 4 << 10

// fenceMagic starts a fence message: 'F', then the head it was published at (seq 8, hash 32)
// and the nonce that names it (32). A record starts with its version byte, 0x01, so the two
// never mix.
const (
	fenceMagic = 'F'
	fenceLen   = 1 + 8 + hashLen + fenceNonceLen
	// fenceNonceLen is the fence's random part: two writers that fence at the same head still
	// publish fences with different IDs, so neither can follow the other's.
	fenceNonceLen = hashLen
)

func fencePayload(h Head, nonce [fenceNonceLen]byte) []byte {
	b := make([]byte, fenceLen)
	b[0] = fenceMagic
	binary.BigEndian.PutUint64(b[1:], h.Seq)
	copy(b[9:], h.Hash[:])
	copy(b[9+hashLen:], nonce[:])
	return b
}

// splitMessage returns the encoded records of a message, or the head a fence names.
func splitMessage(payload []byte) (records [][]byte, fence *Head, err error) {
	if len(payload) > 0 && payload[0] == fenceMagic {
		if len(payload) != fenceLen {
			return nil, nil, fmt.Errorf("%w: a fence of %d bytes", ErrCorruptRecord, len(payload))
		}
		h := Head{Seq: binary.BigEndian.Uint64(payload[1:])}
		copy(h.Hash[:], payload[9:])
		return nil, &h, nil
	}
	for rest := payload; len(rest) > 0; {
		if len(rest) < headerLen+hashLen {
			return nil, nil, fmt.Errorf("%w: %d bytes left in a message, shorter than a record", ErrCorruptRecord, len(rest))
		}
		n := headerLen + int(binary.BigEndian.Uint16(rest[offStreamLen:])) + int(binary.BigEndian.Uint16(rest[offTypeLen:])) +
			int(binary.BigEndian.Uint32(rest[offDataLen:])) + hashLen
		if n > len(rest) {
			return nil, nil, fmt.Errorf("%w: a record of %d bytes with %d left in the message", ErrCorruptRecord, n, len(rest))
		}
		records, rest = append(records, rest[:n]), rest[n:]
	}
	if len(records) == 0 {
		return nil, nil, fmt.Errorf("%w: an empty message", ErrCorruptRecord)
	}
	return records, nil, nil
}

func upstreamPos(msg, seq uint64) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, msg)
	binary.BigEndian.PutUint64(b[8:], seq)
	return b
}

// joinUpstream checks that the local copy is a prefix of the upstream and catches up with it.
// A leader then fences the upstream: see lead.
func (l *Log) joinUpstream(ctx context.Context) error {
	msg, seq := uint64(0), uint64(0)
	v, closer, err := l.db.Get([]byte(keyUpstream))
	switch {
	case err == nil:
		if len(v) == 16 {
			msg, seq = binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:])
		}
		_ = closer.Close()
	case !errors.Is(err, pebble.ErrNotFound):
		return fmt.Errorf("eventlog: read the upstream position: %w", err)
	}
	head := l.durable
	if seq != head.Seq {
		return fmt.Errorf("%w: the local log ends at seq %d but came from the upstream up to seq %d", ErrDiverged, head.Seq, seq)
	}
	if msg > 0 {
		var payload []byte
		err := l.untilAnswered(ctx, "reading the upstream", func() (err error) {
			payload, err = l.upstreamGet(ctx, msg)
			return err
		}, func(err error) bool { return errors.Is(err, ErrNotFound) || errors.Is(err, ErrClosed) })
		if errors.Is(err, ErrNotFound) {
			return fmt.Errorf("%w: the local copy came from message %d, which the upstream does not hold", ErrDiverged, msg)
		}
		if err != nil {
			return fmt.Errorf("eventlog: upstream: %w", err)
		}
		recs, fence, err := splitMessage(payload)
		if err != nil {
			return fmt.Errorf("eventlog: upstream message %d: %w", msg, err)
		}
		if fence == nil {
			last, err := DecodeRecord(recs[len(recs)-1])
			if err != nil {
				return fmt.Errorf("eventlog: upstream message %d: %w", msg, err)
			}
			fence = &Head{Seq: last.Seq, Hash: last.Hash}
		}
		if fence.Seq != head.Seq || fence.Hash != head.Hash {
			return fmt.Errorf("%w: the upstream's message %d ends at seq %d, the local copy at seq %d with another hash", ErrDiverged, msg, fence.Seq, head.Seq)
		}
	}
	l.upApplied = msg
	return l.catchUp(ctx)
}

// errCaughtUp stops a Read once it reached the message it was after.
var errCaughtUp = errors.New("caught up")

// catchUp copies the upstream's messages up to its last one at the time of the call, trying
// again for a while if the upstream does not answer (a NATS cluster electing leaders).
func (l *Log) catchUp(ctx context.Context) error {
	return l.untilAnswered(ctx, "catching up with the upstream", func() error { return l.catchUpOnce(ctx) }, func(err error) bool {
		var ce *ChainError
		return errors.As(err, &ce) || errors.Is(err, ErrFailed) || errors.Is(err, ErrClosed)
	})
}

// untilAnswered runs op until it succeeds, fails for good (final), ctx ends, or op has failed
// upstreamTries times, upstreamRetryWait apart: an upstream that does not answer may be
// electing or reconnecting.
func (l *Log) untilAnswered(ctx context.Context, what string, op func() error, final func(error) bool) error {
	for try := 1; ; try++ {
		err := op()
		if err == nil || final(err) || ctx.Err() != nil || try >= upstreamTries {
			return err
		}
		l.opts.Logger.Warn(what+" failed; trying again", zap.String("code", "UPSTREAM_RETRY"), zap.Error(err))
		l.opts.Sleep(upstreamRetryWait)
	}
}

// upstreamGet reads one message, waiting at most the upstream's patience for the answer.
func (l *Log) upstreamGet(ctx context.Context, seq uint64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, l.opts.Upstream.Patience())
	defer cancel()
	return l.opts.Upstream.Get(ctx, seq)
}

// errStalled ends a catch-up's read whose next message did not come within the upstream's
// patience, although the upstream holds it: the read is made again, maybe through another
// server, rather than waited on.
var errStalled = errors.New("the upstream did not deliver a message it holds in time")

func (l *Log) catchUpOnce(ctx context.Context) error {
	up := l.opts.Upstream
	patience := up.Patience()
	asked, cancel := context.WithTimeout(ctx, patience)
	last, err := up.Last(asked)
	cancel()
	if err != nil {
		return fmt.Errorf("eventlog: upstream: %w", err)
	}
	if last <= l.upApplied {
		return nil
	}
	reading, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	stall := time.AfterFunc(patience, func() { stop(errStalled) })
	defer stall.Stop()
	err = up.Read(reading, l.upApplied+1, func(seq uint64, payload []byte) error {
		stall.Reset(patience) // every message is due: each gets the patience anew
		if err := l.applyMessage(seq, payload); err != nil {
			return err
		}
		if seq >= last {
			return errCaughtUp
		}
		return nil
	})
	switch {
	case errors.Is(err, errCaughtUp):
		return nil
	case ctx.Err() == nil && errors.Is(context.Cause(reading), errStalled):
		return fmt.Errorf("eventlog: upstream: catching up to message %d of %d: %w (%s)", l.upApplied+1, last, errStalled, patience)
	}
	return err
}

// A leader keeps trying to learn whether a message it published landed, or to catch up, for
// upstreamTries tries upstreamRetryWait apart (15 s and more: each try may wait for its answer
// too), through a NATS server going away and the client reconnecting to another.
const (
	upstreamTries     = 150
	upstreamRetryWait = 100 * time.Millisecond
)

// settlePublish finds out what became of message msg, whose publish failed with err, and
// publishes it again if it did not land. A publish that fails may still have landed (the
// acknowledgement was lost with the connection), and a message published behind one that had
// not landed yet is refused as if fenced; so rather than trust the error, it reads the
// message: its own payload there means it landed, another payload that another writer fenced
// the upstream, and none that the message may go again, after the same message as before (the
// acceptance rule is the same for the retry: a retry never follows anything else).
func (l *Log) settlePublish(msg uint64, payload []byte, err error) (uint64, error) {
	up := l.opts.Upstream
	for try := 1; try <= upstreamTries; try++ {
		if l.Err() != nil {
			return 0, err
		}
		there, gerr := l.upstreamGet(context.Background(), msg)
		switch {
		case gerr == nil && bytes.Equal(there, payload):
			return msg, nil
		case gerr == nil:
			return 0, fmt.Errorf("%w: message %d is another writer's", ErrFenced, msg)
		case errors.Is(gerr, ErrClosed):
			return 0, gerr
		case errors.Is(gerr, ErrNotFound):
			seq, perr := up.Publish(msg-1, payload)()
			if perr == nil {
				return seq, nil
			}
			err = perr // refused as fenced, too: read it back, another writer's may be there now
		default:
			err = gerr
		}
		l.opts.Logger.Warn("an upstream publish is unsettled; trying again", zap.String("code", "UPSTREAM_RETRY"),
			zap.Uint64("message", msg), zap.Error(err))
		l.opts.Sleep(upstreamRetryWait) // the client is reconnecting; nothing signals it here
	}
	return 0, err
}

// lead fences the upstream: it publishes a fence at the head it caught up to, after the last
// message it copied. Once the fence is in, an append by anyone who led before is refused,
// since it follows that writer's own last message, which is no longer the last. If another
// server appended meanwhile, lead copies that too and tries again.
func (l *Log) lead(ctx context.Context) error {
	rng := l.opts.Rand
	if rng == nil {
		rng = rand.Reader
	}
	for attempt := 1; ; attempt++ {
		var nonce [fenceNonceLen]byte
		if _, err := io.ReadFull(rng, nonce[:]); err != nil {
			return fmt.Errorf("eventlog: the fence's nonce: %w", err)
		}
		payload := fencePayload(l.durable, nonce)
		seq, err := l.opts.Upstream.Publish(l.upApplied, payload)()
		if err != nil {
			seq, err = l.settlePublish(l.upApplied+1, payload, err)
		}
		switch {
		case err == nil:
			if err := l.applyMessage(seq, payload); err != nil {
				return err
			}
			l.upNext = seq
			return nil
		case errors.Is(err, ErrFenced) && attempt < 10:
			if err := l.catchUp(ctx); err != nil {
				return err
			}
		default:
			return fmt.Errorf("eventlog: fence the upstream: %w", err)
		}
	}
}

// MessageRecord is a record of an upstream message, with its encoding.
type MessageRecord struct {
	Record
	raw []byte
}

// ContinueChain checks that upstream message number seq continues the chain at head: a fence
// must name head, and records must follow it one by one, each chained from the one before. It
// returns the message's records and the head after them. Every copy of an upstream applies
// messages by this rule, and the simulator's stream checks every message it stores by it.
func ContinueChain(seq uint64, head Head, payload []byte) ([]MessageRecord, Head, error) {
	recs, fence, err := splitMessage(payload)
	if err != nil {
		return nil, head, fmt.Errorf("eventlog: upstream message %d: %w", seq, err)
	}
	if fence != nil && (fence.Seq != head.Seq || fence.Hash != head.Hash) {
		return nil, head, &ChainError{Seq: head.Seq + 1, Reason: fmt.Sprintf("upstream message %d fences at seq %d, the log's head is %d", seq, fence.Seq, head.Seq)}
	}
	out := make([]MessageRecord, 0, len(recs))
	for _, raw := range recs {
		r, err := DecodeRecord(raw)
		if err != nil {
			return nil, head, fmt.Errorf("eventlog: upstream message %d: %w", seq, err)
		}
		if r.Seq != head.Seq+1 || !r.ChainsFrom(head.Hash) || r.Time.Before(head.Time) {
			return nil, head, &ChainError{Seq: head.Seq + 1, Reason: fmt.Sprintf("upstream message %d holds seq %d, which does not continue the chain", seq, r.Seq)}
		}
		out = append(out, MessageRecord{Record: r, raw: raw})
		head = Head{Seq: r.Seq, Hash: r.Hash, Time: r.Time}
	}
	return out, head, nil
}

// applyMessage writes one upstream message into the local copy and makes its records durable.
// The records must continue the local chain; a fence must name the local head.
func (l *Log) applyMessage(seq uint64, payload []byte) error {
	l.applyMu.Lock()
	defer l.applyMu.Unlock()
	return l.applyLocked(seq, payload)
}

// errLeading ends a Follow once Lead has taken over the copying.
var errLeading = errors.New("eventlog: this copy leads the upstream now")

// followMessage is applyMessage for Follow, which stops at the first message after Lead.
func (l *Log) followMessage(seq uint64, payload []byte) error {
	l.applyMu.Lock()
	defer l.applyMu.Unlock()
	if l.promoted {
		return errLeading
	}
	return l.applyLocked(seq, payload)
}

func (l *Log) applyLocked(seq uint64, payload []byte) error {
	select {
	case <-l.done:
		return ErrClosed
	default:
	}
	if seq != l.upApplied+1 {
		return fmt.Errorf("%w: upstream message %d follows message %d", ErrChainBroken, seq, l.upApplied)
	}
	recs, head, err := ContinueChain(seq, l.Head(), payload)
	if err != nil {
		return err
	}
	batch := l.db.NewBatch()
	defer batch.Close()
	for _, r := range recs {
		_ = batch.Set(logKey(r.Seq), r.raw, nil)
		_ = batch.Set(idxKey(r.Stream, r.Seq), nil, nil)
	}
	_ = batch.Set([]byte(keyUpstream), upstreamPos(seq, head.Seq), nil)
	if err := l.guard(func() error { return l.db.Apply(batch, pebble.NoSync) }); err != nil {
		l.fail(err)
		return l.Err()
	}
	l.upApplied = seq
	l.mu.Lock()
	l.next = head
	l.advanceLocked(head)
	l.mu.Unlock()
	return nil
}

// Follow copies what the leader appends to the upstream into this follower's copy as it
// arrives, until ctx ends, the log closes, Lead promotes it (then it returns nil, whether Lead
// came before or during it), or the copy itself fails. Readers and subscriptions see each
// message once it is copied: it is durable in the upstream.
//
// A failure of the upstream's read (a timeout, a lost connection, this process paused past a
// deadline) is not the copy's: Follow reads again from its next message after a pause that
// doubles up to followRetryMax, and logs each retry (FOLLOW_RETRY). Only what the copy cannot
// take ends it: a message that breaks the chain or a gap (ErrChainBroken), or the local
// store's failure.
func (l *Log) Follow(ctx context.Context) error {
	if l.opts.Upstream == nil || l.opts.Lead || l.opts.ReadOnly {
		return errors.New("eventlog: Follow needs a log opened on an upstream without Lead")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-l.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	pause := followRetryMin
	for {
		l.applyMu.Lock()
		from, promoted := l.upApplied+1, l.promoted
		l.applyMu.Unlock()
		if promoted {
			return nil // Lead came first: the copying is its own now
		}
		var copyErr error
		copied := false
		err := l.opts.Upstream.Read(ctx, from, func(seq uint64, payload []byte) error {
			if copyErr = l.followMessage(seq, payload); copyErr == nil {
				copied = true
			}
			return copyErr
		})
		if ctx.Err() != nil || errors.Is(err, errLeading) {
			return nil
		}
		if copyErr != nil || errors.Is(err, ErrChainBroken) {
			return err
		}
		if copied {
			pause = followRetryMin
		}
		l.opts.Logger.Warn("reading the upstream failed; reading again", zap.String("code", "FOLLOW_RETRY"),
			zap.Uint64("from_seq", from), zap.Duration("after", pause), zap.Error(err))
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil
		}
		pause = min(2*pause, followRetryMax)
	}
}

// followRetryMin and followRetryMax bound Follow's pause between reads of an upstream that
// failed: short enough that a standby whose process was paused is following again at once,
// long enough not to hammer an upstream that is down.
const (
	followRetryMin = 50 * time.Millisecond
	followRetryMax = 5 * time.Second
)

// Lead makes a follower the upstream's writer in place, as Open with Options.Lead would: it
// stops Follow, catches up, fences the upstream, and takes appends from then on. Readers,
// subscriptions and views of the copy carry over, so a standby that wins the election keeps
// the projections it folded instead of reopening and rebuilding them. If Lead fails, the log
// follows no more; close it.
func (l *Log) Lead(ctx context.Context) error {
	if l.opts.Upstream == nil || l.opts.ReadOnly {
		return errors.New("eventlog: Lead needs a log opened on an upstream")
	}
	l.applyMu.Lock()
	already := l.promoted // Open with Lead sets it too
	l.promoted = true     // Follow applies nothing more: from here the copying is this goroutine's
	l.applyMu.Unlock()
	if already {
		return errors.New("eventlog: Lead called twice, or on a log that leads")
	}
	if err := l.catchUp(ctx); err != nil {
		return err
	}
	if err := l.lead(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		return ErrClosed
	}
	l.startPipeline()
	return nil
}

// Lag is how far a copy is behind its upstream.
type Lag struct {
	// Records are the records the upstream holds past the copy.
	Records uint64
	// Behind is how much older the copy's newest record is than the upstream's: 0 when the
	// copy holds every record.
	Behind time.Duration
}

// UpstreamLag asks the upstream how far this copy is behind it: the number of its last
// message, and the head that message ends at (a record's seq and time, or the head a fence
// names; then the time of the records before it). It waits at most the upstream's patience
// for each answer.
func (l *Log) UpstreamLag(ctx context.Context) (Lag, error) {
	up := l.opts.Upstream
	if up == nil {
		return Lag{}, errors.New("eventlog: UpstreamLag needs a log on an upstream")
	}
	l.applyMu.Lock()
	applied := l.upApplied
	l.applyMu.Unlock()
	head := l.Head()
	asked, cancel := context.WithTimeout(ctx, up.Patience())
	last, err := up.Last(asked)
	cancel()
	if err != nil || last <= applied {
		return Lag{}, err
	}
	var lag Lag
	// The last message's head; a fence names one but carries no time, so a few messages back
	// (a fence follows records, or another fence that the same takeover retried) for it.
	for msg := last; msg > applied && msg+3 > last; msg-- {
		payload, err := l.upstreamGet(ctx, msg)
		if err != nil {
			return Lag{}, err
		}
		recs, fence, err := splitMessage(payload)
		if err != nil {
			return Lag{}, fmt.Errorf("eventlog: upstream message %d: %w", msg, err)
		}
		if fence != nil {
			if msg == last && fence.Seq > head.Seq {
				lag.Records = fence.Seq - head.Seq
			}
			continue
		}
		r, err := DecodeRecord(recs[len(recs)-1])
		if err != nil {
			return Lag{}, fmt.Errorf("eventlog: upstream message %d: %w", msg, err)
		}
		if msg == last && r.Seq > head.Seq {
			lag.Records = r.Seq - head.Seq
		}
		if r.Time.After(head.Time) {
			lag.Behind = r.Time.Sub(head.Time)
		}
		break
	}
	return lag, nil
}
