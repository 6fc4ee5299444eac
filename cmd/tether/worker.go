package main

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/transport/cli"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/tracing"
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
	cli.ServerVar(fs, &server)
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
	var ca cli.CACert
	ca.Register(fs)
	var env envFlags
	fs.Var(&env, "env", "give every job the worker's variable KEY, or KEY=VALUE (repeatable); jobs get the worker's environment without any TETHER_* variable, and never the token")
	tokenFile := fs.String("token-file", "", "a file (mode 0600) that holds the worker token and is rewritten atomically each time the worker renews it; if it does not exist yet, the worker registers with --token and writes it")
	stateDir := fs.String("state-dir", defaultStateDir(), "where the worker keeps its registration (worker id and token, mode 0600), the results the server has not taken yet, and the jobs it runs (a restart after kill -9 ends what they left and gives their leases back)")
	otelEndpoint := fs.String("otel-endpoint", "", "export an OpenTelemetry span of each job's run over OTLP/HTTP to this URL (e.g. http://collector:4318), under the trace its assignment names; the OTEL_EXPORTER_OTLP_* variables work too; empty and unset: off")
	var lf cli.LogFlags
	lf.Register(fs)
	const usage = "tether worker [flags] -- COMMAND [ARGS]"
	argv, err := cli.ParseCommand(fs, args, usage)
	if err != nil {
		return err
	}
	if err := lf.Check(); err != nil {
		return cli.BadFlag(fs, err)
	}
	switch {
	case len(argv) == 0:
		return cli.BadFlagf(fs, "no command given; usage: %s", usage)
	case len(splitList(*queue)) == 0:
		return cli.BadFlagf(fs, "--queue %q names no queue", *queue)
	case *capacity < 1 || *capacity > 1000:
		return cli.BadFlagf(fs, "--capacity %d: want 1..1000", *capacity)
	case *timeout < 0, *grace < 0, *killGrace < 0:
		return cli.BadFlagf(fs, "--timeout, --grace and --kill-grace are durations of 0 or more")
	}
	switch *transportName {
	case client.TransportAuto, client.TransportWebSocket, client.TransportLongPoll:
	default:
		return cli.BadFlagf(fs, "--transport %q: want auto, websocket or longpoll", *transportName)
	}
	if err := tracing.CheckEndpoint(*otelEndpoint); err != nil {
		return cli.BadFlagf(fs, "--otel-endpoint: %v", err)
	}
	traces, err := tracing.ReadSettings(*otelEndpoint, os.LookupEnv)
	if err != nil {
		return cli.BadFlag(fs, err)
	}
	codes, err := intList(*fatal)
	if err != nil {
		return cli.BadFlagf(fs, "--fatal-exit-codes: %w", err)
	}
	command := client.Command{Args: argv, Timeout: *timeout, KillGrace: *killGrace, FatalExitCodes: codes, Stderr: os.Stderr, Env: env}
	if err := command.Check(); err != nil {
		return cli.BadFlag(fs, err) // a typo here would give every job back, one after another
	}
	var key ed25519.PrivateKey
	if *keyFile != "" {
		if key, err = client.ReadKey(*keyFile); err != nil {
			return err
		}
	}
	log, err := lf.Logger()
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

	reg := client.Registration{Server: server, HTTPClient: ca.HTTPClient(), Name: *name, Queues: splitList(*queue), Capacity: *capacity, Key: key, StateDir: *stateDir, Logger: log}
	w := client.Worker{Server: server, Capacity: *capacity, Key: key, Transport: *transportName, Logger: log.Named("worker"),
		Grace: *grace, Hurry: hurry, Handler: command.Handler(), TLSConfig: ca.TLS}
	tp, err := startExport(traces, "tether-worker", log)
	if err != nil {
		return err
	}
	if tp != nil {
		defer flushSpans(tp)
		w.TracerProvider = tp
	}
	err = reg.Run(ctx, w, *token, *tokenFile)
	if refused := (*client.Error)(nil); *token == "" && errors.As(err, &refused) && refused.Code == "UNAUTHENTICATED" {
		return fmt.Errorf("%w; give an enroll token: --token ENROLL_TOKEN (see tether admin enroll-token)", err)
	}
	return err
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

func workerRegister(args []string) error {
	fs := flag.NewFlagSet("worker register", flag.ContinueOnError)
	var cf cli.ClientFlags
	cf.Register(fs, "enroll token (none under --auth none)")
	queue := fs.String("queue", "default", "queues to serve, comma-separated")
	name := fs.String("name", hostname(), "worker name")
	capacity := fs.Int("capacity", 1, "jobs at once")
	keyFile := fs.String("key", "", "Ed25519 private key (PEM) whose public half the server will check results against")
	if _, err := cli.ParseArgs(fs, args, 0, "tether worker register --token ENROLL_TOKEN --queue Q"); err != nil {
		return err
	}
	if len(splitList(*queue)) == 0 {
		return cli.BadFlagf(fs, "--queue %q names no queue", *queue)
	}
	var key ed25519.PrivateKey
	if *keyFile != "" {
		var err error
		if key, err = client.ReadKey(*keyFile); err != nil {
			return err
		}
	}
	reg, err := client.Register(context.Background(), cf.Client(), *name, splitList(*queue), *capacity, key)
	if err != nil {
		return err
	}
	return cf.Print(reg, func() string {
		return fmt.Sprintf("worker %s, token valid until %s (shown only now):\n%s\n", reg.WorkerID, reg.ExpiresAt.Format(time.RFC3339), reg.WorkerToken)
	})
}

func workerKeygen(args []string) error {
	fs := flag.NewFlagSet("worker keygen", flag.ContinueOnError)
	out := fs.String("out", "tether-worker.key", "where to write the private key (PEM, mode 0600)")
	if _, err := cli.ParseArgs(fs, args, 0, "tether worker keygen [--out FILE]"); err != nil {
		return err
	}
	pub, err := client.WriteNewKey(*out)
	if err != nil {
		return err
	}
	fmt.Printf("private key: %s\npublic key:  %s\n", *out, base64.StdEncoding.EncodeToString(pub))
	return nil
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
