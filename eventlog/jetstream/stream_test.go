package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/eventlog/election"
	"github.com/tetherhq/tether/eventlog/eventlogtest"
	"github.com/tetherhq/tether/eventlog/jetstream"
	"github.com/tetherhq/tether/eventlog/jetstream/natstest"
)

var streams atomic.Int64

// connect makes a new stream on the cluster and connects to it.
func connect(t testing.TB, c *natstest.Cluster, replicas int) *jetstream.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := jetstream.Connect(ctx, jetstream.Config{URL: c.LogURL(fmt.Sprintf("T%d", streams.Add(1))), Replicas: replicas})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// store is a store on the crashable in-memory filesystem that copies a stream: a crash loses
// the copy's unsynced writes and leaves the stream whole.
func store(fs *vfs.MemFS, up eventlog.Upstream) eventlogtest.Store {
	s := eventlogtest.Store{FS: fs, Dir: "/data/log", Upstream: up}
	s.Crash = func(keep int, rng *rand.Rand) eventlogtest.Store {
		return store(fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: keep, RNG: rng}), up)
	}
	s.HoldDurable = func(gate func()) eventlogtest.Store {
		held := s
		held.Upstream = holding{up, gate}
		return held
	}
	return s
}

// holding runs gate before a publish's wait returns.
type holding struct {
	eventlog.Upstream
	gate func()
}

func (h holding) Publish(prev uint64, payload []byte) func() (uint64, error) {
	wait := h.Upstream.Publish(prev, payload)
	return func() (uint64, error) {
		h.gate()
		return wait()
	}
}

func TestConformanceR1(t *testing.T) {
	c := natstest.Start(t, 1)
	eventlogtest.Run(t, func(t *testing.T) eventlogtest.Store { return store(vfs.NewCrashableMem(), connect(t, c, 1)) })
}

func TestConformanceR3(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-node cluster")
	}
	c := natstest.Start(t, 3)
	eventlogtest.Run(t, func(t *testing.T) eventlogtest.Store { return store(vfs.NewCrashableMem(), connect(t, c, 3)) })
}

// The stream's own rule fences a deposed leader's in-flight and retried publishes, on one node
// and on a cluster, where the stream's leader checks it against the messages proposed.
func TestDeposedWriterR1(t *testing.T) {
	c := natstest.Start(t, 1)
	eventlogtest.DeposedWriter(t, func(t *testing.T) eventlog.Upstream { return connect(t, c, 1) })
}

func TestDeposedWriterR3(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-node cluster")
	}
	c := natstest.Start(t, 3)
	eventlogtest.DeposedWriter(t, func(t *testing.T) eventlog.Upstream { return connect(t, c, 3) })
}

func TestCrashRecovery(t *testing.T) {
	c := natstest.Start(t, 1)
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			eventlogtest.CrashRecovery(t, store(vfs.NewCrashableMem(), connect(t, c, 1)), seed)
		})
	}
}

// A deposed leader's append is refused by JetStream itself, and a stream that already exists
// with settings that would lose messages is refused.
func TestFencedByTheStream(t *testing.T) {
	c := natstest.Start(t, 1)
	ctx := context.Background()
	up := connect(t, c, 1)
	fs := vfs.NewMem()
	old, err := eventlog.Open("/a", eventlog.Options{FS: fs, Upstream: up, Lead: true})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if _, err := old.Append(ctx, eventlogtest.Event("job/x", 1)); err != nil {
		t.Fatal(err)
	}
	next, err := eventlog.Open("/b", eventlog.Options{FS: fs, Upstream: up, Lead: true})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if _, err := old.Append(ctx, eventlogtest.Event("job/x", 2)); !errors.Is(err, eventlog.ErrFenced) {
		t.Fatalf("the deposed leader's append: %v, want ErrFenced", err)
	}
	if r, err := next.Append(ctx, eventlogtest.Event("job/x", 3)); err != nil || r.First != 2 {
		t.Fatalf("the new leader's append: %+v %v", r, err)
	}
}

