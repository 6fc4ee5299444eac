package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors/runtime"
	"github.com/tetherhq/tether/transport"
)

func runServer(args []string) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	data := fs.String("data", "tether-data", "data directory (created if missing)")
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
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

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	var status brokerStatus
	srv := &http.Server{
		Handler:           transport.OpsHandler(&status),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          zap.NewStdLog(log.Named("http")),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("listening; /readyz answers 503 until recovery is done", zap.String("addr", ln.Addr().String()))

	// Recovery (checkpoint, tail replay, lease grace) runs while /healthz already answers.
	type opened struct {
		b   *runtime.Broker
		err error
	}
	recovered := make(chan opened, 1)
	go func() {
		b, err := runtime.Open(runtime.Config{Dir: *data, Logger: log})
		recovered <- opened{b, err}
	}()

	stop, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var broker *runtime.Broker
	var failed <-chan struct{}
	var runErr error
	for broker == nil && runErr == nil {
		select {
		case o := <-recovered:
			if o.err != nil {
				runErr = o.err
				break
			}
			broker, failed = o.b, o.b.Failed()
			status.broker.Store(broker)
			head := broker.Head()
			log.Info("ready", zap.String("data", *data), zap.Uint64("head_seq", head.Seq), zap.Stringer("head_hash", head.Hash))
		case err := <-served:
			runErr = err
		case <-stop.Done():
			log.Info("shutting down during recovery")
			if o := <-recovered; o.err == nil {
				broker = o.b
			}
			runErr = errStopped
		}
	}
	if runErr == nil {
		select {
		case <-stop.Done():
			log.Info("shutting down")
		case <-failed:
			runErr = fmt.Errorf("event log failed, stopping: %w", broker.Err())
		case err := <-served:
			runErr = err
		}
	}
	status.broker.Store(nil)
	ctx, done := context.WithTimeout(context.Background(), 10*time.Second)
	defer done()
	if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("http shutdown", zap.Error(err))
	}
	if broker != nil {
		runErr = errors.Join(runErr, broker.Close())
	}
	if errors.Is(runErr, errStopped) {
		return nil
	}
	return runErr
}

var errStopped = errors.New("stopped")

// brokerStatus reports readiness: not ready until recovery is done, and not once the log fails.
type brokerStatus struct {
	broker atomic.Pointer[runtime.Broker]
}

func (s *brokerStatus) Ready() error {
	b := s.broker.Load()
	if b == nil {
		return errors.New("recovering: the projections are being rebuilt from the log")
	}
	return b.Err()
}

func (s *brokerStatus) Status() any {
	b := s.broker.Load()
	head, st := b.Head(), b.Log().Stats()
	return map[string]any{
		"status":    "ready",
		"head_seq":  head.Seq,
		"head_hash": head.Hash.String(),
		"events":    st.Events,
		"fsyncs":    st.Syncs,
	}
}
