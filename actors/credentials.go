package actors

import (
	"crypto/ed25519"
	"encoding/base64"
	"time"

	"github.com/tetherhq/tether/actors/signing"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// credentials is the part of a tenant that issues and revokes its API keys and enroll tokens,
// and registers, renews and revokes its workers. What is durable is read from the projections;
// what it keeps is what is in flight, so that two registrations can never both take an enroll
// token's last use, nor two renewals of one worker both end the token the first one gave.
type credentials struct {
	// registering holds the registrations in flight: the enroll token each spends, or "".
	registering map[string]string
	// pendingEnroll counts the uses of each enroll token spent by registrations not yet durable.
	// INVARIANT: pendingEnroll[token] is the number of registrations in flight that spend it,
	// and a token none spends has no entry.
	pendingEnroll map[string]int
	revoking      map[string]bool
	// renewing holds the workers whose token renewal is not durable yet: one at a time.
	renewing map[string]bool
}

type registerDone struct {
	reply         Ref
	workerID      string
	enrollTokenID string
}

type revokeDone struct {
	reply    Ref
	workerID string
}

type renewDone struct {
	reply    Ref
	workerID string
}

func (c *credentials) reset() {
	*c = credentials{registering: map[string]string{}, pendingEnroll: map[string]int{}, revoking: map[string]bool{}, renewing: map[string]bool{}}
}

// Worker registration limits.
const (
	WorkerNameLenMax = 128
	WorkerQueuesMax  = 32
	CapacityMax      = 1000
)

func (c *credentials) register(t *Tenant, env Env, m RegisterWorker) {
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
		if r := c.spendEnrollUse(t, env, m.EnrollTokenID); r != nil {
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
	c.registering[id] = m.EnrollTokenID
	t.pipe.persist(env, events, registerDone{reply: env.Sender(), workerID: id, enrollTokenID: m.EnrollTokenID})
}

// spendEnrollUse takes one use of an enroll token, counting the uses of registrations that are
// not durable yet, so two registrations can never both take the last use.
func (c *credentials) spendEnrollUse(t *Tenant, env Env, id string) *Rejection {
	var tok projections.EnrollToken
	var ok bool
	env.Read(func(s *projections.Set) { tok, ok = s.EnrollToken(id) })
	switch {
	case !ok || tok.Tenant != t.name:
		return reject(CodeUnauthenticated, "unknown enroll token")
	case !env.Now().Before(tok.ExpiresAt):
		return reject(CodeTokenExpired, "the enroll token expired at %s", tok.ExpiresAt.Format(time.RFC3339))
	case tok.Used+c.pendingEnroll[id] >= tok.Uses:
		return reject(CodeEnrollTokenUsedUp, "the enroll token's %d uses are spent", tok.Uses)
	}
	c.pendingEnroll[id]++
	return nil
}

func (c *credentials) registered(env Env, d registerDone, m Persisted) {
	delete(c.registering, d.workerID)
	if d.enrollTokenID != "" {
		if c.pendingEnroll[d.enrollTokenID]--; c.pendingEnroll[d.enrollTokenID] == 0 {
			delete(c.pendingEnroll, d.enrollTokenID)
		}
	}
	env.Send(d.reply, Registered{WorkerID: d.workerID, Receipt: receiptOf(m.Receipt), Err: unavailable(m.Err)})
}

// Enroll token limits.
const (
	EnrollUsesMax    = 10_000
	EnrollTTLMax     = 365 * 24 * time.Hour
	EnrollTTLDefault = 24 * time.Hour
)

func (c *credentials) createEnrollToken(t *Tenant, env Env, m CreateEnrollToken) {
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

func (c *credentials) createAPIKey(t *Tenant, env Env, m CreateAPIKey) {
	id := NewID(env)
	t.pipe.persist(env, []eventlog.Payload{eventlog.APIKeyCreated{Tenant: t.name, KeyID: id, KeyHash: m.KeyHash}}, createdDone{env.Sender(), id})
}

func (c *credentials) revokeKey(t *Tenant, env Env, m RevokeAPIKey) {
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

func (c *credentials) revoke(t *Tenant, env Env, m RevokeWorker) {
	var w projections.Worker
	var ok bool
	env.Read(func(s *projections.Set) { w, ok = s.Worker(m.WorkerID) })
	switch {
	case !ok || w.Tenant != t.name:
		env.Send(env.Sender(), Done{Err: reject(CodeWorkerNotFound, "no worker %q", clip(m.WorkerID))})
	case w.Revoked || c.revoking[m.WorkerID]:
		env.Send(env.Sender(), Done{}) // revoking twice changes nothing
	default:
		c.revoking[m.WorkerID] = true
		t.pipe.persist(env, []eventlog.Payload{eventlog.WorkerRevoked{WorkerID: m.WorkerID, By: m.By}},
			revokeDone{reply: env.Sender(), workerID: m.WorkerID})
	}
}

func (c *credentials) revoked(env Env, d revokeDone, m Persisted) {
	delete(c.revoking, d.workerID)
	err := unavailable(m.Err)
	if err == nil {
		env.Send(DispatcherRef(), WorkerRevokedNotice{WorkerID: d.workerID, Seq: m.Receipt.Last})
	}
	env.Send(d.reply, Done{Receipt: receiptOf(m.Receipt), Err: err})
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

func (c *credentials) renewToken(t *Tenant, env Env, m RenewWorkerToken) {
	var w projections.Worker
	var ok bool
	env.Read(func(s *projections.Set) { w, ok = s.Worker(m.WorkerID) })
	now := env.Now()
	presentedUntil := w.TokenValidUntil(m.PresentedHash)
	switch {
	case !ok || w.Tenant != t.name:
		env.Send(env.Sender(), Done{Err: reject(CodeWorkerNotFound, "no worker %q", clip(m.WorkerID))})
		return
	case w.Revoked || c.revoking[m.WorkerID]:
		env.Send(env.Sender(), Done{Err: reject(CodeWorkerRevoked, "worker %s is revoked", w.ID)})
		return
	case !now.Before(presentedUntil):
		env.Send(env.Sender(), Done{Err: reject(CodeTokenExpired, "the token this renewal was asked with no longer works")})
		return
	case c.renewing[m.WorkerID] || now.Sub(w.TokenIssuedAt) < min(TokenRenewIntervalMin, w.ExpiresAt.Sub(w.TokenIssuedAt)/4):
		// Whatever token it is asked with: a renewal sent twice (a retry, a duplicate on the
		// way) must not end the token the first one gave, which the worker may hold by now. A
		// worker that lost the answer keeps the token it asked with for the grace, and asks again.
		env.Send(env.Sender(), Done{Err: reject(CodeTokenRenewedRecently, "the worker's token was issued at %s; renew it later", w.TokenIssuedAt.Format(time.RFC3339))})
		return
	case !m.ExpiresAt.After(now):
		env.Send(env.Sender(), Done{Err: reject(CodeInvalidArgument, "a new token must expire in the future")})
		return
	}
	c.renewing[m.WorkerID] = true
	t.pipe.persist(env, []eventlog.Payload{eventlog.WorkerTokenRotated{
		WorkerID: w.ID, TokenHash: m.TokenHash, ExpiresAt: m.ExpiresAt.UTC(),
		PreviousTokenHash: m.PresentedHash, PreviousValidUntil: minTime(now.Add(TokenRenewGrace), presentedUntil).UTC(),
	}}, renewDone{reply: env.Sender(), workerID: w.ID})
}

func (c *credentials) renewed(env Env, d renewDone, m Persisted) {
	delete(c.renewing, d.workerID)
	env.Send(d.reply, Done{Receipt: receiptOf(m.Receipt), Err: unavailable(m.Err)})
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
