package actors_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/actorstest"
)

func TestSubmitValidation(t *testing.T) {
	t.Parallel()
	ok := actors.JobSpec{Queue: "q", Type: "t"}
	with := func(f func(*actors.JobSpec)) actors.JobSpec { s := ok; f(&s); return s }
	for _, tc := range []struct {
		name string
		spec actors.JobSpec
		code actors.Code
	}{
		{"empty queue", with(func(s *actors.JobSpec) { s.Queue = "" }), actors.CodeInvalidArgument},
		{"queue with a dot", with(func(s *actors.JobSpec) { s.Queue = "a.b" }), actors.CodeInvalidArgument},
		{"queue of 65", with(func(s *actors.JobSpec) { s.Queue = strings.Repeat("q", 65) }), actors.CodeInvalidArgument},
		{"type with a space", with(func(s *actors.JobSpec) { s.Type = "a b" }), actors.CodeInvalidArgument},
		{"type of 129", with(func(s *actors.JobSpec) { s.Type = strings.Repeat("t", 129) }), actors.CodeInvalidArgument},
		{"payload over 1 MiB", with(func(s *actors.JobSpec) { s.Payload = json.RawMessage(`"` + strings.Repeat("x", 1<<20) + `"`) }), actors.CodePayloadTooLarge},
		{"payload not JSON", with(func(s *actors.JobSpec) { s.Payload = json.RawMessage(`{nope`) }), actors.CodeInvalidArgument},
		{"priority too high", with(func(s *actors.JobSpec) { s.Priority = actors.PriorityMax + 1 }), actors.CodeInvalidArgument},
		{"max_attempts 101", with(func(s *actors.JobSpec) { s.MaxAttempts = 101 }), actors.CodeInvalidArgument},
		{"lease_ttl 4s", with(func(s *actors.JobSpec) { s.LeaseTTL = 4 * time.Second }), actors.CodeInvalidArgument},
		{"lease_ttl 61m", with(func(s *actors.JobSpec) { s.LeaseTTL = 61 * time.Minute }), actors.CodeInvalidArgument},
		{"delay and run_at", with(func(s *actors.JobSpec) { s.Delay = time.Second; s.RunAt = t0 }), actors.CodeInvalidArgument},
		{"idempotency key of 257", with(func(s *actors.JobSpec) { s.IdempotencyKey = strings.Repeat("k", 257) }), actors.CodeInvalidArgument},
		{"33 labels", with(func(s *actors.JobSpec) {
			s.Labels = map[string]string{}
			for i := range 33 {
				s.Labels[strings.Repeat("l", i+1)] = "v"
			}
		}), actors.CodeInvalidArgument},
		{"unknown reservation", with(func(s *actors.JobSpec) { s.ReservationID = "r1" }), actors.CodeReservationNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, nil)
			mark := len(f.w.Log)
			wantCode(t, f.submit(tc.spec).Err, tc.code)
			if len(f.w.Log) != mark {
				t.Fatal("a refused submit logged events")
			}
		})
	}
}

// Jobs submitted in the same millisecond, and after the clock went back, still get ids in
// submission order: lists page by id, and newest first is by id.
func TestJobIDsFollowSubmissionOrder(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	var ids []string
	for i := range 200 {
		if i == 100 {
			f.w.Clock = f.w.Clock.Add(-time.Hour) // a clock jump back
		}
		ids = append(ids, f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t"})...)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("job %d's id %s does not sort after job %d's %s", i, ids[i], i-1, ids[i-1])
		}
	}
}

func TestSubmitDefaultsAndDelay(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	mark := len(f.w.Log)
	ids := f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t"}, actors.JobSpec{Queue: "q", Type: "t", Delay: time.Minute})
	wantTypes(t, f.w.Since(mark), "job.submitted", "job.submitted", "job.scheduled")
	j := f.job(ids[0])
	if j.MaxAttempts != actors.DefaultMaxAttempts || j.LeaseTTL != actors.DefaultLeaseTTL || string(j.Payload) != "null" {
		t.Fatalf("defaults: %+v", j)
	}
	if d := f.job(ids[1]); d.StatusAt(t0) != "scheduled" || !d.RunAt.Equal(t0.Add(time.Minute)) || d.StatusAt(t0.Add(time.Minute)) != "queued" {
		t.Fatalf("delayed job: %+v", d)
	}
}

func TestBatchIsAllOrNothing(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	mark := len(f.w.Log)
	r := f.submit(actors.JobSpec{Queue: "q", Type: "t"}, actors.JobSpec{Queue: "bad queue", Type: "t"})
	wantCode(t, r.Err, actors.CodeInvalidArgument)
	if r.Err.Details["index"] != 1 || len(f.w.Log) != mark {
		t.Fatalf("details %v, %d events", r.Err.Details, len(f.w.Log)-mark)
	}
	wantCode(t, f.submit().Err, actors.CodeInvalidArgument)
}

