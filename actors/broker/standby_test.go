package broker_test

import (
	"encoding/json"
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
	next, err := sb.Lead(ctx(t))
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

// A standby that closes instead opens again where it was.
func TestStandbyReopens(t *testing.T) {
	up := eventlog.NewMemUpstream()
	leader, err := broker.Open(broker.Config{Dir: t.TempDir(), Upstream: up, CheckpointEvery: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Close()
	dir := t.TempDir()
	sb, err := broker.OpenStandby(broker.Config{Dir: dir, Upstream: up, CheckpointEvery: 5})
	if err != nil {
		t.Fatal(err)
	}
	res, _, err := leader.Submit(ctx(t), "acme", "", actors.JobSpec{Queue: "q", Type: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	next, err := broker.Open(broker.Config{Dir: dir, Upstream: up})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if _, ok := next.Get("acme", res[0].Job.ID); !ok {
		t.Fatalf("job %s is not on the server that stood by", res[0].Job.ID)
	}
}

// BenchmarkTakeover is a standby's takeover of a stream that holds 50,000 waiting jobs, from the
// election won to a broker that takes requests: "lead" promotes the standby in place
// (Standby.Lead), "reopen" closes it and opens a broker on its data dir, a checkpoint written
// and read back. An op is one takeover.
func BenchmarkTakeover(b *testing.B) {
	const jobs, batch = 50_000, 100
	for _, how := range []string{"lead", "reopen"} {
		b.Run(how, func(b *testing.B) {
			up := eventlog.NewMemUpstream()
			leader, err := broker.Open(broker.Config{Dir: b.TempDir(), Upstream: up})
			if err != nil {
				b.Fatal(err)
			}
			specs := make([]actors.JobSpec, batch)
			for i := range specs {
				specs[i] = actors.JobSpec{Queue: "q", Type: "t", Payload: json.RawMessage(`{"n":1}`)}
			}
			var last string
			for range jobs / batch {
				res, _, err := leader.Submit(ctx(b), "acme", "", specs...)
				if err != nil {
					b.Fatal(err)
				}
				last = res[len(res)-1].Job.ID
			}
			_ = leader.Close()
			dir := b.TempDir()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				sb, err := broker.OpenStandby(broker.Config{Dir: dir, Upstream: up})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				var next *broker.Broker
				if how == "lead" {
					next, err = sb.Lead(ctx(b))
				} else if err = sb.Close(); err == nil {
					next, err = broker.Open(broker.Config{Dir: dir, Upstream: up})
				}
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				if _, ok := next.Get("acme", last); !ok {
					b.Fatal("the new leader does not have the last job")
				}
				_ = next.Close()
			}
		})
	}
}
