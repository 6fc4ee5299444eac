package actors

import (
	"time"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Retention: the dispatcher decides what happens to a finished job, so it is also what takes
// one out of the views (job.expired), whether its retention ended, a client deleted it or a
// purge took it. Its re-drives and expiries are thus serialised: a job is never both. Its sweep
// takes out the ended flows (flow.expired) and the workers whose registration ended
// (worker.expired) too.

const (
	// retentionBatch caps the expiries of one sweep; a full batch sweeps again at once.
	retentionBatch = 256
	// retentionSweepMax is the longest the dispatcher waits between sweeps: a job finished with
	// a short result TTL is swept within it. The API hides a job whose retention has ended
	// before the sweep writes its expiry.
	retentionSweepMax = 10 * time.Second
	retentionSweepMin = time.Second
)

type (
	// retentionSweep is the dispatcher's timer for the next sweep.
	retentionSweep struct{}
	// expireDone: the expiries of a sweep (reply unset), a delete or a purge are durable.
	expireDone struct {
		ids    []string
		reply  Ref
		purge  bool
		more   bool
		sweep  bool
		filled bool // the sweep took a full batch
	}
)

// armSweep sets the timer for the next retention sweep: when the next finished job is due,
// but within retentionSweepMax, since a job that finishes meanwhile may be due sooner.
func (d *Dispatcher) armSweep(env Env) {
	if d.retention == (projections.Retention{}) || d.sweep != 0 || d.sweeping {
		return
	}
	wait := retentionSweepMax
	now := env.Now()
	env.Read(func(s *projections.Set) {
		if next, ok := s.NextExpiry(d.retention); ok {
			wait = min(max(next.Sub(now), retentionSweepMin), wait)
		}
	})
	d.sweep = env.After(wait, retentionSweep{})
}

// sweepRetention writes the expiry of the finished jobs that are due, a batch at a time.
func (d *Dispatcher) sweepRetention(env Env) {
	d.sweep = 0
	var due []projections.Expiry
	now := env.Now()
	if mutantExpireEarly {
		now = now.Add(d.retention.Done)
	}
	env.Read(func(s *projections.Set) { due = s.Expirable(d.retention, now, retentionBatch) })
	var events []eventlog.Payload
	var ids []string
	// The cap counts the dead letters in the views, where a re-drive or an expiry on its way is
	// still counted: it waits until none is, or it would take one too many.
	capSettled := len(d.redriving) == 0 && len(d.expiring) == 0
	for _, e := range due {
		// A job whose lease ended durably is finished in the views before the dispatcher hears
		// that its lease ended (leaseEnded): after a stall, both come at once. The next sweep
		// takes it.
		_, leased := d.leased[e.JobID]
		if leased || d.expiring[e.JobID] || d.redriving[e.JobID] || (e.Reason == eventlog.ExpiredDeadCap && !capSettled) {
			continue
		}
		events = append(events, eventlog.JobExpired{JobID: e.JobID, Reason: e.Reason})
		ids = append(ids, e.JobID)
	}
	// Ended flows go with their retention too; no one decides anything of a flow that is no
	// longer live, so the dispatcher can take it out without asking its tenant.
	var flows []string
	var workers []eventlog.WorkerExpired
	env.Read(func(s *projections.Set) {
		flows = s.ExpirableFlows(d.retention, now, retentionBatch)
		workers = s.ExpirableWorkers(d.retention, now, retentionBatch)
	})
	for _, id := range flows {
		events = append(events, eventlog.FlowExpired{FlowID: id, Reason: eventlog.ExpiredRetention})
	}
	// So do workers whose registration can no longer be used: nothing can make them live
	// again (a session or a renewal needs a token that works), so the tenant is not asked.
	for _, w := range workers {
		events = append(events, w)
	}
	if len(events) == 0 {
		d.armSweep(env)
		return
	}
	d.expire(env, events, expireDone{ids: ids, sweep: true,
		filled: len(due) == retentionBatch || len(flows) == retentionBatch || len(workers) == retentionBatch})
}

func (d *Dispatcher) expire(env Env, events []eventlog.Payload, then expireDone) {
	for _, id := range then.ids {
		d.expiring[id] = true
	}
	d.sweeping = d.sweeping || then.sweep
	d.pipe.persist(env, events, then)
}

func (d *Dispatcher) expired(env Env, t expireDone, m Persisted) {
	for _, id := range t.ids {
		delete(d.expiring, id)
	}
	err := unavailable(m.Err)
	switch {
	case t.sweep:
		d.sweeping = false
		if err == nil && t.filled {
			d.sweepRetention(env)
			return
		}
		d.armSweep(env)
	case t.purge:
		env.Send(t.reply, PurgeDone{Purged: len(t.ids), More: t.more, Receipt: receiptOf(m.Receipt), Err: err})
	default:
		env.Send(t.reply, Done{Receipt: receiptOf(m.Receipt), Err: err})
	}
}

// deleteJob takes a finished job of the tenant out of the views.
func (d *Dispatcher) deleteJob(env Env, m Delete) {
	var status projections.Status // "": none of the tenant's
	env.Read(func(s *projections.Set) {
		if j := s.JobRef(m.JobID); j != nil && j.Tenant == m.Tenant {
			status = j.Status
		}
	})
	id := clip(m.JobID)
	switch {
	case status == "":
		env.Send(env.Sender(), Done{Err: reject(CodeJobNotFound, "no job %q", id)})
	case d.expiring[m.JobID]:
		env.Send(env.Sender(), Done{Err: reject(CodeJobExpired, "job %s has expired", id)})
	case (!status.Terminal() || d.redriving[m.JobID]) && !mutantDeleteLive:
		env.Send(env.Sender(), Done{Err: reject(CodeNotFinished, "job %s is %s; only a finished job can be deleted", id, status)})
	default:
		d.expire(env, []eventlog.Payload{eventlog.JobExpired{JobID: m.JobID, Reason: eventlog.ExpiredDeleted, APIKeyID: m.APIKeyID}},
			expireDone{ids: []string{m.JobID}, reply: env.Sender()})
	}
}

// purgeDead takes a tenant's old dead letters out of the views, PurgeLimit at a time.
func (d *Dispatcher) purgeDead(env Env, m PurgeDead) {
	var ids []string
	more := false
	env.Read(func(s *projections.Set) { ids, more = s.DeadBefore(m.Tenant, m.Queue, m.Before, PurgeLimit) })
	var events []eventlog.Payload
	kept := ids[:0]
	for _, id := range ids {
		if d.expiring[id] || d.redriving[id] {
			continue
		}
		kept = append(kept, id)
		events = append(events, eventlog.JobExpired{JobID: id, Reason: eventlog.ExpiredPurged, APIKeyID: m.APIKeyID})
	}
	if len(events) == 0 {
		env.Send(env.Sender(), PurgeDone{More: more})
		return
	}
	d.expire(env, events, expireDone{ids: kept, reply: env.Sender(), purge: true, more: more})
}
