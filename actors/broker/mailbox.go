package broker

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// mailbox is protoactor's default mailbox (actor/mailbox.go) less an allocation per turn:
// protoactor's hands the dispatcher the method value m.processMessages each time an idle
// mailbox gets a message, a closure made anew each time (six a job in BenchmarkLifecycle);
// this one makes it once. The rules are protoactor's: system messages go before user messages,
// a suspended mailbox (a failed actor awaiting its supervisor) takes only system messages, and
// a message posted while a run ends starts another. Unlike protoactor's it does not unpack a
// MessageBatch, which no one here sends, and it has no middlewares.
type mailbox struct {
	user, system fifo
	// userCount and systemCount are the messages posted and not yet taken; scheduled is set
	// while a run is on the dispatcher or about to be.
	userCount, systemCount atomic.Int32
	scheduled, suspended   atomic.Bool

	invoker    actor.MessageInvoker
	dispatcher actor.Dispatcher
	process    func() // processMessages, made once
}

func newMailbox() actor.Mailbox {
	m := &mailbox{}
	m.process = m.processMessages
	return m
}

func (m *mailbox) PostUserMessage(msg any) {
	m.user.push(msg)
	m.userCount.Add(1)
	m.schedule()
}

func (m *mailbox) PostSystemMessage(msg any) {
	m.system.push(msg)
	m.systemCount.Add(1)
	m.schedule()
}

func (m *mailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.invoker, m.dispatcher = invoker, dispatcher
}

func (m *mailbox) Start() {}

func (m *mailbox) UserMessageCount() int { return int(m.userCount.Load()) }

func (m *mailbox) schedule() {
	if m.scheduled.CompareAndSwap(false, true) {
		m.dispatcher.Schedule(m.process)
	}
}

func (m *mailbox) processMessages() {
	for {
		m.run()
		m.scheduled.Store(false)
		// A message posted after run found the queues empty found the mailbox scheduled and
		// left it to this run: take it, unless its poster has scheduled a run already.
		pending := m.systemCount.Load() > 0 || (!m.suspended.Load() && m.userCount.Load() > 0)
		if !pending || !m.scheduled.CompareAndSwap(false, true) {
			return
		}
	}
}

func (m *mailbox) run() {
	var msg any
	defer func() {
		if r := recover(); r != nil {
			m.invoker.EscalateFailure(r, msg)
		}
	}()
	for i, throughput := 0, m.dispatcher.Throughput(); ; i++ {
		if i > throughput { // let the other mailboxes of the dispatcher's goroutines run
			i = 0
			runtime.Gosched()
		}
		if msg = m.system.pop(); msg != nil {
			m.systemCount.Add(-1)
			switch msg.(type) {
			case *actor.SuspendMailbox:
				m.suspended.Store(true)
			case *actor.ResumeMailbox:
				m.suspended.Store(false)
			default:
				m.invoker.InvokeSystemMessage(msg)
			}
			continue
		}
		if m.suspended.Load() {
			return
		}
		if msg = m.user.pop(); msg == nil {
			return
		}
		m.userCount.Add(-1)
		m.invoker.InvokeUserMessage(msg)
	}
}

// fifo is a queue of messages, many posters and one taker, in a ring that grows as needed and
// keeps its size: a parked host's mailbox is ready for its next cell.
type fifo struct {
	mu   sync.Mutex
	ring []any
	head int // ring[head] is the oldest message
	n    int
}

func (q *fifo) push(msg any) {
	q.mu.Lock()
	if q.n == len(q.ring) {
		grown := make([]any, max(8, 2*len(q.ring)))
		for i := range q.n {
			grown[i] = q.ring[(q.head+i)%len(q.ring)]
		}
		q.ring, q.head = grown, 0
	}
	q.ring[(q.head+q.n)%len(q.ring)] = msg
	q.n++
	q.mu.Unlock()
}

// pop takes the oldest message, nil if there is none.
func (q *fifo) pop() any {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return nil
	}
	msg := q.ring[q.head]
	q.ring[q.head] = nil
	q.head = (q.head + 1) % len(q.ring)
	q.n--
	return msg
}
