package floor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
)

// Canned messages, the sizes of tether's: a job resource, an assign, a complete and an ack.
var (
	jobAnswer     = []byte(`{"id":"01KAR7ZQ6J3N6WQH1V9X8Y7Z6A","tenant":"default","queue":"bench-0123456789ab","type":"noop","payload":{"sent":1763772000000000000},"priority":0,"labels":{},"status":"queued","attempt":0,"max_attempts":3,"run_at":null,"lease":null,"cancel_requested":false,"output":null,"output_hash":"","error":null,"dead_reason":"","created_at":"2026-11-22T00:00:00.123456Z","updated_at":"2026-11-22T00:00:00.123456Z","events_truncated":false,"receipt":{"seq":123456,"hash":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"},"idempotent_hit":false}`)
	assignFrame   = []byte(`{"type":"assign","job_id":"01KAR7ZQ6J3N6WQH1V9X8Y7Z6A","lease_id":"01KAR7ZQ6J3N6WQH1V9X8Y7Z6B","nonce":"0123456789abcdef0123456789abcdef","queue":"bench-0123456789ab","job_type":"noop","payload":{"sent":1763772000000000000},"attempt":1,"lease_expires_at":"2026-11-22T00:00:30.123456Z"}`)
	completeFrame = []byte(`{"type":"complete","ref":"c1","job_id":"01KAR7ZQ6J3N6WQH1V9X8Y7Z6A","lease_id":"01KAR7ZQ6J3N6WQH1V9X8Y7Z6B","nonce":"0123456789abcdef0123456789abcdef","output":null,"output_hash":"74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b"}`)
	ackFrame      = []byte(`{"type":"ack","ref":"c1","ok":true,"receipt":{"seq":123456,"hash":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}}`)
)

// record stands for one event: about what one of tether's takes in its WAL.
var record = make([]byte, 300)

// prefill is the zeroed, synced region written ahead, so that commits overwrite and an
// fdatasync need not also write the inode, as tether's log does.
const prefill = 64 << 20

// groupLog appends records in batches: every record handed in while a sync runs goes into the
// next write and sync, and each record's callback runs once its batch is durable.
type groupLog struct {
	mu      sync.Mutex
	pending []func()
	wake    chan struct{}

	file  *os.File
	fsync bool
	off   int64

	statsMu        sync.Mutex
	records, syncs int
}

func openGroupLog(path string, fsync bool) (*groupLog, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	zeros := make([]byte, 1<<20)
	for off := 0; off < prefill; off += len(zeros) {
		if _, err := f.Write(zeros); err != nil {
			return nil, err
		}
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	l := &groupLog{wake: make(chan struct{}, 1), file: f, fsync: fsync}
	go l.loop()
	return l, nil
}

// append hands in one record; then runs on the log's goroutine once it is durable.
func (l *groupLog) append(then func()) {
	l.mu.Lock()
	l.pending = append(l.pending, then)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *groupLog) loop() {
	var batch []func()
	buf := make([]byte, 0, 1<<16)
	for range l.wake {
		for {
			l.mu.Lock()
			batch, l.pending = l.pending, batch[:0]
			l.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			buf = buf[:0]
			for range batch {
				buf = append(buf, record...)
			}
			if l.off+int64(len(buf)) > prefill {
				l.off = 0 // the Shape, not the size, is measured: wrap within the prefilled region
			}
			if _, err := l.file.WriteAt(buf, l.off); err != nil {
				panic(err) // as tether stops on a failed write
			}
			l.off += int64(len(buf))
			if l.fsync {
				if err := syscall.Fdatasync(int(l.file.Fd())); err != nil {
					panic(err)
				}
			}
			l.statsMu.Lock()
			l.records += len(batch)
			l.syncs++
			l.statsMu.Unlock()
			for _, then := range batch {
				then()
			}
		}
	}
}

// stats is what /stats answers: the log's counters and the process's CPU so far.
type stats struct {
	Records int           `json:"records"`
	Syncs   int           `json:"syncs"`
	CPU     time.Duration `json:"cpu_ns"`
}

func (l *groupLog) stats() stats {
	l.statsMu.Lock()
	defer l.statsMu.Unlock()
	return stats{Records: l.records, Syncs: l.syncs, CPU: processCPU()}
}

// worker is one connected WebSocket worker.
type worker struct {
	mu   sync.Mutex // one writer at a time
	conn *websocket.Conn
}

func (w *worker) send(frame []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.conn.WriteMessage(websocket.TextMessage, frame)
}

// dispatcher matches one tenant's durable jobs to its free workers; each match appends a lease
// record and assigns once it is durable. A job's stamp, when it has one (the light tenants' of
// a skew run), goes back in its assign, so that the worker can measure submit→start.
type dispatcher struct {
	log   *groupLog
	mu    sync.Mutex
	ready []int64 // the stamps of the jobs waiting, oldest first
	free  []*worker
}

func (d *dispatcher) jobReady(stamp int64) {
	d.mu.Lock()
	if len(d.free) == 0 {
		d.ready = append(d.ready, stamp)
		d.mu.Unlock()
		return
	}
	w := d.free[len(d.free)-1]
	d.free = d.free[:len(d.free)-1]
	d.mu.Unlock()
	d.lease(w, stamp)
}

func (d *dispatcher) workerFree(w *worker) {
	d.mu.Lock()
	if len(d.ready) == 0 {
		d.free = append(d.free, w)
		d.mu.Unlock()
		return
	}
	stamp := d.ready[0]
	d.ready = d.ready[1:]
	d.mu.Unlock()
	d.lease(w, stamp)
}

func (d *dispatcher) lease(w *worker, stamp int64) {
	frame := assignFrame
	if stamp != 0 {
		frame = bytes.Replace(assignFrame, []byte(cannedSent), strconv.AppendInt(nil, stamp, 10), 1)
	}
	d.log.append(func() { go w.send(frame) })
}

// cannedSent is the stamp in the canned frames.
const cannedSent = "1763772000000000000"

// stampOf is the "sent" stamp of a submit body when it differs from the canned one, else 0.
func stampOf(body []byte) int64 {
	_, rest, ok := bytes.Cut(body, []byte(`"sent":`))
	if !ok {
		return 0
	}
	end := bytes.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(rest)
	}
	if string(rest[:end]) == cannedSent {
		return 0
	}
	n, _ := strconv.ParseInt(string(rest[:end]), 10, 64)
	return n
}

