package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/cli"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/flowfile"
	"github.com/tetherhq/tether/transport/tracing"
)

// serverProcs is the GOMAXPROCS the server sets, 0 for none: the flag's value if given; else,
// unless the operator set GOMAXPROCS, one more than Go's own choice (the CPUs the process may
// use). The log's flush goroutine spends much of its time in fdatasync, and while it does its P
// is out of play until the scheduler notices and hands the P to another thread, which costs
// thread wake-ups on every commit; a spare P takes over at once. On the 2-core development VM,
// 3 Ps gave 4–15 % more saturated throughput than 2 over five series of alternating runs, and
// 4 Ps 8 %. Once set, Go no longer follows later changes to a container's CPU limit; --procs
// or GOMAXPROCS sets the number outright instead.
func serverProcs(flagValue int) int {
	switch {
	case flagValue > 0:
		return flagValue
	case os.Getenv("GOMAXPROCS") != "":
		return 0
	}
	return goruntime.GOMAXPROCS(0) + 1
}

// Bounds of --worker-token-ttl.
const (
	workerTokenTTLMin = 10 * time.Second
	workerTokenTTLMax = 365 * 24 * time.Hour
)

// scrubRateMax bounds --archive-scrub-rate, in MiB a second: past what any disk reads.
const scrubRateMax = 100_000

// Bounds of --retain and --retain-dead, besides 0.
const (
	retainMin = time.Second
	retainMax = 10 * 365 * 24 * time.Hour
)

// serverConfig is the server's command line, every flag checked: what serve runs with.
type serverConfig struct {
	data, addr                string
	auth                      transport.AuthMode
	adminToken, metricsToken  string
	metricsAddr, pprofAddr    string
	otelEndpoint              string
	tracing                   tracing.Settings // --otel-endpoint and the OTEL_* variables, checked
	maxConns, maxDead, procs  int
	flowBytes                 int
	tlsCert, tlsKey           string
	certs                     *transport.CertReloader // --tls-cert and --tls-key, loaded and checked
	tokenTTL, retain          time.Duration
	retainDead                time.Duration
	archiveAfter, archiveKeep time.Duration
	archiveDir                string
	scrubEvery                time.Duration
	scrubRate                 int
	cluster                   clusterFlags
	log                       cli.LogFlags
}

func runServer(args []string) error {
	cfg, err := parseServerConfig(args, os.LookupEnv)
	if err != nil {
		return err
	}
	return serve(cfg)
}