// The bucket's answers, as package election takes them: a key is created once, renewed at its
// revision, refused at another, read back, and resigned.
func TestElection(t *testing.T) {
	c := natstest.Start(t, 1)
	ctx := context.Background()
	up := connect(t, c, 1)
	a, err := up.Elect(ctx, jetstream.NewLeader("a", "http://a"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b, err := up.Elect(ctx, jetstream.NewLeader("b", "http://b"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	do := func(e *jetstream.Election, a election.Action, want election.Kind) election.Outcome {
		t.Helper()
		o := e.Do(ctx, a)
		if o.Kind != want {
			t.Fatalf("%+v: %+v, want kind %d", a, o, want)
		}
		return o
	}
	do(b, election.Action{Kind: election.Read}, election.Absent)
	created := do(a, election.Action{Kind: election.Create}, election.Created)
	do(b, election.Action{Kind: election.Create}, election.Exists)
	found := do(b, election.Action{Kind: election.Read}, election.Found)
	if l, err := jetstream.ParseLeader(found.Value); err != nil || l != a.Me() || found.Rev != created.Rev {
		t.Fatalf("b reads %+v at %d (%v), want %+v at %d", l, found.Rev, err, a.Me(), created.Rev)
	}
	renewed := do(a, election.Action{Kind: election.Renew, Rev: created.Rev}, election.Updated)
	// A renewal at the revision before: what a leader whose last answer was lost sends next.
	do(a, election.Action{Kind: election.Renew, Rev: created.Rev}, election.Refused)
	if back := do(a, election.Action{Kind: election.Read}, election.Found); back.Rev != renewed.Rev || string(back.Value) != string(a.Me().Value()) {
		t.Fatalf("a reads back %q at %d, want its own at %d", back.Value, back.Rev, renewed.Rev)
	}
	do(a, election.Action{Kind: election.Probe}, election.Answered)
	if err := a.Resign(ctx, renewed.Rev); err != nil {
		t.Fatal(err)
	}
	do(b, election.Action{Kind: election.Read}, election.Absent)
	do(b, election.Action{Kind: election.Create}, election.Created)
	do(a, election.Action{Kind: election.Renew, Rev: renewed.Rev}, election.Refused)
}

// A server whose settings differ from those the stream recorded is refused, naming the
// difference; one that brings a setting the stream lacks records it; --cluster-reconfigure
// records its own.
func TestClusterSettings(t *testing.T) {
	c := natstest.Start(t, 1)
	ctx := context.Background()
	open := func(settings map[string]string, reconfigure bool) error {
		s, err := jetstream.Connect(ctx, jetstream.Config{URL: c.LogURL("SETTINGS"), Replicas: 1, Settings: settings, Reconfigure: reconfigure})
		if err == nil {
			s.Close()
		}
		return err
	}
	if err := open(map[string]string{"tether.auth": "token"}, false); err != nil {
		t.Fatal(err)
	}
	err := open(map[string]string{"tether.auth": "none"}, false)
	if !errors.Is(err, jetstream.ErrSettingsDiffer) || !strings.Contains(err.Error(), `auth is "none" here and "token" in the cluster`) {
		t.Fatalf("a server with --auth none: %v", err)
	}
	if err := open(map[string]string{"tether.auth": "token", "tether.retain": "1h0m0s"}, false); err != nil {
		t.Fatalf("a setting the stream lacks: %v", err)
	}
	if err := open(map[string]string{"tether.auth": "token", "tether.retain": "2h0m0s"}, false); !errors.Is(err, jetstream.ErrSettingsDiffer) {
		t.Fatalf("a setting recorded by an earlier server: %v", err)
	}
	if err := open(map[string]string{"tether.auth": "token", "tether.retain": "2h0m0s"}, true); err != nil {
		t.Fatalf("--cluster-reconfigure: %v", err)
	}
	if err := open(map[string]string{"tether.auth": "token", "tether.retain": "2h0m0s"}, false); err != nil {
		t.Fatalf("after --cluster-reconfigure: %v", err)
	}
	if err := open(map[string]string{"tether.auth": "token"}, false); err != nil {
		t.Fatalf("a reader's settings need not name everything: %v", err)
	}
	s, err := jetstream.Connect(ctx, jetstream.Config{URL: c.LogURL("SETTINGS"), Replicas: 3, Settings: map[string]string{}})
	if err == nil {
		s.Close()
	}
	if !errors.Is(err, jetstream.ErrSettingsDiffer) || !strings.Contains(err.Error(), "--nats-replicas") {
		t.Fatalf("another replica count: %v", err)
	}
}

// BenchmarkCatchUp times a new copy of a stream that holds history: b.N records in messages
// of 100, each record about 300 bytes, copied by a fresh follower's Open.
func BenchmarkCatchUp(b *testing.B) {
	c := natstest.Start(b, 1)
	up := connect(b, c, 1)
	fs := vfs.NewMem()
	leader, err := eventlog.Open("/leader", eventlog.Options{FS: fs, Upstream: up, Lead: true})
	if err != nil {
		b.Fatal(err)
	}
	defer leader.Close()
	data := []byte(fmt.Sprintf(`{"pad":%q}`, strings.Repeat("x", 250)))
	batch := make([]eventlog.Event, 100)
	for i := range batch {
		batch[i] = eventlog.Event{Stream: fmt.Sprintf("job/%d", i), Type: "test.event", Data: data}
	}
	for n := 0; n < b.N; n += len(batch) {
		if _, err := leader.Append(context.Background(), batch...); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	copied, err := eventlog.Open("/copy", eventlog.Options{FS: fs, Upstream: up})
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if copied.Head() != leader.Head() {
		b.Fatalf("the copy opened at %d, the stream is at %d", copied.Head().Seq, leader.Head().Seq)
	}
	_ = copied.Close()
}
