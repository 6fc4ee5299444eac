package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/transport/wire"
)

// pollLink carries a worker's requests over plain HTTP: the long-poll transport, and how a
// stopping worker reports once its WebSocket is closed.
type pollLink struct{ api *Client }

func (l *pollLink) credit(int) {}

func (l *pollLink) drop() {} // each request makes its own connection

// request ignores credit: a long-poll link asks for work when it polls.
func (l *pollLink) request(ctx context.Context, f wire.Frame, _ int) (wire.Frame, error) {
	ok := true
	ack := wire.Frame{Type: wire.FrameAck, OK: &ok}
	path := "/v1/worker/jobs/" + url.PathEscape(f.JobID)
	var header []string // a report's trace context, which the server's span of it continues
	if f.Traceparent != "" {
		header = []string{"traceparent", f.Traceparent}
	}
	var err error
	switch f.Type {
	case wire.FrameEvent:
		var out wire.EventAck
		_, err = l.api.do(ctx, http.MethodPost, path+"/events", wire.EventRequest{LeaseID: f.LeaseID, EventType: f.EventType, Data: f.Data, Seq: f.Seq}, &out)
		ack.Number, ack.Receipt = out.Number, &out.Receipt
	case wire.FrameComplete:
		var out wire.Done
		_, err = l.api.do(ctx, http.MethodPost, path+"/complete", wire.CompleteRequest{LeaseID: f.LeaseID, Nonce: f.Nonce, Output: f.Output,
			OutputHash: f.OutputHash, Signature: f.Signature}, &out, header...)
		ack.Receipt = &out.Receipt
	case wire.FrameFail:
		var out wire.Done
		_, err = l.api.do(ctx, http.MethodPost, path+"/fail", wire.FailRequest{LeaseID: f.LeaseID, ErrorCode: f.ErrorCode, Message: f.Message,
			Retryable: f.Retryable}, &out, header...)
		ack.Receipt = &out.Receipt
	case wire.FrameRelease:
		var out wire.Done
		_, err = l.api.do(ctx, http.MethodPost, path+"/release", wire.ReleaseRequest{LeaseID: f.LeaseID, Reason: f.Reason, Message: f.Message}, &out, header...)
		ack.Receipt = &out.Receipt
	case wire.FrameHeartbeat:
		var out wire.HeartbeatResponse
		_, err = l.api.do(ctx, http.MethodPost, "/v1/worker/heartbeat", wire.HeartbeatRequest{Leases: f.Leases}, &out)
		ack.Cancel, ack.Unknown, ack.HeartbeatSeconds, ack.PublicKey = out.Cancel, out.Unknown, out.HeartbeatSeconds, out.PublicKey
		if !out.TokenExpiresAt.IsZero() {
			ack.TokenExpiresAt, ack.TokenRenewSeconds = &out.TokenExpiresAt, &out.TokenRenewSeconds
		}
	case wire.FrameRenew:
		var out wire.TokenRenewal
		_, err = l.api.do(ctx, http.MethodPost, "/v1/worker/token", nil, &out)
		ack.WorkerToken, ack.TokenExpiresAt, ack.Receipt = out.WorkerToken, &out.ExpiresAt, &out.Receipt
	default:
		return wire.Frame{}, fmt.Errorf("tether: long-poll cannot send %q", f.Type)
	}
	var apiErr *Error
	if err != nil && !errors.As(err, &apiErr) && ctx.Err() == nil {
		return wire.Frame{}, fmt.Errorf("%w: %w", errLinkDown, err)
	}
	return ack, err
}

// runPoll long-polls for work until a request fails or ctx ends; connected says whether the
// server answered. Its first request is a heartbeat of the leases the worker holds: it checks
// the token and the key, and keeps leases that a reconnect might otherwise lose. Heartbeats go
// on beside the polls, which the server never makes them wait for.
func (r *runner) runPoll(ctx context.Context) (connected bool, err error) {
	l := &pollLink{api: r.api}
	hello, err := l.request(ctx, wire.Frame{Type: wire.FrameHeartbeat, Leases: r.leases()}, 0)
	if err != nil {
		return false, err
	}
	if err := r.checkKey(hello.PublicKey); err != nil {
		return false, err
	}
	r.noteToken(hello)
	for _, id := range hello.Unknown {
		r.stopTask(id, "lost")
	}
	r.setLink(l)
	defer r.clearLink(l)
	if r.w.OnConnect != nil {
		r.w.OnConnect(TransportLongPoll)
	}
	r.log.Info("connected", zap.String("transport", TransportLongPoll))
	done := make(chan struct{})
	defer close(done)
	go r.heartbeats(l, seconds(hello.HeartbeatSeconds), done, false) // hello was one
	for ctx.Err() == nil {
		n := r.free()
		if n <= 0 {
			select {
			case <-r.freed:
			case <-ctx.Done():
			}
			continue
		}
		var out wire.Assignments
		status, err := r.api.do(ctx, http.MethodPost, "/v1/worker/lease", wire.LeaseRequest{Max: n, WaitSeconds: pollWait}, &out)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return true, err
		}
		if status == http.StatusOK {
			for _, a := range out.Assignments {
				r.start(a)
			}
		}
	}
	return true, nil
}
