package transport

import (
	"crypto/rand"
	"encoding/base32"
	"net/http"
	"strconv"
	"sync/atomic"
)

// RequestIDHeader names a request in its answer, its error body (request_id) and the server's
// log lines about it, so a user's report can be matched to the log.
const RequestIDHeader = "X-Request-Id"

// requestIDLenMax bounds an id a client chooses; a longer one is replaced.
const requestIDLenMax = 128

// requestIDs makes the ids of requests that bring none: a random prefix per process, so ids
// from two runs never meet, and a counter, which costs nothing per request.
type requestIDs struct {
	prefix string
	n      atomic.Uint64
}

func newRequestIDs() *requestIDs {
	var b [10]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail (Go 1.24)
	return &requestIDs{prefix: base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]) + "-"}
}

// assign gives the exchange its id: the client's when it is sane, a new one otherwise. The
// request's own header then holds the id in force, for the log lines written about it. Both
// headers share one slice of values, which net/http only reads.
func (ids *requestIDs) assign(w http.ResponseWriter, r *http.Request) {
	v := r.Header[RequestIDHeader]
	if len(v) == 0 || !saneRequestID(v[0]) {
		var b [64]byte
		id := string(strconv.AppendUint(append(b[:0], ids.prefix...), ids.n.Add(1), 10))
		v = []string{id}
		r.Header[RequestIDHeader] = v
	} else if len(v) > 1 {
		v = v[:1:1] // the answer names the first; an append to either header copies
	}
	w.Header()[RequestIDHeader] = v
}

// saneRequestID takes what a tracing proxy or client library sends (UUIDs, ULIDs, hex, W3C
// trace ids with dashes and dots), and refuses what could forge a log line or a header.
func saneRequestID(id string) bool {
	if id == "" || len(id) > requestIDLenMax {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':' || c == '/' || c == '+' || c == '=') {
			return false
		}
	}
	return true
}
