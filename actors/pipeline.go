package actors

import "github.com/tetherhq/tether/eventlog"

// pipeline counts a behaviour's persists that are not durable yet, and holds replies that may
// only leave once everything before them is durable (an idempotent hit on a job whose submit is
// still in flight, say). Persists complete in order, so "nothing pending" means "all durable".
type pipeline struct {
	pending int
	waiting []func()
}

func (p *pipeline) persist(env Env, events []eventlog.Payload, then any) {
	p.pending++
	env.Persist(events, then)
}

// settled records that one persist completed and runs what waited for all of them.
func (p *pipeline) settled() {
	p.pending--
	if p.pending > 0 {
		return
	}
	waiting := p.waiting
	p.waiting = nil
	for _, f := range waiting {
		f()
	}
}

// whenSettled runs f now if nothing is pending, else once everything pending is durable.
func (p *pipeline) whenSettled(f func()) {
	if p.pending == 0 {
		f()
		return
	}
	p.waiting = append(p.waiting, f)
}

// reset forgets every persist: a behaviour that recovers has none pending.
func (p *pipeline) reset() { *p = pipeline{} }
