package broker

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// call sends msg to an actor as an external caller and waits for the one reply.
func (b *Broker) call(ctx context.Context, to actors.Ref, msg any) (any, error) {
	if to.Kind == actors.RefTenant && !actors.ValidTenant(to.ID) {
		return nil, &actors.Rejection{Code: actors.CodeInvalidArgument, Message: "a tenant name is 1..64 of [A-Za-z0-9_.-]"}
	}
	return b.callVia(ctx, route{to: to}, msg)
}

// waiter is the sink of a call: it keeps the first reply for the caller, who waits on it.
type waiter chan any

func (w waiter) deliver(m any) {
	select {
	case w <- m:
	default: // a second reply; a call takes one
	}
}

// callVia is call by a route. A call costs its waiter, the one allocation of its own.
func (b *Broker) callVia(ctx context.Context, r route, msg any) (any, error) {
	select {
	case <-b.closing:
		return nil, ErrClosed
	default:
	}
	w := make(waiter, 1)
	b.deliver(r, msg, actors.Ref{Kind: actors.RefExternal, External: w})
	select {
	case m := <-w:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-b.elog.Failed():
		return nil, b.elog.Err()
	case <-b.stopped:
		return nil, ErrClosed
	}
}

// callFor is call for a reply of a known type.
func callFor[T any](ctx context.Context, b *Broker, to actors.Ref, msg any) (T, error) {
	return replyOf[T](b.call(ctx, to, msg))
}

func replyOf[T any](r any, err error) (T, error) {
	if err != nil {
		var zero T
		return zero, err
	}
	return r.(T), nil
}

// fill completes a receipt that names only a seq (an idempotent hit, a repeated completion)
// with that record's chain hash.
func (b *Broker) fill(r actors.Receipt) actors.Receipt {
	if r.Hash == "" && r.Seq != 0 {
		if rec, err := b.elog.Get(r.Seq); err == nil {
			r.Hash = rec.Hash.String()
		}
	}
	return r
}

// errOf turns a rejection into an error, keeping a nil *Rejection a nil error.
func errOf(r *actors.Rejection) error {
	if r == nil {
		return nil
	}
	return r
}

// SubmitResult is one job a submit accepted: the tenant's answer itself, which Submit returns
// as it came (its slice is the caller's once answered) with an idempotent hit's job filled in,
// rather than a copy made for each submit.
type SubmitResult = actors.SubmittedJob

// traceparentKey is the context key of a request's W3C trace context (WithTraceparent).
type traceparentKey struct{}

// WithTraceparent returns ctx carrying a W3C traceparent, which the jobs a Submit with it
// makes continue.
func WithTraceparent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return context.WithValue(ctx, traceparentKey{}, traceparent)
}

// Traceparent is the W3C trace context ctx carries, if any.
func Traceparent(ctx context.Context) string {
	s, _ := ctx.Value(traceparentKey{}).(string)
	return s
}

// Submit accepts a batch of jobs for a tenant, all or none; they continue the trace ctx
// carries (WithTraceparent).
func (b *Broker) Submit(ctx context.Context, tenant, apiKeyID string, specs ...actors.JobSpec) ([]SubmitResult, actors.Receipt, error) {
	r, err := callFor[actors.Submitted](ctx, b, actors.TenantRef(tenant), actors.Submit{Tenant: tenant, Jobs: specs, APIKeyID: apiKeyID, Traceparent: Traceparent(ctx)})
	if err != nil || r.Err != nil {
		return nil, actors.Receipt{}, firstErr(err, r.Err)
	}
	out := r.Jobs
	for i, j := range out {
		if j.Job != nil {
			continue
		}
		// An idempotent hit, which has no snapshot.
		job, ok := b.job(j.ID)
		if !ok || b.cfg.Retention.Expired(job, b.clock()) {
			// An idempotent hit on a job that has left the views: the key outlives it.
			job = &projections.Job{ID: j.ID, Tenant: tenant, Status: projections.StatusExpired}
		}
		out[i].Job = job
	}
	return out, b.fill(r.Receipt), nil
}

func firstErr(err error, r *actors.Rejection) error {
	if err != nil {
		return err
	}
	return errOf(r)
}

// Get returns a tenant's job; another tenant's job is not found, nor is one whose retention has
// ended (Expired tells the two apart).
func (b *Broker) Get(tenant, id string) (job *projections.Job, ok bool) {
	job, ok = b.job(id)
	if !ok || job.Tenant != tenant || b.cfg.Retention.Expired(job, b.clock()) {
		return nil, false
	}
	return job, true
}

