package floor

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// Shape is one run's shape, as in `tether bench`.
type Shape struct {
	Jobs, Producers, Workers int
}

// Result is what a run measured.
type Result struct {
	JobsPerSecond float64
	Records       int
	Syncs         int
	ServerCPU     time.Duration
	GeneratorCPU  time.Duration
}

func (r Result) eventsPerSync() float64 {
	if r.Syncs == 0 {
		return 0
	}
	return float64(r.Records) / float64(r.Syncs)
}

const submitBody = `{"queue":"bench-0123456789ab","type":"noop","payload":{"sent":1763772000000000000}}`

// generate connects the workers, then runs the producers until every completion is acked.
func generate(addr string, s Shape) (Result, error) {
	if s.Jobs < 1 || s.Producers < 1 || s.Workers < 1 {
		return Result{}, errors.New("jobs, producers and workers must each be at least 1")
	}
	var acked atomic.Int64
	allAcked := make(chan struct{})
	conns := make([]*websocket.Conn, 0, s.Workers)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range s.Workers {
		c, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws", nil)
		if err != nil {
			return Result{}, err
		}
		conns = append(conns, c)
		go runWorker(c, func() {
			if acked.Add(1) == int64(s.Jobs) {
				close(allAcked)
			}
		})
	}

	before, err := fetchStats(addr)
	if err != nil {
		return Result{}, err
	}
	cpu0, start := processCPU(), time.Now()
	var next atomic.Int64
	errs := make(chan error, s.Producers)
	for range s.Producers {
		go func() {
			errs <- produce(addr, "/v1/jobs", func() bool { return next.Add(1) <= int64(s.Jobs) })
		}()
	}
	for range s.Producers {
		if err := <-errs; err != nil {
			return Result{}, err
		}
	}
	<-allAcked
	elapsed, generatorCPU := time.Since(start), processCPU()-cpu0
	after, err := fetchStats(addr)
	if err != nil {
		return Result{}, err
	}
	return Result{
		JobsPerSecond: float64(s.Jobs) / elapsed.Seconds(),
		Records:       after.Records - before.Records,
		Syncs:         after.Syncs - before.Syncs,
		// The stats request itself is noise against thousands of jobs.
		ServerCPU:    after.CPU - before.CPU,
		GeneratorCPU: generatorCPU,
	}, nil
}

// runWorker answers each assign with a complete, written from its own goroutine as a handler's
// result would be, and counts acks.
func runWorker(c *websocket.Conn, onAck func()) {
	var writeMu sync.Mutex
	for {
		_, msg, err := c.ReadMessage()
		if err != nil {
			return
		}
		if !strings.HasPrefix(string(msg), `{"type":"assign"`) {
			onAck()
			continue
		}
		go func() {
			writeMu.Lock()
			defer writeMu.Unlock()
			_ = c.WriteMessage(websocket.TextMessage, completeFrame)
		}()
	}
}

// produce submits to path on one connection, one request in flight, while more() says so.
func produce(addr, path string, more func() bool) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	req := []byte("POST " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(submitBody)) + "\r\n\r\n" + submitBody)
	r := bufio.NewReader(c)
	for more() {
		if _, err := c.Write(req); err != nil {
			return err
		}
		if err := readAnswer(r); err != nil {
			return err
		}
	}
	return nil
}

// readAnswer reads one answer with a Content-Length body and checks it is a 201.
func readAnswer(r *bufio.Reader) error {
	status, err := r.ReadSlice('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(string(status), "HTTP/1.1 201 ") {
		return fmt.Errorf("submit answered %q", strings.TrimSpace(string(status)))
	}
	length := -1
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		h := strings.TrimSpace(string(line))
		if h == "" {
			break
		}
		if name, value, ok := strings.Cut(h, ":"); ok && strings.EqualFold(name, "Content-Length") {
			if length, err = strconv.Atoi(strings.TrimSpace(value)); err != nil {
				return err
			}
		}
	}
	if length < 0 {
		return errors.New("submit answer has no Content-Length")
	}
	_, err = r.Discard(length)
	return err
}

func fetchStats(addr string) (stats, error) {
	resp, err := http.Get("http://" + addr + "/stats")
	if err != nil {
		return stats{}, err
	}
	defer resp.Body.Close()
	var s stats
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&s); err != nil {
		return stats{}, err
	}
	return s, nil
}
