package main

import (
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
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/flowfile"
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

// Bounds of --retain and --retain-dead, besides 0.
const (
	retainMin = time.Second
	retainMax = 10 * 365 * 24 * time.Hour
)

func runServer(args []string) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	data := fs.String("data", "tether-data", "data directory (created if missing)")
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	auth := fs.String("auth", "none", "none (loopback only: every client is tenant \"default\") or token (API keys, enroll tokens, an admin token)")
	adminToken := fs.String("admin-token", "", "the admin token under --auth token; if empty, one is made and kept in DATA/admin-token (mode 0600)")
	metricsToken := fs.String("metrics-token", "", "under --auth token, a token that reads /metrics (the admin token does too)")
	metricsAddr := fs.String("metrics-addr", "", "also serve /metrics with no credential on this (loopback) address, for a local scraper; empty: off")
	maxConns := fs.Int("max-conns", 10_000, "the most connections served at once; more wait to be accepted")
	pprofAddr := fs.String("pprof-addr", "", "serve Go's /debug/pprof on this (loopback) address; empty: off")
	tlsCert := fs.String("tls-cert", "", "serve HTTPS and WSS with this certificate (PEM; a chain, leaf first); a changed file is picked up without a restart")
	tlsKey := fs.String("tls-key", "", "the private key (PEM) of --tls-cert")
	insecureHTTP := fs.Bool("insecure-http", false, "serve plain HTTP under --auth token on a non-loopback address: only behind a proxy that terminates TLS")
	tokenTTL := fs.Duration("worker-token-ttl", broker.WorkerTokenTTLDefault, "how long a worker token lasts; connected workers renew theirs at half of it")
	retain := fs.Duration("retain", 7*24*time.Hour, "how long a succeeded or cancelled job, or an ended flow, stays queryable (a job's result_ttl_seconds overrides it); 0: until deleted")
	retainDead := fs.Duration("retain-dead", 7*24*time.Hour, "how long a dead-lettered job stays, for an operator to re-drive it; 0: until purged")
	maxDead := fs.Int("max-dead", 100_000, "the most dead letters a tenant keeps; past it the oldest go first; 0: no cap")
	archiveAfter := fs.Duration("archive-after", 24*time.Hour, "how old a record must be before it moves from the hot log into a sealed archive segment (it must also be covered by a checkpoint); 0: never")
	archiveDir := fs.String("archive-dir", "", "where archive segments go; empty: DATA/archive")
	archiveKeep := fs.Duration("archive-keep", 0, "delete archive segments whose last record is older than this; 0: keep them for ever")
	flowBytes := fs.Int("flow-bytes-max", flowfile.BytesMaxDefault, "the largest flow file POST /v1/flows takes, in bytes")
	var nf clusterFlags
	nf.register(fs)
	procs := fs.Int("procs", 0, "Go processors to run on (GOMAXPROCS); 0: one more than the CPUs the process may use, unless GOMAXPROCS is set")
	var lf logFlags
	lf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := lf.logger()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	if *procs < 0 {
		return badFlagf(fs, "--procs %d: want 0 (the default) or more", *procs)
	}
	if n := serverProcs(*procs); n > 0 {
		goruntime.GOMAXPROCS(n)
	}

	// Everything a flag can get wrong is refused before anything is made on disk.
	mode := transport.AuthMode(*auth)
	switch {
	case mode != transport.AuthNone && mode != transport.AuthToken:
		return badFlagf(fs, "--auth %q: want none or token", *auth)
	case mode == transport.AuthNone && !loopback(*addr):
		return badFlagf(fs, "--auth none serves loopback addresses only, not %q; use --auth token", *addr)
	case *adminToken != "" && len(*adminToken) < transport.AdminTokenLenMin:
		return badFlagf(fs, "--admin-token is %d characters; it needs at least %d", len(*adminToken), transport.AdminTokenLenMin)
	case *metricsToken != "" && len(*metricsToken) < transport.AdminTokenLenMin:
		return badFlagf(fs, "--metrics-token is %d characters; it needs at least %d", len(*metricsToken), transport.AdminTokenLenMin)
	case *metricsAddr != "" && !loopback(*metricsAddr):
		return badFlagf(fs, "--metrics-addr %q: /metrics without a credential is served on loopback addresses only; elsewhere scrape the main address with --metrics-token", *metricsAddr)
	case *data == "":
		return badFlagf(fs, "--data is empty")
	case (*tlsCert == "") != (*tlsKey == ""):
		return badFlagf(fs, "--tls-cert and --tls-key go together")
	case mode == transport.AuthToken && !loopback(*addr) && *tlsCert == "" && !*insecureHTTP:
		return badFlagf(fs, "--auth token on %s, a non-loopback address, would send API keys and tokens in clear text: give --tls-cert and --tls-key, or --insecure-http behind a proxy that terminates TLS", *addr)
	case *tokenTTL < workerTokenTTLMin || *tokenTTL > workerTokenTTLMax:
		return badFlagf(fs, "--worker-token-ttl %s: want %s..%s", *tokenTTL, workerTokenTTLMin, workerTokenTTLMax)
	case *retain != 0 && (*retain < retainMin || *retain > retainMax):
		return badFlagf(fs, "--retain %s: want 0 (keep until deleted) or %s..%s", *retain, retainMin, retainMax)
	case *retainDead != 0 && (*retainDead < retainMin || *retainDead > retainMax):
		return badFlagf(fs, "--retain-dead %s: want 0 (keep until purged) or %s..%s", *retainDead, retainMin, retainMax)
	case *archiveAfter != 0 && (*archiveAfter < retainMin || *archiveAfter > retainMax):
		return badFlagf(fs, "--archive-after %s: want 0 (never) or %s..%s", *archiveAfter, retainMin, retainMax)
	case *archiveKeep != 0 && (*archiveKeep < retainMin || *archiveKeep > retainMax):
		return badFlagf(fs, "--archive-keep %s: want 0 (for ever) or %s..%s", *archiveKeep, retainMin, retainMax)
	case *maxDead < 0:
		return badFlagf(fs, "--max-dead %d: want 0 (no cap) or more", *maxDead)
	}
	var certs *transport.CertReloader
	if *tlsCert != "" {
		if certs, err = transport.NewCertReloader(*tlsCert, *tlsKey, time.Now, log); err != nil {
			return badFlag(fs, err)
		}
	}
	if err := os.MkdirAll(*data, 0o755); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if mode == transport.AuthToken && *adminToken == "" {
		path := filepath.Join(*data, adminTokenName)
		if *adminToken, err = adminTokenFile(path); err != nil {
			return fmt.Errorf("the admin token: %w", err)
		}
		log.Info("the admin token is in a file", zap.String("path", path))
	}
	if *flowBytes < 1 {
		return badFlagf(fs, "--flow-bytes-max %d: a flow file may hold at least 1 byte", *flowBytes)
	}
	if err := nf.check(fs); err != nil {
		return err
	}
	api, err := transport.NewServer(transport.Config{Auth: mode, AdminToken: *adminToken, MetricsToken: *metricsToken, Logger: log, FlowBytesMax: *flowBytes})
	if err != nil {
		return err
	}
	if *pprofAddr != "" {
		if !loopback(*pprofAddr) {
			return badFlagf(fs, "--pprof-addr %q: profiles are served on loopback addresses only", *pprofAddr)
		}
		go func() {
			log.Warn("pprof stopped", zap.String("code", "PPROF_STOPPED"), zap.Error(http.ListenAndServe(*pprofAddr, pprofMux())))
		}()
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := transport.NewHTTPServer(api, log)
	scheme := "http"
	if certs != nil {
		srv.TLSConfig, scheme = certs.TLSConfig(), "https"
	}
	served := make(chan error, 1)
	go func() {
		limited := transport.LimitListener(ln, *maxConns)
		if scheme == "https" {
			served <- srv.ServeTLS(limited, "", "")
			return
		}
		served <- srv.Serve(limited)
	}()
	if *metricsAddr != "" {
		mln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		msrv := transport.NewHTTPServer(api.MetricsHandler(), log)
		defer msrv.Close()
		go func() { _ = msrv.Serve(mln) }()
		log.Info("serving /metrics without a credential", zap.String("metrics_addr", mln.Addr().String()))
	}
	log.Info("listening; /readyz answers 503 until recovery is done", zap.String("addr", ln.Addr().String()), zap.String("auth", *auth),
		zap.String("dashboard", scheme+"://"+ln.Addr().String()+"/"),
		zap.Int("procs", goruntime.GOMAXPROCS(0)))

	stop, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var replicated *cluster
	deposed := make(chan struct{})
	if nf.log != "" {
		advertise := nf.advertise
		if advertise == "" {
			advertise = scheme + "://" + ln.Addr().String()
		}
		settings := clusterSettings{
			"auth": *auth, "admin_token": secretDigest("admin", *adminToken), "metrics_token": secretDigest("metrics", *metricsToken),
			"leader_ttl": nf.leaderTTL.String(), "worker_token_ttl": tokenTTL.String(), "flow_bytes_max": strconv.Itoa(*flowBytes),
			"retain": retain.String(), "retain_dead": retainDead.String(), "max_dead": strconv.Itoa(*maxDead),
			"archive_after": archiveAfter.String(), "archive_keep": archiveKeep.String(),
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
	go func() {
		cfg := broker.Config{Dir: *data, Logger: log, Companions: []string{adminTokenName}, WorkerTokenTTL: *tokenTTL,
			Retention: projections.Retention{Done: *retain, Dead: *retainDead, MaxDead: *maxDead},
			Archive:   broker.ArchiveConfig{Dir: *archiveDir, After: *archiveAfter, Keep: *archiveKeep}}
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
			log.Info("ready", zap.String("data", *data), zap.Uint64("head_seq", head.Seq), zap.Stringer("head_hash", head.Hash))
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

func pprofMux() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("/debug/pprof/", pprof.Index)
	m.HandleFunc("/debug/pprof/profile", pprof.Profile)
	m.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return m
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
	if b, err := os.ReadFile(path); err == nil {
		t := strings.TrimSpace(string(b))
		if len(t) >= transport.AdminTokenLenMin {
			return t, nil
		}
		if t != "" {
			return "", fmt.Errorf("%s holds a token of %d characters; it needs at least %d", path, len(t), transport.AdminTokenLenMin)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	token := "ta_" + base64.RawURLEncoding.EncodeToString(raw[:])
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", err
	}
	return token, nil
}
