package broker

import (
	"runtime"
)

// pool is a protoactor dispatcher that runs mailboxes on a fixed set of long-lived goroutines.
// protoactor's default starts a goroutine each time a mailbox gets work; each new goroutine
// starts with a small stack and grows it by copying as soon as a behaviour encodes an event,
// which cost 15% of the CPU in BenchmarkLifecycle. Warm goroutines keep their grown stacks.
//
// Schedule never blocks: when every worker is busy and the queue is full it falls back to a
// goroutine of its own, so a mailbox that blocks (a restart waiting for the log) cannot stall
// the others.
type pool struct {
	work       chan func()
	stop       chan struct{}
	throughput int
}

func newPool(workers, throughput int) *pool {
	p := &pool{work: make(chan func(), 1<<16), stop: make(chan struct{}), throughput: throughput}
	for range workers {
		go func() {
			for {
				select {
				case fn := <-p.work:
					fn()
				case <-p.stop:
					return
				}
			}
		}()
	}
	return p
}

func defaultPoolWorkers() int { return 4 * runtime.GOMAXPROCS(0) }

func (p *pool) Schedule(fn func()) {
	select {
	case <-p.stop: // stopped: no worker reads the queue any more
		go fn()
		return
	default:
	}
	select {
	case p.work <- fn:
	default:
		go fn()
	}
}

func (p *pool) Throughput() int { return p.throughput }

func (p *pool) close() { close(p.stop) }
