package transport

import (
	"crypto/rand"
	"encoding/base32"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// RequestIDHeader names a request in its answer, its error body (request_id) and the server's
// log lines about it, so a user's report can be matched to the log.
const RequestIDHeader = "X-Request-Id"

// requestIDLenMax bounds an id a client chooses; a longer one is replaced.
const requestIDLenMax = 128

// requestIDs makes the ids of requests that bring none: a random prefix per process, so ids
// from two runs never meet, and a counter. An id and the header value that holds it are cut
// from blocks made for idBlock ids at a time, not allocated per request: a block stays in
// memory while a request that holds one of its ids does (a few KB for a long poll at most).
type requestIDs struct {
	prefix string
	mu     sync.Mutex
	n      uint64
	text   strings.Builder // the block's ids so far: each is a substring of its String, which a later write does not change
	values []string        // the block's header values not handed out yet
}

// idBlock is how many ids one block of requestIDs holds.
const idBlock = 64

// idDigitsMax is the longest counter an id ends with (a uint64's decimal digits).
const idDigitsMax = 20

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
		v = ids.next()
		r.Header[RequestIDHeader] = v
	} else if len(v) > 1 {
		v = v[:1:1] // the answer names the first; an append to either header copies
	}
	w.Header()[RequestIDHeader] = v
}

// next is a new id as a header's values: a slice of one, without room to append in place.
func (ids *requestIDs) next() []string {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if ids.text.Cap()-ids.text.Len() < len(ids.prefix)+idDigitsMax {
		ids.text = strings.Builder{}
		ids.text.Grow(idBlock * (len(ids.prefix) + idDigitsMax))
	}
	if len(ids.values) == 0 {
		ids.values = make([]string, idBlock)
	}
	ids.n++
	start := ids.text.Len()
	var digits [idDigitsMax]byte
	ids.text.WriteString(ids.prefix)
	ids.text.Write(strconv.AppendUint(digits[:0], ids.n, 10))
	v := ids.values[:1:1]
	ids.values = ids.values[1:]
	v[0] = ids.text.String()[start:]
	return v
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
