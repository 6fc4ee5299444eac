package transport_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// A worker renews its token over long-poll's endpoint and over the WebSocket. It keeps its id
// and its leases; the token it renewed with works for a few minutes more, and then stops; an
// early renewal is refused; revocation ends old and new tokens alike.
func TestWorkerTokenRenewal(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthToken)
	acme := h.tenant("acme")
	reg := h.register("acme", nil, 1)
	heartbeat := func(token string) (int, map[string]any) {
		return h.raw("POST", "/v1/worker/heartbeat", token, []byte(`{"leases":[]}`))
	}
	if st, b := h.raw("POST", "/v1/worker/token", reg.WorkerToken, nil); st != http.StatusTooManyRequests || codeOf(b) != "TOKEN_RENEWED_RECENTLY" {
		t.Fatalf("a renewal of a fresh token: %d %v", st, b)
	}
	if _, b := heartbeat(reg.WorkerToken); b["token_renew_seconds"].(float64) < 3*24*3600 {
		t.Fatalf("a fresh token is said to be due: %v", b)
	}
	h.clock.advance(4 * 24 * time.Hour)
	if _, b := heartbeat(reg.WorkerToken); b["token_renew_seconds"] != 0.0 || b["token_expires_at"] != reg.ExpiresAt.Format(time.RFC3339Nano) {
		t.Fatalf("a token past half its life is not said to be due: %v", b)
	}

	// Over long-poll's endpoint, with a job leased over the WebSocket meanwhile.
	w := h.dial(reg.WorkerToken, 1)
	w.send(wire.Frame{Type: wire.FrameCredit, N: 1})
	job := submit(t, acme, `{}`)
	a := w.assignment()
	// Each token's proof of life is an event on the job the worker holds: it opens no session
	// that would replace the WebSocket's.
	event := func(token string) (int, map[string]any) {
		return h.raw("POST", "/v1/worker/jobs/"+job.ID+"/events", token, []byte(`{"lease_id":"`+a.LeaseID+`","event_type":"log","data":"x"}`))
	}
	st, b := h.raw("POST", "/v1/worker/token", reg.WorkerToken, nil)
	if st != http.StatusOK || b["worker_id"] != reg.WorkerID || b["worker_token"] == reg.WorkerToken {
		t.Fatalf("renewal: %d %v", st, b)
	}
	second := b["worker_token"].(string)
	for _, tok := range []string{reg.WorkerToken, second} {
		if st, b := event(tok); st != http.StatusCreated {
			t.Fatalf("within the grace, a token answers %d %v", st, b)
		}
	}
	// The same renewal asked again at once (a retry, a duplicate) is refused, whichever token
	// asks: it must not end the token the first one gave.
	if st, b := h.raw("POST", "/v1/worker/token", reg.WorkerToken, nil); st != http.StatusTooManyRequests {
		t.Fatalf("a renewal asked again at once with the old token: %d %v", st, b)
	}
	// Over the WebSocket, later, with the token it connected with, which is in its grace. The
	// lease it holds is its own still.
	h.clock.advance(2 * time.Minute)
	w.ack(wire.Frame{Type: wire.FrameHeartbeat, Leases: []string{a.LeaseID}}) // the lease outlives the jump
	ack := w.ack(wire.Frame{Type: wire.FrameRenew})
	if !*ack.OK || ack.WorkerToken == "" || ack.TokenExpiresAt == nil {
		t.Fatalf("a renew frame: %+v", ack)
	}
	third := ack.WorkerToken
	if st, b := h.raw("POST", "/v1/worker/token", third, nil); st != http.StatusTooManyRequests {
		t.Fatalf("an immediate renewal of a new token: %d %v", st, b)
	}
	ack = w.ack(wire.Frame{Type: wire.FrameHeartbeat, Leases: []string{a.LeaseID}})
	if len(ack.Unknown) != 0 || ack.TokenRenewSeconds == nil || *ack.TokenRenewSeconds < 3*24*3600 {
		t.Fatalf("after renewals, the lease or the hint: %+v", ack)
	}
	h.clock.advance(actors.TokenRenewGrace + time.Second)
	w.ack(wire.Frame{Type: wire.FrameHeartbeat, Leases: []string{a.LeaseID}}) // the lease outlives the jump
	// The WebSocket renewed with the token it connected with, the first: that one had the
	// grace, and the second, renewed over, stopped at once.
	if st, b := event(reg.WorkerToken); st != http.StatusUnauthorized || codeOf(b) != "TOKEN_EXPIRED" {
		t.Fatalf("a renewed token after its grace: %d %v", st, b)
	}
	if st, b := event(second); st != http.StatusUnauthorized {
		t.Fatalf("a token renewed over: %d %v", st, b)
	}
	if st, b := event(third); st != http.StatusCreated {
		t.Fatalf("the newest token: %d %v", st, b)
	}
	if ack := w.ack(wire.Frame{Type: wire.FrameComplete, JobID: job.ID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: []byte(`null`)}); !*ack.OK {
		t.Fatalf("the lease taken before the renewals: %+v", ack)
	}

	// Revocation ends every token.
	h.clock.advance(4 * 24 * time.Hour)
	st, b = h.raw("POST", "/v1/worker/token", third, nil)
	if st != http.StatusOK {
		t.Fatalf("renewal: %d %v", st, b)
	}
	if err := acme.RevokeWorker(ctx(t), reg.WorkerID); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{third, b["worker_token"].(string)} {
		if st, b := heartbeat(tok); st != http.StatusForbidden || codeOf(b) != "WORKER_REVOKED" {
			t.Fatalf("a token of a revoked worker: %d %v", st, b)
		}
		if st, b := h.raw("POST", "/v1/worker/token", tok, nil); st != http.StatusForbidden {
			t.Fatalf("a renewal by a revoked worker: %d %v", st, b)
		}
	}
}

