package actors

import (
	"maps"
	"slices"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// A server starting on a log does three things, in this order, before it takes commands; the
// runtime and the simulator both do them through these functions:
//
//  1. It appends StaleSessionEnds: the sessions the last run left open are over, since their
//     connections died with it. No actor has started yet, so the dispatcher never sees them.
//  2. It starts the dispatcher, which rebuilds from the projections (Recover).
//  3. It starts the actors of ResumedRefs: each tenant that holds reservations, which arms
//     their expiry timers (an idle tenant's actor would otherwise never start, and its
//     reservations never expire), live flows, which it takes up again, or schedules that are
//     not paused, whose timers it sets (deciding the ticks missed while the server was down);
//     and each leased job, which logs a fresh lease_ttl of grace so that a worker that
//     reconnects in time keeps its job, and puts back, unspent, the lease of one that
//     reconnects without it (Job.disowned).

// StaleSessionEnds returns the events that end every session the projections hold open.
func StaleSessionEnds(s *projections.Set) []eventlog.Payload {
	var out []eventlog.Payload
	for _, w := range s.OpenSessions() {
		out = append(out, eventlog.WorkerSessionEnded{WorkerID: w.ID, SessionID: w.Session.ID, Reason: eventlog.EndedShutdown})
	}
	return out
}

// ResumedRefs returns the actors a starting server starts after the dispatcher: the tenants
// with reservations, live flows or active schedules, by name, then the leased jobs, in the
// projections' order.
func ResumedRefs(s *projections.Set) []Ref {
	var out []Ref
	resumed := s.ScheduleTenants() // a tenant may have schedules and nothing else
	for name := range s.LiveFlowTenants() {
		resumed[name] = true
	}
	for _, name := range s.TenantNames() {
		if len(s.Tenant(name).Reservations) > 0 {
			resumed[name] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(resumed)) {
		out = append(out, TenantRef(name))
	}
	for _, j := range s.Leases() {
		out = append(out, JobRef(j.ID))
	}
	return out
}
