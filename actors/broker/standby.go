package broker

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Standby is a server that follows the replicated log another server leads: it copies the
// upstream into its own data dir as the leader appends, and folds it into projections that it
// checkpoints as the leader does, so that when it takes over, Open finds a checkpoint at most
// CheckpointEvery records behind the head and starts in about the time a restart takes on a
// quiet log. It runs no actors and takes no commands.
type Standby struct {
	cfg  Config
	log  *zap.Logger
	elog *eventlog.Log
	set  *projections.Set // the fold's goroutine's alone until it ends

	cancel context.CancelFunc
	folds  sync.WaitGroup // the fold; Close does not wait for Follow, see there
	errMu  sync.Mutex
	err    error
}

// OpenStandby opens the copy of cfg.Upstream in cfg.Dir as a follower, catches it up, rebuilds
// the projections, and starts following.
func OpenStandby(cfg Config) (*Standby, error) {
	if cfg.Upstream == nil {
		return nil, errors.New("broker: a standby needs an upstream")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.CheckpointEvery == 0 {
		cfg.CheckpointEvery = 20_000
	}
	if cfg.Archive.Dir == "" {
		cfg.Archive.Dir = filepath.Join(cfg.Dir, "archive")
	}
	elog, err := eventlog.Open(cfg.Dir, eventlog.Options{FS: cfg.FS, Logger: cfg.Logger.Named("eventlog"),
		Companions: append(cfg.Companions, "archive"), ArchiveDir: cfg.Archive.Dir, Upstream: cfg.Upstream})
	if err != nil {
		return nil, err
	}
	s := &Standby{cfg: cfg, log: cfg.Logger.Named("standby"), elog: elog}
	s.set, _, err = projections.Rebuild(elog, func(err error) {
		s.log.Warn("checkpoint unusable; replaying the whole log", zap.String("code", "CHECKPOINT_UNUSABLE"), zap.Error(err))
	})
	if err != nil {
		_ = elog.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.folds.Add(1)
	go func() {
		if err := elog.Follow(ctx); err != nil && !errors.Is(err, eventlog.ErrClosed) {
			s.stop(fmt.Errorf("following the upstream: %w", err))
		}
	}()
	go func() {
		defer s.folds.Done()
		if err := s.fold(ctx); ctx.Err() == nil {
			s.stop(err)
		}
	}()
	return s, nil
}

// fold applies every record the copy gains to the projections, and checkpoints them every
// CheckpointEvery records, until ctx ends or something fails; it returns why.
func (s *Standby) fold(ctx context.Context) error {
	sub := s.elog.Subscribe(s.set.Seq() + 1)
	checkpointed := s.set.Seq()
	for {
		recs, err := sub.Next(ctx, 4096)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if err := s.set.ApplyRecord(r); err != nil {
				return err
			}
		}
		if s.set.Seq()-checkpointed >= s.cfg.CheckpointEvery {
			if err := s.set.BeginFlush().Save(s.elog, s.set); err != nil {
				return fmt.Errorf("checkpoint: %w", err)
			}
			checkpointed = s.set.Seq()
		}
	}
}

func (s *Standby) stop(err error) {
	s.errMu.Lock()
	if s.err == nil {
		s.err = err
		s.log.Error("the standby stopped following", zap.String("code", "STANDBY_FAILED"), zap.Error(err))
	}
	s.errMu.Unlock()
	s.cancel()
}

// Err is why the standby stopped following, or nil.
func (s *Standby) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

// Head is the copy's head: how far the standby has followed.
func (s *Standby) Head() eventlog.Head { return s.elog.Head() }

// Close stops following, checkpoints the projections, and closes the copy, so that Open with
// the same Config starts from where the standby was. It does not wait for Follow, which may sit
// in a read from an upstream that is reconnecting: once the copy is closed, Follow writes
// nothing more to it.
func (s *Standby) Close() error {
	s.cancel()
	s.folds.Wait()
	start := time.Now()
	var err error
	if s.Err() == nil && s.set.Seq() > 0 {
		err = s.set.BeginFlush().Save(s.elog, s.set)
	}
	s.log.Info("standby closed", zap.Uint64("seq", s.set.Seq()), zap.Duration("checkpoint_took", time.Since(start)))
	return errors.Join(err, s.elog.Close())
}
