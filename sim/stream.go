package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/tetherhq/tether/eventlog"
)

// The replicated log (docs/design.md §10) as the simulator models it: a JetStream stream, with the
// rule the real server applies, and the log of each server process on it through a link that
// the network delays, loses, and cuts.
//
// The stream takes a publish that names message after only if after is its last message,
// counting the publishes it has accepted and not yet stored, as a replicated stream's leader
// does (Nats-Expected-Last-Sequence, checked against its proposals); it stores what it took a
// raft round later, and answers. A publish may arrive late (delayed, or held while its server
// was cut off from NATS), its answer may be lost, and while the stream elects a raft leader of
// its own it answers nothing. Every message it stores must continue the chain
// (eventlog.ContinueChain); every record it stores is folded into the oracle.

// natsModel is the simulated NATS cluster: the stream and the election's bucket.
type natsModel struct {
	s    *Sim
	msgs [][]byte
	// proposed counts the publishes taken and not yet stored: the stream's leader checks a
	// publish's after against len(msgs)+proposed.
	proposed int
	head     eventlog.Head // the chain's head after the stored messages
	// streamDown and kvDown: the stream (the bucket) answers nothing until then (a raft
	// leader lost, and another being elected).
	streamDown, kvDown time.Time
	kv                 kvModel
}

func newNATS(s *Sim) *natsModel { return &natsModel{s: s, head: eventlog.Head{Hash: eventlog.Genesis}} }

// publishTimeout is how long a publish waits for its answer before its server reads the
// message back (nats.go's async publish timeout, as jetstream.Stream sets it).
const publishTimeout = 5 * time.Second

// errUnanswered is a publish whose answer never came, or was lost.
var errUnanswered = errors.New("sim: the publish was not answered")

// link is one server process's connection to the simulated NATS, and its log's Upstream.
//
// While the process opens its log (sync), the simulator's own goroutine calls it, and it
// answers from the stream as it is. After that the log's goroutines call it; every call is
// queued, and the simulator serves the queue while it waits for the log's goroutines to wait
// (pump): what a publish does to the world happens in the simulator's goroutine, in an order
// that does not depend on Go's scheduler.
type link struct {
	v *server
	n *natsModel

	mu   sync.Mutex
	sync bool
	dead bool
	// calls waits for the simulator; waiting is the handle the syncer waits on, if it does.
	calls   []linkCall
	waiting *handle
	// open are the handles not yet resolved; the process's death resolves them.
	open []*handle
}

type linkCall struct {
	kind    string // "publish", "get", "last", "sleep"
	after   uint64
	payload []byte
	seq     uint64
	d       time.Duration
	h       *handle
	reply   chan getReply
}

type getReply struct {
	payload []byte
	last    uint64
	err     error
}

// handle is a publish's answer, or a sleep's end, that a log goroutine waits for.
type handle struct {
	done chan struct{}
	seq  uint64
	err  error
}

func newLink(v *server, n *natsModel) *link { return &link{v: v, n: n, sync: true} }

// Publish implements eventlog.Upstream.
func (l *link) Publish(after uint64, payload []byte) func() (uint64, error) {
	l.mu.Lock()
	if l.sync {
		l.mu.Unlock()
		seq, err := l.n.takeNow(after, payload)
		return func() (uint64, error) { return seq, err }
	}
	h := &handle{done: make(chan struct{})}
	if l.dead {
		h.err = fmt.Errorf("%w: the process is gone", eventlog.ErrClosed)
		close(h.done)
	} else {
		l.open = append(l.open, h)
		l.calls = append(l.calls, linkCall{kind: "publish", after: after, payload: bytes.Clone(payload), h: h})
	}
	l.mu.Unlock()
	return func() (uint64, error) { return l.block(h) }
}

// block waits for h, telling the simulator the syncer waits on it.
func (l *link) block(h *handle) (uint64, error) {
	l.mu.Lock()
	select {
	case <-h.done:
		l.mu.Unlock()
		return h.seq, h.err
	default:
	}
	l.waiting = h
	l.mu.Unlock()
	<-h.done
	return h.seq, h.err
}

