package client

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/tetherhq/tether/transport/wire"
)

// How a client of several servers (a replicated log's leader and hot standbys) chooses where a
// request goes. A server may be away (its connection is refused), a standby (503 STANDBY,
// naming the leader when it knows it), starting (503 NOT_READY), or alive and silent: a paused
// process, a frozen VM, a hung disk, whose kernel still takes the connection. Silence must cost
// no more than a refusal does, as long as another server takes the request:
//
//  1. Before its first request, and before a request that is not safe to repeat when the server
//     it talks to has not answered for HedgeAfter, a client asks every server's /readyz at once
//     (findLeader) and moves to the one that answers that it leads: one round trip, whatever
//     else hangs, so a process that makes one request (the CLI) never waits on a silent server
//     it would have asked first, and a request that cannot be hedged goes to a server that
//     answers.
//  2. A request goes to the server the client talks to now. One that never reached a server, or
//     that a standby or a starting server refused, goes at once to the next server, or to the
//     leader the standby named; the client moves there for the requests after it.
//  3. A request safe to repeat (repeatable; a worker's WebSocket handshake, which has no effect)
//     that has no answer after HedgeAfter goes to the next server too, while the first may
//     still answer; servers that answered that they stand by are asked again as they come due
//     while another is awaited, so a request held by a paused leader is taken by the new one
//     as soon as it leads. The first answer that is not a failover's wins; the rest are
//     abandoned, and the client talks to the winner from then on.
//  4. A request that is not safe to repeat (a submit without an idempotency key) goes to one
//     server at a time and never twice, and past the first only to servers that answered
//     within HedgeAfter (a standby naming a leader that is silent is the answer): if a server
//     took it and gave no answer in Patience, it fails with the timeout (it may have landed),
//     and the client moves off that server for the requests after it.

// hedgeAfterDefault is how long a request safe to repeat waits for a server's answer before it
// is sent to the next server too: far above a healthy server's answer (milliseconds, a
// quorum's fsync included), far below a paused server's silence.
const hedgeAfterDefault = time.Second

// SplitServers splits a comma-separated list of server URLs.
func SplitServers(list string) []string {
	var out []string
	for s := range strings.SplitSeq(list, ",") {
		if s = strings.TrimRight(strings.TrimSpace(s), "/"); s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		out = []string{""}
	}
	return out
}

// Server is the server the client talks to now.
func (c *Client) Server() string { return c.servers[c.currentIndex()] }

func (c *Client) currentIndex() int { return int(c.current.Load()) % len(c.servers) }

// heardFrom notes that server answered (anything: a success, a refusal, a standby's 503).
func (c *Client) heardFrom(server string) {
	if i := c.indexOf(server); i >= 0 {
		c.answered[i].Store(time.Now().UnixNano())
	}
}

// fresh reports whether server i answered within HedgeAfter.
func (c *Client) fresh(i int) bool {
	at := c.answered[i].Load()
	return at != 0 && time.Since(time.Unix(0, at)) < c.hedgeAfter()
}

func (c *Client) hedgeAfter() time.Duration { return cmp.Or(c.HedgeAfter, hedgeAfterDefault) }

// failover moves the client off server, which could not be reached, is a standby, or did not
// answer: to leader, if it names one of the client's servers, else to the next one. Concurrent
// calls about the same server move it once.
func (c *Client) failover(server, leader string) {
	cur := c.current.Load()
	if c.servers[int(cur)%len(c.servers)] != server {
		return // another call moved it already
	}
	next := (cur + 1) % uint32(len(c.servers))
	if i := c.indexOf(leader); i >= 0 {
		next = uint32(i)
	}
	c.current.CompareAndSwap(cur, next)
}

// indexOf is the index of server among the client's servers, or -1.
func (c *Client) indexOf(server string) int {
	server = strings.TrimRight(server, "/")
	for i, s := range c.servers {
		if server != "" && s == server {
			return i
		}
	}
	return -1
}

// namedLeader is the leader a standby's answer names, "" if none.
func namedLeader(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Code == wire.CodeStandby {
		leader, _ := e.Details["leader"].(string)
		return leader
	}
	return ""
}

// neverTaken reports whether err says the server surely did not act on the request: it was
// not reached, or a standby or a server still starting refused it.
func neverTaken(err error) bool { return unreached(err) || electing(err) }

