package transport_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/transporttest"
)

// BenchmarkSubmit drives POST /v1/jobs and POST /v1/jobs/batch through net/http over loopback
// against a real broker on disk, as `tether bench`'s producers do: each connection is
// keep-alive and sends its next request once the answer to the last is read. An op is one
// job, so ns/op and allocs/op (which count every goroutine of the process: the handler, the
// broker's actors and the log's group commit) are per job whether it came alone or in a batch.
// cpu-ns/job is the process's user and system CPU per job, fsyncs/job the log's group commits
// per job. The client reads answers without
// allocating, so what is counted is the server's.
func BenchmarkSubmit(b *testing.B) {
	for _, c := range []struct {
		name  string
		conns int
		batch int // 0: single submits
	}{
		{"single", 8, 0},
		{"batch=100", 2, 100},
	} {
		b.Run(c.name, func(b *testing.B) {
			// No checkpoint during the run: with no worker draining the queue, each would write
			// every job queued so far, a cost that grows with b.N and is not the submit's.
			br, err := broker.Open(broker.Config{Dir: b.TempDir(), Logger: zap.NewNop(), CheckpointEvery: 1 << 40})
			if err != nil {
				b.Fatal(err)
			}
			_, base := transporttest.Serve(b, br, transport.Config{Auth: transport.AuthNone})
			u, _ := url.Parse(base)
			conns := make([]*submitter, c.conns)
			for i := range conns {
				if conns[i], err = dialSubmitter(u.Host, c.batch); err != nil {
					b.Fatal(err)
				}
				defer conns[i].conn.Close()
			}
			var next atomic.Int64 // jobs handed out
			var wg sync.WaitGroup
			before, syncs := cpuTime(), br.LogStats().Syncs
			b.ReportAllocs()
			b.ResetTimer()
			for _, s := range conns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						n := int64(max(c.batch, 1))
						end := next.Add(n)
						if end-n >= int64(b.N) {
							return
						}
						if err := s.submit(int(min(n, int64(b.N)-(end-n)))); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-before)/float64(b.N), "cpu-ns/job")
			b.ReportMetric(float64(br.LogStats().Syncs-syncs)/float64(b.N), "fsyncs/job")
		})
	}
}

// cpuTime is the process's user and system CPU so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// submitter is one keep-alive connection that submits a job, or a batch of jobs, at a time.
type submitter struct {
	conn  net.Conn
	r     *bufio.Reader
	reqs  map[int][]byte // the request for a batch of n jobs (n 1 for a single submit, batch 0)
	batch int
	body  []byte
}

const submitBody = `{"queue":"q","type":"noop","payload":{"n":1}}`

func dialSubmitter(addr string, batch int) (*submitter, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &submitter{conn: conn, r: bufio.NewReaderSize(conn, 64<<10), reqs: map[int][]byte{}, batch: batch}, nil
}

// request is the request for n jobs, made once per n.
func (s *submitter) request(n int) []byte {
	if req, ok := s.reqs[n]; ok {
		return req
	}
	path, body := "/v1/jobs", submitBody
	if s.batch > 0 {
		path, body = "/v1/jobs/batch", `{"jobs":[`+strings.TrimSuffix(strings.Repeat(submitBody+",", n), ",")+`]}`
	}
	req := []byte(fmt.Sprintf("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body))
	s.reqs[n] = req
	return req
}

// submit sends the request for n jobs and reads its answer, which must be 201.
func (s *submitter) submit(n int) error {
	if _, err := s.conn.Write(s.request(n)); err != nil {
		return err
	}
	status, body, _, err := readAnswer(s.r, s.body[:0])
	s.body = body
	if err != nil {
		return err
	}
	if status != 201 {
		return fmt.Errorf("submit answered %d: %.300s", status, body)
	}
	return nil
}

// readAnswer reads one HTTP/1.1 answer, appending its body to buf. chunked says it came
// without a Content-Length.
func readAnswer(r *bufio.Reader, buf []byte) (status int, body []byte, chunked bool, err error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, buf, false, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, buf, false, fmt.Errorf("malformed status line %q", line)
	}
	status = int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	length := -1
	for {
		if line, err = r.ReadSlice('\n'); err != nil {
			return 0, buf, false, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			length = 0
			for _, c := range value {
				length = length*10 + int(c-'0')
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		}
	}
	switch {
	case chunked:
		var b bytes.Buffer
		if _, err = b.ReadFrom(httputil.NewChunkedReader(r)); err == nil {
			_, err = r.ReadSlice('\n') // the empty trailer
		}
		return status, append(buf, b.Bytes()...), true, err
	case length < 0:
		return 0, buf, false, fmt.Errorf("an answer with no Content-Length, not chunked")
	}
	start := len(buf)
	buf = slices.Grow(buf, length)[:start+length]
	_, err = io.ReadFull(r, buf[start:])
	return status, buf, false, err
}

// TestSubmitAnswersPipelined sends requests back to back on one connection before reading any
// answer, as a pipelining client does: every answer comes, in order, each with its
// Content-Length and the job it made.
func TestSubmitAnswersPipelined(t *testing.T) {
	h := start(t, transport.AuthNone)
	u, _ := url.Parse(h.url)
	s, err := dialSubmitter(u.Host, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.conn.Close()
	var all []byte
	const n = 5
	for range n {
		all = append(all, s.request(1)...)
	}
	batch, err := dialSubmitter(u.Host, 40)
	if err != nil {
		t.Fatal(err)
	}
	defer batch.conn.Close()
	if _, err := s.conn.Write(all); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for i := range n {
		status, body, chunked, err := readAnswer(s.r, nil)
		if err != nil || status != 201 || chunked || !bytes.HasPrefix(body, []byte(`{"id":"`)) || !bytes.HasSuffix(body, []byte("}\n")) {
			t.Fatalf("answer %d: %d %v %s", i, status, err, body)
		}
		ids[string(body[7:33])] = true
	}
	if len(ids) != n {
		t.Fatalf("%d answers named %d jobs", n, len(ids))
	}
	if _, err := batch.conn.Write(append(batch.request(40), batch.request(2)...)); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{40, 2} {
		status, body, chunked, err := readAnswer(batch.r, nil)
		if err != nil || status != 201 || chunked || bytes.Count(body, []byte(`"status":"queued"`)) != want {
			t.Fatalf("batch %d: %d %v %s", i, status, err, body)
		}
	}
	// A job whose answer is larger than net/http's buffer, and an error, come whole too.
	big := `{"queue":"q","type":"t","payload":"` + strings.Repeat("x", 8<<10) + `"}`
	for _, c := range []struct {
		body   string
		status int
	}{{big, 201}, {`{"queue":"q","type":"t","extra":"` + strings.Repeat("x", 8<<10) + `"}`, 400}} {
		fmt.Fprintf(s.conn, "POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(c.body), c.body)
		status, body, chunked, err := readAnswer(s.r, nil)
		if err != nil || status != c.status || chunked || len(body) < 100 || body[len(body)-1] != '\n' {
			t.Fatalf("%d %v chunked %v: %.200s", status, err, chunked, body)
		}
	}
}