// job returns a copy of a job, reading the table, if it is there, outside the lock that
// commits wait for.
func (b *Broker) job(id string) (job *projections.Job, ok bool) {
	b.rt.ReadOutside(func(locked projections.Locked) { job, ok = projections.JobOutside(locked, id) })
	return job, ok
}

// PeekJob calls fn with a job without copying it, if there is one, reading the table outside
// the lock that commits wait for; fn must neither keep nor change it.
func (b *Broker) PeekJob(id string, fn func(*projections.Job)) (ok bool) {
	b.rt.ReadOutside(func(locked projections.Locked) { ok = projections.PeekOutside(locked, id, fn) })
	return ok
}

// Expired reports whether the tenant's job id finished and has left the views: its retention
// ended, or it was deleted or purged. The views keep a tombstone of each job that left them,
// which is how a job that expired differs from one that never was once the archive segments
// that held its history are deleted; a job that expired under a build that kept no tombstones
// is found by its stream in the log.
func (b *Broker) Expired(tenant, id string) bool {
	if len(id) > idLenMax {
		return false
	}
	now := b.clock()
	known, expired := false, false
	if b.PeekJob(id, func(j *projections.Job) { expired = j.Tenant == tenant && b.cfg.Retention.Expired(j, now) }) {
		known = true
	} else {
		var owner string
		b.rt.ReadOutside(func(locked projections.Locked) { owner, known = projections.GoneOutside(locked, id) })
		expired = known && owner == tenant
	}
	if known {
		return expired
	}
	for rec, err := range b.elog.Stream(eventlog.JobStream(id), 0) {
		var gap *eventlog.GapError
		if errors.As(err, &gap) && gap.Pruned {
			continue // deleted on purpose; the job may still be after it
		}
		if err != nil {
			return false
		}
		p, err := eventlog.Decode(rec.Type, rec.Data)
		submitted, ok := p.(eventlog.JobSubmitted)
		return err == nil && ok && submitted.Tenant == tenant
	}
	return false
}

// idLenMax bounds an id looked up in the log: a ULID is 26 characters.
const idLenMax = 64

// List returns one page of a tenant's jobs and whether more follow; jobs whose retention has
// ended are left out. It reads the table outside the lock that commits wait for: a list whose
// filters skip most of the history reads much of the disk.
func (b *Broker) List(f projections.JobFilter) (page []*projections.Job, more bool) {
	f.Retention = b.cfg.Retention
	now := b.clock()
	b.rt.ReadOutside(func(locked projections.Locked) { page, more = projections.ListOutside(locked, f, now) })
	return page, more
}

// Retention is the policy for finished jobs.
func (b *Broker) Retention() projections.Retention { return b.cfg.Retention }

// Read runs fn with the projections under the read lock, for views the facade does not wrap.
// fn must not keep or modify what it reads.
func (b *Broker) Read(fn func(*projections.Set)) { b.rt.Read(fn) }