// parseServerConfig reads the server's flags and their TETHER_* twins (from lookupEnv, as
// os.LookupEnv: a twin set to "" is given, as on the command line) and checks every one of
// them, and every combination, so that a mistake is refused (a usage error, exit 2) before
// anything is made on disk. It reads the files --tls-cert and --tls-key name, and writes
// nothing.
func parseServerConfig(args []string, lookupEnv func(string) (string, bool)) (serverConfig, error) {
	var c serverConfig
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.StringVar(&c.data, "data", "tether-data", "data directory (created if missing)")
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "listen address")
	auth := fs.String("auth", "none", "none (loopback only: every client is tenant \"default\") or token (API keys, enroll tokens, an admin token)")
	fs.StringVar(&c.adminToken, "admin-token", "", "the admin token under --auth token; if empty, one is made and kept in DATA/admin-token (mode 0600)")
	fs.StringVar(&c.metricsToken, "metrics-token", "", "under --auth token, a token that reads /metrics (the admin token does too)")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "also serve /metrics with no credential on this (loopback) address, for a local scraper; empty: off")
	fs.IntVar(&c.maxConns, "max-conns", 10_000, "the most connections served at once; more wait to be accepted")
	fs.StringVar(&c.otelEndpoint, "otel-endpoint", "", "export OpenTelemetry traces of jobs over OTLP/HTTP to this URL (e.g. http://collector:4318); the OTEL_EXPORTER_OTLP_* variables work too; empty and unset: off")
	fs.StringVar(&c.pprofAddr, "pprof-addr", "", "serve Go's /debug/pprof on this (loopback) address; empty: off")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "serve HTTPS and WSS with this certificate (PEM; a chain, leaf first); a changed file is picked up without a restart")
	fs.StringVar(&c.tlsKey, "tls-key", "", "the private key (PEM) of --tls-cert")
	insecureHTTP := fs.Bool("insecure-http", false, "serve plain HTTP under --auth token on a non-loopback address: only behind a proxy that terminates TLS")
	fs.DurationVar(&c.tokenTTL, "worker-token-ttl", broker.WorkerTokenTTLDefault, "how long a worker token lasts; connected workers renew theirs at half of it")
	fs.DurationVar(&c.retain, "retain", 7*24*time.Hour, "how long a succeeded or cancelled job, an ended flow, or a worker registration that can no longer be used stays queryable (a job's result_ttl_seconds overrides it); 0: until deleted")
	fs.DurationVar(&c.retainDead, "retain-dead", 7*24*time.Hour, "how long a dead-lettered job stays, for an operator to re-drive it; 0: until purged")
	fs.IntVar(&c.maxDead, "max-dead", 100_000, "the most dead letters a tenant keeps; past it the oldest go first; 0: no cap")
	fs.DurationVar(&c.archiveAfter, "archive-after", 24*time.Hour, "how old a record must be before it moves from the hot log into a sealed archive segment (it must also be covered by a checkpoint); 0: never")
	fs.StringVar(&c.archiveDir, "archive-dir", "", "where archive segments go; empty: DATA/archive")
	fs.DurationVar(&c.archiveKeep, "archive-keep", 0, "delete archive segments whose last record is older than this; 0: keep them for ever")
	fs.DurationVar(&c.scrubEvery, "archive-scrub-every", 24*time.Hour, "read every archive segment whole against its checksum this often, the first time at start, in the background; 0: never")
	fs.IntVar(&c.scrubRate, "archive-scrub-rate", broker.ScrubRateDefault>>20, "the most MiB a second a scrub reads, so that it leaves the disk to the log")
	fs.IntVar(&c.flowBytes, "flow-bytes-max", flowfile.BytesMaxDefault, "the largest flow file POST /v1/flows takes, in bytes")
	c.cluster.register(fs)
	fs.IntVar(&c.procs, "procs", 0, fmt.Sprintf("Go processors to run on (GOMAXPROCS), at most %d (256 or 4 per CPU, whichever is more); 0: one more than the CPUs the process may use, unless GOMAXPROCS is set", procsMax()))
	c.log.Register(fs)
	if err := cli.ParseFlagsEnv(fs, args, lookupEnv); err != nil {
		return c, err
	}
	if err := c.log.Check(); err != nil {
		return c, cli.BadFlag(fs, err)
	}
	c.auth = transport.AuthMode(*auth)
	switch {
	case c.procs < 0 || c.procs > procsMax():
		return c, cli.BadFlagf(fs, "--procs %d: want 0 (the default) to %d (256 or 4 per CPU, whichever is more)", c.procs, procsMax())
	case c.auth != transport.AuthNone && c.auth != transport.AuthToken:
		return c, cli.BadFlagf(fs, "--auth %q: want none or token", *auth)
	case !hostPort(c.addr):
		return c, cli.BadFlagf(fs, "--addr %q: want host:port, the port 0..65535", c.addr)
	case c.metricsAddr != "" && !hostPort(c.metricsAddr):
		return c, cli.BadFlagf(fs, "--metrics-addr %q: want host:port, the port 0..65535", c.metricsAddr)
	case c.pprofAddr != "" && !hostPort(c.pprofAddr):
		return c, cli.BadFlagf(fs, "--pprof-addr %q: want host:port, the port 0..65535", c.pprofAddr)
	case sameAddr(c.addr, c.metricsAddr):
		return c, cli.BadFlagf(fs, "--metrics-addr %q is --addr too; give it an address of its own", c.metricsAddr)
	case sameAddr(c.addr, c.pprofAddr):
		return c, cli.BadFlagf(fs, "--pprof-addr %q is --addr too; give it an address of its own", c.pprofAddr)
	case sameAddr(c.metricsAddr, c.pprofAddr):
		return c, cli.BadFlagf(fs, "--metrics-addr %q is --pprof-addr too; give each an address of its own", c.metricsAddr)
	case c.auth == transport.AuthNone && !loopback(c.addr):
		return c, cli.BadFlagf(fs, "--auth none serves loopback addresses only, not %q; use --auth token", c.addr)
	case c.adminToken != "" && len(c.adminToken) < transport.AdminTokenLenMin:
		return c, cli.BadFlagf(fs, "--admin-token is %d characters; it needs at least %d", len(c.adminToken), transport.AdminTokenLenMin)
	case c.metricsToken != "" && len(c.metricsToken) < transport.AdminTokenLenMin:
		return c, cli.BadFlagf(fs, "--metrics-token is %d characters; it needs at least %d", len(c.metricsToken), transport.AdminTokenLenMin)
	case c.metricsToken != "" && c.metricsToken == c.adminToken:
		return c, cli.BadFlagf(fs, "--metrics-token is the admin token: a scraper would hold the admin's rights; give it a token of its own (the admin token reads /metrics anyway)")
	case c.metricsAddr != "" && !loopback(c.metricsAddr):
		return c, cli.BadFlagf(fs, "--metrics-addr %q: /metrics without a credential is served on loopback addresses only; elsewhere scrape the main address with --metrics-token", c.metricsAddr)
	case c.pprofAddr != "" && !loopback(c.pprofAddr):
		return c, cli.BadFlagf(fs, "--pprof-addr %q: profiles are served on loopback addresses only", c.pprofAddr)
	case c.maxConns < 1:
		return c, cli.BadFlagf(fs, "--max-conns %d: want 1 or more", c.maxConns)
	case c.data == "":
		return c, cli.BadFlagf(fs, "--data is empty")
	case (c.tlsCert == "") != (c.tlsKey == ""):
		return c, cli.BadFlagf(fs, "--tls-cert and --tls-key go together")
	case c.tlsCert != "" && *insecureHTTP:
		return c, cli.BadFlagf(fs, "--insecure-http serves plain HTTP, --tls-cert HTTPS: give one or the other")
	case c.auth == transport.AuthToken && !loopback(c.addr) && c.tlsCert == "" && !*insecureHTTP:
		return c, cli.BadFlagf(fs, "--auth token on %s, a non-loopback address, would send API keys and tokens in clear text: give --tls-cert and --tls-key, or --insecure-http behind a proxy that terminates TLS", c.addr)
	case c.tokenTTL < workerTokenTTLMin || c.tokenTTL > workerTokenTTLMax:
		return c, cli.BadFlagf(fs, "--worker-token-ttl %s: want %s..%s", c.tokenTTL, workerTokenTTLMin, workerTokenTTLMax)
	case c.retain != 0 && (c.retain < retainMin || c.retain > retainMax):
		return c, cli.BadFlagf(fs, "--retain %s: want 0 (keep until deleted) or %s..%s", c.retain, retainMin, retainMax)
	case c.retainDead != 0 && (c.retainDead < retainMin || c.retainDead > retainMax):
		return c, cli.BadFlagf(fs, "--retain-dead %s: want 0 (keep until purged) or %s..%s", c.retainDead, retainMin, retainMax)
	case c.archiveAfter != 0 && (c.archiveAfter < retainMin || c.archiveAfter > retainMax):
		return c, cli.BadFlagf(fs, "--archive-after %s: want 0 (never) or %s..%s", c.archiveAfter, retainMin, retainMax)
	case c.archiveKeep != 0 && (c.archiveKeep < retainMin || c.archiveKeep > retainMax):
		return c, cli.BadFlagf(fs, "--archive-keep %s: want 0 (for ever) or %s..%s", c.archiveKeep, retainMin, retainMax)
	case c.scrubEvery != 0 && (c.scrubEvery < retainMin || c.scrubEvery > retainMax):
		return c, cli.BadFlagf(fs, "--archive-scrub-every %s: want 0 (never) or %s..%s", c.scrubEvery, retainMin, retainMax)
	case c.scrubRate < 1 || c.scrubRate > scrubRateMax:
		return c, cli.BadFlagf(fs, "--archive-scrub-rate %d: want 1..%d (MiB a second)", c.scrubRate, scrubRateMax)
	case c.maxDead < 0:
		return c, cli.BadFlagf(fs, "--max-dead %d: want 0 (no cap) or more", c.maxDead)
	case c.flowBytes < 1:
		return c, cli.BadFlagf(fs, "--flow-bytes-max %d: a flow file may hold at least 1 byte", c.flowBytes)
	}
	if err := tracing.CheckEndpoint(c.otelEndpoint); err != nil {
		return c, cli.BadFlagf(fs, "--otel-endpoint: %v", err)
	}
	traces, err := tracing.ReadSettings(c.otelEndpoint, lookupEnv)
	if err != nil {
		return c, cli.BadFlag(fs, err)
	}
	c.tracing = traces
	if err := c.cluster.check(fs); err != nil {
		return c, err
	}
	if fi, err := os.Stat(c.data); err == nil && !fi.IsDir() {
		return c, cli.BadFlagf(fs, "--data %s is a file, not a directory", c.data)
	}
	if c.archiveDir != "" {
		if fi, err := os.Stat(c.archiveDir); err == nil && !fi.IsDir() {
			return c, cli.BadFlagf(fs, "--archive-dir %s is a file, not a directory", c.archiveDir)
		}
	}
	if c.tlsCert != "" {
		// Loaded here to be checked (readable, a pair, in date), once: serve hands it its logger.
		certs, err := transport.NewCertReloader(c.tlsCert, c.tlsKey, time.Now, nil)
		if err != nil {
			return c, cli.BadFlag(fs, err)
		}
		c.certs = certs
	}
	return c, nil
}

