package client_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/internal/proc"
)

// BenchmarkWorkerJob is what one job costs a Go SDK worker of capacity 1 over WebSocket: an
// assignment read, a no-op handler run, its completion and credit written, the ack read. The
// server is canned (frames made from templates, as the floor's are), so that the figures are
// the worker's: allocs/op, and cpu-ns/op, the process's CPU per job, the canned server's
// included. `tether bench` drives the same worker against a real server.
func BenchmarkWorkerJob(b *testing.B) {
	var assigned atomic.Int64
	jobs := int64(b.N)
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up := websocket.Upgrader{}
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		if _, _, err := c.ReadMessage(); err != nil { // hello
			return
		}
		_ = c.WriteMessage(websocket.TextMessage, []byte(`{"type":"welcome","worker_id":"w1","heartbeat_seconds":10,"lease_ttl_seconds":30}`))
		var out []byte
		for {
			_, msg, err := c.ReadMessage()
			if err != nil {
				return
			}
			switch {
			case bytes.HasPrefix(msg, []byte(`{"type":"credit"`)):
				n, _ := strconv.Atoi(string(cannedField(msg, `"n":`)))
				for range n {
					i := assigned.Add(1)
					if i > jobs {
						break
					}
					out = cannedAssign(out[:0], i)
					if c.WriteMessage(websocket.TextMessage, out) != nil {
						return
					}
				}
			case bytes.HasPrefix(msg, []byte(`{"type":"complete"`)):
				out = append(append(append(out[:0], `{"type":"ack","ref":"`...), cannedField(msg, `"ref":"`)...),
					`","ok":true,"number":1,"receipt":{"seq":12345,"hash":"4a5b6c7d8e9f00112233445566778899aabbccddeeff00112233445566778899"}}`...)
				if c.WriteMessage(websocket.TextMessage, out) != nil {
					return
				}
			}
		}
	}))
	defer srv.Close()
	var acked atomic.Int64
	w := &client.Worker{Server: srv.URL, Token: "t", Capacity: 1, Transport: client.TransportWebSocket,
		Handler: func(context.Context, *client.Job) (any, error) { return nil, nil },
		OnResult: func(_ *client.Job, report string, err error) {
			if err != nil || report != "complete" {
				b.Errorf("a result was answered %s, %v", report, err)
			}
			if acked.Add(1) == jobs {
				close(done)
			}
		}}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	b.ReportAllocs()
	cpu0, _ := proc.CPU()
	b.ResetTimer()
	go func() { stopped <- w.Run(ctx) }()
	select {
	case <-done:
	case err := <-stopped:
		b.Fatalf("the worker stopped: %v", err)
	case <-time.After(time.Minute + time.Duration(jobs)*time.Millisecond):
		b.Fatalf("%d of %d jobs acked", acked.Load(), jobs)
	}
	b.StopTimer()
	cpu1, _ := proc.CPU()
	b.ReportMetric(float64(cpu1-cpu0)/float64(jobs), "cpu-ns/op")
	cancel()
	if err := <-stopped; err != nil && !errors.Is(err, context.Canceled) {
		b.Fatal(err)
	}
}

// cannedAssign appends the ith assignment, as the server writes one.
func cannedAssign(dst []byte, i int64) []byte {
	id := strconv.AppendInt(nil, 1_000_000+i, 10)
	dst = append(dst, `{"type":"assign","job_id":"job_01KB7W2Z0`...)
	dst = append(dst, id...)
	dst = append(dst, `","lease_id":"lease_01KB7W2Z0`...)
	dst = append(dst, id...)
	dst = append(dst, `","nonce":"6f1d3c2b9a8e7f60","queue":"bench-0123456789ab","job_type":"noop","payload":{"sent":1763772000000000000},"attempt":1,"lease_expires_at":"2026-11-29T07:30:00.123456789Z","heartbeat_seconds":10}`...)
	return dst
}

// cannedField is the bytes of msg after key up to the next '"' or ','.
func cannedField(msg []byte, key string) []byte {
	_, rest, _ := bytes.Cut(msg, []byte(key))
	if i := bytes.IndexAny(rest, `",}`); i >= 0 {
		return rest[:i]
	}
	return rest
}
