package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"

	"github.com/tetherhq/tether/eventlog/fastjson"
	"github.com/tetherhq/tether/transport/wire"
)

// producer submits over one keep-alive HTTP/1.1 connection of its own, one request at a time,
// reading each answer before it sends the next. It writes the request itself instead of going
// through net/http's Transport, whose two goroutines per connection cost a hand-off each way
// on every request: CPU that the load generator would take from the server it shares the
// machine with. The server sees ordinary requests.
type producer struct {
	addr, host string
	tls        bool
	tlsConfig  *tls.Config
	header     []byte // the request line and headers, up to the Content-Length value
	conn       net.Conn
	r          *bufio.Reader
	buf        []byte       // the request
	encoded    []byte       // the request's body
	payload    []byte       // the job's payload, the caller's
	body       bytes.Buffer // the answer's body
	// length and limit read it: kept here, not made per answer
	length, limit io.LimitedReader
}

func newProducer(server, token string, tlsConfig *tls.Config) (*producer, error) {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("bench: server URL %q is not http(s)://host[:port]", server)
	}
	p := &producer{host: u.Host, addr: u.Host, tls: u.Scheme == "https", tlsConfig: tlsConfig}
	switch {
	case u.Port() != "":
	case p.tls:
		p.addr = net.JoinHostPort(u.Hostname(), "443")
	default:
		p.addr = net.JoinHostPort(u.Hostname(), "80")
	}
	h := "POST " + strings.TrimRight(u.EscapedPath(), "/") + "/v1/jobs HTTP/1.1\r\nHost: " + u.Host + "\r\nContent-Type: application/json\r\n"
	if token != "" {
		h += "Authorization: Bearer " + token + "\r\n"
	}
	p.header = []byte(h + "Content-Length: ")
	return p, nil
}

func (p *producer) dial(ctx context.Context) error {
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return err
	}
	if p.tls {
		host, _, _ := net.SplitHostPort(p.addr)
		cfg := &tls.Config{}
		if p.tlsConfig != nil {
			cfg = p.tlsConfig.Clone()
		}
		cfg.ServerName = host
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return err
		}
		conn = tc
	}
	p.conn, p.r = conn, bufio.NewReaderSize(conn, 8<<10)
	return nil
}

// submit sends one job and waits for the server's answer. A broken connection is closed and
// the next submit dials again; a submit is never resent, so no job is submitted twice.
func (p *producer) submit(ctx context.Context, req wire.SubmitRequest) error {
	body, err := appendSubmit(p.encoded[:0], req)
	if err != nil {
		return err
	}
	p.encoded = body
	if p.conn == nil {
		if err := p.dial(ctx); err != nil {
			return err
		}
	}
	p.buf = append(append(append(append(p.buf[:0], p.header...), strconv.Itoa(len(body))...), "\r\n\r\n"...), body...)
	if _, err := p.conn.Write(p.buf); err != nil {
		p.close()
		return err
	}
	status, closing, err := p.readResponse()
	if err != nil || closing {
		p.close()
	}
	if err != nil {
		return err
	}
	data := p.body.Bytes()
	if status != http.StatusCreated {
		var e wire.Error
		if json.Unmarshal(data, &e) != nil || e.Error.Code == "" {
			return fmt.Errorf("bench: submit answered %d", status)
		}
		return fmt.Errorf("bench: submit answered %d: %s: %s", status, e.Error.Code, e.Error.Message)
	}
	if !hasJobID(data) {
		return fmt.Errorf("bench: submit answered 201 without a job: %.200s", data)
	}
	return nil
}

