package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// A client of several servers moves off one it cannot reach and off a standby, to the leader
// the standby names, and stays there; a request that reached a server and failed there is not
// sent again.
func TestClientFindsTheLeader(t *testing.T) {
	var leaderHits, standbyHits int
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaderHits++
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/jobs/broken" {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"error":{"code":"INTERNAL","message":"a bug","details":{}}}`))
			return
		}
		_, _ = w.Write([]byte(`{"id":"j1","status":"queued"}`))
	}))
	defer leader.Close()
	standby := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		standbyHits++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"code":"STANDBY","message":"a standby","details":{"leader":"` + leader.URL + `"}}}`))
	}))
	defer standby.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // its address refuses connections

	c := client.New(gone.URL+","+standby.URL+","+leader.URL, "", nil)
	ctx := context.Background()
	j, err := c.Submit(ctx, wire.SubmitRequest{Queue: "q", Type: "t"})
	if err != nil || j.ID != "j1" {
		t.Fatalf("submit through a dead server and a standby: %+v, %v", j, err)
	}
	if c.Server() != leader.URL || standbyHits != 1 || leaderHits != 1 {
		t.Fatalf("the client talks to %s after %d standby and %d leader hits; want the leader after 1 and 1", c.Server(), standbyHits, leaderHits)
	}
	if _, err := c.Get(ctx, "broken"); err == nil || leaderHits != 2 || c.Server() != leader.URL {
		t.Fatalf("a failure on the leader: %v after %d leader hits, now on %s; want it returned, sent once, the client staying", err, leaderHits, c.Server())
	}
}

// With RetryFor, a request safe to repeat goes on across a failover while no server takes it
// (standbys that know no leader yet, a server starting); one that is not safe is answered at
// once, after a round of the servers.
func TestClientRetriesSafeRequestsAcrossAFailover(t *testing.T) {
	var hits atomic.Int32
	busy := func(code string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"code":"` + code + `","message":"m","details":{}}}`))
		}
	}
	var promoted atomic.Bool // the second server leads once the first is asked enough
	leader := func(w http.ResponseWriter, r *http.Request) {
		if !promoted.Load() {
			busy("NOT_READY")(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"j1","status":"queued"}`))
	}
	standby := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Load() >= 10 { // two rounds of both servers, and a wait, after the first submit
			promoted.Store(true)
		}
		busy("STANDBY")(w, r)
	}))
	defer standby.Close()
	next := httptest.NewServer(http.HandlerFunc(leader))
	defer next.Close()

	c := client.New(standby.URL+","+next.URL, "", nil)
	c.RetryFor = time.Minute
	ctx := context.Background()
	if _, err := c.Submit(ctx, wire.SubmitRequest{Queue: "q", Type: "t"}); err == nil || hits.Load() != 4 {
		t.Fatalf("a submit without an idempotency key: %v after %d tries; want it refused after two rounds of both", err, hits.Load())
	}
	j, err := c.Submit(ctx, wire.SubmitRequest{Queue: "q", Type: "t", IdempotencyKey: "k"})
	if err != nil || j.ID != "j1" || !promoted.Load() {
		t.Fatalf("a submit under a key: %+v %v", j, err)
	}
	if _, err := c.Get(ctx, "j1"); err != nil || c.Server() != next.URL {
		t.Fatalf("a read: %v, on %s", err, c.Server())
	}
}

// A server that took a request and does not answer (a paused leader) is given up on after
// Patience: a request safe to repeat goes on to the next server, one that is not fails there
// and is not sent again.
func TestClientGivesUpOnAServerThatDoesNotAnswer(t *testing.T) {
	release := make(chan struct{})
	var pausedHits, leaderHits atomic.Int32
	paused := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pausedHits.Add(1)
		<-release
	}))
	defer paused.Close()
	defer close(release) // before Close, which waits for the handlers
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaderHits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"j1","status":"queued"}`))
	}))
	defer leader.Close()

	c := client.New(paused.URL+","+leader.URL, "", nil)
	c.RetryFor, c.Patience = time.Minute, 100*time.Millisecond
	ctx := context.Background()
	if _, err := c.Submit(ctx, wire.SubmitRequest{Queue: "q", Type: "t"}); err == nil || pausedHits.Load() != 1 || leaderHits.Load() != 0 {
		t.Fatalf("a submit without an idempotency key: %v, %d requests to the paused server and %d to the leader; want it failed, sent once",
			err, pausedHits.Load(), leaderHits.Load())
	}
	c = client.New(paused.URL+","+leader.URL, "", nil)
	c.RetryFor, c.Patience = time.Minute, 100*time.Millisecond
	j, err := c.Submit(ctx, wire.SubmitRequest{Queue: "q", Type: "t", IdempotencyKey: "k"})
	if err != nil || j.ID != "j1" || c.Server() != leader.URL {
		t.Fatalf("a submit under a key: %+v %v, the client on %s", j, err, c.Server())
	}
}
