package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// A stopping worker closes its WebSocket but reads on until the server's close answers it: an
// assignment the server wrote just before is read, and given back untried over plain HTTP,
// rather than lost in a buffer to run out its lease. The server here is a stand-in that writes
// exactly that assignment when it reads the worker's close.
func TestStoppingWorkerGivesBackWhatCameAsItClosed(t *testing.T) {
	released := make(chan wire.ReleaseRequest, 1)
	upgrader := websocket.Upgrader{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/worker/connect", func(w http.ResponseWriter, r *http.Request) {
		conn, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		var hello wire.Frame
		if conn.ReadJSON(&hello) != nil || conn.WriteJSON(wire.Frame{Type: wire.FrameWelcome, WorkerID: "w", HeartbeatSeconds: 10}) != nil {
			return
		}
		conn.SetCloseHandler(func(code int, _ string) error {
			at := time.Now().Add(time.Minute)
			_ = conn.WriteJSON(wire.Frame{Type: wire.FrameAssign, JobID: "j1", LeaseID: "l1", Nonce: "n", Queue: "q", JobType: "t",
				Attempt: 1, LeaseExpiresAt: &at, HeartbeatSeconds: 10})
			return conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, ""), time.Now().Add(time.Second))
		})
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("POST /v1/worker/jobs/{id}/release", func(w http.ResponseWriter, r *http.Request) {
		var req wire.ReleaseRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		released <- req
		_ = json.NewEncoder(w).Encode(wire.Done{})
	})
	mux.HandleFunc("POST /v1/worker/heartbeat", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(wire.HeartbeatResponse{HeartbeatSeconds: 10})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	connected := make(chan string, 1)
	ran := make(chan string, 1)
	w := &client.Worker{Server: srv.URL, Token: "tw_x", Transport: client.TransportWebSocket,
		OnConnect: func(tr string) { connected <- tr },
		Handler:   func(_ context.Context, j *client.Job) (any, error) { ran <- j.ID; return nil, nil }}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-connected
	stop()
	select {
	case req := <-released:
		if req.LeaseID != "l1" || req.Reason != "worker_stopping" {
			t.Fatalf("released %+v", req)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the assignment that came as the worker closed was never given back")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-ran:
		t.Fatalf("a stopping worker ran job %s", id)
	default:
	}
}
