package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Standby is a server that follows the replicated log another server leads: it copies the
// upstream into its own data dir as the leader appends, and folds it into projections that it
// checkpoints as the leader does. When it wins the election, Lead makes its copy the writer and
// starts the broker on the projections it holds, so a takeover costs a catch-up and a fence,
// not a rebuild, however much the log holds. It runs no actors and takes no commands.
type Standby struct {
	cfg  Config
	log  *zap.Logger
	elog *eventlog.Log
	// set and checkpointed (the seq of its last checkpoint) are the fold's goroutine's alone
	// until it ends.
	set          *projections.Set
	checkpointed uint64

	cancel context.CancelFunc
	folds  sync.WaitGroup // the fold; Close does not wait for Follow, see there
	errMu  sync.Mutex
	err    error
	failed chan struct{} // closed when err is set
}

// OpenStandby opens the copy of cfg.Upstream in cfg.Dir as a follower, catches it up, rebuilds
// the projections, and starts following.
func OpenStandby(cfg Config) (*Standby, error) {
	if cfg.Upstream == nil {
		return nil, errors.New("broker: a standby needs an upstream")
	}
	cfg = cfg.withDefaults()
	elog, err := eventlog.Open(cfg.Dir, cfg.logOptions(false))
	if err != nil {
		return nil, err
	}
	s := &Standby{cfg: cfg, log: cfg.Logger.Named("standby"), elog: elog, failed: make(chan struct{})}
	s.set, s.checkpointed, err = projections.Rebuild(elog, func(err error) {
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

// fold applies every record the copy gains to the projections until ctx ends or something
// fails; it returns why.
func (s *Standby) fold(ctx context.Context) error {
	sub := s.elog.Subscribe(s.set.Seq() + 1)
	for {
		recs, err := sub.Next(ctx, 4096)
		if err != nil {
			return err
		}
		if err := s.apply(recs); err != nil {
			return err
		}
	}
}

// apply folds records into the projections, and checkpoints them every CheckpointEvery records.
func (s *Standby) apply(recs []eventlog.Record) error {
	for _, r := range recs {
		if err := s.set.ApplyRecord(r); err != nil {
			return err
		}
	}
	if s.set.Seq()-s.checkpointed >= s.cfg.CheckpointEvery {
		if err := s.set.BeginFlush().Save(s.elog, s.set); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		s.checkpointed = s.set.Seq()
	}
	return nil
}

// Lead makes this standby the upstream's writer and returns the broker, ready: it stops
// following, catches up, fences the upstream (eventlog's Log.Lead), folds what the catch-up
// copied, and starts the actors on the projections it holds. The Standby is spent either way;
// on failure its copy is closed.
func (s *Standby) Lead(ctx context.Context) (*Broker, error) {
	s.cancel()
	s.folds.Wait()
	if err := s.Err(); err != nil {
		_ = s.elog.Close()
		return nil, err
	}
	start := time.Now()
	if err := s.elog.Lead(ctx); err != nil {
		_ = s.elog.Close()
		return nil, err
	}
	from := s.set.Seq()
	for r, err := range s.elog.Range(from+1, 0) {
		if err == nil {
			err = s.set.ApplyRecord(r)
		}
		if err != nil {
			_ = s.elog.Close()
			return nil, err
		}
	}
	b := newBroker(s.cfg, s.elog)
	b.noteCheckpoint(s.checkpointed) // the broker checkpoints in the background when one is due
	if _, err := b.start(s.set); err != nil {
		return nil, err
	}
	b.log.Info("leading on the standby's projections", zap.Uint64("checkpoint_seq", s.checkpointed), zap.Uint64("head_seq", s.set.Seq()),
		zap.Uint64("caught_up", s.set.Seq()-from), zap.Duration("took", time.Since(start)))
	return b, nil
}

func (s *Standby) stop(err error) {
	s.errMu.Lock()
	if s.err == nil {
		s.err = err
		if err != nil {
			close(s.failed)
		}
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

// Lag asks the upstream how far the copy is behind it (eventlog.Log.UpstreamLag).
func (s *Standby) Lag(ctx context.Context) (eventlog.Lag, error) { return s.elog.UpstreamLag(ctx) }

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
