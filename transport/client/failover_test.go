package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

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
