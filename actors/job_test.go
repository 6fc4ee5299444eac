package actors_test

import (
	"crypto/ed25519"
	"encoding/json"
	"testing"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/signing"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

func TestLeaseFields(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ids := f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t", LeaseTTL: time.Minute})
	mark := len(f.w.Log)
	a := f.connect("s1", 1)[0]
	leased := f.w.Since(mark)[1].(eventlog.JobLeased) // after worker.session_started
	if leased.JobID != ids[0] || leased.LeaseID != a.LeaseID || leased.Nonce != a.Nonce || len(a.Nonce) != 32 ||
		leased.Attempt != 1 || !leased.ExpiresAt.Equal(t0.Add(time.Minute)) || leased.WorkerID != f.wk || leased.SessionID != "s1" {
		t.Fatalf("leased %+v, assignment %+v", leased, a)
	}
}

func TestSignedCompletion(t *testing.T) {
	t.Parallel()
	pub, priv, _ := ed25519.GenerateKey(nil)
	f := setup(t, pub)
	f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t"}, actors.JobSpec{Queue: "q", Type: "t"})
	as := f.connect("s1", 2)
	out := json.RawMessage(`{"b":1,"a":[1,2]}`)
	hash, _ := signing.OutputHash(out)
	complete := func(a actors.Assignment, sig string) actors.Done {
		return f.do(actors.Complete{WorkerID: f.wk, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: out, Signature: sig})
	}
	wantCode(t, complete(as[0], "").Err, actors.CodeSignatureInvalid)
	// A signature over another job's completion does not verify for this one.
	wantCode(t, complete(as[0], signing.SignCompletion(priv, as[1].JobID, as[1].LeaseID, as[1].Nonce, hash)).Err, actors.CodeSignatureInvalid)
	if d := complete(as[0], signing.SignCompletion(priv, as[0].JobID, as[0].LeaseID, as[0].Nonce, hash)); d.Err != nil {
		t.Fatal(d.Err)
	}
	if j := f.job(as[0].JobID); j.OutputHash != hash || j.Status != projections.StatusSucceeded {
		t.Fatalf("job %+v", j)
	}
	// A wrong nonce and a wrong output hash are refused before the signature is looked at.
	bad := actors.Complete{WorkerID: f.wk, JobID: as[1].JobID, LeaseID: as[1].LeaseID, Nonce: "00", Output: out}
	wantCode(t, f.do(bad).Err, actors.CodeLeaseMismatch)
	bad.Nonce, bad.OutputHash = as[1].Nonce, "deadbeef"
	wantCode(t, f.do(bad).Err, actors.CodeInvalidArgument)
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]time.Duration{1: 10 * time.Second, 2: 20 * time.Second, 5: 160 * time.Second, 6: 300 * time.Second, 60: 300 * time.Second} {
		if got := actors.Backoff(n); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", n, got, want)
		}
	}
}