// serve runs the server that c describes until a signal stops it, the log fails, or it loses
// the lead of a replicated log. It listens before it makes anything on disk, and a start that
// fails before recovery begins (the replicated log unreachable, say) takes away the data dir
// it made.
func serve(c serverConfig) (err error) {
	log, err := c.log.Logger()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	defer func() {
		if err != nil {
			err = stopping(log, err)
		}
	}()
	storage := &storageStop{log: log}
	if n := serverProcs(c.procs); n > 0 {
		goruntime.GOMAXPROCS(n)
	}
	if c.certs != nil {
		c.certs.UseLog(log)
	}
	// Listen first: an address in use fails the start with nothing made on disk.
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	var mln net.Listener
	if c.metricsAddr != "" {
		if mln, err = net.Listen("tcp", c.metricsAddr); err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		defer mln.Close()
	}
	// What this start makes before recovery begins, it takes away if it fails before then.
	recovering := false
	tokenPath := filepath.Join(c.data, adminTokenName)
	if _, statErr := os.Stat(c.data); errors.Is(statErr, os.ErrNotExist) {
		defer func() {
			if err != nil && !recovering {
				_ = os.RemoveAll(c.data)
			}
		}()
	} else if _, statErr := os.Lstat(tokenPath); errors.Is(statErr, os.ErrNotExist) {
		defer func() {
			if err != nil && !recovering {
				_ = os.Remove(tokenPath)
			}
		}()
	}
	if err := os.MkdirAll(c.data, 0o755); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if path := tokenPath; c.auth == transport.AuthToken && c.adminToken == "" {
		if c.adminToken, err = adminTokenFile(path); err != nil {
			return fmt.Errorf("the admin token: %w", err)
		}
		log.Info("the admin token is in a file", zap.String("path", path))
	} else if c.auth == transport.AuthToken {
		if staleAdminTokenFile(path, c.adminToken) {
			log.Warn("the admin token in the file is not the one in use: --admin-token is; delete the file, or write the token in use to it",
				zap.String("code", "ADMIN_TOKEN_FILE_STALE"), zap.String("path", path))
		}
	}
	tracer, err := startTracing(c.tracing, "tether", log)
	if err != nil {
		return err
	}
	defer flushSpans(tracer)
	api, err := transport.NewServer(transport.Config{Auth: c.auth, AdminToken: c.adminToken, MetricsToken: c.metricsToken, Logger: log,
		FlowBytesMax: c.flowBytes, Tracing: tracer})
	if err != nil {
		return err
	}
	if c.pprofAddr != "" {
		go func() {
			log.Warn("pprof stopped", zap.String("code", "PPROF_STOPPED"), zap.Error(http.ListenAndServe(c.pprofAddr, pprofMux())))
		}()
	}
	srv := transport.NewHTTPServer(api, log)
	scheme := "http"
	if c.certs != nil {
		srv.TLSConfig, scheme = c.certs.TLSConfig(), "https"
	}
	served := make(chan error, 1)
	go func() {
		limited := transport.LimitListener(ln, c.maxConns)
		if scheme == "https" {
			served <- srv.ServeTLS(limited, "", "")
			return
		}
		served <- srv.Serve(limited)
	}()
	if mln != nil {
		msrv := transport.NewHTTPServer(api.MetricsHandler(), log)
		defer msrv.Close()
		go func() { _ = msrv.Serve(mln) }()
		log.Info("serving /metrics without a credential", zap.String("metrics_addr", mln.Addr().String()))
	}
	log.Info("listening; /readyz answers 503 until recovery is done", zap.String("addr", ln.Addr().String()), zap.String("auth", string(c.auth)),
		zap.String("dashboard", scheme+"://"+ln.Addr().String()+"/"),
		zap.Int("procs", goruntime.GOMAXPROCS(0)))

	stop, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var replicated *cluster
	deposed := make(chan struct{})
	if nf := c.cluster; nf.log != "" {
		advertise := nf.advertise
		if advertise == "" {
			advertise = scheme + "://" + ln.Addr().String()
		}
		settings := clusterSettings{
			"auth": string(c.auth), "admin_token": secretDigest("admin", c.adminToken), "metrics_token": secretDigest("metrics", c.metricsToken),
			"leader_ttl": nf.leaderTTL.String(), "worker_token_ttl": c.tokenTTL.String(), "flow_bytes_max": strconv.Itoa(c.flowBytes),
			"retain": c.retain.String(), "retain_dead": c.retainDead.String(), "max_dead": strconv.Itoa(c.maxDead),
			"archive_after": c.archiveAfter.String(), "archive_keep": c.archiveKeep.String(),
		}
		if replicated, err = nf.join(stop, advertise, settings.metadata(), log); err != nil {
			return err
		}
		defer replicated.close()
		deposed = replicated.deposed
	}

	// Recovery (checkpoint, tail replay, lease grace) runs while /healthz already answers; on a
	// replicated log it waits, as a hot standby, until this server wins the election.
	type opened struct {
		b   *broker.Broker
		err error
	}
	recovered := make(chan opened, 1)
	recovering = true
	go func() {
		cfg := broker.Config{Dir: c.data, Logger: log, Companions: []string{adminTokenName}, WorkerTokenTTL: c.tokenTTL, OnStorageFault: storage.fault,
			Retention: projections.Retention{Done: c.retain, Dead: c.retainDead, MaxDead: c.maxDead},
			Archive: broker.ArchiveConfig{Dir: c.archiveDir, After: c.archiveAfter, Keep: c.archiveKeep,
				ScrubEvery: c.scrubEvery, ScrubRate: int64(c.scrubRate) << 20}}
		if tracer != nil {
			cfg.Observe = func(view *projections.Set, seq uint64, at time.Time, p eventlog.Payload) {
				tracer.Observe(view, seq, at, p)
			}
		}
		var b *broker.Broker
		var err error
		if replicated != nil {
			b, err = replicated.lead(stop, cfg, api)
		} else {
			b, err = broker.Open(cfg)
		}
		recovered <- opened{b, err}
	}()
	var core *broker.Broker
	var failed <-chan struct{}
	var runErr error
	for core == nil && runErr == nil {
		select {
		case o := <-recovered:
			if o.err != nil {
				runErr = o.err
				break
			}
			core, failed = o.b, o.b.Failed()
			api.Attach(core)
			head := core.Head()
			log.Info("ready", zap.String("data", c.data), zap.Uint64("head_seq", head.Seq), zap.Stringer("head_hash", head.Hash))
		case err := <-served:
			runErr = err
		case <-stop.Done():
			log.Info("shutting down during recovery")
			if o := <-recovered; o.err == nil && o.b != nil {
				core = o.b
			}
			runErr = errStopped
		}
	}
	if runErr == nil {
		select {
		case <-stop.Done():
			log.Info("shutting down: no new connections; requests in flight finish, workers are told to go away")
		case <-failed:
			runErr = fmt.Errorf("event log failed, stopping: %w", core.Err())
		case <-deposed:
			runErr = fmt.Errorf("%w: %s", errDeposed, replicated.why)
		case err := <-served:
			runErr = err
		}
	}
	if replicated != nil {
		// A leader that stops lets go at once: new requests are sent to the leader (or to
		// look for one) while those in flight finish.
		api.Detach(replicated.standbyAnswer)
	}
	// Stop accepting and let requests in flight finish while the broker still answers them;
	// then close the broker, which ends every session with "shutdown" (WebSockets get 1001)
	// and waits for the appends in flight.
	api.Shutdown()
	ctx, done := context.WithTimeout(context.Background(), 10*time.Second)
	defer done()
	if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("http shutdown did not finish in time", zap.String("code", "SHUTDOWN_TIMEOUT"), zap.Error(err))
	}
	if core != nil {
		runErr = errors.Join(runErr, core.Close())
	}
	api.Wait(ctx)
	if errors.Is(runErr, errStopped) {
		return nil
	}
	return runErr
}

