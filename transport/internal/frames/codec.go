package frames

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/tetherhq/tether/transport/wire"
)

// The worker protocol's hot frames (assign, ack, complete, credit) are flat objects of short
// strings and numbers, and encoding/json spends most of its time on them in reflection: on the
// load generator, decoding them was 13 % of its CPU. The codec below handles the frames that
// look the way encoding/json writes them, and hands everything else back to encoding/json, so
// that no frame decodes or encodes differently for the path it took. FuzzDecodeMatchesUnmarshal
// and FuzzEncodeMatchesMarshal hold it to that.

// decodeFast decodes data into f, which must be zero, if data is a JSON object whose keys are
// the frame's field names exactly, whose strings hold no escapes, and whose values have the
// shapes encoding/json would decode without complaint. It reports false, with f in any state,
// for anything else: a key it does not know, an escape, a null, a float, a list.
func decodeFast(data []byte, f *wire.Frame) bool {
	s := scanner{b: data}
	if !s.consume('{') {
		return false
	}
	if s.consume('}') {
		return s.end()
	}
	for {
		key, ok := s.str()
		if !ok || !s.consume(':') {
			return false
		}
		if !s.field(string(key), f) {
			return false
		}
		if s.consume('}') {
			return s.end()
		}
		if !s.consume(',') {
			return false
		}
	}
}

type scanner struct {
	b []byte
	i int
}

