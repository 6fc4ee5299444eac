package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
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

// A submit's body is what json.Marshal writes for it, whichever path encodes it: every field
// of wire.SubmitRequest is set in turn (a field added later included), with strings that
// encoding/json escapes and payloads it compacts.
func TestSubmitBodyIsMarshals(t *testing.T) {
	base := wire.SubmitRequest{Queue: "bench-0123456789ab", Type: "noop", Payload: appendPayload(nil, 1763772000000000000)}
	cases := []wire.SubmitRequest{
		base,
		{Queue: "q", Type: "t"},
		{Queue: "q<&>", Type: "t\u2028é\"\\"},
		{Queue: "q", Type: "t", Payload: json.RawMessage(`{ "a" : [1, 2] }`)},
		{Queue: "q", Type: "t", Payload: json.RawMessage(`{"a":"<b>"}`)},
		{Queue: "q", Type: "t", ConcurrencyKey: "k7", RateLimits: []wire.RateLimitUse{{Name: "bench", Key: "k7"}, {Name: "other"}}},
	}
	v := reflect.ValueOf(&base).Elem()
	for i := range v.NumField() {
		req := base
		f := reflect.ValueOf(&req).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Int, reflect.Int64:
			f.SetInt(3)
		case reflect.Float64:
			f.SetFloat(1.5)
		case reflect.Pointer:
			f.Set(reflect.New(f.Type().Elem()))
		case reflect.Map:
			f.Set(reflect.MakeMapWithSize(f.Type(), 1))
			f.SetMapIndex(reflect.ValueOf("k"), reflect.ValueOf("v"))
		case reflect.Slice:
			if f.Type() == reflect.TypeOf(json.RawMessage(nil)) {
				f.SetBytes([]byte(`[1,"two"]`))
			} else {
				f.Set(reflect.MakeSlice(f.Type(), 1, 1))
			}
		default:
			t.Fatalf("field %s is a %s, which this test does not set", v.Type().Field(i).Name, f.Kind())
		}
		cases = append(cases, req)
	}
	for _, req := range cases {
		want, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendSubmit([]byte("leftover"), req)
		if err != nil || !bytes.Equal(bytes.TrimPrefix(got, []byte("leftover")), want) {
			t.Errorf("%+v:\n got %s %v\nwant %s", req, got, err, want)
		}
	}
}

// The handler reads back the moment appendPayload wrote, and any JSON's "sent".
func TestSentOfReadsPayloads(t *testing.T) {
	for _, c := range []struct {
		raw  string
		sent int64
		ok   bool
	}{
		{string(appendPayload(nil, 1763772000000000000)), 1763772000000000000, true},
		{`{ "sent": 42 }`, 42, true},
		{`{"sent":0}`, 0, false},
		{`{"sent":-5}`, 0, false},
		{`{"sent":"x"}`, 0, false},
		{`null`, 0, false},
		{``, 0, false},
	} {
		if sent, ok := sentOf([]byte(c.raw)); sent != c.sent || ok != c.ok {
			t.Errorf("sentOf(%q) = %d, %v; want %d, %v", c.raw, sent, ok, c.sent, c.ok)
		}
	}
}
