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
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/eventlog"
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

	start := time.Now()
	elog, err := eventlog.Open(*data, eventlog.Options{Logger: log.Named("eventlog")})
	if err != nil {
		return err
	}
	head := elog.Head()
	log.Info("event log open", zap.String("data", *data), zap.Uint64("head_seq", head.Seq),
		zap.Stringer("head_hash", head.Hash), zap.Duration("took", time.Since(start)))

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		_ = elog.Close()
		return err
	}
	srv := &http.Server{
		Handler:           transport.OpsHandler(logStatus{elog}),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          zap.NewStdLog(log.Named("http")),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("listening", zap.String("addr", ln.Addr().String()))

	stop, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var runErr error
	select {
	case <-stop.Done():
		log.Info("shutting down")
	case <-elog.Failed():
		runErr = fmt.Errorf("event log failed, stopping: %w", elog.Err())
	case err := <-served:
		runErr = err
	}
	ctx, done := context.WithTimeout(context.Background(), 10*time.Second)
	defer done()
	if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("http shutdown", zap.Error(err))
	}
	return errors.Join(runErr, elog.Close())
}

// logStatus reports readiness from the log: open means recovered, a failed log is not ready.
type logStatus struct{ log *eventlog.Log }

func (s logStatus) Ready() error { return s.log.Err() }

func (s logStatus) Status() any {
	head, st := s.log.Head(), s.log.Stats()
	return map[string]any{
		"status":    "ready",
		"head_seq":  head.Seq,
		"head_hash": head.Hash.String(),
		"events":    st.Events,
		"fsyncs":    st.Syncs,
	}
}
