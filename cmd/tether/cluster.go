package main

import (
	"context"
	"errors"
	"flag"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/eventlog/jetstream"
	"github.com/tetherhq/tether/transport"
)

// natsConn says how to reach a JetStream stream: its URL and the credentials NATS clients take.
// The server and tether replay share it.
type natsConn struct {
	log                    string
	creds, nkey            string
	tlsCA, tlsCert, tlsKey string
}

func (n *natsConn) register(fs *flag.FlagSet, logUsage string) {
	fs.StringVar(&n.log, "log", "", logUsage)
	fs.StringVar(&n.creds, "nats-creds", "", "a NATS credentials file (user JWT and NKey seed)")
	fs.StringVar(&n.nkey, "nats-nkey", "", "a file holding a NATS NKey seed")
	fs.StringVar(&n.tlsCA, "nats-tls-ca", "", "PEM file of the CAs that sign the NATS servers' certificates")
	fs.StringVar(&n.tlsCert, "nats-tls-cert", "", "PEM client certificate for NATS")
	fs.StringVar(&n.tlsKey, "nats-tls-key", "", "the private key (PEM) of --nats-tls-cert")
}

func (n *natsConn) check(fs *flag.FlagSet) error {
	if n.log == "" {
		if n.creds != "" || n.nkey != "" || n.tlsCA != "" || n.tlsCert != "" || n.tlsKey != "" {
			return badFlagf(fs, "the --nats-* flags go with --log nats://...")
		}
		return nil
	}
	if _, _, err := jetstream.ParseURL(n.log); err != nil {
		return badFlagf(fs, "--log %v", err)
	}
	if (n.tlsCert == "") != (n.tlsKey == "") {
		return badFlagf(fs, "--nats-tls-cert and --nats-tls-key go together")
	}
	return nil
}

// config is the connection's jetstream.Config, for a client named name.
func (n *natsConn) config(name string) jetstream.Config {
	return jetstream.Config{URL: n.log, Creds: n.creds, NKey: n.nkey, TLSCA: n.tlsCA, TLSCert: n.tlsCert, TLSKey: n.tlsKey, Name: name}
}

// clusterFlags say where the server's event log is: Pebble in --data (the default), or a
// JetStream stream that --data holds a copy of, and how the server takes part in leading it.
type clusterFlags struct {
	natsConn
	replicas  int
	advertise string
	leaderTTL time.Duration
}

// Bounds of --leader-ttl.
const (
	leaderTTLMin = 500 * time.Millisecond
	leaderTTLMax = time.Minute
)

func (n *clusterFlags) register(fs *flag.FlagSet) {
	n.natsConn.register(fs, "the event log: empty for Pebble in --data; nats://host:4222[,host:4222...]/STREAM for a replicated JetStream stream that this server leads or follows as a hot standby (--data keeps its copy); user:password@ or a token@ may come before the hosts")
	fs.IntVar(&n.replicas, "nats-replicas", 3, "replicas of the stream when this server creates it (1 for a single NATS server)")
	fs.StringVar(&n.advertise, "advertise", "", "the URL clients reach this server at, which standbys send them to while it leads; empty: http(s)://--addr")
	fs.DurationVar(&n.leaderTTL, "leader-ttl", 2*time.Second, "how long the leader's claim lives without renewal: a standby takes over at most this long after the leader dies (the bucket keeps the TTL it was made with)")
}

func (n *clusterFlags) check(fs *flag.FlagSet) error {
	if err := n.natsConn.check(fs); err != nil || n.log == "" {
		return err
	}
	switch {
	case n.replicas < 1 || n.replicas > 5:
		return badFlagf(fs, "--nats-replicas %d: want 1..5", n.replicas)
	case n.leaderTTL < leaderTTLMin || n.leaderTTL > leaderTTLMax:
		return badFlagf(fs, "--leader-ttl %s: want %s..%s", n.leaderTTL, leaderTTLMin, leaderTTLMax)
	case n.advertise != "" && !strings.HasPrefix(n.advertise, "http://") && !strings.HasPrefix(n.advertise, "https://"):
		return badFlagf(fs, "--advertise %q: want an http:// or https:// URL", n.advertise)
	}
	return nil
}

// cluster is this server's part in a replicated log: the stream and the election.
type cluster struct {
	stream   *jetstream.Stream
	election *jetstream.Election
	log      *zap.Logger
	// deposed is closed when this server loses the lead it held; closing when it stops.
	deposed, closing chan struct{}
}

