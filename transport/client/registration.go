package client

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/transport/wire"
)

// WorkerTokenPrefix begins every worker token (the server's broker.WorkerTokenPrefix): a token
// without it is an enroll token, to register with.
const WorkerTokenPrefix = "tw_"

// Registration is a worker that registers once and keeps its token in a file, so that a
// restart neither spends another enroll use nor leaves the old worker behind (tether worker
// with an enroll token). Its state file, beside a lock, is in StateDir.
type Registration struct {
	Server, Name string
	HTTPClient   *http.Client // nil: http.DefaultClient's settings
	Queues       []string
	Capacity     int
	Key          ed25519.PrivateKey // nil: results are not signed
	StateDir     string
	Logger       *zap.Logger // nil: none
}

func (g *Registration) logger() *zap.Logger {
	if g.Logger == nil {
		return zap.NewNop()
	}
	return g.Logger
}

// Run runs the worker w until ctx ends or w stops for good, with the worker token it is to
// use: token if it is a worker token; else the one tokenFile (if given) or the state file holds,
// registered first with token (an enroll token) or tokenFile's enroll token when there is none.
// A renewed token is kept where the token came from, for the next start. A stored token the
// server no longer knows is forgotten and the worker registers again; a revoked one stays.
// It holds tokenFile, or the registration's name (Claim), while it runs.
func (g *Registration) Run(ctx context.Context, w Worker, token, tokenFile string) error {
	if tokenFile != "" {
		real, err := RealPath(tokenFile)
		if err != nil {
			return err
		}
		unlock, err := HoldTokenFile(tokenFile, real)
		if err != nil {
			return err
		}
		defer unlock()
		tokenFile = real
	}
	if tokenFile == "" && !strings.HasPrefix(token, WorkerTokenPrefix) {
		unlock, err := g.Claim()
		if err != nil {
			return err
		}
		defer unlock()
	}
	for {
		workerToken := token
		stored := false
		// keep is where a renewed token goes, so that the next start uses it.
		keep := func(string, time.Time) {
			g.logger().Warn("the renewed worker token is kept in memory only: a restart uses the old one, which stops working soon; give --token-file")
		}
		switch {
		case tokenFile != "":
			var err error
			if workerToken, err = g.FromTokenFile(ctx, tokenFile, token); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			keep = func(t string, _ time.Time) {
				if err := WriteFileAtomic(tokenFile, []byte(t+"\n")); err != nil {
					g.logger().Error("the renewed worker token could not be written; a restart would use the old one", zap.String("path", tokenFile), zap.Error(err))
				}
			}
		case !strings.HasPrefix(workerToken, WorkerTokenPrefix):
			var err error
			if workerToken, err = g.Token(ctx, token); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			stored = true
			keep = g.KeepRenewed
		}
		run := w
		run.Token, run.OnTokenRenewed, run.ResultsDir = workerToken, keep, g.ResultsDir(tokenFile, token)
		err := run.Run(ctx)
		if stored && g.ForgetIfUnknown(err) {
			continue // the stored token is gone (expired, or the server's data dir is new): register again
		}
		var revoked *Error
		if stored && errors.As(err, &revoked) && revoked.Code == "WORKER_REVOKED" {
			return fmt.Errorf("%w; it stays revoked: to register a new worker, remove %s", err, g.Path())
		}
		return err
	}
}

// slotsMax bounds how many workers of one name may run at once on one machine.
const slotsMax = 64

// Claim takes the registration of the first of name, name-2, name-3... that no other worker
// process on this machine holds, so that several workers started alike (a service template,
// a second terminal) each keep a worker of their own rather than share one, which the server
// would let only one of them connect as. It holds a lock on the state until unlock.
func (g *Registration) Claim() (unlock func(), err error) {
	if err := os.MkdirAll(g.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("the worker's state dir: %w", err)
	}
	base := g.Name
	for n := 1; n <= slotsMax; n++ {
		if n > 1 {
			g.Name = fmt.Sprintf("%s-%d", base, n)
		}
		unlock, err := lockFile(g.Path() + ".lock")
		switch {
		case err == nil:
			return unlock, nil
		case !errors.Is(err, errLockHeld): // held: another worker of this name runs here, so try the next
			return nil, fmt.Errorf("locking the worker's state: %w", err)
		}
	}
	return nil, fmt.Errorf("%d workers named %q run on this machine already", slotsMax, base)
}