func (s *scanner) skipSpace() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) consume(c byte) bool {
	s.skipSpace()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end reports whether only whitespace is left.
func (s *scanner) end() bool {
	s.skipSpace()
	return s.i == len(s.b)
}

// str reads a string without escapes or control characters, in valid UTF-8, and returns its
// contents.
func (s *scanner) str() ([]byte, bool) {
	s.skipSpace()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			s.i = j + 1
			v := s.b[start:j]
			return v, utf8.Valid(v)
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// quoted reads a string as str does and returns it with its quotes.
func (s *scanner) quoted() ([]byte, bool) {
	s.skipSpace()
	start := s.i
	_, ok := s.str()
	return s.b[start:s.i], ok
}

// integer reads an integer of at most 18 digits, with no fraction or exponent.
func (s *scanner) integer() (int64, bool) {
	s.skipSpace()
	start, j := s.i, s.i
	if j < len(s.b) && s.b[j] == '-' {
		j++
	}
	digits := j
	for j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9' {
		j++
	}
	n := j - digits
	if n == 0 || n > 18 || (n > 1 && s.b[digits] == '0') {
		return 0, false
	}
	if j < len(s.b) {
		switch s.b[j] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	v, err := strconv.ParseInt(string(s.b[start:j]), 10, 64)
	s.i = j
	return v, err == nil
}

func (s *scanner) boolean() (*bool, bool) {
	s.skipSpace()
	rest := s.b[s.i:]
	for _, v := range []bool{true, false} {
		lit := strconv.FormatBool(v)
		if len(rest) >= len(lit) && string(rest[:len(lit)]) == lit {
			s.i += len(lit)
			return &v, true
		}
	}
	return nil, false
}

// raw reads any JSON value and returns a copy of its bytes, as json.RawMessage keeps them.
func (s *scanner) raw() (json.RawMessage, bool) {
	s.skipSpace()
	start, j := s.i, s.i
	if j >= len(s.b) {
		return nil, false
	}
	switch s.b[j] {
	case '"':
		if j = skipString(s.b, j); j < 0 {
			return nil, false
		}
	case '{', '[':
		depth := 0
		for j < len(s.b) {
			switch s.b[j] {
			case '"':
				if j = skipString(s.b, j); j < 0 {
					return nil, false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			j++
			if depth == 0 {
				break
			}
		}
		if depth != 0 {
			return nil, false
		}
	default: // a number or a literal
		for j < len(s.b) {
			switch s.b[j] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
			default:
				j++
				continue
			}
			break
		}
	}
	v := s.b[start:j]
	if !json.Valid(v) {
		return nil, false
	}
	s.i = j
	return append(json.RawMessage(nil), v...), true
}

// skipString returns the index just past the string that starts at b[i], or -1.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// field decodes the value of key into f.
func (s *scanner) field(key string, f *wire.Frame) bool {
	str := func(dst *string) bool {
		v, ok := s.str()
		*dst = string(v)
		return ok
	}
	integer := func(dst *int) bool {
		v, ok := s.integer()
		*dst = int(v)
		return ok
	}
	var ok bool
	switch key {
	case "type":
		return str(&f.Type)
	case "ref":
		return str(&f.Ref)
	case "capacity":
		return integer(&f.Capacity)
	case "n":
		return integer(&f.N)
	case "job_id":
		return str(&f.JobID)
	case "lease_id":
		return str(&f.LeaseID)
	case "event_type":
		return str(&f.EventType)
	case "data":
		f.Data, ok = s.raw()
	case "nonce":
		return str(&f.Nonce)
	case "output":
		f.Output, ok = s.raw()
	case "output_hash":
		return str(&f.OutputHash)
	case "signature":
		return str(&f.Signature)
	case "error_code":
		return str(&f.ErrorCode)
	case "message":
		return str(&f.Message)
	case "retryable":
		f.Retryable, ok = s.boolean()
	case "worker_id":
		return str(&f.WorkerID)
	case "queue":
		return str(&f.Queue)
	case "job_type":
		return str(&f.JobType)
	case "payload":
		f.Payload, ok = s.raw()
	case "attempt":
		return integer(&f.Attempt)
	case "lease_expires_at":
		var q []byte
		if q, ok = s.quoted(); ok {
			var t time.Time
			ok = t.UnmarshalJSON(q) == nil
			f.LeaseExpiresAt = &t
		}
	case "ok":
		f.OK, ok = s.boolean()
	case "number":
		return integer(&f.Number)
	case "receipt":
		f.Receipt, ok = s.receipt()
	}
	return ok
}

// receipt decodes {"seq":N,"hash":"..."} with its keys in that order.
func (s *scanner) receipt() (*wire.Receipt, bool) {
	var r wire.Receipt
	if !s.consume('{') {
		return nil, false
	}
	if k, ok := s.str(); !ok || string(k) != "seq" || !s.consume(':') {
		return nil, false
	}
	seq, ok := s.integer()
	if !ok || seq < 0 || !s.consume(',') {
		return nil, false
	}
	r.Seq = uint64(seq)
	if k, ok := s.str(); !ok || string(k) != "hash" || !s.consume(':') {
		return nil, false
	}
	h, ok := s.str()
	r.Hash = string(h)
	return &r, ok && s.consume('}')
}

// appendFast appends f as json.Marshal would write it and reports true, or reports false when
// f holds something whose encoding it leaves to encoding/json: a string that needs escaping, a
// raw value that is not already compact and plain ASCII, a float, an error, a time that
// MarshalJSON might refuse.
func appendFast(dst []byte, f *wire.Frame) ([]byte, bool) {
	if f.HeartbeatSeconds != 0 || f.LeaseTTLSeconds != 0 || f.Error != nil {
		return dst, false
	}
	w := frameWriter{b: append(dst, '{'), ok: true}
	w.str("type", f.Type, true)
	w.str("ref", f.Ref, false)
	w.int("capacity", f.Capacity)
	w.int("n", f.N)
	w.list("leases", f.Leases)
	w.str("job_id", f.JobID, false)
	w.str("lease_id", f.LeaseID, false)
	w.str("event_type", f.EventType, false)
	w.raw("data", f.Data)
	w.str("nonce", f.Nonce, false)
	w.raw("output", f.Output)
	w.str("output_hash", f.OutputHash, false)
	w.str("signature", f.Signature, false)
	w.str("error_code", f.ErrorCode, false)
	w.str("message", f.Message, false)
	w.boolean("retryable", f.Retryable)
	w.str("worker_id", f.WorkerID, false)
	w.str("queue", f.Queue, false)
	w.str("job_type", f.JobType, false)
	w.raw("payload", f.Payload)
	w.int("attempt", f.Attempt)
	if t := f.LeaseExpiresAt; t != nil {
		_, offset := t.Zone()
		if t.Year() < 0 || t.Year() > 9999 || offset%60 != 0 || offset <= -24*3600 || offset >= 24*3600 {
			return dst, false
		}
		w.key("lease_expires_at")
		w.b = append(t.AppendFormat(append(w.b, '"'), time.RFC3339Nano), '"')
	}
	w.boolean("ok", f.OK)
	w.list("cancel", f.Cancel)
	w.list("unknown", f.Unknown)
	w.int("number", f.Number)
	if r := f.Receipt; r != nil {
		w.key("receipt")
		w.b = strconv.AppendUint(append(w.b, `{"seq":`...), r.Seq, 10)
		w.b = append(w.b, `,"hash":`...)
		w.quote(r.Hash)
		w.b = append(w.b, '}')
	}
	if !w.ok {
		return dst, false
	}
	return append(w.b, '}'), true
}

type frameWriter struct {
	b     []byte
	ok    bool
	comma bool
}

func (w *frameWriter) key(k string) {
	if w.comma {
		w.b = append(w.b, ',')
	}
	w.comma = true
	w.b = append(append(append(w.b, '"'), k...), `":`...)
}

// quote appends s quoted if no character of it needs escaping (json.Marshal escapes <, > and &
// too); otherwise it gives up.
func (w *frameWriter) quote(s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			w.ok = false
			return
		}
	}
	w.b = append(append(append(w.b, '"'), s...), '"')
}

func (w *frameWriter) str(k, v string, always bool) {
	if v != "" || always {
		w.key(k)
		w.quote(v)
	}
}

func (w *frameWriter) int(k string, v int) {
	if v != 0 {
		w.key(k)
		w.b = strconv.AppendInt(w.b, int64(v), 10)
	}
}

func (w *frameWriter) boolean(k string, v *bool) {
	if v != nil {
		w.key(k)
		w.b = strconv.AppendBool(w.b, *v)
	}
}

func (w *frameWriter) list(k string, v []string) {
	if len(v) == 0 {
		return
	}
	w.key(k)
	w.b = append(w.b, '[')
	for i, s := range v {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.quote(s)
	}
	w.b = append(w.b, ']')
}

// raw appends a raw value that is valid JSON, has no whitespace outside its strings and no
// byte that json.Marshal would escape inside them, so that Marshal's compacting would leave it
// as it is.
func (w *frameWriter) raw(k string, v json.RawMessage) {
	if len(v) == 0 {
		return
	}
	inString := false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c >= 0x80, c == '<', c == '>', c == '&':
			w.ok = false
			return
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			w.ok = false
			return
		}
	}
	if !json.Valid(v) {
		w.ok = false
		return
	}
	w.key(k)
	w.b = append(w.b, v...)
}
