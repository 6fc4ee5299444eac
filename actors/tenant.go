package actors

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"github.com/oklog/ulid/v2"
	"maps"
	"slices"
	"time"

	"github.com/tetherhq/tether/actors/signing"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Tenant is the intake of one tenant: it validates submits, keeps the idempotency index, the
// quota and the reservations, registers and revokes the tenant's workers, and issues and
// revokes its API keys and enroll tokens. One actor per tenant serialises all of it, so two
// submits can never both take the last slot, nor two registrations an enroll token's last use.
//
// Usage against max_active is the committed count of non-terminal jobs (from the projections)
// plus the jobs this actor admitted that are not durable yet, plus its reservations. Jobs leave
// the count only through committed terminal events, so the count can run high for a moment,
// never low.
type Tenant struct {
	name   string
	limits Limits

	maxActive    int
	maxRunning   int
	reservations map[string]reservation
	// pendingJobs counts jobs admitted (submitted, or started by a flow or a schedule) whose
	// events are not in the projections yet.
	pendingJobs int
	// redriving holds the jobs whose re-drive this actor admitted and the dispatcher has not
	// settled; each counts against max_active while the projections still show it dead.
	redriving   map[string]bool
	pendingIdem map[string]pendingKey
	// pendingEnroll counts the uses of each enroll token spent by registrations not yet durable.
	pendingEnroll map[string]int
	revoking      map[string]bool
	// renewing holds the workers whose token renewal is not durable yet: one at a time.
	renewing map[string]bool
	pipe     pipeline
	// lastJobID is the last job id this incarnation made: job ids sort in submission order.
	lastJobID ulid.ULID
	// pendingFlowIdem holds the idempotency keys of flows admitted and not durable yet.
	pendingFlowIdem map[string]pendingKey
	// flowBusy holds the flows with a decision in flight; flowAgain those to read again once
	// it is durable, because a step ended meanwhile.
	flowBusy, flowAgain map[string]bool
	// schedTimers holds the timer of each schedule that is not paused; schedBusy the schedules
	// with a decision or change in flight; schedNames the names of schedules being created.
	schedTimers map[string]TimerID
	schedBusy   map[string]bool
	schedNames  map[string]string
}

type reservation struct {
	expiresAt time.Time
	timer     TimerID
}

type pendingKey struct{ jobID, requestHash string }

// NewTenant returns the behaviour of a tenant's actor.
func NewTenant(name string, limits Limits) *Tenant {
	return &Tenant{name: name, limits: limits}
}

// Recover implements Behaviour.
func (t *Tenant) Recover(env Env) {
	var q projections.Tenant
	env.Read(func(s *projections.Set) { q = s.Tenant(t.name) })
	t.maxActive, t.maxRunning = q.MaxActive, q.MaxRunning
	t.reservations = map[string]reservation{}
	t.pendingJobs, t.pendingIdem, t.revoking, t.pipe, t.redriving = 0, map[string]pendingKey{}, map[string]bool{}, pipeline{}, map[string]bool{}
	t.pendingEnroll, t.renewing = map[string]int{}, map[string]bool{}
	t.pendingFlowIdem, t.flowBusy, t.flowAgain = map[string]pendingKey{}, map[string]bool{}, map[string]bool{}
	t.schedTimers, t.schedBusy, t.schedNames = map[string]TimerID{}, map[string]bool{}, map[string]string{}
	now := env.Now()
	for _, id := range slices.Sorted(maps.Keys(q.Reservations)) { // timers in a replayable order
		exp := q.Reservations[id]
		t.reservations[id] = reservation{expiresAt: exp, timer: env.After(max(exp.Sub(now), 0), reservationExpiry{id})}
	}
	// A step that ended while no actor of the tenant was there to hear it, or a flow that
	// ended and has jobs left to cancel, is taken up now.
	var flows, schedules []string
	env.Read(func(s *projections.Set) { flows, schedules = s.LiveFlows(t.name), s.ActiveSchedules(t.name) })
	for _, id := range flows {
		t.advanceFlow(env, id)
	}
	// Each schedule decides the ticks it missed while the server was down, and sets its timer.
	for _, id := range schedules {
		t.tickSchedule(env, id)
	}
}