func (n *clusterFlags) join(ctx context.Context, advertise string, log *zap.Logger) (*cluster, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cfg := n.config("tether " + advertise)
	cfg.Replicas, cfg.Logger = n.replicas, log.Named("nats")
	stream, err := jetstream.Connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	election, err := stream.Elect(ctx, jetstream.Leader{Node: hostname() + " " + advertise, URL: advertise}, n.leaderTTL)
	if err != nil {
		stream.Close()
		return nil, err
	}
	return &cluster{stream: stream, election: election, log: log.Named("cluster"), deposed: make(chan struct{}), closing: make(chan struct{})}, nil
}

// standbyPoll is how often a standby asks whether the lead is free.
const standbyPoll = 250 * time.Millisecond

// lead follows the stream as a hot standby until this server wins the election, then opens the
// broker as the stream's writer.
func (c *cluster) lead(ctx context.Context, cfg broker.Config, api *transport.Server) (*broker.Broker, error) {
	cfg.Upstream = c.stream
	sb, err := broker.OpenStandby(cfg)
	if err != nil {
		return nil, err
	}
	var leader atomic.Pointer[string] // its URL; nil or "" while no one leads
	api.SetStandby(func() transport.Standby {
		st := transport.Standby{HeadSeq: sb.Head().Seq}
		if url := leader.Load(); url != nil {
			st.Leader = *url
		}
		return st
	})
	c.log.Info("standby: following the stream", zap.String("stream", c.stream.Name()), zap.Uint64("head_seq", sb.Head().Seq))
	tick := time.NewTicker(standbyPoll)
	defer tick.Stop()
	for {
		if err := sb.Err(); err != nil {
			_ = sb.Close()
			return nil, err
		}
		won, err := c.election.TryLead(ctx)
		if err != nil {
			c.log.Warn("the election did not answer", zap.String("code", "ELECTION_UNAVAILABLE"), zap.Error(err))
		}
		if won {
			break
		}
		if l, _, err := c.election.Leader(ctx); err == nil {
			leader.Store(&l.URL) // the zero Leader while no one leads
		}
		select {
		case <-ctx.Done():
			_ = sb.Close()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
	won := time.Now()
	c.log.Info("won the election; catching up and fencing the stream", zap.Uint64("standby_seq", sb.Head().Seq))
	go c.renew()
	if err := sb.Close(); err != nil {
		_ = c.election.Resign(context.Background())
		return nil, err
	}
	b, err := broker.Open(cfg)
	if err != nil {
		_ = c.election.Resign(context.Background())
		return nil, err
	}
	c.log.Info("leading the stream", zap.Uint64("head_seq", b.Head().Seq), zap.Duration("took", time.Since(won)))
	return b, nil
}

// renew keeps the lead alive from the moment it is won until the server has stopped (close),
// clean shutdown included, so that no standby fences a leader still closing. The lead is lost
// when a renewal is refused (the key expired and another server took it), or when renewals
// have failed for a whole TTL: either way a standby may be leading by now, and this server
// stops acting. Its appends would be refused anyway (the new leader fenced the stream);
// stopping also stops its reads.
func (c *cluster) renew() {
	ttl := c.election.TTL()
	tick := time.NewTicker(ttl / 4)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-c.closing:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), ttl/4)
		err := c.election.Renew(ctx)
		cancel()
		switch {
		case err == nil:
			last = time.Now()
			continue
		case !errors.Is(err, jetstream.ErrLeadLost) && time.Since(last) < ttl:
			c.log.Warn("the lead was not renewed; trying again", zap.String("code", "LEAD_NOT_RENEWED"), zap.Error(err))
			continue
		}
		c.log.Error("lost the lead; stopping", zap.String("code", "LEAD_LOST"), zap.Error(err), zap.Duration("since_renewed", time.Since(last)))
		// Closing the connection fails the appends in flight at once, so the requests
		// waiting for them get their answer (UNAVAILABLE) instead of a publish timeout.
		c.stream.Close()
		close(c.deposed)
		return
	}
}

// close resigns the lead, if held, so a standby takes over at once, and closes the connection.
func (c *cluster) close() {
	close(c.closing)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.election.Resign(ctx); err != nil {
		c.log.Warn("could not resign the lead; a standby takes over when it expires", zap.Error(err))
	}
	c.stream.Close()
}

var errDeposed = errors.New("lost the lead of the stream")