// resolve answers h; it runs on the simulator's goroutine.
func (l *link) resolve(h *handle, seq uint64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-h.done:
		return
	default:
	}
	h.seq, h.err = seq, err
	if l.waiting == h {
		l.waiting = nil
	}
	l.open = slices.DeleteFunc(l.open, func(o *handle) bool { return o == h })
	close(h.done)
}

// Sleep is the log's Options.Sleep: a wait on the virtual clock.
func (l *link) Sleep(d time.Duration) {
	h := &handle{done: make(chan struct{})}
	l.mu.Lock()
	if l.dead || l.sync {
		l.mu.Unlock()
		return
	}
	l.open = append(l.open, h)
	l.calls = append(l.calls, linkCall{kind: "sleep", d: d, h: h})
	l.mu.Unlock()
	_, _ = l.block(h)
}

// ask queues a read for the simulator and waits for its answer.
func (l *link) ask(c linkCall) getReply {
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		return getReply{err: fmt.Errorf("%w: the process is gone", eventlog.ErrClosed)}
	}
	if l.sync {
		l.mu.Unlock()
		return l.n.read(c)
	}
	c.reply = make(chan getReply, 1)
	l.calls = append(l.calls, c)
	l.mu.Unlock()
	return <-c.reply
}

// Last implements eventlog.Upstream.
func (l *link) Last(context.Context) (uint64, error) {
	r := l.ask(linkCall{kind: "last"})
	return r.last, r.err
}

// Get implements eventlog.Upstream: a direct get, answered at once from the stream as it is
// (the simulator serves it from its goroutine).
func (l *link) Get(_ context.Context, seq uint64) ([]byte, error) {
	r := l.ask(linkCall{kind: "get", seq: seq})
	return r.payload, r.err
}

// Read implements eventlog.Upstream for a log that catches up while it opens.
func (l *link) Read(_ context.Context, from uint64, visit func(uint64, []byte) error) error {
	l.mu.Lock()
	sync := l.sync
	l.mu.Unlock()
	if !sync {
		return errors.New("sim: a stream is read only while a log opens")
	}
	for seq := max(from, 1); seq <= uint64(len(l.n.msgs)); seq++ {
		if err := visit(seq, l.n.msgs[seq-1]); err != nil {
			return err
		}
	}
	return nil
}

// MaxPayload implements eventlog.Upstream.
func (l *link) MaxPayload() int { return 1 << 20 }

// Patience implements eventlog.Upstream. The simulator answers every read, and a publish's
// timeout is its own (publishTimeout, on the virtual clock): no wall-clock bound may cut a
// call short, or a run would not repeat.
func (l *link) Patience() time.Duration { return time.Hour }

// opened ends the open: from now on the log's goroutines call the link.
func (l *link) opened() {
	l.mu.Lock()
	l.sync = false
	l.mu.Unlock()
}

// kill is the process's death: every wait ends, and the link answers nothing more.
func (l *link) kill() {
	l.mu.Lock()
	l.dead = true
	open := l.open
	l.open, l.waiting, l.calls = nil, nil, nil
	l.mu.Unlock()
	for _, h := range open {
		h.err = fmt.Errorf("%w: the process is gone", eventlog.ErrClosed)
		close(h.done)
	}
}

