package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

func runWorker(args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "register":
			return workerRegister(args[1:])
		case "keygen":
			return workerKeygen(args[1:])
		}
	}
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	var server string
	serverVar(fs, &server)
	token := fs.String("token", "", "a worker token (tw_…), or an enroll token (te_…) to register with on the first start; none under --auth none")
	queue := fs.String("queue", "default", "queues to serve, comma-separated (when registering)")
	name := fs.String("name", hostname(), "worker name (when registering); one registration is kept per name and server")
	capacity := fs.Int("capacity", 1, "jobs at once")
	keyFile := fs.String("key", "", "Ed25519 private key (PEM, from tether worker keygen) that signs every result")
	timeout := fs.Duration("timeout", 0, "per-job time limit (0: none)")
	grace := fs.Duration("grace", 10*time.Second, "on SIGTERM or Ctrl-C, how long running jobs may finish before they are stopped and given back (a second signal: at once)")
	killGrace := fs.Duration("kill-grace", 10*time.Second, "after SIGTERM, how long a stopped or timed-out command has before SIGKILL")
	fatal := fs.String("fatal-exit-codes", "", "exit codes that fail a job for good (no retry), comma-separated")
	transportName := fs.String("transport", client.TransportAuto, "auto (WebSocket, long-poll where it is refused), websocket, or longpoll")
	var ca caCert
	ca.register(fs)
	var env envFlags
	fs.Var(&env, "env", "give every job the worker's variable KEY, or KEY=VALUE (repeatable); jobs get the worker's environment without any TETHER_* variable, and never the token")
	tokenFile := fs.String("token-file", "", "a file (mode 0600) that holds the worker token and is rewritten atomically each time the worker renews it; if it does not exist yet, the worker registers with --token and writes it")
	stateDir := fs.String("state-dir", defaultStateDir(), "where the worker keeps its registration (worker id and token, mode 0600) and the results the server has not taken yet")
	var lf logFlags
	lf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	argv := fs.Args()
	switch {
	case len(argv) == 0:
		return badFlagf(fs, "no command given; usage: tether worker [flags] -- COMMAND [ARGS]")
	case *capacity < 1 || *capacity > 1000:
		return badFlagf(fs, "--capacity %d: want 1..1000", *capacity)
	case *timeout < 0, *grace < 0, *killGrace < 0:
		return badFlagf(fs, "--timeout, --grace and --kill-grace are durations of 0 or more")
	}
	switch *transportName {
	case client.TransportAuto, client.TransportWebSocket, client.TransportLongPoll:
	default:
		return badFlagf(fs, "--transport %q: want auto, websocket or longpoll", *transportName)
	}
	codes, err := intList(*fatal)
	if err != nil {
		return badFlagf(fs, "--fatal-exit-codes: %w", err)
	}
	command := client.Command{Args: argv, Timeout: *timeout, KillGrace: *killGrace, FatalExitCodes: codes, Stderr: os.Stderr, Env: env}
	if err := command.Check(); err != nil {
		return err // a typo here would give every job back, one after another
	}
	var key ed25519.PrivateKey
	if *keyFile != "" {
		if key, err = readKey(*keyFile); err != nil {
			return err
		}
	}
	log, err := lf.logger()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	// The first signal stops the worker cleanly; a second one cuts its grace short.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hurry := make(chan struct{})
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)
	go func() {
		<-signals
		log.Info("stopping: taking no new jobs; running ones have their grace (signal again to stop them now)", zap.Duration("grace", *grace))
		cancel()
		<-signals
		close(hurry)
	}()

	reg := registration{server: server, hc: ca.httpClient(), name: *name, queues: splitList(*queue), capacity: *capacity, key: key, stateDir: *stateDir, log: log}
	if *tokenFile != "" {
		real, err := realPath(*tokenFile)
		if err != nil {
			return err
		}
		unlock, err := holdTokenFile(*tokenFile, real)
		if err != nil {
			return err
		}
		defer unlock()
		*tokenFile = real
	}
	if *tokenFile == "" && !strings.HasPrefix(*token, broker.WorkerTokenPrefix) {
		unlock, err := reg.claim()
		if err != nil {
			return err
		}
		defer unlock()
	}
	for {
		workerToken := *token
		stored := false
		// keep is where a renewed token goes, so that the next start uses it.
		keep := func(string, time.Time) {
			log.Warn("the renewed worker token is kept in memory only: a restart uses the old one, which stops working soon; give --token-file")
		}
		switch {
		case *tokenFile != "":
			if workerToken, err = reg.fromTokenFile(ctx, *tokenFile, *token); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			keep = func(t string, _ time.Time) {
				if err := writeFileAtomic(*tokenFile, []byte(t+"\n")); err != nil {
					log.Error("the renewed worker token could not be written; a restart would use the old one", zap.String("path", *tokenFile), zap.Error(err))
				}
			}
		case !strings.HasPrefix(workerToken, broker.WorkerTokenPrefix):
			if workerToken, err = reg.token(ctx, *token); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			stored = true
			keep = reg.keepRenewed
		}
		w := &client.Worker{
			Server: server, Token: workerToken, Capacity: *capacity, Key: key, Transport: *transportName, Logger: log.Named("worker"),
			Grace: *grace, Hurry: hurry, Handler: command.Handler(), OnTokenRenewed: keep, TLSConfig: ca.config,
			ResultsDir: reg.resultsDir(*tokenFile, *token),
		}
		err = w.Run(ctx)
		if stored && reg.forgetIfUnknown(err) {
			continue // the stored token is gone (expired, or the server's data dir is new): register again
		}
		var revoked *client.Error
		if stored && errors.As(err, &revoked) && revoked.Code == "WORKER_REVOKED" {
			return fmt.Errorf("%w; it stays revoked: to register a new worker, remove %s", err, reg.path())
		}
		return err
	}
}

func defaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "tether")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "tether")
	}
	return ".tether"
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// registration is a worker that registers once and keeps its token in a file, so that a
// restart neither spends another enroll use nor leaves the old worker behind.
type registration struct {
	server, name string
	hc           *http.Client
	queues       []string
	capacity     int
	key          ed25519.PrivateKey
	stateDir     string
	log          *zap.Logger
}

// slotsMax bounds how many workers of one name may run at once on one machine.
const slotsMax = 64

// claim takes the registration of the first of name, name-2, name-3... that no other worker
// process on this machine holds, so that several workers started alike (a service template,
// a second terminal) each keep a worker of their own rather than share one, which the server
// would let only one of them connect as. It holds a lock on the state until unlock.
func (g *registration) claim() (unlock func(), err error) {
	if err := os.MkdirAll(g.stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("the worker's state dir: %w", err)
	}
	base := g.name
	for n := 1; n <= slotsMax; n++ {
		if n > 1 {
			g.name = fmt.Sprintf("%s-%d", base, n)
		}
		unlock, err := lockFile(g.path() + ".lock")
		switch {
		case err == nil:
			return unlock, nil
		case !errors.Is(err, errLockHeld): // held: another worker of this name runs here, so try the next
			return nil, fmt.Errorf("locking the worker's state: %w", err)
		}
	}
	return nil, fmt.Errorf("%d workers named %q run on this machine already", slotsMax, base)
}

// realPath is the token file that path names, links followed, so that two workers given two
// links to one file lock the same file, and a renewal rewrites the file, not the link.
func realPath(path string) (string, error) {
	real, err := filepath.EvalSymlinks(path)
	if err == nil {
		return real, nil
	}
	if _, lerr := os.Lstat(path); lerr == nil {
		return "", fmt.Errorf("--token-file %s is a link to a file that is not there: %w", path, err)
	}
	if dir, derr := filepath.EvalSymlinks(filepath.Dir(path)); derr == nil {
		return filepath.Join(dir, filepath.Base(path)), nil // made at registration
	}
	return path, nil
}

// holdTokenFile checks, before anything is registered, that the worker can keep its token in
// path, and locks the file for this worker until unlock. A worker that registered and then could
// not write its token would spend an enroll use and leave a worker behind at every start; two
// workers on one file would take turns displacing each other as one worker id.
func holdTokenFile(path, real string) (unlock func(), err error) {
	probe, err := os.CreateTemp(filepath.Dir(real), "."+filepath.Base(real)+"-*")
	if err != nil {
		return nil, fmt.Errorf("--token-file %s: its directory cannot be written, and the worker writes its token there and rewrites it at each renewal: %w", path, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	unlock, err = lockFile(real + ".lock")
	switch {
	case errors.Is(err, errLockHeld):
		return nil, fmt.Errorf("--token-file %s is in use by another worker on this machine (it holds %s.lock); give each worker a token file of its own", path, real)
	case err != nil:
		return nil, fmt.Errorf("locking --token-file: %w", err)
	}
	return unlock, nil
}

// errLockHeld is a lock another process holds.
var errLockHeld = errors.New("the lock is held by another process")

// lockFile takes an exclusive lock on path, made if missing, without waiting: errLockHeld if
// another process holds it. Closing the file (unlock, or the process's end) lets it go.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	switch err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); {
	case err == nil:
		return func() { f.Close() }, nil
	case errors.Is(err, syscall.EWOULDBLOCK):
		f.Close()
		return nil, errLockHeld
	default:
		f.Close()
		return nil, err
	}
}

