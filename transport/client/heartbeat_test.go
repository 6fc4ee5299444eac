package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap/zaptest"

	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// A worker heartbeats as soon as it is connected, whatever interval the server asked for:
// its new session adopts the leases it names at once, and a server that restarted learns at
// once which of the leases it found the worker does not hold (it puts those back unspent).
func TestWorkerHeartbeatsOnConnecting(t *testing.T) {
	beat := make(chan wire.Frame, 1)
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		var hello wire.Frame
		if conn.ReadJSON(&hello) != nil || conn.WriteJSON(wire.Frame{Type: wire.FrameWelcome, WorkerID: "w", HeartbeatSeconds: 3600}) != nil {
			return
		}
		for {
			var f wire.Frame
			if conn.ReadJSON(&f) != nil {
				return
			}
			if f.Type == wire.FrameHeartbeat {
				beat <- f
				return
			}
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &client.Worker{Server: srv.URL, Token: "tw_test", Transport: client.TransportWebSocket, Logger: zaptest.NewLogger(t),
		Handler: func(context.Context, *client.Job) (any, error) { return nil, nil }}
	go func() { _ = w.Run(ctx) }()
	select {
	case f := <-beat:
		if len(f.Leases) != 0 {
			t.Fatalf("a worker that holds nothing heartbeat %v", f.Leases)
		}
	case <-time.After(30 * time.Second): // an hour before the interval the server asked for
		t.Fatal("no heartbeat in 30 s of a connection that asked for one an hour")
	}
}
