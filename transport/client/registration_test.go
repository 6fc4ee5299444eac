package client_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/transport/client"
)

// The client tells a worker token from an enroll token by the prefix the server gives it.
func TestWorkerTokenPrefixIsTheServers(t *testing.T) {
	if client.WorkerTokenPrefix != broker.WorkerTokenPrefix {
		t.Fatalf("client %q, broker %q", client.WorkerTokenPrefix, broker.WorkerTokenPrefix)
	}
}

// A registration registers once and keeps its token: a second start of the same worker uses the
// stored one; a worker configured differently registers anew; a token the server does not know
// is forgotten.
func TestRegistrationIsKept(t *testing.T) {
	url := serve(t)
	reg := client.Registration{Server: url, Name: "w", Queues: []string{"q"}, Capacity: 1, StateDir: t.TempDir(), Logger: zaptest.NewLogger(t)}
	unlock, err := reg.Claim()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	first, err := reg.Token(ctx(t), "")
	if err != nil || !strings.HasPrefix(first, client.WorkerTokenPrefix) {
		t.Fatalf("token %q, %v", first, err)
	}
	if fi, err := os.Stat(reg.Path()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file: %v %v, want mode 0600", fi, err)
	}
	if again, err := reg.Token(ctx(t), ""); err != nil || again != first {
		t.Fatalf("a restart registered again: %q %v", again, err)
	}
	reg.KeepRenewed("tw_renewed", time.Now())
	if again, _ := reg.Token(ctx(t), ""); again != "tw_renewed" {
		t.Fatalf("the renewed token was not kept: %q", again)
	}
	other := reg
	other.Capacity = 2
	if again, err := other.Token(ctx(t), ""); err != nil || again == first || again == "tw_renewed" {
		t.Fatalf("another capacity kept the old registration: %q %v", again, err)
	}
	if !reg.ForgetIfUnknown(&client.Error{Code: "TOKEN_EXPIRED"}) {
		t.Fatal("an expired token was not forgotten")
	}
	if _, err := os.Stat(reg.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the state file is still there: %v", err)
	}
	if reg.ForgetIfUnknown(&client.Error{Code: "WORKER_REVOKED"}) {
		t.Fatal("a revoked worker is to be registered again")
	}
}

// Two workers started alike on one machine each claim a name of their own.
func TestRegistrationClaimsANameEach(t *testing.T) {
	dir := t.TempDir()
	a := client.Registration{Server: "http://x", Name: "w", StateDir: dir}
	b := a
	unlockA, err := a.Claim()
	if err != nil {
		t.Fatal(err)
	}
	defer unlockA()
	unlockB, err := b.Claim()
	if err != nil {
		t.Fatal(err)
	}
	defer unlockB()
	if a.Name != "w" || b.Name != "w-2" || a.Path() == b.Path() {
		t.Fatalf("names %q and %q, paths %s and %s", a.Name, b.Name, a.Path(), b.Path())
	}
}

// A token file is followed through links, and held by one worker at a time.
func TestTokenFileIsTheFileNotTheLink(t *testing.T) {
	dir := t.TempDir()
	file, link := filepath.Join(dir, "token"), filepath.Join(dir, "link")
	if err := client.WriteFileAtomic(file, []byte("tw_x\n")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	real, err := client.RealPath(link)
	if err != nil || real != file {
		t.Fatalf("RealPath(link) = %q, %v; want %q", real, err, file)
	}
	unlock, err := client.HoldTokenFile(file, file)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if _, err := client.HoldTokenFile(link, real); err == nil || !strings.Contains(err.Error(), "in use by another worker") {
		t.Fatalf("a second hold: %v", err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RealPath(link); err == nil || !strings.Contains(err.Error(), "a link to a file that is not there") {
		t.Fatalf("a dangling link: %v", err)
	}
}

// Run registers on the first start and keeps the token in the state file; the next start
// connects with the stored token, registering nothing.
func TestRegistrationRunKeepsTheToken(t *testing.T) {
	url := serve(t)
	reg := client.Registration{Server: url, Name: "w", Queues: []string{"q"}, Capacity: 1, StateDir: t.TempDir(), Logger: zaptest.NewLogger(t)}
	start := func() string {
		c, cancel := context.WithCancel(ctx(t))
		defer cancel()
		w := client.Worker{Server: url, Capacity: 1, Logger: zaptest.NewLogger(t), OnConnect: func(string) { cancel() },
			Handler: func(context.Context, *client.Job) (any, error) { return nil, nil }}
		if err := reg.Run(c, w, "", ""); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(reg.Path())
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	first := start()
	if !strings.Contains(first, `"worker_token": "tw_`) {
		t.Fatalf("the state file after the first start:\n%s", first)
	}
	if again := start(); again != first {
		t.Fatalf("the second start registered again:\n%s\nthen\n%s", first, again)
	}
}