// tenants holds a dispatcher per tenant (the t query parameter; none is the default tenant):
// a tenant's jobs go only to its own workers, as in tether, and every tenant shares the log.
type tenants struct {
	log *groupLog
	mu  sync.Mutex
	by  map[string]*dispatcher
}

func (ts *tenants) of(r *http.Request) *dispatcher {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	name := r.URL.Query().Get("t")
	d := ts.by[name]
	if d == nil {
		d = &dispatcher{log: ts.log}
		ts.by[name] = d
	}
	return d
}

// handler serves the Shape: POST /v1/jobs, GET /ws and GET /stats. Each job's submit and its
// completion each do cost.
func handler(l *groupLog, cost work) http.Handler {
	ts := &tenants{log: l, by: map[string]*dispatcher{}}
	var upgrader websocket.Upgrader
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		cost.do()
		d, stamp := ts.of(r), stampOf(body)
		durable := make(chan struct{})
		l.append(func() { close(durable) })
		<-durable
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(jobAnswer)
		d.jobReady(stamp)
	})
	mux.HandleFunc("GET /ws", func(w http.ResponseWriter, r *http.Request) {
		conn, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		wk, d := &worker{conn: conn}, ts.of(r)
		d.workerFree(wk)
		for {
			if _, _, err := conn.ReadMessage(); err != nil { // a complete
				return
			}
			cost.do()
			l.append(func() {
				go func() {
					wk.send(ackFrame)
					d.workerFree(wk)
				}()
			})
		}
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(l.stats())
	})
	return mux
}

// ServerConfig is how the server runs: whether it fsyncs, and how much CPU it spends on each
// job besides the shape's own (a stand-in for a broker's work: decoding, deciding, indexing).
type ServerConfig struct {
	Fsync     bool
	CPUPerJob time.Duration
}

// Serve is the server Run starts in a child process: it listens on a loopback port, prints its
// address on stdout and serves until killed, with its records in the file at path.
func Serve(path string, cfg ServerConfig) error {
	l, err := openGroupLog(path, cfg.Fsync)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr())
	return http.Serve(ln, handler(l, newWork(cfg.CPUPerJob/2)))
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
}

// work is a fixed amount of CPU work: a number of rounds of arithmetic, calibrated once, so that
// it costs the same CPU however the process is scheduled (a loop that watched the clock would
// do less work the more the machine is contended).
type work struct{ rounds int }

var workSink atomic.Uint64

func newWork(d time.Duration) work {
	if d <= 0 {
		return work{}
	}
	const probe = 1 << 20
	start := time.Now()
	spin(probe)
	perRound := float64(time.Since(start)) / probe
	return work{rounds: int(float64(d) / perRound)}
}

func (w work) do() {
	if w.rounds > 0 {
		spin(w.rounds)
	}
}

func spin(rounds int) {
	x := uint64(rounds)
	for range rounds {
		x = x*6364136223846793005 + 1442695040888963407
	}
	workSink.Add(x)
}
