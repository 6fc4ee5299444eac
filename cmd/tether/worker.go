package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors/runtime"
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
	server := fs.String("server", "http://127.0.0.1:8080", "the server's URL")
	token := fs.String("token", "", "a worker token (tw_…), or an enroll token (te_…) to register with at start; none under --auth none")
	queue := fs.String("queue", "default", "queues to serve, comma-separated (when registering at start)")
	name := fs.String("name", hostname(), "worker name (when registering at start)")
	capacity := fs.Int("capacity", 1, "jobs at once")
	keyFile := fs.String("key", "", "Ed25519 private key (PEM, from tether worker keygen) that signs every result")
	timeout := fs.Duration("timeout", 0, "per-job time limit (0: none)")
	grace := fs.Duration("kill-grace", 10*time.Second, "after SIGTERM, how long a cancelled or timed-out command has before SIGKILL")
	fatal := fs.String("fatal-exit-codes", "", "exit codes that fail a job for good (no retry), comma-separated")
	transportName := fs.String("transport", "auto", "auto (WebSocket, long-poll when it fails), websocket, or longpoll")
	var lf logFlags
	lf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return errors.New("usage: tether worker [flags] -- COMMAND [ARGS]")
	}
	log, err := lf.logger()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	codes, err := intList(*fatal)
	if err != nil {
		return fmt.Errorf("--fatal-exit-codes: %w", err)
	}
	var key ed25519.PrivateKey
	if *keyFile != "" {
		if key, err = readKey(*keyFile); err != nil {
			return err
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	workerToken := *token
	if !strings.HasPrefix(workerToken, runtime.WorkerTokenPrefix) {
		reg, err := register(ctx, *server, *token, *name, *queue, *capacity, key)
		if err != nil {
			return err
		}
		workerToken = reg.WorkerToken
		log.Info("registered", zap.String("worker_id", reg.WorkerID), zap.Time("token_expires_at", reg.ExpiresAt))
	}
	w := &client.Worker{
		Server: *server, Token: workerToken, Capacity: *capacity, Key: key, Transport: *transportName, Logger: log.Named("worker"),
		Handler: client.Command{Args: argv, Timeout: *timeout, KillGrace: *grace, FatalExitCodes: codes, Stderr: os.Stderr}.Handler(),
	}
	return w.Run(ctx)
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

func register(ctx context.Context, server, enrollToken, name, queues string, capacity int, key ed25519.PrivateKey) (*wire.Registration, error) {
	req := wire.RegisterRequest{Name: name, Queues: strings.Split(queues, ","), Capacity: capacity}
	if key != nil {
		req.PublicKey = base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey))
	}
	return client.New(server, enrollToken, nil).RegisterWorker(ctx, req)
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
	reg, err := register(context.Background(), cf.server, cf.token, *name, *queue, *capacity, key)
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
