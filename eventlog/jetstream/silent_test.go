package jetstream_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/eventlog/eventlogtest"
	"github.com/tetherhq/tether/eventlog/jetstream"
	"github.com/tetherhq/tether/eventlog/jetstream/natstest"
)

// A standby takes over while the NATS server its connection went to is alive but silent for
// the whole takeover (paused, black-holed: its proxy holds every byte): no request waits for
// that server's answer longer than the request timeout, and the connection moves to another
// server, so the catch-up and the fence go through there. nats.go's defaults would keep the
// connection on the silent server for 4 to 6 minutes, each request waiting for its own
// timeout (10 s for the stream's state) and asked of the same server again.
func TestTakeoverLeavesASilentNATSServer(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-node cluster")
	}
	c := natstest.Start(t, 3)
	stream := fmt.Sprintf("T%d", streams.Add(1))
	var proxies []*natstest.Proxy
	var hosts []string
	for _, n := range c.Nodes {
		p := natstest.NewProxy(t, strings.TrimPrefix(n.URL(), "nats://"))
		proxies = append(proxies, p)
		hosts = append(hosts, p.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ttl = time.Second
	leaderUp, err := jetstream.Connect(ctx, jetstream.Config{URL: c.LogURL(stream), Replicas: 3, RequestTimeout: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer leaderUp.Close()
	standbyUp, err := jetstream.Connect(ctx, jetstream.Config{URL: "nats://" + strings.Join(hosts, ",") + "/" + stream, Replicas: 3, RequestTimeout: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer standbyUp.Close()

	fs := vfs.NewMem()
	leader, err := eventlog.Open("/leader", eventlog.Options{FS: fs, Upstream: leaderUp, Lead: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := leader.Append(ctx, eventlogtest.Event("job/a", i)); err != nil {
			t.Fatal(err)
		}
	}
	standby, err := eventlog.Open("/standby", eventlog.Options{FS: fs, Upstream: standbyUp})
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Close()
	// More than the standby copied: the takeover has to catch up through NATS.
	for i := range 20 {
		if _, err := leader.Append(ctx, eventlogtest.Event("job/b", i)); err != nil {
			t.Fatal(err)
		}
	}
	head := leader.Head()
	_ = leader.Close() // the leader dies

	silent := -1
	for i, h := range hosts {
		if standbyUp.ConnectedAddr() == h {
			silent = i
		}
	}
	if silent < 0 {
		t.Fatalf("the standby's connection is on %s, none of the proxies %v", standbyUp.ConnectedAddr(), hosts)
	}
	proxies[silent].Pause()
	defer proxies[silent].Resume()
	start := time.Now()
	if err := standby.Lead(ctx); err != nil {
		t.Fatalf("the takeover, its NATS server silent throughout: %v", err)
	}
	took := time.Since(start)
	if got := standby.Head(); got != head {
		t.Fatalf("the new leader caught up to seq %d, the stream holds %d", got.Seq, head.Seq)
	}
	if r, err := standby.Append(ctx, eventlogtest.Event("job/c", 0)); err != nil || r.First != head.Seq+1 {
		t.Fatalf("the new leader's append: %+v %v", r, err)
	}
	t.Logf("took over in %s (request timeout %s), its NATS server silent; now on %s", took.Round(time.Millisecond), ttl, standbyUp.ConnectedAddr())
}
