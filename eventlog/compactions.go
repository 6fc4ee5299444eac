package eventlog

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// compactionGate is Pebble's CompactionScheduler for the log: Pebble's own policy (as many
// compactions at once as the DB allows, granted when one ends, on a poke, and every 100 ms)
// behind a gate that stays shut until Open has returned.
//
// Why the gate: pebble.Open flushes the memtables it replays from the WAL, the flush
// schedules compactions, and Open then waits for every running compaction to end before it
// scans for obsolete files. After a kill -9 under load, the compaction it waited for was the
// one the crash interrupted: with a million jobs of history, a second of rewriting the base
// level before the server could even read its checkpoint (1.2-1.5 s to /readyz on a copy of
// one such data dir, 0.18-0.23 s with the gate). The compactions wait for the gate instead and
// run once the log is open, alongside the server's work, as they would have a moment later.
//
// The policy is written out here because Pebble's ConcurrencyLimitScheduler cannot be wrapped:
// its constructor with the periodic granter is unexported, and the exported one is for tests.
type compactionGate struct {
	mu       sync.Mutex
	db       pebble.DBForCompaction
	shut     bool // until release
	gone     bool // unregistered: no grant any more
	granting bool
	running  int
	turn     *sync.Cond // granting ended
	poke     chan struct{}
	stop     chan struct{}
	stopped  chan struct{}
}

func newCompactionGate() *compactionGate {
	g := &compactionGate{shut: true, poke: make(chan struct{}, 1)}
	g.turn = sync.NewCond(&g.mu)
	return g
}

// release opens the gate and grants what waits.
func (g *compactionGate) release() {
	g.mu.Lock()
	g.shut = false
	g.grantLockedAndUnlock()
}

// Register implements pebble.CompactionScheduler. Pebble calls it once, from Open.
func (g *compactionGate) Register(_ int, db pebble.DBForCompaction) {
	g.db = db
	g.stop, g.stopped = make(chan struct{}), make(chan struct{})
	go g.periodic()
}

// Unregister implements pebble.CompactionScheduler: no grant after it returns.
func (g *compactionGate) Unregister() {
	if g.stop != nil {
		close(g.stop)
		<-g.stopped
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gone = true
	for g.granting {
		g.turn.Wait()
	}
}

// TrySchedule implements pebble.CompactionScheduler.
func (g *compactionGate) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut || g.gone || g.db.GetAllowedWithoutPermission() <= g.running {
		return false, nil
	}
	g.running++
	return true, g
}

// UpdateGetAllowedWithoutPermission implements pebble.CompactionScheduler: a flush may allow
// more compactions; the periodic granter looks at once.
func (g *compactionGate) UpdateGetAllowedWithoutPermission() {
	select {
	case g.poke <- struct{}{}:
	default:
	}
}

// Started, MeasureCPU and CumulativeStats implement pebble.CompactionGrantHandle; the gate
// neither measures nor paces.
func (g *compactionGate) Started()                                          {}
func (g *compactionGate) MeasureCPU(pebble.CompactionGoroutineKind)         {}
func (g *compactionGate) CumulativeStats(pebble.CompactionGrantHandleStats) {}

// Done implements pebble.CompactionGrantHandle: a compaction ended, another may start.
func (g *compactionGate) Done() {
	g.mu.Lock()
	g.running--
	g.grantLockedAndUnlock()
}

// grantLockedAndUnlock grants waiting compactions up to what the DB allows, one granter at a
// time; Schedule is called without the lock, because Pebble takes its own mutex in it.
func (g *compactionGate) grantLockedAndUnlock() {
	defer g.mu.Unlock()
	for g.granting {
		g.turn.Wait()
	}
	if g.shut || g.gone {
		return
	}
	n := g.db.GetAllowedWithoutPermission() - g.running
	if n <= 0 {
		return
	}
	g.granting = true
	g.mu.Unlock()
	for ; n > 0; n-- {
		if waiting, _ := g.db.GetWaitingCompaction(); !waiting || !g.db.Schedule(g) {
			break
		}
		g.mu.Lock()
		g.running++
		g.mu.Unlock()
	}
	g.mu.Lock()
	g.granting = false
	g.turn.Broadcast()
}

// periodic grants every 100 ms and on a poke: Pebble does not tell a scheduler of every change
// that allows a compaction (Pebble's ConcurrencyLimitScheduler samples the same way).
func (g *compactionGate) periodic() {
	defer close(g.stopped)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-g.poke:
		case <-g.stop:
			return
		}
		g.mu.Lock()
		g.grantLockedAndUnlock()
	}
}