// RealPath is the token file that path names, links followed, so that two workers given two
// links to one file lock the same file, and a renewal rewrites the file, not the link.
func RealPath(path string) (string, error) {
	real, err := filepath.EvalSymlinks(path)
	if err == nil {
		return real, nil
	}
	if _, lerr := os.Lstat(path); lerr == nil {
		return "", fmt.Errorf("--token-file %s is a link to a file that is not there: %w", path, err)
	}
	if dir, derr := filepath.EvalSymlinks(filepath.Dir(path)); derr == nil {
		return filepath.Join(dir, filepath.Base(path)), nil // made at Registration
	}
	return path, nil
}

// HoldTokenFile checks, before anything is registered, that the worker can keep its token in
// path, and locks the file for this worker until unlock. A worker that registered and then could
// not write its token would spend an enroll use and leave a worker behind at every start; two
// workers on one file would take turns displacing each other as one worker id.
func HoldTokenFile(path, real string) (unlock func(), err error) {
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

// Path is the state file of this worker name at this server.
func (g *Registration) Path() string {
	sum := sha256.Sum256([]byte(g.Server))
	safe := strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9') {
			return r
		}
		return '_'
	}, g.Name)
	return filepath.Join(g.StateDir, fmt.Sprintf("worker-%s-%s.json", safe, hex.EncodeToString(sum[:4])))
}

// ResultsDir is where the worker keeps the results the server has not taken yet, and the jobs
// it runs (Worker.ResultsDir): beside its
// Registration, or, for a worker given its token, named after the token's file or the token.
func (g *Registration) ResultsDir(tokenFile, token string) string {
	switch {
	case tokenFile != "":
		if abs, err := filepath.Abs(tokenFile); err == nil {
			tokenFile = abs
		}
		sum := sha256.Sum256([]byte(tokenFile))
		return filepath.Join(g.StateDir, "results-"+hex.EncodeToString(sum[:6]))
	case strings.HasPrefix(token, WorkerTokenPrefix):
		sum := sha256.Sum256([]byte(token))
		return filepath.Join(g.StateDir, "results-"+hex.EncodeToString(sum[:6]))
	}
	return strings.TrimSuffix(g.Path(), ".json") + ".results"
}

func (g *Registration) publicKey() string {
	if g.Key == nil {
		return ""
	}
	return base64.StdEncoding.EncodeToString(g.Key.Public().(ed25519.PublicKey))
}

