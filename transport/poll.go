package transport

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/runtime"
	"github.com/tetherhq/tether/transport/protocol"
	"github.com/tetherhq/tether/transport/wire"
)

// WaitSecondsMax caps how long one long poll waits for work.
const WaitSecondsMax = 30

// pollSessions keeps the session of each worker that long-polls. A session lives across polls;
// it ends as any session does (no heartbeat and no poll for three intervals, revocation), and
// the next poll opens a new one, which adopts the worker's leases.
type pollSessions struct {
	mu       sync.Mutex
	sessions map[string]*pollSession // by worker id
}

type pollSession struct {
	turn    chan struct{} // one request of a worker at a time uses the session
	sess    *runtime.Session
	pending []actors.Assignment // assigned beyond the max of the poll that received them
}

// acquire returns the worker's poll session, holding its turn until release.
func (p *pollSessions) acquire(ctx context.Context, worker string) (*pollSession, error) {
	p.mu.Lock()
	ps := p.sessions[worker]
	if ps == nil {
		ps = &pollSession{turn: make(chan struct{}, 1)}
		p.sessions[worker] = ps
	}
	p.mu.Unlock()
	select {
	case ps.turn <- struct{}{}:
		return ps, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (ps *pollSession) release() { <-ps.turn }

// open returns the session, opening one if there is none or the last one ended.
func (ps *pollSession) open(ctx context.Context, b *runtime.Broker, worker string) (*runtime.Session, error) {
	if ps.sess != nil {
		return ps.sess, nil
	}
	sess, err := b.Connect(ctx, worker, "longpoll", 0)
	if err != nil {
		return nil, err
	}
	ps.sess = sess
	return sess, nil
}

// take moves the session's frames into pending, dropping cancel notices (heartbeats report
// them) and forgetting a session that ended. With a wait, it waits for the first assignment
// until wait fires or either stop channel closes.
func (ps *pollSession) take(wait <-chan time.Time, stop, stop2 <-chan struct{}) {
	for ps.sess != nil {
		var f any
		var ok bool
		if len(ps.pending) == 0 && wait != nil {
			select {
			case f, ok = <-ps.sess.Frames:
			case <-wait:
				return
			case <-stop:
				return
			case <-stop2:
				return
			}
		} else {
			select {
			case f, ok = <-ps.sess.Frames:
			default:
				return
			}
		}
		switch m := f.(type) {
		case actors.Assignment:
			ps.pending = append(ps.pending, m)
		case actors.SessionEnded:
			ps.sess = nil
		}
		if !ok {
			ps.sess = nil
		}
	}
}

func (s *Server) pollLease(r *request) error {
	req := wire.LeaseRequest{Max: 1}
	if err := r.decode(SmallBodyBytesMax, &req); err != nil {
		return err
	}
	if req.Max < 1 || req.Max > actors.CapacityMax {
		return invalid("max must be 1..%d", actors.CapacityMax)
	}
	if req.WaitSeconds < 0 || req.WaitSeconds > WaitSecondsMax {
		return invalid("wait_seconds must be 0..%d", WaitSecondsMax)
	}
	// A poll is a sign of life: it heartbeats the session with no leases.
	return s.withPollSession(r, nil, func(ps *pollSession, _ actors.HeartbeatAck) error {
		if len(ps.pending) < req.Max {
			ps.sess.Credit(req.Max - len(ps.pending))
		}
		timer := time.NewTimer(seconds(req.WaitSeconds))
		defer timer.Stop()
		ps.take(timer.C, r.Context().Done(), s.shutdown)
		n := min(req.Max, len(ps.pending))
		if n == 0 {
			r.w.WriteHeader(http.StatusNoContent)
			return nil
		}
		out := wire.Assignments{Assignments: make([]wire.Frame, n)}
		for i, a := range ps.pending[:n] {
			out.Assignments[i] = protocol.AssignFrame(a)
		}
		ps.pending = append(ps.pending[:0], ps.pending[n:]...)
		return r.reply(http.StatusOK, out)
	})
}

// withPollSession runs fn with the worker's poll session, opened if need be and heartbeaten
// with leases, holding the session's turn.
func (s *Server) withPollSession(r *request, leases []string, fn func(*pollSession, actors.HeartbeatAck) error) error {
	ps, err := s.polls.acquire(r.Context(), r.by.worker.ID)
	if err != nil {
		return err
	}
	defer ps.release()
	ps.take(nil, nil, nil) // learn whether the session ended while nobody polled
	sess, err := ps.open(r.Context(), r.b, r.by.worker.ID)
	if err != nil {
		return err
	}
	ack, err := sess.Heartbeat(r.Context(), leases)
	if err != nil {
		ps.sess = nil
		return err
	}
	return fn(ps, ack)
}

func (s *Server) pollHeartbeat(r *request) error {
	var req wire.HeartbeatRequest
	if err := r.decode(SmallBodyBytesMax, &req); err != nil {
		return err
	}
	if len(req.Leases) > actors.CapacityMax {
		return invalid("a heartbeat lists at most %d leases", actors.CapacityMax)
	}
	return s.withPollSession(r, req.Leases, func(ps *pollSession, ack actors.HeartbeatAck) error {
		out := wire.HeartbeatResponse{Cancel: ack.CancelRequested, Unknown: ack.Unknown,
			HeartbeatSeconds: ps.sess.HeartbeatInterval.Seconds(), LeaseTTLSeconds: ps.sess.LeaseTTL.Seconds()}
		if out.Cancel == nil {
			out.Cancel = []string{}
		}
		if out.Unknown == nil {
			out.Unknown = []string{}
		}
		return r.reply(http.StatusOK, out)
	})
}

func (s *Server) workerEvent(r *request) error {
	var req wire.EventRequest
	if err := r.decode(int64(actors.ProgressDataBytesMax+envelopeBytes), &req); err != nil {
		return err
	}
	op, err := protocol.WorkerOp(r.by.worker.ID, r.PathValue("id"), wire.Frame{Type: wire.FrameEvent, LeaseID: req.LeaseID, EventType: req.EventType, Data: req.Data})
	if err != nil {
		return err
	}
	n, rc, err := r.b.Event(r.Context(), op.(actors.Progress))
	if err != nil {
		return err
	}
	return r.reply(http.StatusCreated, wire.EventAck{Number: n, Receipt: receipt(rc)})
}

func (s *Server) workerComplete(r *request) error {
	var req wire.CompleteRequest
	if err := r.decode(int64(actors.OutputBytesMax+envelopeBytes), &req); err != nil {
		return err
	}
	op, err := protocol.WorkerOp(r.by.worker.ID, r.PathValue("id"), wire.Frame{Type: wire.FrameComplete, LeaseID: req.LeaseID, Nonce: req.Nonce,
		Output: req.Output, OutputHash: req.OutputHash, Signature: req.Signature})
	if err != nil {
		return err
	}
	rc, err := r.b.Complete(r.Context(), op.(actors.Complete))
	if err != nil {
		return err
	}
	return r.reply(http.StatusOK, wire.Done{Receipt: receipt(rc)})
}

func (s *Server) workerFail(r *request) error {
	var req wire.FailRequest
	if err := r.decode(SmallBodyBytesMax, &req); err != nil {
		return err
	}
	op, err := protocol.WorkerOp(r.by.worker.ID, r.PathValue("id"), wire.Frame{Type: wire.FrameFail, LeaseID: req.LeaseID, ErrorCode: req.ErrorCode,
		Message: req.Message, Retryable: req.Retryable})
	if err != nil {
		return err
	}
	rc, err := r.b.Fail(r.Context(), op.(actors.Fail))
	if err != nil {
		return err
	}
	return r.reply(http.StatusOK, wire.Done{Receipt: receipt(rc)})
}

// contextFor is a context that ends after d or when stop closes.
func contextFor(stop <-chan struct{}, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