// Cancel cancels a tenant's job: at once when it waits, by request when it is leased.
//
// A job the views already show queued may not have reached the dispatcher yet: a schedule's
// or a flow's job, or one re-queued after a failed attempt, is folded into the views before its
// Enqueue is delivered, and the dispatcher answers a cancel of a job it does not hold with
// ALREADY_TERMINAL. Such an answer, for a job the views show unfinished and unleased, is asked
// again after a pause (at most cancelTries times, about a second in all); it persisted nothing.
func (b *Broker) Cancel(ctx context.Context, tenant, apiKeyID, id string) (actors.Receipt, error) {
	msg := actors.Cancel{Tenant: tenant, JobID: id, APIKeyID: apiKeyID}
	pause := time.Millisecond
	for try := 1; ; try++ {
		rc, err := b.jobDone(ctx, tenant, id, actors.DispatcherRef(), msg)
		r, ok := err.(*actors.Rejection)
		if !ok || r.Code != actors.CodeAlreadyTerminal || try == cancelTries || !b.queuedNotHeld(tenant, id) {
			return rc, err
		}
		select {
		case <-ctx.Done():
			return rc, err
		case <-time.After(pause):
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// cancelTries bounds Cancel's asks of a job that is queued in the views but not yet in the
// dispatcher's hands.
const cancelTries = 15

// queuedNotHeld says whether the views show the job unfinished and without a lease.
func (b *Broker) queuedNotHeld(tenant, id string) bool {
	j, ok := b.Get(tenant, id)
	return ok && !j.Status.Terminal() && j.Lease == nil
}

// Retry re-drives a dead-lettered job with a fresh attempt budget.
func (b *Broker) Retry(ctx context.Context, tenant, apiKeyID, id string) (actors.Receipt, error) {
	return b.jobDone(ctx, tenant, id, actors.TenantRef(tenant), actors.Redrive{Tenant: tenant, JobID: id, APIKeyID: apiKeyID})
}

// Delete takes a tenant's finished job out of every view now.
func (b *Broker) Delete(ctx context.Context, tenant, apiKeyID, id string) (actors.Receipt, error) {
	return b.jobDone(ctx, tenant, id, actors.DispatcherRef(), actors.Delete{Tenant: tenant, JobID: id, APIKeyID: apiKeyID})
}

// PurgeDead takes a tenant's dead letters that died before before out of every view, those of
// queue only if it is set, up to actors.PurgeLimit a call; more says to call again.
func (b *Broker) PurgeDead(ctx context.Context, tenant, apiKeyID, queue string, before time.Time) (purged int, more bool, rc actors.Receipt, err error) {
	r, err := callFor[actors.PurgeDone](ctx, b, actors.DispatcherRef(), actors.PurgeDead{Tenant: tenant, Queue: queue, Before: before, APIKeyID: apiKeyID})
	if err != nil || r.Err != nil {
		return 0, false, actors.Receipt{}, firstErr(err, r.Err)
	}
	return r.Purged, r.More, b.fill(r.Receipt), nil
}

// PauseQueue pauses a tenant's queue (paused) or resumes it. A queue already in that state
// answers the receipt of the event that put it there, or none.
func (b *Broker) PauseQueue(ctx context.Context, tenant, apiKeyID, queue string, paused bool) (actors.Receipt, error) {
	return b.done(ctx, actors.DispatcherRef(), actors.PauseQueue{Tenant: tenant, Queue: queue, Paused: paused, APIKeyID: apiKeyID})
}

// jobDone is done for a command on one job, where a job that has expired, before the command or
// while it ran, is JOB_EXPIRED rather than not found or finished.
func (b *Broker) jobDone(ctx context.Context, tenant, id string, to actors.Ref, msg any) (actors.Receipt, error) {
	expired := &actors.Rejection{Code: actors.CodeJobExpired, Message: "job " + id + " finished and has left every view"}
	if b.Expired(tenant, id) {
		return actors.Receipt{}, expired
	}
	rc, err := b.done(ctx, to, msg)
	if r, ok := err.(*actors.Rejection); ok && r.Code == actors.CodeJobNotFound && b.Expired(tenant, id) {
		return actors.Receipt{}, expired
	}
	return rc, err
}

func (b *Broker) done(ctx context.Context, to actors.Ref, msg any) (actors.Receipt, error) {
	return b.settle(callFor[actors.Done](ctx, b, to, msg))
}

// settle turns a Done into the receipt or the error it carries.
func (b *Broker) settle(r actors.Done, err error) (actors.Receipt, error) {
	if err != nil || r.Err != nil {
		return actors.Receipt{}, firstErr(err, r.Err)
	}
	return b.fill(r.Receipt), nil
}

// Reserve holds one of a tenant's max_active slots for ttl (0: 300 s).
func (b *Broker) Reserve(ctx context.Context, tenant string, ttl time.Duration) (id string, expiresAt time.Time, rc actors.Receipt, err error) {
	r, err := callFor[actors.Reserved](ctx, b, actors.TenantRef(tenant), actors.Reserve{Tenant: tenant, TTL: ttl})
	if err != nil || r.Err != nil {
		return "", time.Time{}, actors.Receipt{}, firstErr(err, r.Err)
	}
	return r.ID, r.ExpiresAt, r.Receipt, nil
}

// Release gives a reservation back.
func (b *Broker) Release(ctx context.Context, tenant, id string) (actors.Receipt, error) {
	return b.done(ctx, actors.TenantRef(tenant), actors.Release{Tenant: tenant, ID: id})
}

// Explain says why a tenant's job is not running, whom it runs on, or how it ended, as the
// dispatcher sees it (actors.Explanation), with what only the runtime hears: for a leased job
// the expiry and the heartbeat as the worker's last heartbeat left them, and when a worker was
// last heard from (the log's last session start or end if not since the start).
func (b *Broker) Explain(ctx context.Context, tenant, jobID string) (actors.Explanation, error) {
	x, err := callFor[actors.Explanation](ctx, b, actors.DispatcherRef(), actors.Explain{Tenant: tenant, JobID: jobID})
	if err != nil || x.Err != nil {
		return actors.Explanation{}, firstErr(err, x.Err)
	}
	switch x.Code {
	case actors.ExplainLeased:
		x.ExpiresAt = b.LeaseExpiresAt(x.WorkerID, x.LeaseID, x.LeaseTTL, x.ExpiresAt)
		x.LastSeen = b.LastSeen(x.WorkerID)
		if l := b.heard(x.WorkerID); l != nil {
			x.LastHeartbeat, _ = l.Heartbeat(x.LeaseID)
		}
	case actors.ExplainNoWorker:
		if t := b.LastSeen(x.LastWorker); x.LastWorker != "" && !t.IsZero() {
			x.LastSeen = t // heard from since the start: the last sign of life, not the session's logged end
		}
	}
	return x, nil
}

// WaitingReasons counts the waiting jobs by the reason Explain would give each
// (actors.WaitingCounts).
func (b *Broker) WaitingReasons(ctx context.Context) (actors.WaitingCounts, error) {
	return callFor[actors.WaitingCounts](ctx, b, actors.DispatcherRef(), actors.WaitingReasons{})
}

// SetKeyLimit sets max_running_per_key in a tenant's queue, or with queue empty the tenant's
// default; nil clears it (0 is unlimited). apiKeyID names who set it (empty for the admin).
func (b *Broker) SetKeyLimit(ctx context.Context, tenant, apiKeyID, queue string, maxRunningPerKey *int) (actors.Receipt, error) {
	return b.done(ctx, actors.DispatcherRef(), actors.SetKeyLimit{Tenant: tenant, Queue: queue, MaxRunningPerKey: maxRunningPerKey, APIKeyID: apiKeyID})
}

// SetRateLimit sets one of a tenant's rate limits, new or changed (actors.SetRateLimit).
func (b *Broker) SetRateLimit(ctx context.Context, tenant, apiKeyID, name string, rate float64, burst int) (actors.Receipt, error) {
	return b.done(ctx, actors.DispatcherRef(), actors.SetRateLimit{Tenant: tenant, Name: name, Rate: rate, Burst: burst, APIKeyID: apiKeyID})
}

// DeleteRateLimit deletes one of a tenant's rate limits.
func (b *Broker) DeleteRateLimit(ctx context.Context, tenant, apiKeyID, name string) (actors.Receipt, error) {
	return b.done(ctx, actors.DispatcherRef(), actors.DeleteRateLimit{Tenant: tenant, Name: name, APIKeyID: apiKeyID})
}

// RateLimits returns the state of a tenant's rate limits (every tenant's if tenant is empty),
// by tenant and name.
func (b *Broker) RateLimits(ctx context.Context, tenant string) ([]actors.RateLimitState, error) {
	r, err := callFor[actors.RateLimitStates](ctx, b, actors.DispatcherRef(), actors.RateLimits{Tenant: tenant})
	return r.Limits, err
}

// SetQuota sets a tenant's max_active and max_running (0: unlimited); a nil limit keeps its
// current value.
func (b *Broker) SetQuota(ctx context.Context, tenant string, maxActive, maxRunning *int) (actors.Receipt, error) {
	return b.done(ctx, actors.TenantRef(tenant), actors.SetQuota{Tenant: tenant, MaxActive: maxActive, MaxRunning: maxRunning})
}

// Quota returns a tenant's limits and usage.
func (b *Broker) Quota(tenant string) (t projections.Tenant) {
	b.rt.Read(func(set *projections.Set) { t = set.Tenant(tenant) })
	return t
}

// WorkerSpec is what a worker registers with.
type WorkerSpec struct {
	Name      string
	Queues    []string
	Capacity  int
	PublicKey string // base64 Ed25519, optional
	Labels    map[string]string
	TokenTTL  time.Duration // 0: 7 days
	// EnrollTokenID names the enroll token the worker registered with, which loses one use.
	EnrollTokenID string
}

// WorkerTokenTTLDefault is how long a worker token lasts unless the registration says otherwise.
const WorkerTokenTTLDefault = 7 * 24 * time.Hour

// Registration is a registered worker and its token, which is shown only here.
type Registration struct {
	WorkerID  string
	Token     string
	ExpiresAt time.Time
	Receipt   actors.Receipt
}

// RegisterWorker enrolls a worker for a tenant and issues its token: 256 random bits, of which
// only the SHA-256 is logged.
func (b *Broker) RegisterWorker(ctx context.Context, tenant string, spec WorkerSpec) (Registration, error) {
	token, err := newSecret(WorkerTokenPrefix)
	if err != nil {
		return Registration{}, err
	}
	ttl := spec.TokenTTL
	if ttl <= 0 {
		ttl = b.workerTokenTTL()
	}
	exp := b.clock().Add(ttl).UTC()
	r, err := callFor[actors.Registered](ctx, b, actors.TenantRef(tenant), actors.RegisterWorker{
		Tenant: tenant, Name: spec.Name, Queues: spec.Queues, Capacity: spec.Capacity, PublicKey: spec.PublicKey,
		Labels: spec.Labels, TokenHash: TokenHash(token), ExpiresAt: exp, EnrollTokenID: spec.EnrollTokenID,
	})
	if err != nil || r.Err != nil {
		return Registration{}, firstErr(err, r.Err)
	}
	return Registration{WorkerID: r.WorkerID, Token: token, ExpiresAt: exp, Receipt: r.Receipt}, nil
}

func (b *Broker) workerTokenTTL() time.Duration {
	if b.cfg.WorkerTokenTTL > 0 {
		return b.cfg.WorkerTokenTTL
	}
	return WorkerTokenTTLDefault
}

// RenewedToken is a worker's new token, shown only here.
type RenewedToken struct {
	Token     string
	ExpiresAt time.Time
	Receipt   actors.Receipt
}

// RenewWorkerToken issues worker w a new token for the server's token lifetime. presented is
// the token the worker asked with; it keeps working for actors.TokenRenewGrace. The worker keeps
// its id, its session and its leases.
func (b *Broker) RenewWorkerToken(ctx context.Context, w projections.Worker, presented string) (RenewedToken, error) {
	token, err := newSecret(WorkerTokenPrefix)
	if err != nil {
		return RenewedToken{}, err
	}
	exp := b.clock().Add(b.workerTokenTTL()).UTC()
	rc, err := b.done(ctx, actors.TenantRef(w.Tenant), actors.RenewWorkerToken{
		Tenant: w.Tenant, WorkerID: w.ID, PresentedHash: TokenHash(presented), TokenHash: TokenHash(token), ExpiresAt: exp,
	})
	if err != nil {
		return RenewedToken{}, err
	}
	return RenewedToken{Token: token, ExpiresAt: exp, Receipt: rc}, nil
}

// TokenHash is how a secret token is stored and looked up: lowercase hex SHA-256.
func TokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// WorkerByToken finds the worker a token belongs to, whatever its state; callers check
// Revoked and ExpiresAt.
func (b *Broker) WorkerByToken(token string) (w projections.Worker, ok bool) {
	b.rt.Read(func(set *projections.Set) { w, ok = set.WorkerByTokenHash(TokenHash(token)) })
	return w, ok
}

// RevokeWorker revokes a tenant's worker: its session ends and its leases go back at once.
func (b *Broker) RevokeWorker(ctx context.Context, tenant, workerID, by string) (actors.Receipt, error) {
	return b.done(ctx, actors.TenantRef(tenant), actors.RevokeWorker{Tenant: tenant, WorkerID: workerID, By: by})
}

// Conn is the handle of one connected worker (the actors.Session behaviour runs behind it). Frames carries what the server sends the worker: Assignment,
// CancelNotice, and a final SessionEnded after which the channel is closed.
type Conn struct {
	ID                string
	WorkerID          string
	HeartbeatInterval time.Duration
	LeaseTTL          time.Duration
	Frames            <-chan any

	b    *Broker
	ref  actors.Ref
	live *Liveness
	// creditOne is SessionCredit{N: 1} boxed once: a worker that grants credit per result
	// (the Go worker, the command runner) sends it for every job.
	creditOne any
}

// framesFor bounds what a session of a worker of the registered capacity buffers for its
// connection: assignments never exceed the capacity and cancel notices the leases, which a
// worker holds no more of than its capacity, so a full buffer means the connection stopped
// reading. (A buffer for the largest capacity was 32 KiB a connected worker.)
func framesFor(capacity int) int { return 2*capacity + 8 }

// Connect opens a session for a worker over a transport ("websocket" or "longpoll"), with a
// capacity no larger than the registered one (0: the registered one).
func (b *Broker) Connect(ctx context.Context, workerID, transport string, capacity int) (*Conn, error) {
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	id := "s_" + hex.EncodeToString(raw[:])
	registered := 0
	b.rt.Read(func(set *projections.Set) {
		if w, ok := set.Worker(workerID); ok {
			registered = w.Capacity
		}
	})
	frames := make(chan any, framesFor(registered))
	ref := actors.SessionRef(id)
	var closed bool // only the session actor's goroutine delivers, one frame at a time
	out := &connSink{send: func(m any) {
		if closed {
			return
		}
		select {
		case frames <- m:
		default:
			b.log.Error("a worker connection stopped reading; its session is closed",
				zap.String("code", "SESSION_STALLED"), zap.String("worker_id", workerID), zap.String("session_id", id))
			b.rt.Send(ref, actors.CloseSession{Reason: eventlog.EndedClosed}, actors.Ref{})
			if to, notice, ok := actors.Bounce(m); ok {
				b.rt.Send(to, notice, actors.Ref{})
			}
			return
		}
		if _, end := m.(actors.SessionEnded); end {
			closed = true
			close(frames)
			b.forgetLiveness(workerID)
		}
	}}
	b.rt.Spawn(ref, func() actors.Behaviour {
		return actors.NewSession(id, actors.Ref{Kind: actors.RefExternal, External: out})
	})
	r, err := callFor[actors.SessionOpened](ctx, b, ref, actors.OpenSession{WorkerID: workerID, Transport: transport, Capacity: capacity})
	if err != nil || r.Err != nil {
		b.forgetLiveness(workerID)
		return nil, firstErr(err, r.Err)
	}
	every := r.HeartbeatInterval
	if b.cfg.IdleHeartbeat > 0 {
		every = min(every, b.cfg.IdleHeartbeat)
	}
	return &Conn{ID: id, WorkerID: workerID, HeartbeatInterval: every, LeaseTTL: r.LeaseTTL, Frames: frames, b: b, ref: ref, live: b.liveness(workerID),
		creditOne: actors.SessionCredit{SessionID: id, N: 1}}, nil
}

// Credit lets the server assign n more jobs. It goes straight to the dispatcher, which keeps
// the session's credit; the session actor has nothing to add.
func (s *Conn) Credit(n int) {
	msg := s.creditOne
	if n != 1 || msg == nil {
		msg = actors.SessionCredit{SessionID: s.ID, N: n}
	}
	s.b.rt.Send(actors.DispatcherRef(), msg, actors.Ref{})
}

// Heartbeat extends the listed leases and says which of them to cancel or forget.
func (s *Conn) Heartbeat(ctx context.Context, leases []string) (actors.HeartbeatAck, error) {
	r, err := callFor[actors.HeartbeatAck](ctx, s.b, s.ref, actors.Heartbeat{Leases: leases})
	if err == nil && r.Err != nil {
		err = r.Err
	}
	if err == nil {
		s.live.heartbeat(s.b.clock(), leases, r.Unknown)
	}
	return r, err
}

// HeartbeatAsync is Heartbeat for a connection that goes on reading: done is called once, on
// an actor's goroutine, and must not block.
func (s *Conn) HeartbeatAsync(leases []string, done func(actors.HeartbeatAck, error)) {
	s.b.ask(s.ref, actors.Heartbeat{Leases: leases}, func(r any, err error) {
		ack, _ := r.(actors.HeartbeatAck)
		if err == nil && ack.Err != nil {
			err = ack.Err
		}
		if err == nil {
			s.live.heartbeat(s.b.clock(), leases, ack.Unknown)
		}
		done(ack, err)
	})
}

// Touch records that the worker was heard from on this connection at t.
func (s *Conn) Touch(t time.Time) { s.live.Touch(t) }

// Close ends the session; its leases run out on schedule unless the worker reconnects in time.
func (s *Conn) Close() {
	s.b.rt.Send(s.ref, actors.CloseSession{Reason: eventlog.EndedClosed}, actors.Ref{})
}

// Offer lets a long-poll session be assigned up to n jobs until Withdraw. An
// actors.CodeSessionClosed rejection means the session ended; open another.
func (s *Conn) Offer(ctx context.Context, n int) error {
	r, err := callFor[actors.OfferAck](ctx, s.b, s.ref, actors.Offer{N: n})
	return firstErr(err, r.Err)
}

// Withdraw ends the offer. Frames then carries actors.OfferEnded after every assignment the
// offer brought; one that comes later goes back to the queue.
func (s *Conn) Withdraw() { s.b.rt.Send(s.ref, actors.Withdraw{}, actors.Ref{}) }

// ReturnUndelivered puts back assignments that never reached the worker: their jobs are
// queued again with no attempt spent.
func (b *Broker) ReturnUndelivered(assignments ...actors.Assignment) {
	for _, a := range assignments {
		to, notice, _ := actors.Bounce(a)
		b.rt.Send(to, notice, actors.Ref{})
	}
}

// Worker operations on a leased job. They name the worker, not a session: a worker that
// reconnected, or one that polls, reports on the leases it holds through any connection.

// Event appends an event (a log line, progress, any worker type) to a leased job and returns
// its number in the job's stream.
func (b *Broker) Event(ctx context.Context, p actors.Progress) (int, actors.Receipt, error) {
	r, err := replyOf[actors.ProgressAck](b.callVia(ctx, toJob(p.JobID), p))
	if err != nil || r.Err != nil {
		return 0, actors.Receipt{}, firstErr(err, r.Err)
	}
	return r.Number, r.Receipt, nil
}

// Complete reports a job's output.
func (b *Broker) Complete(ctx context.Context, c actors.Complete) (actors.Receipt, error) {
	return b.Report(ctx, c)
}

// Fail reports a failed attempt.
func (b *Broker) Fail(ctx context.Context, f actors.Fail) (actors.Receipt, error) {
	return b.Report(ctx, f)
}

// Report sends a worker's result on a job, actors.Complete, actors.Fail or actors.ReleaseLease
// (which gives the job back with no attempt spent), and returns its receipt.
func (b *Broker) Report(ctx context.Context, op any) (actors.Receipt, error) {
	jobID, workerID := idsOf(op)
	rc, err := b.settle(replyOf[actors.Done](b.callVia(ctx, toJob(jobID), op)))
	b.reported(workerID)
	return rc, err
}

// idsOf names the job a worker operation is on, and the worker.
func idsOf(op any) (jobID, workerID string) {
	switch m := op.(type) {
	case actors.Complete:
		return m.JobID, m.WorkerID
	case actors.Fail:
		return m.JobID, m.WorkerID
	case actors.Progress:
		return m.JobID, m.WorkerID
	case actors.ReleaseLease:
		return m.JobID, m.WorkerID
	}
	return "", ""
}

// route is how a message reaches its actor: the actor at to, or, for a worker's operation on a
// job (job set), the job's actor if one is running, else the dispatcher.
type route struct {
	to  actors.Ref
	job bool
}

// toJob routes a worker's operation on a job. A job in flight has an actor, which checks the
// lease itself and hands what no lease of its covers to the dispatcher, so the operation goes
// to it straight: that spares the dispatcher, which every job's lease passes through, a
// message per result. A job with no actor running goes by the dispatcher, so that operations
// on jobs not in flight start no actors.
func toJob(jobID string) route { return route{to: actors.JobRef(jobID), job: true} }

// deliver sends msg by r, as sender.
func (b *Broker) deliver(r route, msg any, sender actors.Ref) {
	if r.job && b.rt.SendIfBound(r.to, msg, sender) {
		return
	}
	if r.job {
		r.to = actors.DispatcherRef()
	}
	b.rt.Send(r.to, msg, sender)
}

// WorkerOp sends a worker operation (actors.Progress, actors.Complete, actors.Fail or
// actors.ReleaseLease) without waiting: done is called once with the event's number (Progress
// only) and the receipt, on an actor's goroutine, and must not block. Operations sent by one goroutine reach the job in the
// order sent, which a connection that goes on reading needs (an event before its completion).
func (b *Broker) WorkerOp(op any, done func(number int, rc actors.Receipt, err error)) {
	jobID, _ := idsOf(op)
	s := &opSink{b: b, done: done}
	select {
	case <-b.closing:
		s.answer(nil, ErrClosed)
		return
	default:
	}
	b.deliver(toJob(jobID), op, actors.Ref{Kind: actors.RefExternal, External: s})
}

// opSink is the sink of a WorkerOp: an asked with the op's callback, in one allocation where
// an ask and a closure were two.
type opSink struct {
	b        *Broker
	done     func(number int, rc actors.Receipt, err error)
	answered atomic.Bool
}

func (s *opSink) deliver(m any) {
	if s.answered.CompareAndSwap(false, true) {
		s.answer(m, nil)
	}
}

func (s *opSink) answer(r any, err error) {
	switch r := r.(type) {
	case actors.ProgressAck:
		s.done(r.Number, r.Receipt, firstErr(err, r.Err))
	case actors.Done:
		if err = firstErr(err, r.Err); err == nil {
			r.Receipt = s.b.fill(r.Receipt)
		}
		s.done(0, r.Receipt, err)
	default:
		s.done(0, actors.Receipt{}, err)
	}
}

// ask sends msg to an actor now and calls done with the one reply, or with ErrClosed if the
// broker is closing. done runs on the replying actor's goroutine.
func (b *Broker) ask(to actors.Ref, msg any, done func(any, error)) {
	b.askVia(route{to: to}, msg, done)
}

// asked is the sink of an ask: it calls done with the first reply.
type asked struct {
	done     func(any, error)
	answered atomic.Bool
}

func (a *asked) deliver(m any) {
	if a.answered.CompareAndSwap(false, true) {
		a.done(m, nil)
	}
}

// askVia is ask by a route.
func (b *Broker) askVia(r route, msg any, done func(any, error)) {
	select {
	case <-b.closing:
		done(nil, ErrClosed)
		return
	default:
	}
	b.deliver(r, msg, actors.Ref{Kind: actors.RefExternal, External: &asked{done: done}})
}

// Changed returns a channel that is closed once the projections next change. Watchers (an
// event stream, a long poll) read, then wait on it, then read again.
func (b *Broker) Changed() <-chan struct{} {
	b.changedMu.Lock()
	defer b.changedMu.Unlock()
	b.watched = true
	return b.changed
}

// signalChanged wakes every watcher; commit calls it after each append it applies. A channel
// no one took is still open and serves for the next change: most commits have no watcher, and
// need not make a channel each.
func (b *Broker) signalChanged() {
	b.changedMu.Lock()
	if b.watched {
		close(b.changed)
		b.changed, b.watched = make(chan struct{}), false
	}
	b.changedMu.Unlock()
}

// SubmitFlow submits a flow; hit says an earlier submit with the same idempotency key made it.
func (b *Broker) SubmitFlow(ctx context.Context, m actors.SubmitFlow) (id string, hit bool, rc actors.Receipt, err error) {
	r, err := callFor[actors.FlowAccepted](ctx, b, actors.TenantRef(m.Tenant), m)
	if err != nil || r.Err != nil {
		return "", false, actors.Receipt{}, firstErr(err, r.Err)
	}
	return r.FlowID, r.IdempotentHit, b.fill(r.Receipt), nil
}

// CreateSchedule creates a schedule; existing says the tenant had it already, by name and
// definition.
func (b *Broker) CreateSchedule(ctx context.Context, m actors.CreateSchedule) (id string, existing bool, rc actors.Receipt, err error) {
	r, err := callFor[actors.ScheduleMade](ctx, b, actors.TenantRef(m.Tenant), m)
	if err != nil || r.Err != nil {
		return "", false, actors.Receipt{}, firstErr(err, r.Err)
	}
	return r.ID, r.Existing, b.fill(r.Receipt), nil
}

// PauseSchedule pauses a schedule, or resumes it.
func (b *Broker) PauseSchedule(ctx context.Context, tenant, apiKeyID, id string, paused bool) (actors.Receipt, error) {
	return b.done(ctx, actors.TenantRef(tenant), actors.PauseSchedule{Tenant: tenant, ID: id, Paused: paused, APIKeyID: apiKeyID})
}

// DeleteSchedule deletes a schedule.
func (b *Broker) DeleteSchedule(ctx context.Context, tenant, apiKeyID, id string) (actors.Receipt, error) {
	return b.done(ctx, actors.TenantRef(tenant), actors.DeleteSchedule{Tenant: tenant, ID: id, APIKeyID: apiKeyID})
}

// CancelFlow ends a running flow cancelled.
func (b *Broker) CancelFlow(ctx context.Context, tenant, apiKeyID, id string) (actors.Receipt, error) {
	return b.done(ctx, actors.TenantRef(tenant), actors.CancelFlow{Tenant: tenant, FlowID: id, APIKeyID: apiKeyID})
}
