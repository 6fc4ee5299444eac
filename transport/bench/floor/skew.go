package floor

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// SkewShape is a fairness run's shape, as `tether bench --skew` runs it: Lights tenants each
// submit LightRate jobs a second for Duration to two workers of their own, first alone, then
// beside a heavy tenant whose HeavyProducers submit as fast as they can to its HeavyWorkers.
// The tenants share nothing but the log (its group commit and fsync), the machine and the
// process, so the light tenants' latency beside the heavy one is the least any broker that
// keeps the durability rule on one log could give them on this machine.
type SkewShape struct {
	Lights         int
	LightRate      float64
	Duration       time.Duration
	HeavyProducers int
	HeavyWorkers   int
}

// SkewResult is what a fairness run measured: the submit→assign latency of the worst light
// tenant (the highest p99), alone and beside the heavy tenant, and the heavy tenant's pace.
type SkewResult struct {
	Alone, Beside  Latency
	HeavyPerSecond float64
}

// Latency is a distribution of submit→assign times.
type Latency struct {
	N             int
	P50, P99, Max time.Duration
}

func latencyOf(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	return Latency{N: len(ds), P50: ds[len(ds)/2], P99: ds[min(len(ds)-1, len(ds)*99/100)], Max: ds[len(ds)-1]}
}

// RunSkew starts the server as Run does and drives it with s.
func RunSkew(dir string, srv ServerConfig, s SkewShape) (SkewResult, error) {
	return withServer(dir, srv, func(addr string) (SkewResult, error) { return generateSkew(addr, s) })
}

