package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/eventlog/election"
)

// stillClock is a clock whose timers never fire: a Driver on it runs its first round and no more.
type stillClock struct{}

func (stillClock) Now() time.Time                  { return time.Unix(0, 0) }
func (stillClock) AfterFunc(time.Duration, func()) {}

// freeKey is a bucket whose key is always free to take, answering on a goroutine of its own.
type freeKey struct{}

func (freeKey) Do(a election.Action, done func(election.Outcome)) {
	go func() {
		switch a.Kind {
		case election.Read:
			done(election.Outcome{Kind: election.Absent})
		case election.Create:
			done(election.Outcome{Kind: election.Created, Rev: 1})
		default:
			done(election.Outcome{Kind: election.Unanswered})
		}
	}()
}

// candidacy is a server's part in an election that it wins at once; deposed hears why it stops.
func candidacy(name string, deposed chan<- string) broker.Candidacy {
	return broker.Candidacy{Election: election.Config{
		TTL: time.Second, Value: []byte(name), Clock: stillClock{}, Bucket: freeKey{},
		Check:   func(_ []byte, done func(election.Outcome)) { done(election.Outcome{Kind: election.NotLeading}) },
		Deposed: func(reason string, _ election.Outcome) { deposed <- reason },
	}}
}

// A server that wins the election takes over with the stream's jobs; the one it fenced is
// deposed by its first refused append, and its Driver no longer holds the key.
func TestLeadTakesOverAndDeposes(t *testing.T) {
	up := eventlog.NewMemUpstream()
	deposedA, deposedB := make(chan string, 1), make(chan string, 1)
	a, da, err := broker.Lead(ctx(t), broker.Config{Dir: t.TempDir(), Upstream: up}, candidacy("a", deposedA))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	res, _, err := a.Submit(ctx(t), "acme", "", actors.JobSpec{Queue: "q", Type: "t"})
	if err != nil {
		t.Fatal(err)
	}
	standing, leading := false, false
	c := candidacy("b", deposedB)
	c.Standing = func(*broker.Standby, *election.Driver) { standing = true }
	c.Leading = func() { leading = true }
	b, db, err := broker.Lead(ctx(t), broker.Config{Dir: t.TempDir(), Upstream: up}, c)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !standing || !leading {
		t.Fatalf("standing %v, leading %v: want both told", standing, leading)
	}
	if _, ok := b.Get("acme", res[0].Job.ID); !ok {
		t.Fatal("the job is not on the new leader")
	}
	if _, _, err := a.Submit(ctx(t), "acme", "", actors.JobSpec{Queue: "q", Type: "t"}); err == nil {
		t.Fatal("the fenced leader acknowledged a submit")
	}
	if why := <-deposedA; why != election.ReasonFenced {
		t.Fatalf("a was deposed for %q, want %q", why, election.ReasonFenced)
	}
	if _, held := da.Close(); held {
		t.Fatal("the fenced leader would resign the key")
	}
	if _, held := db.Close(); !held {
		t.Fatal("the new leader does not hold the key")
	}
	select {
	case why := <-deposedB:
		t.Fatalf("the new leader was deposed: %s", why)
	default:
	}
}

// A standby that is told to stop before it wins returns why, with its Driver to close.
func TestLeadStopsWhileStandingBy(t *testing.T) {
	up := eventlog.NewMemUpstream()
	c := candidacy("a", make(chan string, 1))
	c.Election.Bucket = heldKey{}
	stop, cancel := context.WithCancel(ctx(t))
	c.Standing = func(*broker.Standby, *election.Driver) { cancel() }
	_, d, err := broker.Lead(stop, broker.Config{Dir: t.TempDir(), Upstream: up}, c)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Lead: %v, want context.Canceled", err)
	}
	if _, held := d.Close(); held {
		t.Fatal("a standby holds the key")
	}
}

// heldKey is a bucket whose key another server holds.
type heldKey struct{}

func (heldKey) Do(_ election.Action, done func(election.Outcome)) {
	go done(election.Outcome{Kind: election.Found, Value: []byte("other"), Rev: 9})
}
