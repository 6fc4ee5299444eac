package actors

import (
	"encoding/json"

	"github.com/oklog/ulid/v2"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Tenant is the actor of one tenant. One actor per tenant serialises everything that spends
// the tenant's limits, so two submits can never both take the last slot of max_active, nor two
// registrations an enroll token's last use. It is four parts, each with its own state, reset,
// messages, recovery and invariants:
//
//   - intake (intake.go): submits, the idempotency index, max_active and max_running,
//     reservations, and the quota check of a re-drive;
//   - credentials (credentials.go): API keys, enroll tokens, and the registration, token
//     renewal and revocation of workers;
//   - flows (flow.go): flows submitted, advanced as their steps end, and cancelled;
//   - schedules (schedule.go): schedules created, paused, resumed, deleted and fired.
//
// What they share is the tenant's: its name and limits; its pipeline, since one actor's
// persists complete in the order they were made, so "nothing pending" means every part's
// decisions are durable; the job ids it issues, which sort in the order it made them; and
// max_active, which intake keeps and the jobs of flows and schedules spend (usage).
type Tenant struct {
	name   string
	limits Limits
	pipe   pipeline
	// lastJobID is the last job (or flow) id this incarnation made: they sort in submission order.
	lastJobID ulid.ULID

	intake    intake
	creds     credentials
	flows     flows
	schedules schedules
}

// NewTenant returns the behaviour of a tenant's actor.
func NewTenant(name string, limits Limits) *Tenant {
	return &Tenant{name: name, limits: limits}
}

// Recover implements Behaviour. Every part forgets what it held in memory before any takes up
// what the projections say it owns: flows and schedules may start jobs as they recover, which
// intake's quota and the pipeline must count.
func (t *Tenant) Recover(env Env) {
	t.pipe.reset()
	t.intake.reset()
	t.creds.reset()
	t.flows.reset()
	t.schedules.reset()
	t.intake.recover(t, env)
	var flows, schedules []string
	env.Read(func(s *projections.Set) { flows, schedules = s.LiveFlows(t.name), s.ActiveSchedules(t.name) })
	// A step that ended while no actor of the tenant was there to hear it, or a flow that
	// ended and has jobs left to cancel, is taken up now.
	for _, id := range flows {
		t.flows.advance(t, env, id)
	}
	// Each schedule decides the ticks it missed while the server was down, and sets its timer.
	for _, id := range schedules {
		t.schedules.tick(t, env, id)
	}
}

// Receive implements Behaviour: each message goes to the one part that handles it.
func (t *Tenant) Receive(env Env, msg any) {
	switch m := msg.(type) {
	case Submit:
		t.intake.submit(t, env, m)
	case Reserve:
		t.intake.reserve(t, env, m)
	case Release:
		t.intake.release(t, env, m)
	case reservationExpiry:
		t.intake.expire(t, env, m)
	case SetQuota:
		t.intake.setQuota(t, env, m)
	case Redrive:
		t.intake.redrive(t, env, m)
	case redriveSettled:
		t.intake.redriveSettled(m)
	case RegisterWorker:
		t.creds.register(t, env, m)
	case RevokeWorker:
		t.creds.revoke(t, env, m)
	case RenewWorkerToken:
		t.creds.renewToken(t, env, m)
	case CreateAPIKey:
		t.creds.createAPIKey(t, env, m)
	case RevokeAPIKey:
		t.creds.revokeKey(t, env, m)
	case CreateEnrollToken:
		t.creds.createEnrollToken(t, env, m)
	case SubmitFlow:
		t.flows.submit(t, env, m)
	case CancelFlow:
		t.flows.cancel(t, env, m, env.Sender())
	case flowStepEnded:
		t.flows.advance(t, env, m.FlowID)
	case CreateSchedule:
		t.schedules.create(t, env, m, env.Sender())
	case PauseSchedule:
		t.schedules.pause(t, env, m, env.Sender())
	case DeleteSchedule:
		t.schedules.delete(t, env, m, env.Sender())
	case scheduleTick:
		t.schedules.tick(t, env, m.id)
	case *Persisted:
		t.persisted(env, *m)
	}
}

// persisted hands a durable decision to the part that made it: each part's decisions carry a
// `then` of its own type.
func (t *Tenant) persisted(env Env, m Persisted) {
	defer t.pipe.settled()
	switch d := m.Then.(type) {
	case *submitDone:
		t.intake.submitted(env, d, m)
	case reserveDone:
		t.intake.reserved(env, d, m)
	case releaseDone:
		t.intake.released(env, d, m)
	case expiryDone:
		t.intake.expired(d)
	case quotaDone:
		t.intake.quotaSet(t, env, d, m)
	case registerDone:
		t.creds.registered(env, d, m)
	case renewDone:
		t.creds.renewed(env, d, m)
	case revokeDone:
		t.creds.revoked(env, d, m)
	case createdDone:
		env.Send(d.reply, Created{ID: d.id, Receipt: receiptOf(m.Receipt), Err: unavailable(m.Err)})
	case replyDone:
		env.Send(d.reply, Done{Receipt: receiptOf(m.Receipt), Err: unavailable(m.Err)})
	case flowDone:
		t.flows.persisted(t, env, d, m)
	case scheduleDone:
		t.schedules.persisted(t, env, d, m)
	}
}

// createdDone answers a create (an API key, an enroll token) once it is durable.
type createdDone struct {
	reply Ref
	id    string
}

// replyDone answers a change once it is durable.
type replyDone struct{ reply Ref }

// usage is what counts against max_active: the committed jobs and re-drives and the
// reservations intake holds, and the jobs every part admitted that are not durable yet.
func (t *Tenant) usage(env Env) int {
	return t.intake.usage(t, env) + t.flows.pendingJobs + t.schedules.pendingJobs
}

// full reports whether n more jobs would take the tenant past its max_active.
func (t *Tenant) full(env Env, n int) bool {
	return t.intake.maxActive > 0 && t.usage(env)+n > t.intake.maxActive
}

// templateJob makes the job.submitted of a job that a template defines, with payload (the
// template's own, or one made from it), and its place in the queue.
func (t *Tenant) templateJob(env Env, tpl eventlog.JobTemplate, payload json.RawMessage) (eventlog.JobSubmitted, Waiting) {
	id := NextID(env, &t.lastJobID)
	return eventlog.JobSubmitted{
			JobID: id, Tenant: t.name, Queue: tpl.Queue, Type: tpl.Type, Payload: payload, Priority: tpl.Priority,
			Labels: tpl.Labels, MaxAttempts: tpl.MaxAttempts, LeaseTTLMillis: tpl.LeaseTTLMillis, ResultTTLMillis: tpl.ResultTTLMillis,
			ConcurrencyKey: tpl.ConcurrencyKey, RateLimits: tpl.RateLimits,
		},
		Waiting{ID: id, Tenant: t.name, Queue: tpl.Queue, Priority: tpl.Priority, Key: tpl.ConcurrencyKey, RateLimits: tpl.RateLimits}
}

// enqueue hands the dispatcher the jobs an append submitted, once it is durable; each one's
// SubmitSeq holds its event's index in the append until then. The notice is sent as a pointer,
// which is not boxed apart: into msg, where the caller has room for it, else a new one.
func enqueue(env Env, msg *Enqueue, waiting []Waiting, r eventlog.Receipt) {
	if len(waiting) == 0 {
		return
	}
	for i := range waiting {
		waiting[i].SubmitSeq += r.First
	}
	if msg == nil {
		msg = new(Enqueue)
	}
	*msg = Enqueue{Jobs: waiting, Seq: r.Last}
	env.Send(DispatcherRef(), msg)
}