// submitTwiceWithOneKey sends callers a and b the same keyed submit and lets the first be
// decided: the second is then an idempotent hit on a job not yet durable.
func submitTwiceWithOneKey(f *fixture) {
	spec := actors.JobSpec{Queue: "q", Type: "t", IdempotencyKey: "k"}
	for _, caller := range []string{"a", "b"} {
		f.w.Send(actors.TenantRef("acme"), actors.Submit{Tenant: "acme", Jobs: []actors.JobSpec{spec}}, actorstest.External(caller))
	}
	f.w.Step()
}

// A second submit with the key arrives while the first is not durable yet: it is a hit, and
// its answer waits for the first one's fsync.
func TestIdempotentHitWaitsForDurability(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	submitTwiceWithOneKey(f)
	if got := len(f.w.Inbox("a")) + len(f.w.Inbox("b")); got != 0 {
		t.Fatalf("%d replies before the fsync", got)
	}
	f.w.Run()
	a, b := one[actors.Submitted](t, f.w.Inbox("a")), one[actors.Submitted](t, f.w.Inbox("b"))
	if a.Jobs[0].ID != b.Jobs[0].ID || !b.Jobs[0].IdempotentHit || a.Jobs[0].IdempotentHit || b.Receipt.Seq != a.Receipt.Seq {
		t.Fatalf("a %+v, b %+v", a, b)
	}
}

// An idempotent hit on a submit whose append then fails is not answered with a job that never
// became durable: both callers hear that the log failed.
func TestIdempotentHitOnAFailedSubmit(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	submitTwiceWithOneKey(f)
	f.w.FailSync(errors.New("injected fsync failure"))
	f.w.Step()
	wantCode(t, one[actors.Submitted](t, f.w.Inbox("a")).Err, actors.CodeUnavailable)
	wantCode(t, one[actors.Submitted](t, f.w.Inbox("b")).Err, actors.CodeUnavailable)
}

func TestRegisterWorkerValidation(t *testing.T) {
	t.Parallel()
	w := actorstest.New(1, t0)
	for _, reg := range []actors.RegisterWorker{
		{Tenant: "a", Name: "", Queues: []string{"q"}, Capacity: 1},
		{Tenant: "a", Name: "w", Queues: nil, Capacity: 1},
		{Tenant: "a", Name: "w", Queues: []string{"bad q"}, Capacity: 1},
		{Tenant: "a", Name: "w", Queues: []string{"q"}, Capacity: 0},
		{Tenant: "a", Name: "w", Queues: []string{"q"}, Capacity: actors.CapacityMax + 1},
		{Tenant: "a", Name: "w", Queues: []string{"q"}, Capacity: 1, PublicKey: "not-a-key"},
	} {
		wantCode(t, one[actors.Registered](t, w.Call("c", actors.TenantRef("a"), reg)).Err, actors.CodeInvalidArgument)
	}
	if len(w.Log) != 0 {
		t.Fatal("a refused registration logged events")
	}
}

// An enroll token registers at most Uses workers, counting registrations not yet durable, and
// none once it expires; each use is logged with the registration in one append.
func TestEnrollTokenUsesAndExpiry(t *testing.T) {
	t.Parallel()
	w := actorstest.New(1, t0)
	acme := actors.TenantRef("acme")
	made := one[actors.Created](t, w.Call("admin", acme, actors.CreateEnrollToken{Tenant: "acme", TokenHash: "eh", Uses: 2, ExpiresAt: t0.Add(time.Hour)}))
	if made.Err != nil || made.ID == "" {
		t.Fatalf("create: %+v", made)
	}
	reg := func(tenant string, i int) actors.RegisterWorker {
		return actors.RegisterWorker{Tenant: tenant, Name: "w", Queues: []string{"q"}, Capacity: 1, TokenHash: "t" + string(rune('0'+i)),
			ExpiresAt: t0.Add(time.Hour), EnrollTokenID: made.ID}
	}
	// Another tenant cannot spend acme's token.
	wantCode(t, one[actors.Registered](t, w.Call("c", actors.TenantRef("other"), reg("other", 0))).Err, actors.CodeUnauthenticated)
	// Three registrations arrive before any fsync: two take the uses, the third is refused.
	for i := range 3 {
		w.Send(acme, reg("acme", i), actorstest.External("c"+string(rune('0'+i))))
	}
	w.Run()
	for i, want := range []actors.Code{"", "", actors.CodeEnrollTokenUsedUp} {
		r := one[actors.Registered](t, w.Inbox("c"+string(rune('0'+i))))
		if want == "" && r.Err != nil {
			t.Fatalf("registration %d: %v", i, r.Err)
		} else if want != "" {
			wantCode(t, r.Err, want)
		}
	}
	if tok, _ := w.Set.EnrollToken(made.ID); tok.Used != 2 {
		t.Fatalf("used %d", tok.Used)
	}
	mark := len(w.Log)
	second := one[actors.Created](t, w.Call("admin", acme, actors.CreateEnrollToken{Tenant: "acme", TokenHash: "eh2", Uses: 5, ExpiresAt: t0.Add(time.Minute)}))
	w.Advance(time.Minute)
	r := reg("acme", 4)
	r.EnrollTokenID = second.ID
	wantCode(t, one[actors.Registered](t, w.Call("c", acme, r)).Err, actors.CodeTokenExpired)
	wantTypes(t, w.Since(mark), "tenant.enroll_token_created")
	for _, bad := range []actors.CreateEnrollToken{{Uses: 0, ExpiresAt: t0.Add(2 * time.Hour)}, {Uses: 1, ExpiresAt: t0}} {
		bad.Tenant = "acme"
		wantCode(t, one[actors.Created](t, w.Call("admin", acme, bad)).Err, actors.CodeInvalidArgument)
	}
}

