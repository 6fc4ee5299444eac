package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/eventlog/election"
	"github.com/tetherhq/tether/eventlog/jetstream"
	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/cli"
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
			return cli.BadFlagf(fs, "the --nats-* flags go with --log nats://...")
		}
		return nil
	}
	if _, _, err := jetstream.ParseURL(n.log); err != nil {
		return cli.BadFlagf(fs, "--log %v", err)
	}
	if (n.tlsCert == "") != (n.tlsKey == "") {
		return cli.BadFlagf(fs, "--nats-tls-cert and --nats-tls-key go together")
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
	replicas    int
	advertise   string
	leaderTTL   time.Duration
	reconfigure bool
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
	fs.DurationVar(&n.leaderTTL, "leader-ttl", 2*time.Second, "how long the leader's claim lives without renewal: a standby takes over about this long after the leader dies; every server of a cluster has the same")
	fs.BoolVar(&n.reconfigure, "cluster-reconfigure", false, "record this server's settings (auth, tokens, retention, archive, limits) as its cluster's, in place of those the stream holds; every server of a cluster must agree, and a server whose settings differ refuses to start")
}

func (n *clusterFlags) check(fs *flag.FlagSet) error {
	if n.log == "" {
		// Given without a replicated log, these would be taken and do nothing.
		var given []string
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "cluster-reconfigure", "nats-replicas", "leader-ttl", "advertise":
				given = append(given, "--"+f.Name)
			}
		})
		if len(given) > 0 {
			return cli.BadFlagf(fs, "%s goes with --log nats://...", strings.Join(given, " and "))
		}
	}
	if err := n.natsConn.check(fs); err != nil || n.log == "" {
		return err
	}
	switch {
	case n.replicas < 1 || n.replicas > 5:
		return cli.BadFlagf(fs, "--nats-replicas %d: want 1..5", n.replicas)
	case n.leaderTTL < leaderTTLMin || n.leaderTTL > leaderTTLMax:
		return cli.BadFlagf(fs, "--leader-ttl %s: want %s..%s", n.leaderTTL, leaderTTLMin, leaderTTLMax)
	case n.advertise != "" && !httpURL(n.advertise):
		return cli.BadFlagf(fs, "--advertise %q: want an http:// or https:// URL", n.advertise)
	}
	return nil
}

// cluster is this server's part in a replicated log: the stream, and the election's driver
// (package election) on the wall clock and the stream's KV bucket.
type cluster struct {
	stream   *jetstream.Stream
	election *jetstream.Election
	log      *zap.Logger
	// check asks a leader's /readyz whether it still leads.
	check *http.Client

	// deposed is closed when this server, having led, stops leading (why says why); closing
	// when the server stops.
	deposed, closing chan struct{}
	why              string
	// driver is this server's part in the election once lead started it; nil before.
	mu     sync.Mutex
	driver *election.Driver
	// successor is the URL of the server that holds the key after this one, once seen.
	successor atomic.Pointer[string]
}

func (n *clusterFlags) join(ctx context.Context, advertise string, settings map[string]string, log *zap.Logger) (*cluster, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cfg := n.config("tether " + advertise)
	cfg.Replicas, cfg.Logger, cfg.Settings, cfg.Reconfigure = n.replicas, log.Named("nats"), settings, n.reconfigure
	// No request on the way to lead waits longer than a TTL for its answer before it is asked
	// again, through another NATS server if its own does not answer.
	cfg.RequestTimeout = n.leaderTTL
	stream, err := jetstream.Connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	e, err := stream.Elect(ctx, jetstream.NewLeader(hostname(), advertise), n.leaderTTL)
	if err != nil {
		stream.Close()
		return nil, err
	}
	if e.TTL() != n.leaderTTL {
		stream.Close()
		return nil, fmt.Errorf("%w: --leader-ttl is %s here and the election's bucket keeps %s", jetstream.ErrSettingsDiffer, n.leaderTTL, e.TTL())
	}
	return &cluster{stream: stream, election: e, log: log.Named("cluster"), check: &http.Client{Timeout: checkTimeout(e.TTL())},
		deposed: make(chan struct{}), closing: make(chan struct{})}, nil
}

// checkTimeout is how long a standby waits for the last leader's /readyz: an answer slower
// than a quarter of the TTL is a leader too slow to keep its key anyway.
func checkTimeout(ttl time.Duration) time.Duration { return max(ttl/4, 100*time.Millisecond) }

// wallClock is the election's clock in the server.
type wallClock struct{}

func (wallClock) Now() time.Time                      { return time.Now() }
func (wallClock) AfterFunc(d time.Duration, f func()) { time.AfterFunc(d, f) }

// bucket is the election's bucket in the server: each action a request of its own, answered on
// a goroutine of its own.
type bucket struct{ e *jetstream.Election }

func (b bucket) Do(a election.Action, done func(election.Outcome)) {
	go func() { done(b.e.Do(context.Background(), a)) }()
}

