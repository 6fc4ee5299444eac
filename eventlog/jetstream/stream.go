package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/tetherhq/tether/eventlog"
)

// Config says where the stream is and how to reach it.
type Config struct {
	// URL is nats://host:port[,host:port...]/STREAM (tls:// to require TLS). User and password,
	// or a token, may come in the URL's user info, as NATS clients take them.
	URL string
	// Replicas is the stream's replication factor when Connect creates it. 0: 3.
	Replicas int
	// Creds is a NATS credentials file (a user JWT and its NKey seed).
	Creds string
	// NKey is a file holding an NKey seed.
	NKey string
	// TLSCA, TLSCert and TLSKey are PEM files: the CAs to trust, and a client certificate.
	TLSCA, TLSCert, TLSKey string
	// Existing refuses to create the stream: a reader's, for whom a missing stream is a typo.
	Existing bool
	// Settings are what every server of the cluster must agree on (auth, tokens, policies), as
	// "tether.<name>" keys: the server that creates the stream records them in its metadata,
	// and Connect refuses a stream whose recorded settings differ, naming each difference. A
	// stream that records none of a key yet takes it. Nil: no check (a reader).
	Settings map[string]string
	// Reconfigure records Settings in the stream in place of what it holds.
	Reconfigure bool
	// Name names the connection in the NATS server's monitoring.
	Name string
	// RequestTimeout is the longest any one request to NATS waits for its answer before it is
	// asked again (Patience): a publish's acknowledgement, a read of a message or of the
	// stream's state, a consumer's creation, a connection's handshake. The connection pings its
	// NATS server every quarter of it, and leaves a server that has not answered two pings for
	// another: a server alive but silent (paused, black-holed) holds no request for longer. The
	// server sets it to the leader TTL, so that nothing on a takeover's way waits longer than a
	// TTL for one answer. 0: DefaultRequestTimeout.
	RequestTimeout time.Duration
	Logger         *zap.Logger
}

// DefaultRequestTimeout is Config.RequestTimeout when none is given (tether replay's).
const DefaultRequestTimeout = 5 * time.Second

// Stream is a connection to the stream: an eventlog.Upstream.
type Stream struct {
	mu   sync.Mutex
	lost chan struct{} // closed at the next disconnect (linkLost)
	// lastAck is when the stream last acknowledged a publish (Unix nanoseconds).
	lastAck atomic.Int64
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  jetstream.Stream
	name    string
	subject string
	// timeout is Config.RequestTimeout: the longest one request waits for its answer.
	timeout time.Duration
	log     *zap.Logger
}

var streamName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ParseURL splits nats://host:port[,host:port...]/STREAM into the server URLs a NATS client
// dials and the stream's name.
func ParseURL(raw string) (servers []string, stream string, err error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || (scheme != "nats" && scheme != "tls") {
		return nil, "", fmt.Errorf("%q: want nats://host:port/STREAM (or tls://)", raw)
	}
	hosts, stream, _ := strings.Cut(rest, "/")
	if !streamName.MatchString(stream) {
		return nil, "", fmt.Errorf("%q: the stream name %q must be 1..64 letters, digits, - or _", raw, stream)
	}
	for h := range strings.SplitSeq(hosts, ",") {
		u, err := url.Parse(scheme + "://" + h)
		if err != nil || u.Host == "" || u.Path != "" {
			return nil, "", fmt.Errorf("%q: %q is not host:port", raw, h)
		}
		servers = append(servers, u.String())
	}
	return servers, stream, nil
}

// Connect dials NATS and binds the stream, creating it if it is missing.
func Connect(ctx context.Context, cfg Config) (*Stream, error) {
	servers, name, err := ParseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 3
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	log := cfg.Logger.With(zap.String("stream", name))
	var bound atomic.Pointer[Stream] // for the handlers, which nats.Connect takes before there is one
	opts := []nats.Option{
		nats.Name(cfg.Name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond), nats.Timeout(cfg.RequestTimeout),
		// A server that answers no ping for half to three quarters of RequestTimeout is left
		// for the next (nats.go's default waits 4 to 6 minutes): a leader whose own NATS
		// server went silent moves to another before it would stop as cut off (a TTL).
		nats.PingInterval(cfg.RequestTimeout / 4), nats.MaxPingsOutstanding(2),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: closed on purpose
				log.Warn("disconnected from NATS", zap.String("code", "NATS_DISCONNECTED"), zap.Error(err))
			}
			if s := bound.Load(); s != nil {
				s.disconnected()
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("reconnected to NATS", zap.String("server", nc.ConnectedUrlRedacted())) }),
	}
	if cfg.Creds != "" {
		opts = append(opts, nats.UserCredentials(cfg.Creds))
	}
	if cfg.NKey != "" {
		o, err := nats.NkeyOptionFromSeed(cfg.NKey)
		if err != nil {
			return nil, fmt.Errorf("--nats-nkey: %w", err)
		}
		opts = append(opts, o)
	}
	if cfg.TLSCA != "" {
		opts = append(opts, nats.RootCAs(cfg.TLSCA))
	}
	if cfg.TLSCert != "" || cfg.TLSKey != "" {
		opts = append(opts, nats.ClientCert(cfg.TLSCert, cfg.TLSKey))
	}
	nc, err := nats.Connect(strings.Join(servers, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", strings.Join(servers, ","), err)
	}
	s, err := bind(ctx, nc, name, cfg, log)
	if err != nil {
		nc.Close()
		return nil, err
	}
	bound.Store(s)
	return s, nil
}