var errStopped = errors.New("stopped")

// exitStorage is the exit status of a server whose data dir cannot be written (read-only, full,
// failing): EX_IOERR of sysexits.h, apart from 1 (any other failure) and 2 (the command line),
// so that a supervisor can tell it (systemd: RestartPreventExitStatus=74 keeps it from
// restarting into the same fault).
const exitStorage = 74

// stopping logs the error the server stops on, as it logs everything (JSON under --log-format
// json), and returns it with the exit status it ends with.
func stopping(log *zap.Logger, err error) error {
	if f, ok := eventlog.AsStorageFault(err); ok {
		logStorageFault(log, f)
		return &cli.ExitError{Err: err, Status: exitStorage}
	}
	log.WithOptions(zap.AddStacktrace(zapcore.FatalLevel)).Error("the server stops", zap.String("code", "SERVER_FAILED"), zap.Error(err))
	return &cli.ExitError{Err: err, Status: 1}
}

// logStorageFault says, in one line, which path of the data dir could not be written and why.
func logStorageFault(log *zap.Logger, f *eventlog.StorageFault) {
	log.WithOptions(zap.AddStacktrace(zapcore.FatalLevel)).Error("the server stops: "+f.Reason(), zap.String("code", f.Code()),
		zap.String("path", f.Path), zap.String("op", f.Op), zap.String("errno", f.ErrnoName()), zap.String("error", f.Errno.Error()),
		zap.Int("exit_status", exitStorage))
}