// lead follows the stream as a hot standby until this server wins the election, then opens the
// broker as the stream's writer (broker.Lead), answering for the cluster as it goes.
func (c *cluster) lead(ctx context.Context, cfg broker.Config, api *transport.Server) (*broker.Broker, error) {
	cfg.Upstream = c.stream
	var standby *broker.Standby
	var won time.Time
	b, _, err := broker.Lead(ctx, cfg, broker.Candidacy{
		Election: election.Config{
			TTL: c.election.TTL(), Value: c.election.Me().Value(), Clock: wallClock{}, Bucket: bucket{c.election},
			Check:   func(claim []byte, done func(election.Outcome)) { go func() { done(c.stillLeads(ctx, claim)) }() },
			Deposed: c.depose,
			Unrenewed: func() {
				c.log.Warn("the election's bucket did not answer; asking the stream", zap.String("code", "LEAD_NOT_RENEWED"))
			},
		},
		Standing: func(sb *broker.Standby, d *election.Driver) {
			standby = sb
			c.mu.Lock()
			c.driver = d
			c.mu.Unlock()
			c.log.Info("standby: following the stream", zap.String("stream", c.stream.Name()), zap.Uint64("head_seq", sb.Head().Seq))
			api.SetStandby(func() transport.Standby {
				st := transport.Standby{HeadSeq: sb.Head().Seq, Lag: sb.Lag}
				if l, err := jetstream.ParseLeader(d.Leader()); err == nil {
					st.Leader = l.URL
				}
				return st
			})
		},
		Leading: func() {
			won = time.Now()
			c.log.Info("won the election; catching up and fencing the stream", zap.Uint64("standby_seq", standby.Head().Seq))
			api.SetLeading(transport.Leading{Claim: c.election.Me(), Healthy: c.healthy})
		},
	})
	if err != nil {
		return nil, err
	}
	c.log.Info("leading the stream", zap.Uint64("head_seq", b.Head().Seq), zap.Duration("took", time.Since(won)))
	return b, nil
}

// stillLeads asks the server whose claim the key last held whether it still leads: its /readyz
// answers 200 with that claim while it does and NATS answers it.
func (c *cluster) stillLeads(ctx context.Context, claim []byte) election.Outcome {
	l, err := jetstream.ParseLeader(claim)
	if err != nil || l.URL == "" {
		return election.Outcome{Kind: election.NotLeading}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(l.URL, "/")+"/readyz", nil)
	if err != nil {
		return election.Outcome{Kind: election.NotLeading}
	}
	resp, err := c.check.Do(req)
	if err != nil {
		return election.Outcome{Kind: election.NotLeading}
	}
	defer resp.Body.Close()
	var ready struct {
		Leader *jetstream.Leader `json:"leader"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&ready) != nil || ready.Leader == nil || ready.Leader.ID != l.ID {
		return election.Outcome{Kind: election.NotLeading}
	}
	c.log.Info("the key expired, but its leader says it still leads; holding off", zap.String("leader", l.URL))
	return election.Outcome{Kind: election.Leads}
}

// healthy says whether NATS still answers this leader (its /readyz).
func (c *cluster) healthy() error {
	c.mu.Lock()
	d := c.driver
	c.mu.Unlock()
	if d != nil && !d.Healthy() {
		return errors.New("NATS has not answered it for half the leader TTL")
	}
	return nil
}

// depose stops a leader that the election (another server holds the key, or nothing of NATS
// answered for a whole TTL) or the stream (it refused an append) says no longer leads.
func (c *cluster) depose(reason string, last election.Outcome) {
	if l, err := jetstream.ParseLeader(last.Value); last.Kind == election.Found && err == nil {
		c.successor.Store(&l.URL)
	}
	c.log.Error("no longer leading; stopping", zap.String("code", "LEAD_LOST"), zap.String("reason", reason))
	c.why = reason
	// Closing the connection fails the appends in flight at once, so the requests waiting for
	// them get their answer instead of a publish timeout.
	c.stream.Close()
	close(c.deposed)
}

// close stops the election and resigns the lead, if held, so a standby takes over at once, and
// closes the connection. The lead is kept until then, clean shutdown included, so that no
// standby fences a leader still closing.
func (c *cluster) close() {
	close(c.closing)
	c.mu.Lock()
	d := c.driver
	c.mu.Unlock()
	if d != nil {
		if rev, held := d.Close(); held {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := c.election.Resign(ctx, rev); err != nil {
				c.log.Warn("could not resign the lead; a standby takes over when it expires", zap.Error(err))
			}
		}
	}
	c.stream.Close()
}

var errDeposed = errors.New("lost the lead of the stream")

// standbyAnswer is what a leader that stops tells clients: who leads now, as the key says, if
// it says so within a moment.
func (c *cluster) standbyAnswer() transport.Standby {
	if p := c.successor.Load(); p != nil {
		return transport.Standby{Leader: *p}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	o := c.election.Do(ctx, election.Action{Kind: election.Read})
	if l, err := jetstream.ParseLeader(o.Value); o.Kind == election.Found && err == nil && l.ID != c.election.Me().ID {
		c.successor.Store(&l.URL)
		return transport.Standby{Leader: l.URL}
	}
	return transport.Standby{}
}

// clusterSettings are the settings every server of a cluster must agree on, by name: a server
// that enforced another auth mode, token, retention or limit than the rest would answer for the
// cluster differently once it led (a --auth none server would mint API keys for anyone).
type clusterSettings map[string]string

// metadata is the settings as the stream records them.
func (s clusterSettings) metadata() map[string]string {
	m := make(map[string]string, len(s))
	for k, v := range s {
		m[jetstream.SettingPrefix+k] = v
	}
	return m
}

// secretDigest is what the cluster records of a token: a SHA-256, never the token; "" for none.
func secretDigest(what, token string) string {
	if token == "" {
		return ""
	}
	sum := sha256.Sum256([]byte("tether " + what + " token\x00" + token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// httpURL reports whether s is an http:// or https:// URL with a host.
func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}
