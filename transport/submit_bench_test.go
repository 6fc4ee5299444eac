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
// cpu-ns/job is the process's user and system CPU per job. The client reads answers without
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
			br, err := broker.Open(broker.Config{Dir: b.TempDir(), Logger: zap.NewNop()})
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
			before := cpuTime()
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
