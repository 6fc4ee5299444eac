package broker_test

import (
	"errors"
	"testing"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/eventlog"
)

// A standby folds what the leader appends; when it takes over, it has every job, and the old
// leader, still running, can no longer append.
func TestStandbyTakesOver(t *testing.T) {
	up := eventlog.NewMemUpstream()
	leader, err := broker.Open(broker.Config{Dir: t.TempDir(), Upstream: up, CheckpointEvery: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Close()
	var ids []string
	for range 12 {
		res, _, err := leader.Submit(ctx(t), "acme", "", actors.JobSpec{Queue: "q", Type: "t"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res[0].Job.ID)
	}
	dir := t.TempDir()
	sb, err := broker.OpenStandby(broker.Config{Dir: dir, Upstream: up, CheckpointEvery: 5})
	if err != nil {
		t.Fatal(err)
	}
	if h := sb.Head(); h != leader.Head() {
		t.Fatalf("the standby opened at %d, the leader is at %d", h.Seq, leader.Head().Seq)
	}
	res, _, err := leader.Submit(ctx(t), "acme", "", actors.JobSpec{Queue: "q", Type: "t"})
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, res[0].Job.ID)
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}

	next, err := broker.Open(broker.Config{Dir: dir, Upstream: up})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	for _, id := range ids {
		if _, ok := next.Get("acme", id); !ok {
			t.Fatalf("job %s is not on the new leader", id)
		}
	}
	if _, _, err := leader.Submit(ctx(t), "acme", "", actors.JobSpec{Queue: "q", Type: "t"}); err == nil {
		t.Fatal("the deposed leader acknowledged a submit")
	}
	if !errors.Is(leader.Err(), eventlog.ErrFenced) {
		t.Fatalf("the deposed leader's log: %v, want ErrFenced", leader.Err())
	}
	if _, _, err := next.Submit(ctx(t), "acme", "", actors.JobSpec{Queue: "q", Type: "t"}); err != nil {
		t.Fatalf("a submit on the new leader: %v", err)
	}
}