type reservationExpiry struct{ id string }

// redriveSettled tells the tenant that a re-drive it admitted is durable or refused.
type redriveSettled struct{ jobID string }

type submitDone struct {
	reply   Ref
	jobs    []SubmittedJob
	waiting []Waiting // with SubmitSeq holding the event's index in the append until durable
	keys    []string
	newJobs int
}

type replyDone struct{ reply Ref }

type revokeDone struct {
	reply    Ref
	workerID string
}

type renewDone struct {
	reply    Ref
	workerID string
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

type registerDone struct {
	reply         Ref
	workerID      string
	enrollTokenID string
}

type createdDone struct {
	reply Ref
	id    string
}

// Receive implements Behaviour.
func (t *Tenant) Receive(env Env, msg any) {
	switch m := msg.(type) {
	case Submit:
		t.submit(env, m)
	case SubmitFlow:
		t.submitFlow(env, m)
	case CancelFlow:
		t.cancelFlow(env, m, env.Sender())
	case flowStepEnded:
		t.advanceFlow(env, m.FlowID)
	case CreateSchedule:
		t.createSchedule(env, m, env.Sender())
	case PauseSchedule:
		t.pauseSchedule(env, m, env.Sender())
	case DeleteSchedule:
		t.deleteSchedule(env, m, env.Sender())
	case scheduleTick:
		t.tickSchedule(env, m.id)
	case Reserve:
		t.reserve(env, m)
	case Release:
		t.release(env, m)
	case reservationExpiry:
		t.expire(env, m)
	case SetQuota:
		t.setQuota(env, m)
	case RegisterWorker:
		t.register(env, m)
	case RevokeWorker:
		t.revoke(env, m)
	case RenewWorkerToken:
		t.renewToken(env, m)
	case CreateAPIKey:
		id := NewID(env)
		t.pipe.persist(env, []eventlog.Payload{eventlog.APIKeyCreated{Tenant: t.name, KeyID: id, KeyHash: m.KeyHash}}, createdDone{env.Sender(), id})
	case RevokeAPIKey:
		t.revokeKey(env, m)
	case CreateEnrollToken:
		t.createEnrollToken(env, m)
	case Redrive:
		t.redrive(env, m)
	case redriveSettled:
		delete(t.redriving, m.jobID)
	case Persisted:
		t.persisted(env, m)
	}
}

// setQuota changes the limits the command names and keeps the others: the tenant's actor is
// the only writer of its quota, so its read-modify-write cannot interleave with another.
func (t *Tenant) setQuota(env Env, m SetQuota) {
	maxActive, maxRunning := t.maxActive, t.maxRunning
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
	t.maxActive, t.maxRunning = maxActive, maxRunning
	t.pipe.persist(env, []eventlog.Payload{eventlog.TenantQuotaSet{Tenant: t.name, MaxActive: maxActive, MaxRunning: maxRunning}},
		quotaDone{reply: env.Sender(), maxRunning: maxRunning})
}

func (t *Tenant) usage(env Env) int {
	var active int
	env.Read(func(s *projections.Set) {
		active = s.Tenant(t.name).Active
		for id := range t.redriving {
			// A re-drive the projections show is in Active already: counting it again until
			// the dispatcher's notice arrives would refuse the next one for nothing.
			if j := s.JobRef(id); j == nil || j.Status.Terminal() {
				active++
			}
		}
	})
	return active + t.pendingJobs + len(t.reservations)
}

func (t *Tenant) submit(env Env, m Submit) {
	reply := env.Sender()
	if len(m.Jobs) == 0 || len(m.Jobs) > BatchJobsMax {
		env.Send(reply, Submitted{Err: reject(CodeInvalidArgument, "a batch holds 1..%d jobs, not %d", BatchJobsMax, len(m.Jobs))})
		return
	}
	now := env.Now()
	out := make([]SubmittedJob, len(m.Jobs))
	hashes := make([]string, len(m.Jobs))
	consumed := map[string]bool{}
	newJobs := 0
	for i := range m.Jobs {
		spec := &m.Jobs[i]
		if r := spec.normalize(t.limits); r != nil {
			if len(m.Jobs) > 1 {
				r.Details = map[string]any{"index": i}
			}
			env.Send(reply, Submitted{Err: r})
			return
		}
		if key := spec.IdempotencyKey; key != "" {
			hashes[i] = spec.requestHash()
			id, hash, ok := t.lookupKey(env, key, now, false)
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
			r, ok := t.reservations[rid]
			if !ok || !now.Before(r.expiresAt) || consumed[rid] {
				env.Send(reply, Submitted{Err: reject(CodeReservationNotFound, "reservation %q is not active", clip(rid))})
				return
			}
			consumed[rid] = true
		}
		out[i] = SubmittedJob{ID: NextID(env, &t.lastJobID)}
		newJobs++
	}
	if t.maxActive > 0 && newJobs > 0 {
		if u := t.usage(env) + newJobs - len(consumed); u > t.maxActive {
			env.Send(reply, Submitted{Err: &Rejection{Code: CodeQuotaExceeded,
				Message: "the tenant's max_active would be exceeded", Details: map[string]any{"max_active": t.maxActive, "requested": newJobs}}})
			return
		}
	}
	if newJobs == 0 {
		// Every job was there already. Answer once the submits that made them are durable, with
		// the receipt of the newest of them.
		t.pipe.whenSettled(func() {
			var seq uint64
			lost := false
			env.Read(func(s *projections.Set) {
				for i, j := range out {
					if jr := s.JobRef(j.ID); jr != nil {
						seq = max(seq, jr.SubmitSeq)
					} else if e, ok := s.Idempotency(t.name, m.Jobs[i].IdempotencyKey, now); ok && e.JobID == j.ID {
						seq = max(seq, e.Seq) // durable, and expired since: the key outlives its job
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
	done := submitDone{reply: reply, jobs: out, newJobs: newJobs}
	events := make([]eventlog.Payload, 0, newJobs)
	for i, spec := range m.Jobs {
		if out[i].IdempotentHit {
			continue
		}
		id := out[i].ID
		runAt, reason := spec.RunAt, eventlog.ScheduledRunAt
		if spec.Delay > 0 {
			runAt, reason = now.Add(spec.Delay), eventlog.ScheduledDelay
		}
		done.waiting = append(done.waiting, Waiting{ID: id, Tenant: t.name, Queue: spec.Queue, Priority: spec.Priority, SubmitSeq: uint64(len(events))})
		events = append(events, eventlog.JobSubmitted{
			JobID: id, Tenant: t.name, Queue: spec.Queue, Type: spec.Type, Payload: spec.Payload,
			Priority: spec.Priority, Labels: spec.Labels, MaxAttempts: spec.MaxAttempts,
			LeaseTTLMillis: spec.LeaseTTL.Milliseconds(), IdempotencyKey: spec.IdempotencyKey,
			RequestHash: hashes[i], ReservationID: spec.ReservationID, APIKeyID: m.APIKeyID,
			ResultTTLMillis: spec.ResultTTL.Milliseconds(),
		})
		if runAt.After(now) {
			done.waiting[len(done.waiting)-1].RunAt = runAt
			events = append(events, eventlog.JobScheduled{JobID: id, RunAt: runAt.UTC(), Reason: reason})
		}
		if spec.ReservationID != "" {
			t.dropReservation(env, spec.ReservationID)
			events = append(events, eventlog.ReservationConsumed{Tenant: t.name, ReservationID: spec.ReservationID, JobID: id})
		}
		if spec.IdempotencyKey != "" {
			t.pendingIdem[spec.IdempotencyKey] = pendingKey{jobID: id, requestHash: hashes[i]}
			done.keys = append(done.keys, spec.IdempotencyKey)
		}
	}
	t.pendingJobs += newJobs
	t.pipe.persist(env, events, done)
	if mutantAckBeforeFsync {
		env.Send(reply, Submitted{Jobs: out})
	}
}

// lookupKey finds the job (or, with flow, the flow) an idempotency key names: one admitted
// here and not durable yet, or one in the projections that has not expired.
func (t *Tenant) lookupKey(env Env, key string, now time.Time, flow bool) (id, hash string, ok bool) {
	pending, durable := t.pendingIdem, (*projections.Set).Idempotency
	if flow {
		pending, durable = t.pendingFlowIdem, (*projections.Set).FlowIdempotency
	}
	if p, ok := pending[key]; ok {
		return p.jobID, p.requestHash, true
	}
	var e projections.Idempotency
	env.Read(func(s *projections.Set) { e, ok = durable(s, t.name, key, now) })
	return e.JobID, e.RequestHash, ok
}

func (t *Tenant) reserve(env Env, m Reserve) {
	ttl := m.TTL
	if ttl == 0 {
		ttl = ReservationTTLDefault
	}
	switch {
	case ttl < 0 || ttl > ReservationTTLMax:
		env.Send(env.Sender(), Reserved{Err: reject(CodeInvalidArgument, "ttl %s is outside 1s..%s", ttl, ReservationTTLMax)})
		return
	case len(t.reservations) >= ReservationsMax:
		env.Send(env.Sender(), Reserved{Err: reject(CodeQuotaExceeded, "the tenant holds %d reservations, the most allowed", ReservationsMax)})
		return
	case t.maxActive > 0 && t.usage(env)+1 > t.maxActive:
		env.Send(env.Sender(), Reserved{Err: &Rejection{Code: CodeQuotaExceeded,
			Message: "the tenant's max_active is reached", Details: map[string]any{"max_active": t.maxActive}}})
		return
	}
	id := NewID(env)
	exp := env.Now().Add(ttl).UTC()
	t.reservations[id] = reservation{expiresAt: exp, timer: env.After(ttl, reservationExpiry{id})}
	t.pipe.persist(env, []eventlog.Payload{eventlog.ReservationMade{Tenant: t.name, ReservationID: id, ExpiresAt: exp}},
		reserveDone{reply: env.Sender(), id: id, expiresAt: exp})
}

func (t *Tenant) release(env Env, m Release) {
	if _, ok := t.reservations[m.ID]; !ok {
		env.Send(env.Sender(), Done{Err: reject(CodeReservationNotFound, "reservation %q is not active", clip(m.ID))})
		return
	}
	if !mutantReleaseTwice {
		t.dropReservation(env, m.ID)
	}
	t.pipe.persist(env, []eventlog.Payload{eventlog.ReservationReleased{Tenant: t.name, ReservationID: m.ID}}, replyDone{env.Sender()})
}

func (t *Tenant) expire(env Env, m reservationExpiry) {
	r, ok := t.reservations[m.id]
	if !ok {
		return // consumed or released meanwhile
	}
	if now := env.Now(); now.Before(r.expiresAt) { // the clock went back
		r.timer = env.After(r.expiresAt.Sub(now), m)
		t.reservations[m.id] = r
		return
	}
	delete(t.reservations, m.id)
	t.pipe.persist(env, []eventlog.Payload{eventlog.ReservationExpired{Tenant: t.name, ReservationID: m.id}}, nil)
}

func (t *Tenant) dropReservation(env Env, id string) {
	env.Cancel(t.reservations[id].timer)
	delete(t.reservations, id)
}

// Worker registration limits.
const (
	WorkerNameLenMax = 128
	WorkerQueuesMax  = 32
	CapacityMax      = 1000
)

func (t *Tenant) register(env Env, m RegisterWorker) {
	bad := func(format string, args ...any) {
		env.Send(env.Sender(), Registered{Err: reject(CodeInvalidArgument, format, args...)})
	}
	if len(m.Name) == 0 || len(m.Name) > WorkerNameLenMax {
		bad("name must be 1..%d bytes", WorkerNameLenMax)
		return
	}
	if len(m.Queues) == 0 || len(m.Queues) > WorkerQueuesMax {
		bad("a worker serves 1..%d queues", WorkerQueuesMax)
		return
	}
	for _, q := range m.Queues {
		if !validName(q, QueueLenMax, false) {
			bad("queue %q must be 1..%d of [A-Za-z0-9_-]", clip(q), QueueLenMax)
			return
		}
	}
	if m.Capacity < 1 || m.Capacity > CapacityMax {
		bad("capacity %d is outside 1..%d", m.Capacity, CapacityMax)
		return
	}
	publicKey := ""
	if m.PublicKey != "" {
		k, err := signing.DecodePublicKey(m.PublicKey)
		if err != nil {
			bad("public_key must be a base64 (standard or URL-safe, padding optional) Ed25519 public key of %d bytes", ed25519.PublicKeySize)
			return
		}
		publicKey = base64.StdEncoding.EncodeToString(k) // one form in the log and on the wire
	}
	if r := checkLabels(m.Labels); r != nil {
		env.Send(env.Sender(), Registered{Err: r})
		return
	}
	id := NewID(env)
	var events []eventlog.Payload
	if m.EnrollTokenID != "" {
		if r := t.spendEnrollUse(env, m.EnrollTokenID); r != nil {
			env.Send(env.Sender(), Registered{Err: r})
			return
		}
		events = append(events, eventlog.EnrollTokenUsed{Tenant: t.name, TokenID: m.EnrollTokenID, WorkerID: id})
	}
	events = append(events, eventlog.WorkerRegistered{
		WorkerID: id, Tenant: t.name, Name: m.Name, Queues: m.Queues, Capacity: m.Capacity,
		PublicKey: publicKey, Labels: m.Labels, TokenHash: m.TokenHash, ExpiresAt: m.ExpiresAt.UTC(),
		EnrollTokenID: m.EnrollTokenID,
	})
	t.pipe.persist(env, events, registerDone{reply: env.Sender(), workerID: id, enrollTokenID: m.EnrollTokenID})
}

// spendEnrollUse takes one use of an enroll token, counting the uses of registrations that are
// not durable yet, so two registrations can never both take the last use.
func (t *Tenant) spendEnrollUse(env Env, id string) *Rejection {
	var tok projections.EnrollToken
	var ok bool
	env.Read(func(s *projections.Set) { tok, ok = s.EnrollToken(id) })
	switch {
	case !ok || tok.Tenant != t.name:
		return reject(CodeUnauthenticated, "unknown enroll token")
	case !env.Now().Before(tok.ExpiresAt):
		return reject(CodeTokenExpired, "the enroll token expired at %s", tok.ExpiresAt.Format(time.RFC3339))
	case tok.Used+t.pendingEnroll[id] >= tok.Uses:
		return reject(CodeEnrollTokenUsedUp, "the enroll token's %d uses are spent", tok.Uses)
	}
	t.pendingEnroll[id]++
	return nil
}

// Enroll token limits.
const (
	EnrollUsesMax    = 10_000
	EnrollTTLMax     = 365 * 24 * time.Hour
	EnrollTTLDefault = 24 * time.Hour
)

func (t *Tenant) createEnrollToken(env Env, m CreateEnrollToken) {
	now := env.Now()
	switch {
	case m.Uses < 1 || m.Uses > EnrollUsesMax:
		env.Send(env.Sender(), Created{Err: reject(CodeInvalidArgument, "uses %d is outside 1..%d", m.Uses, EnrollUsesMax)})
		return
	case !m.ExpiresAt.After(now) || m.ExpiresAt.Sub(now) > EnrollTTLMax:
		env.Send(env.Sender(), Created{Err: reject(CodeInvalidArgument, "an enroll token lasts more than 0 s and at most %s", EnrollTTLMax)})
		return
	}
	id := NewID(env)
	t.pipe.persist(env, []eventlog.Payload{eventlog.EnrollTokenCreated{Tenant: t.name, TokenID: id, TokenHash: m.TokenHash, Uses: m.Uses, ExpiresAt: m.ExpiresAt.UTC()}},
		createdDone{env.Sender(), id})
}

func (t *Tenant) revokeKey(env Env, m RevokeAPIKey) {
	var k projections.APIKey
	var ok bool
	env.Read(func(s *projections.Set) { k, ok = s.APIKey(m.KeyID) })
	switch {
	case !ok || k.Tenant != t.name:
		env.Send(env.Sender(), Done{Err: reject(CodeAPIKeyNotFound, "no API key %q", clip(m.KeyID))})
	case k.Revoked:
		env.Send(env.Sender(), Done{}) // revoking twice changes nothing
	default:
		t.pipe.persist(env, []eventlog.Payload{eventlog.APIKeyRevoked{Tenant: t.name, KeyID: k.ID}}, replyDone{env.Sender()})
	}
}

func (t *Tenant) revoke(env Env, m RevokeWorker) {
	var w projections.Worker
	var ok bool
	env.Read(func(s *projections.Set) { w, ok = s.Worker(m.WorkerID) })
	switch {
	case !ok || w.Tenant != t.name:
		env.Send(env.Sender(), Done{Err: reject(CodeWorkerNotFound, "no worker %q", clip(m.WorkerID))})
	case w.Revoked || t.revoking[m.WorkerID]:
		env.Send(env.Sender(), Done{}) // revoking twice changes nothing
	default:
		t.revoking[m.WorkerID] = true
		t.pipe.persist(env, []eventlog.Payload{eventlog.WorkerRevoked{WorkerID: m.WorkerID, By: m.By}},
			revokeDone{reply: env.Sender(), workerID: m.WorkerID})
	}
}

// Token renewal limits.
const (
	// TokenRenewGrace is how long the token a renewal was asked with keeps working.
	TokenRenewGrace = 5 * time.Minute
	// TokenRenewIntervalMin is how young a token may be renewed at the earliest (or a quarter of
	// its life, if that is shorter): each renewal is an event, and a worker must not flood the
	// log with them. It is well inside TokenRenewGrace, so a worker that lost a renewal's
	// answer can renew again with the token it asked with.
	TokenRenewIntervalMin = time.Minute
)

func (t *Tenant) renewToken(env Env, m RenewWorkerToken) {
	var w projections.Worker
	var ok bool
	env.Read(func(s *projections.Set) { w, ok = s.Worker(m.WorkerID) })
	now := env.Now()
	presentedUntil := w.TokenValidUntil(m.PresentedHash)
	switch {
	case !ok || w.Tenant != t.name:
		env.Send(env.Sender(), Done{Err: reject(CodeWorkerNotFound, "no worker %q", clip(m.WorkerID))})
		return
	case w.Revoked || t.revoking[m.WorkerID]:
		env.Send(env.Sender(), Done{Err: reject(CodeWorkerRevoked, "worker %s is revoked", w.ID)})
		return
	case !now.Before(presentedUntil):
		env.Send(env.Sender(), Done{Err: reject(CodeTokenExpired, "the token this renewal was asked with no longer works")})
		return
	case t.renewing[m.WorkerID] || now.Sub(w.TokenIssuedAt) < min(TokenRenewIntervalMin, w.ExpiresAt.Sub(w.TokenIssuedAt)/4):
		// Whatever token it is asked with: a renewal sent twice (a retry, a duplicate on the
		// way) must not end the token the first one gave, which the worker may hold by now. A
		// worker that lost the answer keeps the token it asked with for the grace, and asks again.
		env.Send(env.Sender(), Done{Err: reject(CodeTokenRenewedRecently, "the worker's token was issued at %s; renew it later", w.TokenIssuedAt.Format(time.RFC3339))})
		return
	case !m.ExpiresAt.After(now):
		env.Send(env.Sender(), Done{Err: reject(CodeInvalidArgument, "a new token must expire in the future")})
		return
	}
	t.renewing[m.WorkerID] = true
	t.pipe.persist(env, []eventlog.Payload{eventlog.WorkerTokenRotated{
		WorkerID: w.ID, TokenHash: m.TokenHash, ExpiresAt: m.ExpiresAt.UTC(),
		PreviousTokenHash: m.PresentedHash, PreviousValidUntil: minTime(now.Add(TokenRenewGrace), presentedUntil).UTC(),
	}}, renewDone{reply: env.Sender(), workerID: w.ID})
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (t *Tenant) redrive(env Env, m Redrive) {
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
	case t.maxActive > 0 && t.usage(env)+1 > t.maxActive:
		env.Send(env.Sender(), Done{Err: &Rejection{Code: CodeQuotaExceeded,
			Message: "the tenant's max_active is reached", Details: map[string]any{"max_active": t.maxActive}}})
		return
	}
	t.redriving[m.JobID] = true // until the dispatcher settles it
	env.Forward(DispatcherRef(), redriveJob{Redrive: m}, env.Sender())
}

// templateJob makes the job.submitted of a job that a template defines, with payload (the
// template's own, or one made from it), and its place in the queue.
func (t *Tenant) templateJob(env Env, tpl eventlog.JobTemplate, payload json.RawMessage) (eventlog.JobSubmitted, Waiting) {
	id := NextID(env, &t.lastJobID)
	return eventlog.JobSubmitted{
			JobID: id, Tenant: t.name, Queue: tpl.Queue, Type: tpl.Type, Payload: payload, Priority: tpl.Priority,
			Labels: tpl.Labels, MaxAttempts: tpl.MaxAttempts, LeaseTTLMillis: tpl.LeaseTTLMillis, ResultTTLMillis: tpl.ResultTTLMillis,
		},
		Waiting{ID: id, Tenant: t.name, Queue: tpl.Queue, Priority: tpl.Priority}
}

// enqueue hands the dispatcher the jobs an append submitted, once it is durable; each one's
// SubmitSeq holds its event's index in the append until then.
func enqueue(env Env, waiting []Waiting, r eventlog.Receipt) {
	if len(waiting) == 0 {
		return
	}
	for i := range waiting {
		waiting[i].SubmitSeq += r.First
	}
	env.Send(DispatcherRef(), Enqueue{Jobs: waiting, Seq: r.Last})
}

func (t *Tenant) persisted(env Env, m Persisted) {
	defer t.pipe.settled()
	err := unavailable(m.Err)
	switch d := m.Then.(type) {
	case submitDone:
		t.pendingJobs -= d.newJobs
		for _, k := range d.keys {
			delete(t.pendingIdem, k)
		}
		if err != nil {
			env.Send(d.reply, Submitted{Err: err})
			return
		}
		enqueue(env, d.waiting, m.Receipt)
		if !mutantAckBeforeFsync {
			env.Send(d.reply, Submitted{Jobs: d.jobs, Receipt: receiptOf(m.Receipt)})
		}
	case reserveDone:
		env.Send(d.reply, Reserved{ID: d.id, ExpiresAt: d.expiresAt, Receipt: receiptOf(m.Receipt), Err: err})
	case registerDone:
		if d.enrollTokenID != "" {
			if t.pendingEnroll[d.enrollTokenID]--; t.pendingEnroll[d.enrollTokenID] == 0 {
				delete(t.pendingEnroll, d.enrollTokenID)
			}
		}
		env.Send(d.reply, Registered{WorkerID: d.workerID, Receipt: receiptOf(m.Receipt), Err: err})
	case createdDone:
		env.Send(d.reply, Created{ID: d.id, Receipt: receiptOf(m.Receipt), Err: err})
	case renewDone:
		delete(t.renewing, d.workerID)
		env.Send(d.reply, Done{Receipt: receiptOf(m.Receipt), Err: err})
	case revokeDone:
		delete(t.revoking, d.workerID)
		if err == nil {
			env.Send(DispatcherRef(), WorkerRevokedNotice{WorkerID: d.workerID, Seq: m.Receipt.Last})
		}
		env.Send(d.reply, Done{Receipt: receiptOf(m.Receipt), Err: err})
	case quotaDone:
		if err == nil {
			env.Send(DispatcherRef(), QuotaChanged{Tenant: t.name, MaxRunning: d.maxRunning})
		}
		env.Send(d.reply, Done{Receipt: receiptOf(m.Receipt), Err: err})
	case replyDone:
		env.Send(d.reply, Done{Receipt: receiptOf(m.Receipt), Err: err})
	case flowDone:
		t.flowPersisted(env, d, m)
	case scheduleDone:
		t.schedulePersisted(env, d, m)
	}
}