func TestAPIKeyCreateAndRevoke(t *testing.T) {
	t.Parallel()
	w := actorstest.New(1, t0)
	acme := actors.TenantRef("acme")
	k := one[actors.Created](t, w.Call("admin", acme, actors.CreateAPIKey{Tenant: "acme", KeyHash: "kh"}))
	if got, ok := w.Set.APIKeyByHash("kh"); !ok || got.ID != k.ID || got.Tenant != "acme" || got.Revoked {
		t.Fatalf("key %+v %v", got, ok)
	}
	wantCode(t, one[actors.Done](t, w.Call("admin", actors.TenantRef("other"), actors.RevokeAPIKey{Tenant: "other", KeyID: k.ID})).Err, actors.CodeAPIKeyNotFound)
	for range 2 { // the second revoke changes nothing
		if d := one[actors.Done](t, w.Call("admin", acme, actors.RevokeAPIKey{Tenant: "acme", KeyID: k.ID})); d.Err != nil {
			t.Fatal(d.Err)
		}
	}
	if got, _ := w.Set.APIKeyByHash("kh"); !got.Revoked {
		t.Fatal("the key is not revoked")
	}
	wantTypes(t, w.Since(0), "tenant.api_key_created", "tenant.api_key_revoked")
}

// A renewal needs a token a minute old, whichever token asks: a renewal that arrives twice (a
// retry, a duplicate on the way) renews once, and the token the first gave keeps working. The
// token a renewal was asked with works for TokenRenewGrace; any older one stops at once; and a
// revoked worker renews nothing.
func TestRenewWorkerToken(t *testing.T) {
	t.Parallel()
	w := actorstest.New(1, t0)
	reg := one[actors.Registered](t, w.Call("c", actors.TenantRef("a"), actors.RegisterWorker{Tenant: "a", Name: "w", Queues: []string{"q"},
		Capacity: 1, TokenHash: "A", ExpiresAt: t0.Add(7 * 24 * time.Hour)}))
	renew := func(presented, token string) *actors.Rejection {
		return one[actors.Done](t, w.Call("c", actors.TenantRef("a"), actors.RenewWorkerToken{Tenant: "a", WorkerID: reg.WorkerID,
			PresentedHash: presented, TokenHash: token, ExpiresAt: w.Clock.Add(7 * 24 * time.Hour)})).Err
	}
	wantCode(t, renew("A", "B"), actors.CodeTokenRenewedRecently)
	w.Advance(actors.TokenRenewIntervalMin)
	if err := renew("A", "B"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, renew("A", "C"), actors.CodeTokenRenewedRecently) // the same renewal again
	wantCode(t, renew("B", "C"), actors.CodeTokenRenewedRecently)
	rec, _ := w.Set.Worker(reg.WorkerID)
	if rec.TokenHash != "B" || rec.PreviousTokenHash != "A" || !rec.PreviousValidUntil.Equal(w.Clock.Add(actors.TokenRenewGrace)) {
		t.Fatalf("after one renewal: %+v", rec)
	}
	// The answer was lost: the worker asks again with A, in its grace, and B ends.
	w.Advance(actors.TokenRenewIntervalMin)
	if err := renew("A", "C"); err != nil {
		t.Fatal(err)
	}
	rec, _ = w.Set.Worker(reg.WorkerID)
	if rec.TokenHash != "C" || rec.PreviousTokenHash != "A" || !rec.TokenValidUntil("B").IsZero() {
		t.Fatalf("after a renewal asked with the old token: %+v", rec)
	}
	w.Advance(actors.TokenRenewGrace)
	wantCode(t, renew("A", "D"), actors.CodeTokenExpired) // its grace is over
	if err := one[actors.Done](t, w.Call("c", actors.TenantRef("a"), actors.RevokeWorker{Tenant: "a", WorkerID: reg.WorkerID})).Err; err != nil {
		t.Fatal(err)
	}
	wantCode(t, renew("C", "D"), actors.CodeWorkerRevoked)
}