func bind(ctx context.Context, nc *nats.Conn, name string, cfg Config, log *zap.Logger) (*Stream, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(cfg.RequestTimeout), jetstream.WithPublishAsyncMaxPending(1024),
		jetstream.WithDefaultTimeout(cfg.RequestTimeout))
	if err != nil {
		return nil, err
	}
	s := &Stream{nc: nc, js: js, name: name, subject: "tether.log." + name, timeout: cfg.RequestTimeout, log: log, lost: make(chan struct{})}
	lookup := func() error {
		return s.retry(ctx, func(ctx context.Context) (err error) {
			s.stream, err = js.Stream(ctx, name)
			return err
		})
	}
	err = lookup()
	if errors.Is(err, jetstream.ErrStreamNotFound) && cfg.Existing {
		return nil, fmt.Errorf("there is no stream %s on %s", name, nc.ConnectedUrlRedacted())
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s.stream, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name: name, Description: "tether's event log", Subjects: []string{s.subject},
			Storage: jetstream.FileStorage, Replicas: cfg.Replicas, Retention: jetstream.LimitsPolicy,
			Discard: jetstream.DiscardNew, MaxMsgs: -1, MaxBytes: -1, MaxMsgsPerSubject: -1,
			DenyDelete: true, DenyPurge: true, AllowDirect: true, Metadata: cfg.Settings,
		})
		switch {
		case err == nil:
			log.Info("created the event log's stream", zap.Int("replicas", cfg.Replicas))
		case errors.Is(err, jetstream.ErrStreamNameAlreadyInUse):
			err = lookup() // another server made it first, maybe with other settings
		case cfg.Replicas > 1:
			err = fmt.Errorf("%w (a NATS server that is not in a cluster takes --nats-replicas 1)", err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("the stream %s: %w", name, err)
	}
	c := s.stream.CachedInfo().Config
	switch {
	case c.Storage != jetstream.FileStorage:
		return nil, fmt.Errorf("the stream %s keeps its messages in memory; the event log needs a file store", name)
	case len(c.Subjects) != 1 || c.Subjects[0] != s.subject:
		return nil, fmt.Errorf("the stream %s takes the subjects %v; the event log's stream takes %s alone", name, c.Subjects, s.subject)
	case c.MaxAge > 0 || c.MaxMsgs > 0 || c.MaxBytes > 0 || c.Retention != jetstream.LimitsPolicy:
		return nil, fmt.Errorf("the stream %s lets messages go (max_age, max_msgs, max_bytes or a retention other than limits); the event log must keep every one", name)
	}
	if cfg.Settings != nil {
		if err := s.agree(ctx, cfg.Settings, cfg.Replicas, cfg.Reconfigure); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// agree compares settings and replicas with those of the stream, and records the settings it
// lacks (or, with reconfigure, all of them).
func (s *Stream) agree(ctx context.Context, settings map[string]string, replicas int, reconfigure bool) error {
	c := s.stream.CachedInfo().Config
	var differ []string
	if c.Replicas != replicas {
		differ = append(differ, fmt.Sprintf("--nats-replicas is %d here and the stream has %d replicas", replicas, c.Replicas))
	}
	missing := false
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		have, ok := c.Metadata[k]
		switch {
		case !ok:
			missing = true
		case have != settings[k] && !reconfigure:
			differ = append(differ, fmt.Sprintf("%s is %q here and %q in the cluster", strings.TrimPrefix(k, SettingPrefix), settings[k], have))
		}
	}
	if len(differ) > 0 {
		return fmt.Errorf("%w: %s (recorded in the stream %s by the server that made it); start every server of a cluster with the same settings, or record new ones with --cluster-reconfigure",
			ErrSettingsDiffer, strings.Join(differ, "; "), s.name)
	}
	if !missing && !reconfigure {
		return nil
	}
	if c.Metadata == nil {
		c.Metadata = map[string]string{}
	}
	maps.Copy(c.Metadata, settings)
	var err error
	if s.stream, err = s.js.UpdateStream(ctx, c); err != nil {
		return fmt.Errorf("the stream %s: record the cluster's settings: %w", s.name, err)
	}
	s.log.Info("recorded the cluster's settings in the stream", zap.Bool("reconfigure", reconfigure))
	return nil
}

// SettingPrefix starts the stream metadata keys that hold the cluster's settings.
const SettingPrefix = "tether."

// ErrSettingsDiffer says a server's settings are not its cluster's.
var ErrSettingsDiffer = errors.New("this server's settings differ from its cluster's")

// retry runs a JetStream API call until it answers or ctx ends, each try for at most the
// request timeout: a request made while the cluster elects a meta leader gets no answer at
// all, and the next one may.
func (s *Stream) retry(ctx context.Context, call func(context.Context) error) error {
	for {
		try, cancel := context.WithTimeout(ctx, s.timeout)
		err := call(try)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, jetstream.ErrNoHeartbeat) && !errors.Is(err, nats.ErrNoResponders) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Name is the stream's name.
func (s *Stream) Name() string { return s.name }

// Replicas is the stream's replication factor.
func (s *Stream) Replicas() int { return s.stream.CachedInfo().Config.Replicas }

// Patience implements eventlog.Upstream: the request timeout.
func (s *Stream) Patience() time.Duration { return s.timeout }

// Close closes the connection; publishes not yet acknowledged fail.
func (s *Stream) Close() { s.nc.Close() }

// Publish implements eventlog.Upstream with Nats-Expected-Last-Sequence: the stream's leader
// refuses the message unless its last message, counting the messages proposed and not yet
// stored, is after. A publish that meets a disconnect before its answer returns errUnanswered
// at once, for the log to read the message back, rather than waiting for the answer's timeout
// (the request timeout: then too the log reads it back).
func (s *Stream) Publish(after uint64, payload []byte) func() (uint64, error) {
	lost := s.linkLost()
	ack, err := s.js.PublishMsgAsync(&nats.Msg{Subject: s.subject, Data: payload}, jetstream.WithExpectLastSequence(after))
	return func() (uint64, error) {
		if err != nil {
			return 0, publishErr(err)
		}
		select {
		case a := <-ack.Ok():
			s.lastAck.Store(time.Now().UnixNano())
			return a.Sequence, nil
		case err := <-ack.Err():
			return 0, publishErr(err)
		case <-lost:
			return 0, errUnanswered
		}
	}
}

// answered is when the stream last acknowledged a publish.
func (s *Stream) answered() time.Time { return time.Unix(0, s.lastAck.Load()) }

// errUnanswered is a publish whose connection went away before its answer came: it may or may
// not have landed.
var errUnanswered = errors.New("the connection to NATS was lost before the publish was answered")

// linkLost returns a channel closed at the next disconnect from NATS.
func (s *Stream) linkLost() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

// disconnected closes the channel of those waiting for an answer over the connection that
// went away.
func (s *Stream) disconnected() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.lost)
	s.lost = make(chan struct{})
}