// workerState is what the state file holds.
type workerState struct {
	Server      string    `json:"server"`
	WorkerID    string    `json:"worker_id"`
	WorkerToken string    `json:"worker_token"`
	ExpiresAt   time.Time `json:"expires_at"`
	Name        string    `json:"name"`
	Queues      []string  `json:"queues"`
	Capacity    int       `json:"capacity"`
	PublicKey   string    `json:"public_key,omitempty"`
}

// path is the state file of this worker name at this server.
func (g *registration) path() string {
	sum := sha256.Sum256([]byte(g.server))
	safe := strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9') {
			return r
		}
		return '_'
	}, g.name)
	return filepath.Join(g.stateDir, fmt.Sprintf("worker-%s-%s.json", safe, hex.EncodeToString(sum[:4])))
}

// resultsDir is where the worker keeps the results the server has not taken yet: beside its
// registration, or, for a worker given its token, named after the token's file or the token.
func (g *registration) resultsDir(tokenFile, token string) string {
	switch {
	case tokenFile != "":
		if abs, err := filepath.Abs(tokenFile); err == nil {
			tokenFile = abs
		}
		sum := sha256.Sum256([]byte(tokenFile))
		return filepath.Join(g.stateDir, "results-"+hex.EncodeToString(sum[:6]))
	case strings.HasPrefix(token, broker.WorkerTokenPrefix):
		sum := sha256.Sum256([]byte(token))
		return filepath.Join(g.stateDir, "results-"+hex.EncodeToString(sum[:6]))
	}
	return strings.TrimSuffix(g.path(), ".json") + ".results"
}

func (g *registration) publicKey() string {
	if g.key == nil {
		return ""
	}
	return base64.StdEncoding.EncodeToString(g.key.Public().(ed25519.PublicKey))
}

// token returns the stored worker token if the stored registration is this worker's as it is
// configured now, or registers (retrying while the server cannot be reached) and stores it.
func (g *registration) token(ctx context.Context, enrollToken string) (string, error) {
	path := g.path()
	if b, err := os.ReadFile(path); err == nil {
		var st workerState
		switch {
		case json.Unmarshal(b, &st) != nil || st.WorkerToken == "":
			g.log.Warn("the worker's state file is unreadable; registering anew", zap.String("path", path))
		case !slices.Equal(st.Queues, g.queues) || st.Capacity != g.capacity || st.PublicKey != g.publicKey():
			g.log.Info("queues, capacity or key differ from the stored registration; registering anew", zap.String("path", path),
				zap.String("worker_id", st.WorkerID))
		default:
			g.log.Info("using the stored registration", zap.String("worker_id", st.WorkerID), zap.String("path", path))
			return st.WorkerToken, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("reading the worker's state: %w", err)
	}
	reg, err := g.register(ctx, enrollToken)
	if err != nil {
		return "", err
	}
	st := workerState{Server: g.server, WorkerID: reg.WorkerID, WorkerToken: reg.WorkerToken, ExpiresAt: reg.ExpiresAt,
		Name: g.name, Queues: g.queues, Capacity: g.capacity, PublicKey: g.publicKey()}
	if err := writeState(path, st); err != nil {
		return "", fmt.Errorf("registered as %s, but could not keep its token (a restart would register again): %w", reg.WorkerID, err)
	}
	g.log.Info("registered", zap.String("worker_id", reg.WorkerID), zap.Time("token_expires_at", reg.ExpiresAt), zap.String("state", path))
	return reg.WorkerToken, nil
}

// register registers the worker, retrying while the server cannot be reached; a refusal, the
// server's or its certificate's, is final.
func (g *registration) register(ctx context.Context, enrollToken string) (*wire.Registration, error) {
	for attempt := 1; ; attempt++ {
		reg, err := register(ctx, client.New(g.server, enrollToken, g.hc), g.name, g.queues, g.capacity, g.key)
		var apiErr *client.Error
		switch {
		case err == nil:
			return reg, nil
		case errors.As(err, &apiErr) && apiErr.Status != http.StatusServiceUnavailable, client.CertificateRefused(err):
			return nil, fmt.Errorf("registering: %w", err)
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		d := min(time.Duration(1<<min(attempt-1, 5))*time.Second, 30*time.Second)
		g.log.Warn("the server cannot be reached to register; trying again", zap.Error(err), zap.Duration("in", d))
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// fromTokenFile returns the worker token the file holds. A file that does not exist yet, or
// holds an enroll token, is a worker to register: with the file's enroll token or initial, and
// the file then holds its worker token.
func (g *registration) fromTokenFile(ctx context.Context, path, initial string) (string, error) {
	b, err := os.ReadFile(path)
	token := initial
	switch {
	case err == nil:
		if token = strings.TrimSpace(string(b)); token == "" {
			return "", fmt.Errorf("--token-file %s is empty", path)
		}
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("--token-file: %w", err)
	}
	if strings.HasPrefix(token, broker.WorkerTokenPrefix) {
		return token, nil
	}
	reg, err := g.register(ctx, token)
	if err != nil {
		return "", err
	}
	if err := writeFileAtomic(path, []byte(reg.WorkerToken+"\n")); err != nil {
		return "", fmt.Errorf("registered as %s, but could not write its token to %s: %w", reg.WorkerID, path, err)
	}
	g.log.Info("registered", zap.String("worker_id", reg.WorkerID), zap.Time("token_expires_at", reg.ExpiresAt), zap.String("token_file", path))
	return reg.WorkerToken, nil
}

// keepRenewed writes a renewed token into the state file, so the next start uses it.
func (g *registration) keepRenewed(token string, expiresAt time.Time) {
	path := g.path()
	var st workerState
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err == nil {
		st.WorkerToken, st.ExpiresAt = token, expiresAt
		err = writeState(path, st)
	}
	if err != nil {
		g.log.Error("the renewed worker token could not be kept; a restart would use the old one", zap.String("path", path), zap.Error(err))
	}
}

// forgetIfUnknown removes the stored registration if err says the server no longer knows its
// token, and reports whether it did. A revoked worker stays revoked: it is not registered again.
func (g *registration) forgetIfUnknown(err error) bool {
	var e *client.Error
	if !errors.As(err, &e) || (e.Code != "UNAUTHENTICATED" && e.Code != "TOKEN_EXPIRED") {
		return false
	}
	g.log.Warn("the server does not know the stored worker token; registering anew", zap.String("code", e.Code))
	return os.Remove(g.path()) == nil
}

// writeState writes the state file atomically, readable by its owner only.
func writeState(path string, st workerState) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(b, '\n'))
}

// writeFileAtomic replaces path with data, readable by its owner only: a reader (or a crash)
// sees the old file or the new one, never a part. The new file is synced before it replaces
// the old, and the directory after, so the replacement survives a power cut.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := errors.Join(tmp.Chmod(0o600), tmp.Sync(), tmp.Close()); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "worker"
	}
	return h
}

