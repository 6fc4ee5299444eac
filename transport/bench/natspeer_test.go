package bench

import (
	"context"
	"testing"
	"time"

	"github.com/tetherhq/tether/eventlog/jetstream/natstest"
)

// The peer runs every job through a real JetStream work queue, and leaves no stream behind.
func TestPeerRunsEveryJob(t *testing.T) {
	c := natstest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := RunPeer(ctx, PeerConfig{URL: c.Nodes[0].URL(), Replicas: 1, Jobs: 300, Producers: 3, Workers: 7})
	if err != nil {
		t.Fatal(err)
	}
	if res.Jobs != 300 || res.JobsPerSecond <= 0 {
		t.Fatalf("peer result %+v", res)
	}
	info, err := c.Nodes[0].Server().Jsz(nil)
	if err != nil {
		t.Fatal(err)
	}
	if info.Streams != 0 {
		t.Fatalf("the peer left %d streams", info.Streams)
	}
}
