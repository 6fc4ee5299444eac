package bench

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tetherhq/tether/transport/wire"
)

func TestHasJobID(t *testing.T) {
	for _, c := range []struct {
		body string
		want bool
	}{
		{`{"id":"01KAR7ZQ6J3N6WQH1V9X8Y7Z6A","tenant":"default"}`, true},
		{"\n {\"id\":\"x\"}", true},
		{`{"id":"","tenant":"default"}`, false},
		{`{"id":"`, false},
		{`{"tenant":"default","id":"x"}`, false},
		{`{"error":{"code":"QUOTA_EXCEEDED"}}`, false},
		{``, false},
	} {
		if got := hasJobID([]byte(c.body)); got != c.want {
			t.Errorf("hasJobID(%q) = %v, want %v", c.body, got, c.want)
		}
	}
}

func TestReadResponse(t *testing.T) {
	for _, c := range []struct {
		name, raw       string
		status          int
		body            string
		closing, broken bool
	}{
		{name: "length", raw: "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\ncontent-length: 8\r\n\r\n{\"id\":1}NEXT", status: 201, body: `{"id":1}`},
		{name: "close", raw: "HTTP/1.1 429 Too Many Requests\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}", status: 429, body: `{}`, closing: true},
		{name: "http/1.0", raw: "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}", status: 200, body: `{}`, closing: true},
		{name: "chunked", raw: "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\nNEXT", status: 201, body: `{"a":1}`},
		{name: "to the end", raw: "HTTP/1.1 200 OK\r\n\r\nrest", status: 200, body: "rest", closing: true},
		{name: "short body", raw: "HTTP/1.1 201 Created\r\nContent-Length: 9\r\n\r\n{}", broken: true},
		{name: "huge length", raw: "HTTP/1.1 201 Created\r\nContent-Length: 99999999\r\n\r\n", broken: true},
		{name: "bad status", raw: "HTTP/1.1 OK\r\n\r\n", broken: true},
		{name: "not http", raw: "SSH-2.0-OpenSSH\r\n\r\n", broken: true},
		{name: "bad header", raw: "HTTP/1.1 200 OK\r\nnocolon\r\n\r\n", broken: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &producer{r: bufio.NewReader(strings.NewReader(c.raw))}
			status, closing, err := p.readResponse()
			if c.broken {
				if err == nil {
					t.Fatalf("read %d %q from a broken answer", status, p.body.String())
				}
				return
			}
			if err != nil || status != c.status || closing != c.closing || p.body.String() != c.body {
				t.Fatalf("got %d %v %q %v, want %d %v %q", status, closing, p.body.String(), err, c.status, c.closing, c.body)
			}
			if strings.HasSuffix(c.raw, "NEXT") {
				if rest, _ := io.ReadAll(p.r); string(rest) != "NEXT" {
					t.Fatalf("the next answer would start at %q", rest)
				}
			}
		})
	}
}

// The producer reads what net/http's server writes, with a length or chunked, answer after
// answer on one connection.
func TestProducerAgainstNetHTTP(t *testing.T) {
	big := strings.Repeat("x", 10<<10) // past net/http's buffer: sent chunked
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		if n.Add(1)%2 == 0 {
			_, _ = io.WriteString(w, `{"id":"j`+big+`"}`)
			return
		}
		_, _ = io.WriteString(w, `{"id":"j1"}`)
	}))
	defer srv.Close()
	p, err := newProducer(srv.URL, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	for i := range 4 {
		if err := p.submit(context.Background(), wire.SubmitRequest{Queue: "q", Type: "t"}); err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
		if i%2 == 1 && p.body.Len() < len(big) {
			t.Fatalf("submit %d: a body of %d bytes, want the big one", i, p.body.Len())
		}
	}
	if p.conn == nil {
		t.Fatal("the connection was not kept")
	}
}
