package actors

import (
	"maps"
	"slices"
	"time"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// intake is the part of a tenant that admits jobs: it validates submits, keeps the idempotency
// index, the quota (max_active, max_running) and the reservations, and checks a re-drive
// against the quota.
//
// Usage against max_active is the committed count of non-terminal jobs (from the projections)
// plus the jobs the tenant admitted that are not durable yet, plus its reservations. Jobs leave
// the count only through committed terminal events, so the count can run high for a moment,
// never low.
type intake struct {
	maxActive  int
	maxRunning int
	// reservations are those held against max_active.
	// INVARIANT: a reservation is held until its end (consumed, released, expired) is decided,
	// and not after: reservations and ending never share an id.
	reservations map[string]reservation
	// ending holds the reservations whose end is decided and not durable yet.
	ending map[string]bool
	// pendingJobs counts the jobs of submits admitted whose events are not durable yet.
	pendingJobs int
	// redriving holds the jobs whose re-drive this actor admitted and the dispatcher has not
	// settled; each counts against max_active while the projections still show it dead.
	redriving map[string]bool
	// pendingIdem holds the idempotency keys of the jobs of pendingJobs that have one.
	pendingIdem map[string]pendingKey
	// spare is the rest of the last chunk of submissions made (newSubmission).
	spare []submission
}

type reservation struct {
	expiresAt time.Time
	timer     TimerID
}

type pendingKey struct{ jobID, requestHash string }

type reservationExpiry struct{ id string }

// redriveSettled tells the tenant that a re-drive it admitted is durable or refused.
type redriveSettled struct{ jobID string }

// submitDone is a submit's then-value, handed to the log as a pointer: a value would be boxed,
// an allocation of its own.
type submitDone struct {
	reply    Ref
	jobs     []SubmittedJob
	events   []eventlog.Payload // the append, read once durable for the snapshots
	waiting  []Waiting          // with SubmitSeq holding the event's index in the append until durable
	keys     []string
	consumed []string // reservations
	newJobs  int
	enqueue  Enqueue // the dispatcher's notice, sent as a pointer into the submit (enqueue)
}

// submission is what a submit of one job needs, in one allocation: its answer, its events (a
// job.submitted, perhaps a job.scheduled and a reservation.consumed), its entry for the
// dispatcher and its then-value. A batch's slices are made apart.
//
// The tenant carves its submissions from chunks of submissionChunk (intake.spare): one
// allocation for that many submits. None is ever reused, so nothing a submit handed on (its
// events to the log, its notice to the dispatcher, its answer) can change under its reader; a
// chunk is garbage once its last submission is, and a submission lives only until its submit
// is durable and answered.
type submission struct {
	done    submitDone
	jobs    [1]SubmittedJob
	events  [3]eventlog.Payload
	waiting [1]Waiting
}

// submissionChunk is how many submissions one allocation makes.
const submissionChunk = 16

func (in *intake) newSubmission(jobs int) *submission {
	if len(in.spare) == 0 {
		in.spare = make([]submission, submissionChunk)
	}
	sub := &in.spare[0]
	in.spare = in.spare[1:]
	if jobs == 1 {
		sub.done.jobs, sub.done.events, sub.done.waiting = sub.jobs[:], sub.events[:0], sub.waiting[:0]
	} else {
		sub.done.jobs, sub.done.events = make([]SubmittedJob, jobs), make([]eventlog.Payload, 0, jobs)
	}
	return sub
}

type quotaDone struct {
	reply      Ref
	maxRunning int
}

type reserveDone struct {
	reply     Ref
	id        string
	expiresAt time.Time
}

type releaseDone struct {
	reply Ref
	id    string
}

type expiryDone struct{ id string }

func (in *intake) reset() {
	*in = intake{reservations: map[string]reservation{}, ending: map[string]bool{}, redriving: map[string]bool{}, pendingIdem: map[string]pendingKey{}}
}

// recover takes up the quota and the active reservations, each with its expiry timer.
func (in *intake) recover(t *Tenant, env Env) {
	var q projections.Tenant
	env.Read(func(s *projections.Set) { q = s.Tenant(t.name) })
	in.maxActive, in.maxRunning = q.MaxActive, q.MaxRunning
	now := env.Now()
	for _, id := range slices.Sorted(maps.Keys(q.Reservations)) { // timers in a replayable order
		exp := q.Reservations[id]
		in.reservations[id] = reservation{expiresAt: exp, timer: env.After(max(exp.Sub(now), 0), reservationExpiry{id})}
	}
}

// setQuota changes the limits the command names and keeps the others: the tenant's actor is
// the only writer of its quota, so its read-modify-write cannot interleave with another.
func (in *intake) setQuota(t *Tenant, env Env, m SetQuota) {
	maxActive, maxRunning := in.maxActive, in.maxRunning
	if m.MaxActive != nil {
		maxActive = *m.MaxActive
	}
	if m.MaxRunning != nil {
		maxRunning = *m.MaxRunning
	}
	if maxActive < 0 || maxRunning < 0 {
		env.Send(env.Sender(), Done{Err: reject(CodeInvalidArgument, "limits must be 0 (unlimited) or more")})
		return
	}
	in.maxActive, in.maxRunning = maxActive, maxRunning
	t.pipe.persist(env, []eventlog.Payload{eventlog.TenantQuotaSet{Tenant: t.name, MaxActive: maxActive, MaxRunning: maxRunning}},
		quotaDone{reply: env.Sender(), maxRunning: maxRunning})
}

func (in *intake) quotaSet(t *Tenant, env Env, d quotaDone, m Persisted) {
	err := unavailable(m.Err)
	if err == nil {
		env.Send(DispatcherRef(), QuotaChanged{Tenant: t.name, MaxRunning: d.maxRunning})
	}
	env.Send(d.reply, Done{Receipt: receiptOf(m.Receipt), Err: err})
}

// usage is intake's share of what counts against max_active: the committed non-terminal jobs,
// the re-drives not applied yet, the submits not durable yet, and the reservations.
func (in *intake) usage(t *Tenant, env Env) int {
	var active int
	env.Read(func(s *projections.Set) {
		active = s.Tenant(t.name).Active
		for id := range in.redriving {
			// A re-drive the projections show is in Active already: counting it again until
			// the dispatcher's notice arrives would refuse the next one for nothing.
			if j := s.JobRef(id); j == nil || j.Status.Terminal() {
				active++
			}
		}
	})
	return active + in.pendingJobs + len(in.reservations)
}

func (in *intake) submit(t *Tenant, env Env, m Submit) {
	reply := env.Sender()
	if len(m.Jobs) == 0 || len(m.Jobs) > BatchJobsMax {
		env.Send(reply, Submitted{Err: reject(CodeInvalidArgument, "a batch holds 1..%d jobs, not %d", BatchJobsMax, len(m.Jobs))})
		return
	}
	now := env.Now()
	sub := in.newSubmission(len(m.Jobs))
	out := sub.done.jobs
	hashes := make([]string, len(m.Jobs))
	consumed := map[string]bool{}
	newJobs := 0
	for i := range m.Jobs {
		spec := &m.Jobs[i]
		r := spec.normalize(t.limits)
		if r == nil {
			r = undefinedRateLimit(env, t.name, spec.RateLimits)
		}
		if r != nil {
			if len(m.Jobs) > 1 {
				r.Details = map[string]any{"index": i}
			}
			env.Send(reply, Submitted{Err: r})
			return
		}
		if key := spec.IdempotencyKey; key != "" {
			hashes[i] = spec.requestHash()
			id, hash, ok := lookupKey(env, t.name, in.pendingIdem, (*projections.Set).Idempotency, key, now)
			for j := range i { // an earlier job of the same batch
				if m.Jobs[j].IdempotencyKey == key && !out[j].IdempotentHit {
					id, hash, ok = out[j].ID, hashes[j], true
				}
			}
			if ok {
				if hash != hashes[i] {
					env.Send(reply, Submitted{Err: &Rejection{Code: CodeIdempotencyKeyReused,
						Message: "the idempotency key was used for a different request", Details: map[string]any{"job_id": id}}})
					return
				}
				out[i] = SubmittedJob{ID: id, IdempotentHit: true}
				continue
			}
		}
		if rid := spec.ReservationID; rid != "" {
			r, ok := in.reservations[rid]
			if !ok || !now.Before(r.expiresAt) || consumed[rid] {
				env.Send(reply, Submitted{Err: reject(CodeReservationNotFound, "reservation %q is not active", clip(rid))})
				return
			}
			consumed[rid] = true
		}
		out[i] = SubmittedJob{ID: NextID(env, &t.lastJobID)}
		newJobs++
	}
	if newJobs > 0 && t.full(env, newJobs-len(consumed)) {
		env.Send(reply, Submitted{Err: &Rejection{Code: CodeQuotaExceeded,
			Message: "the tenant's max_active would be exceeded", Details: map[string]any{"max_active": in.maxActive, "requested": newJobs}}})
		return
	}
	if newJobs == 0 {
		// Every job was there already. Answer once the submits that made them are durable, with
		// the receipt of the newest of them.
		t.pipe.whenSettled(func() {
			var seq uint64
			lost := false
			env.Read(func(s *projections.Set) {
				for i, j := range out {
					// The key's entry, in memory, before the job: a finished job is read from the
					// disk, and commits wait while this reads.
					if e, ok := s.Idempotency(t.name, m.Jobs[i].IdempotencyKey, now); ok && e.JobID == j.ID {
						seq = max(seq, e.Seq) // the job's submit, durable; the key outlives the job
					} else if jr := s.JobRef(j.ID); jr != nil {
						seq = max(seq, jr.SubmitSeq)
					} else {
						lost = true
					}
				}
			})
			if lost { // the submit the key named failed to append: the log failed
				env.Send(reply, Submitted{Err: reject(CodeUnavailable, "the submit this idempotency key names was not made durable; the server is stopping")})
				return
			}
			env.Send(reply, Submitted{Jobs: out, Receipt: Receipt{Seq: seq}})
		})
		return
	}
	done := &sub.done
	done.reply, done.newJobs = reply, newJobs
	events := done.events
	for i, spec := range m.Jobs {
		if out[i].IdempotentHit {
			continue
		}
		id := out[i].ID
		runAt, reason := spec.RunAt, eventlog.ScheduledRunAt
		if spec.Delay > 0 {
			runAt, reason = now.Add(spec.Delay), eventlog.ScheduledDelay
		}
		done.waiting = append(done.waiting, Waiting{ID: id, Tenant: t.name, Queue: spec.Queue, Priority: spec.Priority, Key: spec.ConcurrencyKey,
			RateLimits: spec.RateLimits, SubmitSeq: uint64(len(events))})
		events = append(events, eventlog.JobSubmitted{
			JobID: id, Tenant: t.name, Queue: spec.Queue, Type: spec.Type, Payload: spec.Payload,
			Priority: spec.Priority, Labels: spec.Labels, MaxAttempts: spec.MaxAttempts,
			LeaseTTLMillis: spec.LeaseTTL.Milliseconds(), IdempotencyKey: spec.IdempotencyKey,
			RequestHash: hashes[i], ReservationID: spec.ReservationID, APIKeyID: m.APIKeyID,
			ResultTTLMillis: spec.ResultTTL.Milliseconds(), ConcurrencyKey: spec.ConcurrencyKey,
			RateLimits: spec.RateLimits, Traceparent: m.Traceparent,
		})
		if runAt.After(now) {
			done.waiting[len(done.waiting)-1].RunAt = runAt
			events = append(events, eventlog.JobScheduled{JobID: id, RunAt: runAt.UTC(), Reason: reason})
		}
		if rid := spec.ReservationID; rid != "" {
			in.ending[rid] = true
			in.dropReservation(env, rid)
			events = append(events, eventlog.ReservationConsumed{Tenant: t.name, ReservationID: rid, JobID: id})
			done.consumed = append(done.consumed, rid)
		}
		if spec.IdempotencyKey != "" {
			in.pendingIdem[spec.IdempotencyKey] = pendingKey{jobID: id, requestHash: hashes[i]}
			done.keys = append(done.keys, spec.IdempotencyKey)
		}
	}
	in.pendingJobs += newJobs
	done.events = events
	t.pipe.persist(env, events, done)
	if mutantAckBeforeFsync {
		env.Send(reply, Submitted{Jobs: out})
	}
}

func (in *intake) submitted(env Env, d *submitDone, m Persisted) {
	in.pendingJobs -= d.newJobs
	for _, k := range d.keys {
		delete(in.pendingIdem, k)
	}
	for _, id := range d.consumed {
		delete(in.ending, id)
	}
	if err := unavailable(m.Err); err != nil {
		env.Send(d.reply, Submitted{Err: err})
		return
	}
	enqueue(env, &d.enqueue, d.waiting, m.Receipt)
	if !mutantAckBeforeFsync {
		snapshots(d.jobs, d.events, m.Receipt)
		env.Send(d.reply, Submitted{Jobs: d.jobs, Receipt: receiptOf(m.Receipt)})
	}
}

// snapshots sets each new job's Snapshot from the durable append that submitted it: its
// job.submitted, and the job.scheduled that follows it for a job that waits.
func snapshots(jobs []SubmittedJob, events []eventlog.Payload, r eventlog.Receipt) {
	next := 0 // jobs[next:] are not yet matched to their events; hits have none
	var last *projections.Job
	for i, p := range events {
		seq := r.First + uint64(i)
		switch e := p.(type) {
		case eventlog.JobSubmitted:
			for jobs[next].IdempotentHit {
				next++
			}
			last = projections.NewJob(seq, r.Time, e)
			jobs[next].Job = last
			next++
		case eventlog.JobScheduled:
			last.Fold(seq, r.Time, e)
		}
	}
}

// lookupKey finds the job (or flow) an idempotency key names: one admitted here and not
// durable yet (pending), or one in the projections (durable) that has not expired.
func lookupKey(env Env, tenant string, pending map[string]pendingKey,
	durable func(*projections.Set, string, string, time.Time) (projections.Idempotency, bool), key string, now time.Time) (id, hash string, ok bool) {
	if p, ok := pending[key]; ok {
		return p.jobID, p.requestHash, true
	}
	var e projections.Idempotency
	env.Read(func(s *projections.Set) { e, ok = durable(s, tenant, key, now) })
	return e.JobID, e.RequestHash, ok
}

func (in *intake) reserve(t *Tenant, env Env, m Reserve) {
	ttl := m.TTL
	if ttl == 0 {
		ttl = ReservationTTLDefault
	}
	switch {
	case ttl < 0 || ttl > ReservationTTLMax:
		env.Send(env.Sender(), Reserved{Err: reject(CodeInvalidArgument, "ttl %s is outside 1s..%s", ttl, ReservationTTLMax)})
		return
	case len(in.reservations) >= ReservationsMax:
		env.Send(env.Sender(), Reserved{Err: reject(CodeQuotaExceeded, "the tenant holds %d reservations, the most allowed", ReservationsMax)})
		return
	case t.full(env, 1):
		env.Send(env.Sender(), Reserved{Err: &Rejection{Code: CodeQuotaExceeded,
			Message: "the tenant's max_active is reached", Details: map[string]any{"max_active": in.maxActive}}})
		return
	}
	id := NewID(env)
	exp := env.Now().Add(ttl).UTC()
	in.reservations[id] = reservation{expiresAt: exp, timer: env.After(ttl, reservationExpiry{id})}
	t.pipe.persist(env, []eventlog.Payload{eventlog.ReservationMade{Tenant: t.name, ReservationID: id, ExpiresAt: exp}},
		reserveDone{reply: env.Sender(), id: id, expiresAt: exp})
}

func (in *intake) reserved(env Env, d reserveDone, m Persisted) {
	env.Send(d.reply, Reserved{ID: d.id, ExpiresAt: d.expiresAt, Receipt: receiptOf(m.Receipt), Err: unavailable(m.Err)})
}

func (in *intake) release(t *Tenant, env Env, m Release) {
	if _, ok := in.reservations[m.ID]; !ok {
		env.Send(env.Sender(), Done{Err: reject(CodeReservationNotFound, "reservation %q is not active", clip(m.ID))})
		return
	}
	in.ending[m.ID] = true
	if !mutantReleaseTwice {
		in.dropReservation(env, m.ID)
	}
	t.pipe.persist(env, []eventlog.Payload{eventlog.ReservationReleased{Tenant: t.name, ReservationID: m.ID}}, releaseDone{env.Sender(), m.ID})
}

func (in *intake) released(env Env, d releaseDone, m Persisted) {
	delete(in.ending, d.id)
	env.Send(d.reply, Done{Receipt: receiptOf(m.Receipt), Err: unavailable(m.Err)})
}

func (in *intake) expire(t *Tenant, env Env, m reservationExpiry) {
	r, ok := in.reservations[m.id]
	if !ok {
		return // consumed or released meanwhile
	}
	if now := env.Now(); now.Before(r.expiresAt) { // the clock went back
		r.timer = env.After(r.expiresAt.Sub(now), m)
		in.reservations[m.id] = r
		return
	}
	in.ending[m.id] = true
	delete(in.reservations, m.id)
	t.pipe.persist(env, []eventlog.Payload{eventlog.ReservationExpired{Tenant: t.name, ReservationID: m.id}}, expiryDone(m))
}

func (in *intake) expired(d expiryDone) { delete(in.ending, d.id) }

func (in *intake) dropReservation(env Env, id string) {
	env.Cancel(in.reservations[id].timer)
	delete(in.reservations, id)
}

func (in *intake) redrive(t *Tenant, env Env, m Redrive) {
	var j *projections.Job
	env.Read(func(s *projections.Set) { j, _ = s.Job(m.JobID) })
	switch {
	case j == nil || j.Tenant != t.name:
		env.Send(env.Sender(), Done{Err: reject(CodeJobNotFound, "no job %q", clip(m.JobID))})
		return
	case j.Status != projections.StatusFailed:
		env.Send(env.Sender(), Done{Err: reject(CodeNotDeadLettered, "job %s is %s, not in the dead-letter queue", j.ID, j.Status)})
		return
	case j.FlowID != "":
		// Its flow has moved on from it: failed, or skipped the steps that needed it.
		env.Send(env.Sender(), Done{Err: &Rejection{Code: CodeFlowStep, Message: "job " + j.ID + " is step " + j.FlowStep + " of flow " + j.FlowID +
			", which decided what follows its failure; submit the flow again", Details: map[string]any{"flow_id": j.FlowID, "step": j.FlowStep}}})
		return
	case t.full(env, 1):
		env.Send(env.Sender(), Done{Err: &Rejection{Code: CodeQuotaExceeded,
			Message: "the tenant's max_active is reached", Details: map[string]any{"max_active": in.maxActive}}})
		return
	}
	in.redriving[m.JobID] = true // until the dispatcher settles it
	env.Forward(DispatcherRef(), redriveJob{Redrive: m}, env.Sender())
}

func (in *intake) redriveSettled(m redriveSettled) { delete(in.redriving, m.jobID) }