// unreached reports whether a request failed before it reached a server: its connection was
// refused or could not be made.
func unreached(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// electing reports whether err is a server's answer that it does not lead now: a standby, or a
// server still starting.
func electing(err error) bool {
	var e *Error
	return errors.As(err, &e) && (e.Code == wire.CodeStandby || e.Code == wire.CodeNotReady)
}

// silent reports whether err is a server that took the connection and gave no answer in time.
func silent(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// failoverAnswer reports whether err says no server takes requests right now, as a failover
// leaves it for a moment: a request safe to repeat may go again once the client has waited.
func failoverAnswer(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Code == wire.CodeStandby || e.Code == wire.CodeNotReady || e.Code == "UNAVAILABLE" || e.Status == http.StatusBadGateway || e.Status == http.StatusGatewayTimeout
	}
	// The connection failed, broke before the answer, or no answer came; a certificate refused
	// is a misconfiguration that waiting does not mend.
	return err != nil && !CertificateRefused(err)
}

// raceRules say how one request may be spread over the servers (the rules above).
type raceRules struct {
	// safe: the request may reach several servers, and one more than once. Otherwise it goes
	// to another server only when the last surely did not act on it (neverTaken), at most
	// twice to each, and fails with any other error.
	safe bool
	// moveOn reports whether a safe request's error leaves it to another server; nil:
	// failoverAnswer. Any other error is the answer.
	moveOn func(error) bool
	// retryFor is how long a safe request is asked again while no server takes it and none is
	// awaited; 0: each server at most twice, without waiting.
	retryFor time.Duration
	// patience is how long one server has to answer.
	patience time.Duration
	// hedgeAfter, for a safe request: how long without an answer before the next server is
	// asked too; 0: never.
	hedgeAfter time.Duration
}

// attempt is one server's answer to a request in a race.
type attempt[T any] struct {
	server int
	v      T
	err    error
}

// raceServer is what a race knows of one server.
type raceServer struct {
	awaited bool      // a try is in flight
	tries   int       // tries made
	fails   int       // failover answers it gave
	due     time.Time // when it may be asked again, after a failover answer
	silent  bool      // its last try got no answer in time
}

// race sends a request by the rules, to the server the client talks to now first, and returns
// the first answer that is not a failover's: a success, or the server's refusal of the request
// itself. When no server is left to ask it returns the last failover answer. try makes one
// attempt on one server and must return once its ctx ends; a success that comes after the race
// is decided goes to discard (if set), to be closed. The client then talks to the server that
// answered.
func race[T any](ctx context.Context, c *Client, rules raceRules, try func(ctx context.Context, server string) (T, error), discard func(T)) (T, error) {
	if len(c.servers) == 1 && (!rules.safe || rules.retryFor == 0) {
		// Nowhere else to go, and no waiting for a restart: one try, as it is.
		actx, cancel := context.WithTimeout(ctx, rules.patience)
		defer cancel()
		return try(actx, c.servers[0])
	}
	moveOn := rules.moveOn
	if moveOn == nil {
		moveOn = failoverAnswer
	}
	rctx, cancel := context.WithCancel(ctx)
	results := make(chan attempt[T], len(c.servers)) // one try per server in flight at most
	st := make([]raceServer, len(c.servers))
	awaited, lastLaunch := 0, time.Time{}
	launch := func(i int) {
		st[i].awaited, awaited, lastLaunch = true, awaited+1, time.Now()
		st[i].tries++
		server := c.servers[i]
		go func() {
			actx, acancel := context.WithTimeout(rctx, rules.patience)
			v, err := try(actx, server)
			acancel()
			results <- attempt[T]{server: i, v: v, err: err}
		}()
	}
	defer func() {
		cancel()
		if n := awaited; n > 0 { // the abandoned tries end with rctx; a late success is closed
			go func() {
				for range n {
					if a := <-results; a.err == nil && discard != nil {
						discard(a.v)
					}
				}
			}()
		}
	}()

	deadline := time.Now().Add(rules.retryFor)
	leader := -1 // the leader a standby named, asked first when it may be
	// eligible reports whether server i may be asked now, or at its due time.
	eligible := func(i int, now time.Time, atDue bool) bool {
		s := st[i]
		switch {
		case s.awaited:
			return false
		case s.tries == 0:
			return rules.safe || c.fresh(i)
		case !rules.safe:
			return s.tries < 2 && c.fresh(i)
		case awaited > 0: // asked again while another is awaited: it costs the caller nothing
			return atDue || !now.Before(s.due)
		case rules.retryFor > 0:
			return now.Before(deadline) && (atDue || !now.Before(s.due))
		}
		return s.tries < 2 && !s.silent // a second Patience on a silent server would double the wait
	}
	// next is the server to ask now, -1 if none: the named leader, else the first eligible in
	// the list's order from the one the client talks to; with fresh false, only one asked before.
	next := func(fresh bool) int {
		now := time.Now()
		ok := func(i int) bool { return eligible(i, now, false) && (fresh || st[i].tries > 0) }
		if leader >= 0 && ok(leader) {
			return leader
		}
		for k := range len(c.servers) {
			if i := (c.currentIndex() + k) % len(c.servers); ok(i) {
				return i
			}
		}
		return -1
	}
	hedgeDue := func() bool {
		return awaited == 0 || rules.safe && rules.hedgeAfter > 0 && !time.Now().Before(lastLaunch.Add(rules.hedgeAfter))
	}
	// wake is when something may be launched without an answer coming: a hedge, or a server
	// due again; zero if nothing.
	wake := func() time.Time {
		var at time.Time
		sooner := func(t time.Time) {
			if at.IsZero() || t.Before(at) {
				at = t
			}
		}
		now := time.Now()
		for i, s := range st {
			switch {
			case !eligible(i, now, true):
			case s.tries == 0 && rules.safe && rules.hedgeAfter > 0 && awaited > 0:
				sooner(lastLaunch.Add(rules.hedgeAfter))
			case s.tries > 0 && rules.safe && awaited > 0:
				sooner(s.due)
			case s.tries > 0 && rules.safe && rules.retryFor > 0:
				sooner(s.due)
				sooner(deadline) // then it may not be asked again: the race ends
			}
		}
		return at
	}

	launch(c.currentIndex())
	var last attempt[T]
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var wakeC <-chan time.Time
		if at := wake(); !at.IsZero() {
			timer.Reset(time.Until(at))
			wakeC = timer.C
		}
		select {
		case a := <-results:
			awaited--
			st[a.server].awaited = false
			server := c.servers[a.server]
			switch {
			case a.err == nil:
				c.current.Store(uint32(a.server))
				return a.v, nil
			case ctx.Err() != nil:
				return a.v, a.err
			case !neverTaken(a.err) && !(rules.safe && moveOn(a.err)):
				// The answer to the request; or, to one that may not go again, no answer or
				// one that would move it on, and the requests after it go elsewhere.
				if moveOn(a.err) || silent(a.err) {
					c.failover(server, "")
				} else {
					c.current.Store(uint32(a.server))
				}
				return a.v, a.err
			}
			last = a
			st[a.server].fails++
			st[a.server].silent = silent(a.err)
			wait := backoff(st[a.server].fails, 100*time.Millisecond, 2*time.Second)
			named := c.indexOf(namedLeader(a.err))
			switch {
			case named >= 0 && st[named].awaited:
				// It names the leader the request waits on, which may be paused: asked again,
				// less often, in case another takes over.
				wait = backoff(st[a.server].fails, 100*time.Millisecond, time.Second)
			case electing(a.err):
				wait = 100 * time.Millisecond // a leader is being chosen: about a TTL
			}
			st[a.server].due = time.Now().Add(wait)
			if named >= 0 {
				leader = named
			}
			c.failover(server, namedLeader(a.err))
			if i := next(true); i >= 0 {
				launch(i)
			}
		case <-wakeC:
			if i := next(hedgeDue()); i >= 0 {
				launch(i)
			}
		case <-ctx.Done():
			if last.err != nil {
				return last.v, last.err
			}
			var zero T
			return zero, ctx.Err()
		}
		if awaited == 0 && wake().IsZero() {
			return last.v, last.err // no server left to ask
		}
	}
}