// publishErr tells a fenced publish (the stream's last message was not the one expected) from
// any other failure.
func publishErr(err error) error {
	if errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("%w: %v", eventlog.ErrClosed, err)
	}
	var api *jetstream.APIError
	if errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return fmt.Errorf("%w: %v", eventlog.ErrFenced, err)
	}
	return err
}

// Last implements eventlog.Upstream.
func (s *Stream) Last(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	info, err := s.stream.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.LastSeq, nil
}

// Get implements eventlog.Upstream. The stream's leader answers, not a direct get, which any
// replica may answer before it has a message the leader acknowledged: a writer that settles a
// publish must not be told that a message is not there when it is (it would publish it again,
// to be refused, and read again).
func (s *Stream) Get(ctx context.Context, seq uint64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, _ := json.Marshal(struct {
		Seq uint64 `json:"seq"`
	}{seq})
	msg, err := s.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+s.name, req)
	if errors.Is(err, nats.ErrConnectionClosed) {
		return nil, fmt.Errorf("%w: %v", eventlog.ErrClosed, err)
	}
	if err != nil {
		return nil, err
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Data []byte `json:"data"`
		} `json:"message"`
	}
	switch err := json.Unmarshal(msg.Data, &resp); {
	case err != nil:
		return nil, fmt.Errorf("jetstream: the answer to a get of message %d: %w", seq, err)
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, fmt.Errorf("%w: message %d of %s", eventlog.ErrNotFound, seq, s.name)
	case resp.Error != nil:
		return nil, resp.Error
	case resp.Message == nil:
		return nil, fmt.Errorf("jetstream: the answer to a get of message %d holds no message", seq)
	}
	return resp.Message.Data, nil
}

// Read implements eventlog.Upstream with an ordered consumer, which JetStream keeps gap-free:
// it makes the consumer again from where it was if it misses a message.
func (s *Stream) Read(ctx context.Context, from uint64, visit func(uint64, []byte) error) error {
	made, cancel := context.WithTimeout(ctx, s.timeout)
	cons, err := s.js.OrderedConsumer(made, s.name, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: max(from, 1),
	})
	cancel()
	if err != nil {
		return err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(256))
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	for next := max(from, 1); ; next++ {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		if meta.Sequence.Stream != next {
			return fmt.Errorf("%w: the stream %s delivered message %d where %d was due", eventlog.ErrChainBroken, s.name, meta.Sequence.Stream, next)
		}
		if err := visit(next, m.Data()); err != nil {
			return err
		}
	}
}

// MaxPayload implements eventlog.Upstream.
func (s *Stream) MaxPayload() int { return int(s.nc.MaxPayload()) }
