package client

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/transport/wire"
)

// Token renewal. The server says, in its welcome and in every heartbeat's answer, in how many
// seconds the worker token is due for renewal (half its life); the heartbeat loop renews it
// then, over the link it heartbeats on. The server keeps the old token working for a few
// minutes, so a renewal whose answer is lost is simply asked again.

// renewRetry is how long a renewal that failed waits before the next try, whatever the server
// says meanwhile.
const renewRetry = 30 * time.Second

// tokenState is what the runner knows of its token's renewal; r.mu guards it.
type tokenState struct {
	renewAt time.Time // zero: unknown yet
	holdTil time.Time // after a failed renewal: no retry before
}

// noteToken takes the server's word on when to renew, from a welcome or a heartbeat's answer.
func (r *runner) noteToken(f wire.Frame) {
	if f.TokenRenewSeconds == nil {
		return
	}
	at := time.Now().Add(seconds(*f.TokenRenewSeconds))
	r.mu.Lock()
	r.token.renewAt = at
	r.mu.Unlock()
	select {
	case r.tighter <- struct{}{}: // the heartbeat loop reckons its next wake again
	default:
	}
}

// renewDue returns when the token should be renewed next (zero: not known).
func (r *runner) renewDue() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.token.renewAt.IsZero() {
		return time.Time{}
	}
	return maxTime(r.token.renewAt, r.token.holdTil)
}

// renewToken renews the token over l. The new one is used from then on, for requests and
// reconnections alike, and handed to Worker.OnTokenRenewed to be kept.
func (r *runner) renewToken(l link) {
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	ack, err := l.request(ctx, wire.Frame{Type: wire.FrameRenew}, 0)
	cancel()
	if err == nil && (ack.WorkerToken == "" || ack.TokenExpiresAt == nil) {
		err = errLinkDown // a server that does not renew tokens: try later
	}
	r.mu.Lock()
	if err != nil {
		r.token.holdTil = time.Now().Add(renewRetry)
		r.mu.Unlock()
		r.log.Warn("renewing the worker token failed; trying again later", zap.Error(err), zap.Duration("in", renewRetry))
		return
	}
	r.token = tokenState{} // the next heartbeat's answer says when the new one is due
	r.mu.Unlock()
	r.api.setToken(ack.WorkerToken)
	r.log.Info("worker token renewed", zap.Time("expires_at", *ack.TokenExpiresAt))
	if r.w.OnTokenRenewed != nil {
		r.w.OnTokenRenewed(ack.WorkerToken, *ack.TokenExpiresAt)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