// WriteSkew prints r, a run of s, as a table.
func (r SkewResult) WriteSkew(w io.Writer, s SkewShape, srv ServerConfig) {
	fmt.Fprintf(w, "floor skew: %d light tenants at %v jobs/s each, beside one heavy tenant (%d producers, %d workers, %.0f jobs/s), %s\n",
		s.Lights, s.LightRate, s.HeavyProducers, s.HeavyWorkers, r.HeavyPerSecond, srv)
	for _, l := range []struct {
		what string
		l    Latency
	}{{"alone", r.Alone}, {"beside the heavy tenant", r.Beside}} {
		fmt.Fprintf(w, "light submit→assign  p50 %6.2fms  p99 %6.2fms  max %6.2fms  (%d jobs) %s\n",
			ms(l.l.P50), ms(l.l.P99), ms(l.l.Max), l.l.N, l.what)
	}
	if r.Alone.P99 > 0 {
		fmt.Fprintf(w, "p99 beside / alone: %.2f\n", float64(r.Beside.P99)/float64(r.Alone.P99))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func generateSkew(addr string, s SkewShape) (SkewResult, error) {
	if s.Lights < 1 || s.LightRate <= 0 || s.Duration <= 0 || s.HeavyProducers < 1 || s.HeavyWorkers < 1 {
		return SkewResult{}, errors.New("a skew run needs a light tenant, a light rate, a duration, and heavy producers and workers")
	}
	lights := make([]*lightTenant, s.Lights)
	for i := range lights {
		lt, err := connectLight(addr, fmt.Sprintf("light-%d", i))
		if err != nil {
			return SkewResult{}, err
		}
		defer lt.close()
		lights[i] = lt
	}
	runLights := func() (Latency, error) {
		for _, lt := range lights {
			lt.reset()
		}
		errs := make(chan error, len(lights))
		for _, lt := range lights {
			go func() { errs <- lt.submitPaced(addr, s.LightRate, s.Duration) }()
		}
		for range lights {
			if err := <-errs; err != nil {
				return Latency{}, err
			}
		}
		var worst Latency
		for _, lt := range lights {
			if l := lt.wait(); l.P99 >= worst.P99 {
				worst = l
			}
		}
		return worst, nil
	}
	var res SkewResult
	var err error
	if res.Alone, err = runLights(); err != nil {
		return res, err
	}

	var acked atomic.Int64
	saturating := make(chan struct{})
	var once sync.Once
	for range s.HeavyWorkers {
		c, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws?t=heavy", nil)
		if err != nil {
			return res, err
		}
		defer c.Close()
		go runWorker(c, func() {
			acked.Add(1)
			once.Do(func() { close(saturating) })
		})
	}
	var stop atomic.Bool
	heavyErrs := make(chan error, s.HeavyProducers)
	for range s.HeavyProducers {
		go func() { heavyErrs <- produce(addr, "/v1/jobs?t=heavy", func() bool { return !stop.Load() }) }()
	}
	<-saturating // the heavy tenant runs before the light ones start
	from, began := acked.Load(), time.Now()
	res.Beside, err = runLights()
	res.HeavyPerSecond = float64(acked.Load()-from) / time.Since(began).Seconds()
	stop.Store(true)
	for range s.HeavyProducers {
		if herr := <-heavyErrs; herr != nil && err == nil {
			err = herr
		}
	}
	return res, err
}

// lightTenant is one light tenant: two workers that stamp each assign's arrival, and the
// latencies they measured.
type lightTenant struct {
	name    string
	conns   []*websocket.Conn
	mu      sync.Mutex
	took    []time.Duration
	pending sync.WaitGroup // submits whose assign has not arrived
}

func connectLight(addr, name string) (*lightTenant, error) {
	lt := &lightTenant{name: name}
	for range 2 {
		c, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws?t="+name, nil)
		if err != nil {
			lt.close()
			return nil, err
		}
		lt.conns = append(lt.conns, c)
		go lt.work(c)
	}
	return lt, nil
}

func (lt *lightTenant) close() {
	for _, c := range lt.conns {
		c.Close()
	}
}

func (lt *lightTenant) reset() {
	lt.mu.Lock()
	lt.took = lt.took[:0]
	lt.mu.Unlock()
}

// wait waits for every submitted job's assign and returns the tenant's latencies.
func (lt *lightTenant) wait() Latency {
	lt.pending.Wait()
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return latencyOf(slices.Clone(lt.took))
}

// work stamps each assign with the time since its submit was due, and completes it.
func (lt *lightTenant) work(c *websocket.Conn) {
	var writeMu sync.Mutex
	for {
		_, msg, err := c.ReadMessage()
		if err != nil {
			return
		}
		sent := stampOf(msg)
		if sent == 0 { // an ack
			continue
		}
		took := time.Duration(time.Now().UnixNano() - sent)
		lt.mu.Lock()
		lt.took = append(lt.took, took)
		lt.mu.Unlock()
		lt.pending.Done()
		go func() {
			writeMu.Lock()
			defer writeMu.Unlock()
			_ = c.WriteMessage(websocket.TextMessage, completeFrame)
		}()
	}
}

// submitPaced submits rate jobs a second for d, each when it is due, whether or not the ones
// before it were answered (no coordinated omission), each stamped with when it was due.
func (lt *lightTenant) submitPaced(addr string, rate float64, d time.Duration) error {
	total := int(rate * d.Seconds())
	interval := time.Duration(float64(time.Second) / rate)
	idle := make(chan net.Conn, 64)
	defer func() {
		for len(idle) > 0 {
			(<-idle).Close()
		}
	}()
	errs := make(chan error, total)
	var inflight sync.WaitGroup
	began := time.Now()
	for i := range total {
		at := began.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(at))
		lt.pending.Add(1)
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			var c net.Conn
			select {
			case c = <-idle:
			default:
				var err error
				if c, err = net.Dial("tcp", addr); err != nil {
					lt.pending.Done()
					errs <- err
					return
				}
			}
			body := `{"queue":"q","type":"noop","payload":{"sent":` + strconv.FormatInt(at.UnixNano(), 10) + `}}`
			req := "POST /v1/jobs?t=" + lt.name + " HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: " +
				strconv.Itoa(len(body)) + "\r\n\r\n" + body
			if _, err := c.Write([]byte(req)); err != nil {
				lt.pending.Done()
				errs <- err
				return
			}
			if err := readAnswer(bufio.NewReader(c)); err != nil {
				lt.pending.Done()
				errs <- err
				return
			}
			select {
			case idle <- c:
			default:
				c.Close()
			}
		}()
	}
	inflight.Wait()
	close(errs)
	return <-errs
}