func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func register(ctx context.Context, c *client.Client, name string, queues []string, capacity int, key ed25519.PrivateKey) (*wire.Registration, error) {
	req := wire.RegisterRequest{Name: name, Queues: queues, Capacity: capacity}
	if key != nil {
		req.PublicKey = base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey))
	}
	return c.RegisterWorker(ctx, req)
}

func workerRegister(args []string) error {
	fs := flag.NewFlagSet("worker register", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs, "enroll token (none under --auth none)")
	queue := fs.String("queue", "default", "queues to serve, comma-separated")
	name := fs.String("name", hostname(), "worker name")
	capacity := fs.Int("capacity", 1, "jobs at once")
	keyFile := fs.String("key", "", "Ed25519 private key (PEM) whose public half the server will check results against")
	if _, err := parseArgs(fs, args, 0, "tether worker register --token ENROLL_TOKEN --queue Q"); err != nil {
		return err
	}
	var key ed25519.PrivateKey
	if *keyFile != "" {
		var err error
		if key, err = readKey(*keyFile); err != nil {
			return err
		}
	}
	reg, err := register(context.Background(), cf.client(), *name, splitList(*queue), *capacity, key)
	if err != nil {
		return err
	}
	return cf.print(reg, func() string {
		return fmt.Sprintf("worker %s, token valid until %s (shown only now):\n%s\n", reg.WorkerID, reg.ExpiresAt.Format(time.RFC3339), reg.WorkerToken)
	})
}

func workerKeygen(args []string) error {
	fs := flag.NewFlagSet("worker keygen", flag.ContinueOnError)
	out := fs.String("out", "tether-worker.key", "where to write the private key (PEM, mode 0600)")
	if _, err := parseArgs(fs, args, 0, "tether worker keygen [--out FILE]"); err != nil {
		return err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := errors.Join(pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der}), f.Close()); err != nil {
		return err
	}
	fmt.Printf("private key: %s\npublic key:  %s\n", *out, base64.StdEncoding.EncodeToString(pub))
	return nil
}

func readKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s: not a PEM private key (make one with tether worker keygen)", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ed, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an Ed25519 key", path)
	}
	return ed, nil
}

// envFlags collects --env KEY (the worker's own value) and --env KEY=VALUE as KEY=VALUE.
type envFlags []string

func (e *envFlags) String() string { return strings.Join(*e, ",") }

func (e *envFlags) Set(v string) error {
	name, _, given := strings.Cut(v, "=")
	if err := client.CheckEnvVar(name); err != nil {
		return err
	}
	if !given {
		val, ok := os.LookupEnv(name)
		if !ok {
			return fmt.Errorf("%s is not set in the worker's environment; give --env %s=VALUE", name, name)
		}
		v = name + "=" + val
	}
	*e = append(*e, v)
	return nil
}