// storageStop stops the server at the first write to its data dir that the file system refused
// for good: one line naming the path and the cause, then exit status exitStorage. It exits from
// the log's hook, before the error goes back to Pebble, which cannot go on past some such
// writes (it panics, past recovery, when it cannot create a WAL; it retries a failed flush for
// ever, logging each try).
type storageStop struct {
	log  *zap.Logger
	once sync.Once
}

func (s *storageStop) fault(f *eventlog.StorageFault) {
	s.once.Do(func() {
		logStorageFault(s.log, f)
		_ = s.log.Sync()
		os.Exit(exitStorage)
	})
	select {} // another write failed too: the process is exiting
}

func pprofMux() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("/debug/pprof/", pprof.Index)
	m.HandleFunc("/debug/pprof/profile", pprof.Profile)
	m.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return m
}

// hostPort reports whether addr is a host:port that net.Listen can take, the port a number
// 0..65535.
func hostPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	n, err := strconv.ParseUint(port, 10, 16)
	return err == nil && n <= 65535
}

// sameAddr reports whether two listen addresses, both given, are the same one, which the second
// listen would find taken; port 0 picks a free port each time.
func sameAddr(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb || pa == "0" {
		return false
	}
	wildcard := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return strings.EqualFold(ha, hb) || wildcard(ha) || wildcard(hb)
}