// findLeader moves a client of several servers to the one that leads (rule 1) before its first
// request, and before a request that is not safe to repeat when the server it talks to has
// not answered for HedgeAfter: it asks them all at once, for at most HedgeAfter, and failing an
// answer that one leads, moves to the first in the list that answered at all. One asks at a
// time; requests made meanwhile wait for its answer.
func (c *Client) findLeader(ctx context.Context, safe bool) {
	need := func() bool {
		cur := c.currentIndex()
		return c.answered[cur].Load() == 0 || !safe && !c.fresh(cur)
	}
	if len(c.servers) < 2 || !need() {
		return
	}
	c.probing.Lock()
	defer c.probing.Unlock()
	if !need() { // another request asked meanwhile
		return
	}
	leader, first := askReadyz(ctx, c.hc, c.servers, c.hedgeAfter(), c.heardFrom)
	if leader < 0 {
		leader = first
	}
	if leader >= 0 {
		c.current.Store(uint32(leader))
	}
}

// FindLeader asks every server's /readyz at once, for at most wait, and returns the first that
// answers 200 (a replicated log's leader, or a server of its own that is ready), "" if none
// did: a server that does not answer costs no more than wait.
func FindLeader(ctx context.Context, hc *http.Client, servers []string, wait time.Duration) string {
	if i, _ := askReadyz(ctx, hc, servers, wait, nil); i >= 0 {
		return servers[i]
	}
	return ""
}

// askReadyz asks every server's /readyz at once, for at most wait, and returns the index of the
// first that answered 200 (-1 if none did; it does not wait for the others), and of the first
// in the list that answered at all (-1 if none did). heard, if set, is told of each answer.
func askReadyz(ctx context.Context, hc *http.Client, servers []string, wait time.Duration, heard func(server string)) (leader, first int) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	type answer struct{ server, status int }
	answers := make(chan answer, len(servers))
	for i, server := range servers {
		go func() {
			status := 0 // none: refused, or silent
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+"/readyz", nil)
			if err == nil {
				if resp, err := hc.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // the connection is kept for the request
					resp.Body.Close()
					status = resp.StatusCode
					if heard != nil {
						heard(server)
					}
				}
			}
			answers <- answer{i, status}
		}()
	}
	first = -1
	for range servers {
		a := <-answers
		if a.status == http.StatusOK {
			return a.server, first
		}
		if a.status != 0 && (first < 0 || a.server < first) {
			first = a.server
		}
	}
	return -1, first
}