// A worker runs for 30 days of the server's clock with 7-day tokens, on each transport, and
// keeps working: it renews its token as the server tells it to, uses the new one for every
// request, and hands each to OnTokenRenewed to be kept.
func TestWorkerWorksForThirtyDays(t *testing.T) {
	t.Parallel()
	for _, tr := range []string{client.TransportWebSocket, client.TransportLongPoll} {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			h := start(t, transport.AuthNone, func(c *broker.Config) {
				c.WorkerTokenTTL = 7 * 24 * time.Hour
				c.IdleHeartbeat = 50 * time.Millisecond // the news of a jump in the clock comes at once
			})
			c := client.New(h.url, "", nil)
			reg := h.register("", nil, 1)
			renewed := make(chan string, 16)
			w := &client.Worker{Server: h.url, Token: reg.WorkerToken, Transport: tr, Logger: zaptest.NewLogger(t),
				OnTokenRenewed: func(token string, _ time.Time) { renewed <- token },
				Handler:        func(context.Context, *client.Job) (any, error) { return "done", nil }}
			runUntilTheEnd(t, w)
			issued, days := time.Duration(0), time.Duration(0)
			var tokens []string
			for days < 30*24*time.Hour {
				h.clock.advance(3 * 24 * time.Hour)
				days += 3 * 24 * time.Hour
				if days-issued >= 7*24*time.Hour/2 { // past half its life: the worker renews it
					select {
					case tok := <-renewed:
						tokens = append(tokens, tok)
						issued = days
					case <-time.After(20 * time.Second):
						t.Fatalf("day %d: no renewal", days/(24*time.Hour))
					}
				}
				if j := await(t, c, submit(t, c, `{}`).ID); j.Status != "succeeded" {
					t.Fatalf("day %d: job %+v", days/(24*time.Hour), j)
				}
			}
			if len(tokens) < 4 {
				t.Fatalf("%d renewals in 30 days of 7-day tokens", len(tokens))
			}
			ws, err := c.Workers(ctx(t))
			if err != nil || len(ws.Workers) != 1 || ws.Workers[0].ID != reg.WorkerID {
				t.Fatalf("workers after 30 days: %+v %v", ws, err)
			}
			if st, b := h.raw("POST", "/v1/worker/heartbeat", reg.WorkerToken, []byte(`{"leases":[]}`)); st != http.StatusUnauthorized {
				t.Fatalf("the first token after 30 days: %d %v", st, b)
			}
			if st, b := h.raw("POST", "/v1/worker/heartbeat", tokens[len(tokens)-1], []byte(`{"leases":[]}`)); st != http.StatusOK {
				t.Fatalf("the newest token: %d %v", st, b)
			}
		})
	}
}

// A worker numbers its events within its lease; the server writes the first of each number
// and answers a repeat with that first write's number, over the WebSocket and over long-poll's
// endpoint alike. The job's stream holds each event once.
func TestProgressEventsExactlyOnce(t *testing.T) {
	t.Parallel()
	h := start(t, transport.AuthNone)
	c := client.New(h.url, "", nil)
	reg := h.register("", nil, 1)
	w := h.dial(reg.WorkerToken, 1)
	w.send(wire.Frame{Type: wire.FrameCredit, N: 1})
	job := submit(t, c, `{}`)
	a := w.assignment()
	event := func(seq int) wire.Frame {
		return wire.Frame{Type: wire.FrameEvent, JobID: job.ID, LeaseID: a.LeaseID, EventType: "log", Data: []byte(`"line"`), Seq: seq}
	}
	first := w.ack(event(1))
	again := w.ack(event(1))
	if !*first.OK || !*again.OK || again.Number != first.Number {
		t.Fatalf("an event and its repeat: %+v, %+v", first, again)
	}
	second := w.ack(event(2))
	post := func(seq int) (int, map[string]any) {
		return h.raw("POST", "/v1/worker/jobs/"+job.ID+"/events", reg.WorkerToken,
			[]byte(`{"lease_id":"`+a.LeaseID+`","event_type":"log","data":"line","seq":`+strconv.Itoa(seq)+`}`))
	}
	for _, seq := range []int{1, 2} {
		if st, b := post(seq); st != http.StatusCreated || int(b["number"].(float64)) != map[int]int{1: first.Number, 2: second.Number}[seq] {
			t.Fatalf("a repeat of event %d over HTTP: %d %v", seq, st, b)
		}
	}
	if st, b := post(3); st != http.StatusCreated || int(b["number"].(float64)) != second.Number+1 {
		t.Fatalf("event 3 over HTTP: %d %v", st, b)
	}
	if st, b := post(-1); st != http.StatusBadRequest {
		t.Fatalf("seq -1: %d %v", st, b)
	}
	if ack := w.ack(wire.Frame{Type: wire.FrameComplete, JobID: job.ID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: []byte(`1`)}); !*ack.OK {
		t.Fatalf("complete: %+v", ack)
	}
	logs := 0
	if _, err := c.Watch(ctx(t), job.ID, 0, func(e wire.Event) error {
		if e.Type == "job.progress" {
			logs++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if logs != 3 {
		t.Fatalf("%d log events in the job's stream, want 3", logs)
	}
}