// procsMax is the most --procs takes: 256, or 4 per CPU on a larger machine. Past a few per CPU
// the Ps only add threads that contend; 100,000 made a server that never became ready.
func procsMax() int {
	return max(256, 4*goruntime.NumCPU())
}

// loopback reports whether addr listens on a loopback interface only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// adminTokenName is the file in the data dir that keeps the admin token made under --auth
// token when none is given.
const adminTokenName = "admin-token"

// adminTokenFile reads the admin token kept at path, or makes one and keeps it there.
func adminTokenFile(path string) (string, error) {
	t, err := readAdminToken(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return "", err
	case len(t) < transport.AdminTokenLenMin:
		return "", fmt.Errorf("%s holds a token of %d characters; it needs at least %d: delete the file for a new token (clients that use the old one need the new), or write one of %d or more characters to it",
			path, len(t), transport.AdminTokenLenMin, transport.AdminTokenLenMin)
	default:
		return t, nil
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	token := "ta_" + base64.RawURLEncoding.EncodeToString(raw[:])
	if err := client.WriteFileAtomic(path, []byte(token+"\n")); err != nil { // mode 0600
		return "", err
	}
	return token, nil
}

// staleAdminTokenFile reports whether path keeps an admin token other than inUse, the one
// --admin-token gives: whoever reads the file would take it for the admin token.
func staleAdminTokenFile(path, inUse string) bool {
	b, err := os.ReadFile(path)
	kept := strings.TrimSpace(string(b))
	return err == nil && kept != "" && kept != inUse
}

// readAdminToken reads the admin token kept at path, refusing a file that is not a regular
// file or that others than its owner may read.
func readAdminToken(path string) (string, error) {
	fi, err := os.Lstat(path)
	switch {
	case err != nil:
		return "", err
	case fi.Mode()&os.ModeSymlink != 0:
		return "", fmt.Errorf("%s is a symbolic link; the admin token is kept in a regular file: replace the link with the file", path)
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("%s is not a regular file", path)
	case fi.Mode().Perm()&0o077 != 0:
		return "", fmt.Errorf("%s may be read by others than its owner (mode %04o): chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// startTracing returns the server's tracing when an OTLP endpoint is configured (the flag or
// the OTEL_* variables), nil when it is off.
func startTracing(s tracing.Settings, service string, log *zap.Logger) (*tracing.Tracer, error) {
	tp, err := startExport(s, service, log)
	if tp == nil {
		return nil, err
	}
	return tracing.NewTracer(tp, log), nil
}

// startExport returns the provider that exports spans over OTLP when an endpoint is configured
// (the flag or the OTEL_* variables), with the SDK's errors in log; nil when it is off.
func startExport(s tracing.Settings, service string, log *zap.Logger) (*tracing.Provider, error) {
	if !s.On {
		if s.Endpoint != "" {
			log.Info("not exporting traces: OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER=none turns --otel-endpoint off")
		}
		return nil, nil
	}
	tp, err := tracing.NewProvider(context.Background(), s, service, log)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	tracing.LogErrors(log)
	log.Info("exporting traces over OTLP", zap.String("otel_endpoint", cmp.Or(s.Endpoint, "from OTEL_EXPORTER_OTLP_*")),
		zap.String("protocol", s.Protocol))
	return tp, nil
}

// flushSpans exports the spans still queued, for tracing.FlushAtStopMax at most, so that a
// collector that does not answer never holds up a stop, and stops the exporter.
func flushSpans(p interface{ Shutdown(context.Context) error }) {
	ctx, done := context.WithTimeout(context.Background(), tracing.FlushAtStopMax)
	defer done()
	_ = p.Shutdown(ctx)
}
