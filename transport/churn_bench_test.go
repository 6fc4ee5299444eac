package transport_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/internal/proc"
	"github.com/tetherhq/tether/transport/transporttest"
	"github.com/tetherhq/tether/transport/wire"
)

// churnWorkers is how many workers a churn run registers, connects and drops after its
// warm-up, and churnMarks the counts at which it measures the process, once those workers are
// gone. The warm-up's workers fill what the server holds at most whatever it does — Pebble's
// memtables and block cache, 24 MiB — so that the marks measure what the workers leave.
const (
	churnWorkers = 100_000
	churnWarmup  = 20_000
)

var churnMarks = []int{10_000, 50_000, churnWorkers}

// churnPerSecond is how many workers come and go in a second of the broker's clock: with
// tokens of a minute and a minute of retention after them, about 6,000 registrations are in
// memory at any time, however many workers came before.
const churnPerSecond = 50

// BenchmarkWorkerChurn is a fleet that churns, as autoscaled pods do: 100,000 workers, each new,
// after 20,000 to warm up, register, connect (a WebSocket's hello, or a long poll), heartbeat
// once and go, 16 at a time, against a real broker on disk behind the real HTTP server, over
// loopback, while the broker's clock moves a second for every churnPerSecond of them: their
// tokens (a minute) run out, their registrations leave after --retain (a minute), and a
// long-poll worker's session ends after three heartbeat intervals of silence. At 10,000, 50,000 and 100,000 it moves the clock on until every worker
// so far is gone, then collects garbage, returns it to the system, and reads the process's
// resident memory and live heap. Memory must not grow with the workers ever seen: the resident
// memory at 100,000 is within 10 % of that at 10,000 (a failure otherwise). Run it with
// -benchtime=1x: one run is the measurement.
//
//	go test ./transport -run '^$' -bench WorkerChurn -benchtime=1x -timeout 90m
func BenchmarkWorkerChurn(b *testing.B) {
	for _, tr := range []string{"websocket", "longpoll"} {
		b.Run(tr, func(b *testing.B) {
			for range b.N {
				churn(b, tr)
			}
		})
	}
}

func churn(b *testing.B, transportName string) {
	clk := &clock{}
	br, err := broker.Open(broker.Config{Dir: b.TempDir(), Logger: zap.NewNop(), Clock: clk.now, AfterFunc: clk.afterFunc,
		WorkerTokenTTL: time.Minute, Retention: projections.Retention{Done: time.Minute}})
	if err != nil {
		b.Fatal(err)
	}
	api, base := transporttest.Serve(b, br, transport.Config{Auth: transport.AuthNone, Clock: clk.now})
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	var next atomic.Int64
	run := func(to int) {
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					n := next.Add(1)
					if n > int64(to) {
						return
					}
					if n%churnPerSecond == 0 { // a second of the fleet's life on the broker's clock
						clk.elapse(time.Second)
					}
					if err := churnOne(hc, base, transportName); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		next.Store(int64(to))
	}
	run(churnWarmup)
	settle(b, clk, hc, base, api)
	var rss []float64
	for _, mark := range churnMarks {
		run(churnWarmup + mark)
		if b.Failed() {
			return
		}
		settle(b, clk, hc, base, api)
		runtime.GC()
		debug.FreeOSMemory()
		var mem runtime.MemStats
		runtime.ReadMemStats(&mem)
		resident, ok := proc.RSS()
		if !ok {
			b.Skip("the platform does not say the process's resident memory")
		}
		r := float64(resident)
		rss = append(rss, r)
		b.ReportMetric(r/(1<<20), fmt.Sprintf("rss-MiB@%dk", mark/1000))
		b.ReportMetric(float64(mem.HeapInuse)/(1<<20), fmt.Sprintf("heap-MiB@%dk", mark/1000))
		b.Logf("%d workers gone: resident %.1f MiB, heap in use %.1f MiB (of %.1f from the system), stacks %.1f MiB, other %.1f MiB, goroutines %d",
			mark, r/(1<<20), float64(mem.HeapInuse)/(1<<20), float64(mem.HeapSys)/(1<<20), float64(mem.StackInuse)/(1<<20),
			float64(mem.OtherSys)/(1<<20), runtime.NumGoroutine())
	}
	growth := (rss[len(rss)-1] - rss[0]) / rss[0]
	b.ReportMetric(100*growth, "rss-growth-%")
	if growth > 0.10 {
		b.Errorf("resident memory grew %.1f %% from %d workers to %d: %.1f MiB to %.1f MiB", 100*growth, churnMarks[0], churnWorkers,
			rss[0]/(1<<20), rss[len(rss)-1]/(1<<20))
	}
}

// churnOne registers a worker, connects it, heartbeats once and drops it.
func churnOne(hc *http.Client, base, transportName string) error {
	var reg wire.Registration
	if err := postJSON(hc, base+"/v1/workers/register", "", wire.RegisterRequest{Name: "pod", Queues: []string{"q"}, Capacity: 1}, http.StatusCreated, &reg); err != nil {
		return err
	}
	if transportName == "longpoll" {
		if err := postJSON(hc, base+"/v1/worker/lease", reg.WorkerToken, wire.LeaseRequest{Max: 1}, http.StatusNoContent, nil); err != nil {
			return err
		}
		return postJSON(hc, base+"/v1/worker/heartbeat", reg.WorkerToken, wire.HeartbeatRequest{Leases: []string{}}, http.StatusOK, nil)
	}
	conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(base, "http")+"/v1/worker/connect", http.Header{"Authorization": {"Bearer " + reg.WorkerToken}})
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	for _, f := range []wire.Frame{{Type: wire.FrameHello, Capacity: 1}, {Type: wire.FrameHeartbeat, Ref: "hb", Leases: []string{}}} {
		if err := conn.WriteJSON(f); err != nil {
			return err
		}
	}
	for acked := false; !acked; {
		var f wire.Frame
		if err := conn.ReadJSON(&f); err != nil {
			return err
		}
		acked = f.Type == wire.FrameAck && f.Ref == "hb"
	}
	return conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"))
}

func postJSON(hc *http.Client, url, token string, body any, want int, out any) error {
	data, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(data))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		var e bytes.Buffer
		_, _ = e.ReadFrom(resp.Body)
		return fmt.Errorf("POST %s: %s %s", url, resp.Status, e.String())
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}

// settle moves the broker's clock on until every worker is gone: the long-poll sessions end in
// silence, the tokens run out and the retention after them passes, one sweep after another.
func settle(b *testing.B, clk *clock, hc *http.Client, base string, api *transport.Server) {
	clk.elapse(2 * time.Minute)
	deadline := time.Now().Add(10 * time.Minute)
	for {
		clk.elapse(10 * time.Second) // the next sweep, and the liveness checks
		var ws wire.Workers
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/workers?all=true", nil)
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&ws)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		if len(ws.Workers) == 0 && api.PollSessions() == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("10 minutes on, %d workers are still registered and %d polled", len(ws.Workers), api.PollSessions())
		}
		time.Sleep(50 * time.Millisecond) // the sweep's appends, on the log's goroutine
	}
}