// pump lets the log's goroutines run until both wait on the simulator: the sequencer for an
// append or for its last message to settle, the syncer for an answer (or with nothing in
// hand). It serves their reads meanwhile; the publishes and sleeps they queued take effect
// afterwards, in a fixed order.
func (l *link) pump() {
	v := l.v
	var out []linkCall
	for spins := 0; ; spins++ {
		l.mu.Lock()
		calls := l.calls
		l.calls = nil
		blocked := l.waiting != nil
		l.mu.Unlock()
		for _, c := range calls {
			switch c.kind {
			case "get", "last":
				c.reply <- l.n.read(c)
			default:
				out = append(out, c)
			}
		}
		waits, inHand := v.log.Pipeline()
		if len(calls) == 0 && waits && (inHand == 0 || blocked) {
			l.mu.Lock()
			quiet := len(l.calls) == 0
			l.mu.Unlock()
			if quiet {
				break
			}
		}
		if spins > 50_000_000 {
			panic(fmt.Sprintf("sim: the log's goroutines did not come to rest (sequencer waits %v, %d in hand, syncer blocked %v)", waits, inHand, blocked))
		}
		runtime.Gosched()
	}
	// Only one of the log's goroutines publishes at a time, unless a planted bug pipelines:
	// sorting makes the order the world sees independent of which ran first.
	slices.SortStableFunc(out, func(a, b linkCall) int {
		if a.kind != b.kind {
			return bytes.Compare([]byte(a.kind), []byte(b.kind))
		}
		if a.after != b.after {
			return int(a.after) - int(b.after)
		}
		return bytes.Compare(a.payload, b.payload)
	})
	for _, c := range out {
		switch c.kind {
		case "publish":
			v.sendPublish(l, c)
		case "sleep":
			h := c.h
			v.after(c.d, "log retry wait", func() {
				l.resolve(h, 0, nil)
				l.pump()
			})
		}
	}
	v.drainDone()
}

// read answers a read of the stream as it is now.
func (n *natsModel) read(c linkCall) getReply {
	switch c.kind {
	case "last":
		if n.s.now.Before(n.streamDown) {
			return getReply{err: errUnanswered}
		}
		return getReply{last: uint64(len(n.msgs))}
	default:
		if n.s.now.Before(n.streamDown) {
			return getReply{err: errUnanswered}
		}
		if c.seq == 0 || c.seq > uint64(len(n.msgs)) {
			return getReply{err: fmt.Errorf("%w: message %d", eventlog.ErrNotFound, c.seq)}
		}
		return getReply{payload: n.msgs[c.seq-1]}
	}
}

// takeNow takes a publish that arrives this instant, and stores it at once: a log opening
// (its fence) waits for nothing else.
func (n *natsModel) takeNow(after uint64, payload []byte) (uint64, error) {
	if err := n.propose(after); err != nil {
		return 0, err
	}
	n.proposed--
	return n.store(payload, nil), nil
}

// propose applies the stream leader's rule to a publish that names after.
func (n *natsModel) propose(after uint64) error {
	if clseq := uint64(len(n.msgs) + n.proposed); after != clseq {
		return fmt.Errorf("%w: wrong last sequence: %d, the publish expects %d", eventlog.ErrFenced, clseq, after)
	}
	n.proposed++
	return nil
}

// store appends a message the stream took, checks that it continues the chain, and folds its
// records into the oracle with the decisions of the process that made them, if it knows them.
func (n *natsModel) store(payload []byte, from *server) uint64 {
	s := n.s
	n.msgs = append(n.msgs, payload)
	seq := uint64(len(n.msgs))
	recs, head, err := eventlog.ContinueChain(seq, n.head, payload)
	if err != nil {
		s.fail("stream_chain", "the stream took message %d, which does not continue the chain: %v", seq, err)
		return seq
	}
	n.head = head
	for _, r := range recs {
		p, err := eventlog.Decode(r.Type, r.Data)
		if err != nil {
			s.fail("chain", "seq %d does not decode: %v", r.Seq, err)
			return seq
		}
		at, clock := r.Time, -1
		s.deciding = -1
		if from != nil {
			if d, ok := from.decided[r.Seq]; ok {
				at, clock, s.deciding = d.at, d.clock, from.epoch
				delete(from.decided, r.Seq)
			}
		}
		s.oracle.apply(r.Seq, r.Time, p, at, clock)
		s.deciding = -1
	}
	s.record(fmt.Sprintf("stream stored message %d (seqs to %d)", seq, head.Seq))
	return seq
}
