package broker

import (
	"context"
	"errors"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/eventlog/election"
)

// Candidacy is how a server on a replicated log comes to lead it: the election it runs, and
// what it shows the world meanwhile (the server's transport; the simulator has its own).
type Candidacy struct {
	// Election is this server's part, which Lead runs (election.Start); Lead sets its Won.
	Election election.Config
	// Standing, if set, is called once the standby follows the upstream and the election runs:
	// while it stands by, the server answers as a standby (how far it followed, who leads).
	Standing func(*Standby, *election.Driver)
	// Leading, if set, is called once the key is won, before the hand-over: the server answers
	// as the leader, and says whether it is healthy (Driver.Healthy).
	Leading func()
}

// Lead follows cfg.Upstream as a hot standby and runs the election until this server wins the
// key, then takes over (Standby.Lead: catch up, fence, start the actors) and returns the broker.
// The Driver goes on renewing until the caller closes it, clean shutdown included, so that no
// standby fences a leader still closing; it is returned on failure too, once started, for the
// caller to close it (and resign a key it won meanwhile). An append the upstream refuses
// (eventlog.ErrFenced: another server fenced it) deposes the Driver.
func Lead(ctx context.Context, cfg Config, c Candidacy) (*Broker, *election.Driver, error) {
	sb, err := OpenStandby(cfg)
	if err != nil {
		return nil, nil, err
	}
	won := make(chan struct{}, 1) // Won is called once, and must not wait
	ec := c.Election
	ec.Won = func(uint64) { won <- struct{}{} }
	d := election.Start(ec)
	if c.Standing != nil {
		c.Standing(sb, d)
	}
	select {
	case <-ctx.Done():
		_ = sb.Close()
		return nil, d, ctx.Err()
	case <-sb.failed:
		_ = sb.Close()
		return nil, d, sb.Err()
	case <-won:
	}
	if c.Leading != nil {
		c.Leading()
	}
	b, err := sb.Lead(ctx)
	if err != nil {
		return nil, d, err
	}
	go func() {
		select {
		case <-b.Failed():
			if errors.Is(b.Err(), eventlog.ErrFenced) {
				d.StreamRefused()
			}
		case <-b.stopped:
		}
	}()
	return b, d, nil
}