// appendSubmit appends req as json.Marshal writes it: through fastjson for the fields a run's
// jobs have (a tenth of the generator's CPU per job went to encoding/json's reflection), and
// encoding/json for any other, or a string it would escape.
func appendSubmit(dst []byte, req wire.SubmitRequest) ([]byte, error) {
	if req.Priority != 0 || req.DelaySeconds != 0 || req.RunAt != nil || req.MaxAttempts != 0 || req.LeaseTTLSeconds != 0 || req.Labels != nil ||
		req.IdempotencyKey != "" || req.ReservationID != "" || req.ResultTTLSeconds != 0 || !compactAsIs(req.Payload) {
		return json.Marshal(req)
	}
	w := fastjson.NewWriter(dst)
	w.Str("queue", req.Queue, true)
	w.Str("type", req.Type, true)
	if len(req.Payload) > 0 {
		w.Key("payload")
		w.B = append(w.B, req.Payload...)
	}
	w.Str("concurrency_key", req.ConcurrencyKey, false)
	if len(req.RateLimits) > 0 {
		w.Array("rate_limits", len(req.RateLimits), func(w *fastjson.Writer, i int) {
			w.Str("name", req.RateLimits[i].Name, true)
			w.Str("key", req.RateLimits[i].Key, false)
		})
	}
	if b, ok := w.Close(); ok {
		return b, nil
	}
	return json.Marshal(req)
}

// compactAsIs reports whether json.Marshal writes raw as it is, as far as its bytes say: no
// space to compact away, nothing it escapes (<, > and &), nothing but printable ASCII. The run's
// payloads are {"sent":N}.
func compactAsIs(raw json.RawMessage) bool {
	for _, c := range raw {
		if c <= ' ' || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// answerBytesMax bounds an answer's body; a job resource is a few KiB.
const answerBytesMax = 1 << 20

// readResponse reads one answer into p.body and returns its status, and whether the server
// closes the connection after it. It reads what tether's server sends (a Content-Length, or a
// chunked body) without building the header map http.ReadResponse builds, which was a tenth
// of the generator's CPU per job.
func (p *producer) readResponse() (status int, closing bool, err error) {
	line, err := p.r.ReadSlice('\n')
	if err != nil {
		return 0, false, err
	}
	proto, rest, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(" "))
	code, _, _ := bytes.Cut(rest, []byte(" "))
	if status, err = strconv.Atoi(string(code)); err != nil || !bytes.HasPrefix(proto, []byte("HTTP/1.")) {
		return 0, false, fmt.Errorf("bench: malformed status line %q", line)
	}
	closing = string(proto) == "HTTP/1.0"
	length, chunked := int64(-1), false
	for {
		if line, err = p.r.ReadSlice('\n'); err != nil {
			return 0, false, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, false, fmt.Errorf("bench: malformed header %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.ParseInt(string(value), 10, 64); err != nil || length < 0 || length > answerBytesMax {
				return 0, false, fmt.Errorf("bench: Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			closing = closing || bytes.EqualFold(value, []byte("close"))
		}
	}
	var body io.Reader
	switch {
	case chunked:
		body = httputil.NewChunkedReader(p.r)
	case length >= 0:
		p.length = io.LimitedReader{R: p.r, N: length}
		body = &p.length
	default: // the body runs to the end of the connection
		body, closing = p.r, true
	}
	p.body.Reset()
	p.limit = io.LimitedReader{R: body, N: answerBytesMax + 1}
	n, err := p.body.ReadFrom(&p.limit)
	switch {
	case err != nil:
		return 0, false, err
	case n > answerBytesMax:
		return 0, false, fmt.Errorf("bench: an answer of more than %d bytes", answerBytesMax)
	case length >= 0 && n != length:
		return 0, false, io.ErrUnexpectedEOF
	}
	if chunked { // the trailer, which tether never sends, ends with an empty line
		for {
			if line, err = p.r.ReadSlice('\n'); err != nil {
				return 0, false, err
			}
			if len(bytes.TrimRight(line, "\r\n")) == 0 {
				break
			}
		}
	}
	return status, closing, nil
}

// hasJobID reports whether a submit's answer names the job it made. The resource starts with
// its id (docs/design.md §5); finding it there spares the generator decoding every answer in full,
// CPU it would take from the server it shares the machine with.
func hasJobID(data []byte) bool {
	rest, ok := bytes.CutPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte(`{"id":"`))
	return ok && len(rest) > 1 && rest[0] != '"'
}

func (p *producer) close() {
	if p.conn != nil {
		_ = p.conn.Close()
		p.conn, p.r = nil, nil
	}
}