// Token returns the stored worker token if the stored Registration is this worker's as it is
// configured now, or registers (retrying while the server cannot be reached) and stores it.
func (g *Registration) Token(ctx context.Context, enrollToken string) (string, error) {
	path := g.Path()
	if b, err := os.ReadFile(path); err == nil {
		var st workerState
		switch {
		case json.Unmarshal(b, &st) != nil || st.WorkerToken == "":
			g.logger().Warn("the worker's state file is unreadable; registering anew", zap.String("path", path))
		case !slices.Equal(st.Queues, g.Queues) || st.Capacity != g.Capacity || st.PublicKey != g.publicKey():
			g.logger().Info("queues, capacity or key differ from the stored registration; registering anew", zap.String("path", path),
				zap.String("worker_id", st.WorkerID))
		default:
			g.logger().Info("using the stored registration", zap.String("worker_id", st.WorkerID), zap.String("path", path))
			return st.WorkerToken, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("reading the worker's state: %w", err)
	}
	reg, err := g.register(ctx, enrollToken)
	if err != nil {
		return "", err
	}
	st := workerState{Server: g.Server, WorkerID: reg.WorkerID, WorkerToken: reg.WorkerToken, ExpiresAt: reg.ExpiresAt,
		Name: g.Name, Queues: g.Queues, Capacity: g.Capacity, PublicKey: g.publicKey()}
	if err := writeState(path, st); err != nil {
		return "", fmt.Errorf("registered as %s, but could not keep its token (a restart would register again): %w", reg.WorkerID, err)
	}
	g.logger().Info("registered", zap.String("worker_id", reg.WorkerID), zap.Time("token_expires_at", reg.ExpiresAt), zap.String("state", path))
	return reg.WorkerToken, nil
}

// register registers the worker, retrying while the server cannot be reached; a refusal, the
// server's or its certificate's, is final.
func (g *Registration) register(ctx context.Context, enrollToken string) (*wire.Registration, error) {
	for attempt := 1; ; attempt++ {
		reg, err := Register(ctx, New(g.Server, enrollToken, g.HTTPClient), g.Name, g.Queues, g.Capacity, g.Key)
		var apiErr *Error
		switch {
		case err == nil:
			return reg, nil
		case errors.As(err, &apiErr) && apiErr.Status != http.StatusServiceUnavailable, CertificateRefused(err):
			return nil, fmt.Errorf("registering: %w", err)
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		d := min(time.Duration(1<<min(attempt-1, 5))*time.Second, 30*time.Second)
		g.logger().Warn("the server cannot be reached to register; trying again", zap.Error(err), zap.Duration("in", d))
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// FromTokenFile returns the worker token the file holds. A file that does not exist yet, or
// holds an enroll token, is a worker to register: with the file's enroll token or initial, and
// the file then holds its worker token.
func (g *Registration) FromTokenFile(ctx context.Context, path, initial string) (string, error) {
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
	if strings.HasPrefix(token, WorkerTokenPrefix) {
		return token, nil
	}
	reg, err := g.register(ctx, token)
	if err != nil {
		return "", err
	}
	if err := WriteFileAtomic(path, []byte(reg.WorkerToken+"\n")); err != nil {
		return "", fmt.Errorf("registered as %s, but could not write its token to %s: %w", reg.WorkerID, path, err)
	}
	g.logger().Info("registered", zap.String("worker_id", reg.WorkerID), zap.Time("token_expires_at", reg.ExpiresAt), zap.String("token_file", path))
	return reg.WorkerToken, nil
}

// KeepRenewed writes a renewed token into the state file, so the next start uses it.
func (g *Registration) KeepRenewed(token string, expiresAt time.Time) {
	path := g.Path()
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
		g.logger().Error("the renewed worker token could not be kept; a restart would use the old one", zap.String("path", path), zap.Error(err))
	}
}

// ForgetIfUnknown removes the stored Registration if err says the server no longer knows its
// token, and reports whether it did. A revoked worker stays revoked: it is not registered again.
func (g *Registration) ForgetIfUnknown(err error) bool {
	var e *Error
	if !errors.As(err, &e) || (e.Code != "UNAUTHENTICATED" && e.Code != "TOKEN_EXPIRED") {
		return false
	}
	g.logger().Warn("the server does not know the stored worker token; registering anew", zap.String("code", e.Code))
	return os.Remove(g.Path()) == nil
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
	return WriteFileAtomic(path, append(b, '\n'))
}

// WriteFileAtomic replaces path with data, readable by its owner only: a reader (or a crash)
// sees the old file or the new one, never a part. The new file is synced before it replaces
// the old, and the directory after, so the replacement survives a power cut.
func WriteFileAtomic(path string, data []byte) error {
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

// Register registers a worker of name with c, an enroll token's client; key, if not nil, is
// the key its results are signed with.
func Register(ctx context.Context, c *Client, name string, queues []string, capacity int, key ed25519.PrivateKey) (*wire.Registration, error) {
	req := wire.RegisterRequest{Name: name, Queues: queues, Capacity: capacity}
	if key != nil {
		req.PublicKey = base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey))
	}
	return c.RegisterWorker(ctx, req)
}
