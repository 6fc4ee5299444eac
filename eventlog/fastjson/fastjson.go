// Package fastjson reads and writes the JSON shapes of tether's hottest messages without
// reflection, for codecs that hand everything else to encoding/json: transport's job and frame
// codecs, and the finished jobs projections stores in its table. It lives beside the event log,
// the one package both may import.
//
// Its contract is narrow on purpose. A Scanner takes only what encoding/json would decode the
// same way into a Go value: strings without escapes, in valid UTF-8; integers of at most 18
// digits; raw values that json.Valid accepts. Anything else makes it report false, and its
// caller decodes with encoding/json instead. A Writer writes only what json.Marshal would write
// byte for byte (strings that need no escaping, raw values already compact and plain ASCII,
// times MarshalJSON accepts), and records that it gave up otherwise. So a codec built on it can
// differ from encoding/json only in speed, which is what its fuzz tests check.
package fastjson

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// Scanner reads JSON from B. Its zero value, with B set, starts at the beginning.
type Scanner struct {
	B []byte
	i int
}

func (s *Scanner) skipSpace() {
	for s.i < len(s.B) {
		switch s.B[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// Consume reads the byte c, after any whitespace.
func (s *Scanner) Consume(c byte) bool {
	s.skipSpace()
	if s.i < len(s.B) && s.B[s.i] == c {
		s.i++
		return true
	}
	return false
}

// End reports whether only whitespace is left.
func (s *Scanner) End() bool {
	s.skipSpace()
	return s.i == len(s.B)
}

// Object reads an object, calling field for each key to read its value, and then checks that
// nothing but whitespace follows if top is set. field reports false to give up. The key aliases
// B: a field that switches on string(key) compares it without a copy.
func (s *Scanner) Object(top bool, field func(key []byte) bool) bool {
	if !s.Consume('{') {
		return false
	}
	if !s.Consume('}') {
		for {
			key, ok := s.Str()
			if !ok || !s.Consume(':') || !field(key) {
				return false
			}
			if s.Consume('}') {
				break
			}
			if !s.Consume(',') {
				return false
			}
		}
	}
	return !top || s.End()
}

// Str reads a string without escapes or control characters, in valid UTF-8, and returns its
// contents, which alias B.
func (s *Scanner) Str() ([]byte, bool) {
	s.skipSpace()
	if s.i >= len(s.B) || s.B[s.i] != '"' {
		return nil, false
	}
	start := s.i + 1
	for j := start; j < len(s.B); j++ {
		switch c := s.B[j]; {
		case c == '"':
			s.i = j + 1
			v := s.B[start:j]
			return v, utf8.Valid(v)
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// String reads a string as Str does into dst.
func (s *Scanner) String(dst *string) bool {
	v, ok := s.Str()
	*dst = string(v)
	return ok
}

// Int reads an integer of at most 18 digits, with no fraction or exponent, into dst.
func (s *Scanner) Int(dst *int) bool {
	v, ok := s.Int64()
	*dst = int(v)
	return ok
}

// Uint64 reads an unsigned integer of at most 18 digits: no sign, not even "-0", which
// encoding/json refuses for an unsigned field.
func (s *Scanner) Uint64(dst *uint64) bool {
	s.skipSpace()
	if s.i < len(s.B) && s.B[s.i] == '-' {
		return false
	}
	v, ok := s.Int64()
	*dst = uint64(v)
	return ok
}

// Int64 reads an integer of at most 18 digits, with no fraction or exponent.
func (s *Scanner) Int64() (int64, bool) {
	s.skipSpace()
	start, j := s.i, s.i
	if j < len(s.B) && s.B[j] == '-' {
		j++
	}
	digits := j
	for j < len(s.B) && s.B[j] >= '0' && s.B[j] <= '9' {
		j++
	}
	n := j - digits
	if n == 0 || n > 18 || (n > 1 && s.B[digits] == '0') {
		return 0, false
	}
	if j < len(s.B) {
		switch s.B[j] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	v, err := strconv.ParseInt(string(s.B[start:j]), 10, 64)
	s.i = j
	return v, err == nil
}

// Float64 reads a number as encoding/json reads one into a float64: its grammar checked, then
// strconv.ParseFloat. A number out of range reports false.
func (s *Scanner) Float64(dst *float64) bool {
	s.skipSpace()
	start, j := s.i, s.i
	digits := func() int {
		n := 0
		for ; j < len(s.B) && s.B[j] >= '0' && s.B[j] <= '9'; j++ {
			n++
		}
		return n
	}
	if j < len(s.B) && s.B[j] == '-' {
		j++
	}
	intStart := j
	if n := digits(); n == 0 || (n > 1 && s.B[intStart] == '0') {
		return false
	}
	if j < len(s.B) && s.B[j] == '.' {
		j++
		if digits() == 0 {
			return false
		}
	}
	if j < len(s.B) && (s.B[j] == 'e' || s.B[j] == 'E') {
		j++
		if j < len(s.B) && (s.B[j] == '+' || s.B[j] == '-') {
			j++
		}
		if digits() == 0 {
			return false
		}
	}
	if n, exact := smallInteger(s.B[start:j]); exact {
		*dst, s.i = n, j // most durations are whole seconds: no string to parse
		return true
	}
	v, err := strconv.ParseFloat(string(s.B[start:j]), 64)
	if err != nil {
		return false
	}
	*dst, s.i = v, j
	return true
}

// smallInteger reads a number of at most 15 digits and nothing else, which a float64 holds
// exactly, and reports whether it was one. "-0" is not: its float is -0, not 0.
func smallInteger(b []byte) (float64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 15 || (neg && len(b) == 1 && b[0] == '0') {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return float64(n), true
}

// BoolPtr reads true or false into a new bool.
func (s *Scanner) BoolPtr(dst **bool) bool {
	var v bool
	if !s.Bool(&v) {
		return false
	}
	*dst = &v
	return true
}

// Time reads a string as time.Time's UnmarshalJSON does, into a new time.
func (s *Scanner) Time(dst **time.Time) bool {
	var t time.Time
	*dst = &t
	return s.TimeValue(&t)
}

// Bool reads true or false into dst.
func (s *Scanner) Bool(dst *bool) bool {
	s.skipSpace()
	rest := s.B[s.i:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		*dst, s.i = true, s.i+4
	case len(rest) >= 5 && string(rest[:5]) == "false":
		*dst, s.i = false, s.i+5
	default:
		return false
	}
	return true
}

// TimeValue reads a string as time.Time's UnmarshalJSON does, into dst.
func (s *Scanner) TimeValue(dst *time.Time) bool {
	s.skipSpace()
	start := s.i
	if _, ok := s.Str(); !ok {
		return false
	}
	return dst.UnmarshalJSON(s.B[start:s.i]) == nil
}

// Null reads the literal null, and reports false, reading nothing, if the value is another.
func (s *Scanner) Null() bool {
	s.skipSpace()
	if len(s.B)-s.i >= 4 && string(s.B[s.i:s.i+4]) == "null" {
		s.i += 4
		return true
	}
	return false
}

// StringMap reads an object of strings into a new map in *dst, as encoding/json reads one into a
// nil map. A key seen twice, or a map already read (*dst is not nil), reports false: encoding/json
// would merge the two.
func (s *Scanner) StringMap(dst *map[string]string) bool {
	if *dst != nil {
		return false
	}
	m := map[string]string{}
	*dst = m
	return s.Object(false, func(k []byte) bool {
		var v string
		if _, dup := m[string(k)]; dup || !s.String(&v) {
			return false
		}
		m[string(k)] = v
		return true
	})
}

// Array reads an array, calling elem to read each element; elem reports false to give up.
func (s *Scanner) Array(elem func() bool) bool {
	if !s.Consume('[') {
		return false
	}
	if s.Consume(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if s.Consume(']') {
			return true
		}
		if !s.Consume(',') {
			return false
		}
	}
}

// Raw reads any JSON value into a copy of its bytes, as json.RawMessage keeps them.
func (s *Scanner) Raw(dst *json.RawMessage) bool {
	s.skipSpace()
	start, j := s.i, s.i
	if j >= len(s.B) {
		return false
	}
	switch s.B[j] {
	case '"':
		if j = skipString(s.B, j); j < 0 {
			return false
		}
	case '{', '[':
		depth := 0
		for j < len(s.B) {
			switch s.B[j] {
			case '"':
				if j = skipString(s.B, j); j < 0 {
					return false
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
			return false
		}
	default: // a number or a literal
		for j < len(s.B) {
			switch s.B[j] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
			default:
				j++
				continue
			}
			break
		}
	}
	v := s.B[start:j]
	if !json.Valid(v) {
		return false
	}
	s.i = j
	*dst = append(json.RawMessage(nil), v...)
	return true
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

// Writer appends the members of a JSON object to B. OK turns false, for good, when a value
// needs what only encoding/json writes; B is then to be thrown away.
type Writer struct {
	B     []byte
	OK    bool
	comma bool
}

// NewWriter starts an object at the end of dst.
func NewWriter(dst []byte) Writer { return Writer{B: append(dst, '{'), OK: true} }

// Close ends the object and returns the bytes, or false if the writer gave up.
func (w *Writer) Close() ([]byte, bool) { return append(w.B, '}'), w.OK }

// Key starts a member named k.
func (w *Writer) Key(k string) {
	if w.comma {
		w.B = append(w.B, ',')
	}
	w.comma = true
	w.Quote(k)
	w.B = append(w.B, ':')
}

// Quote appends s quoted if no character of it needs escaping (json.Marshal escapes <, > and &
// too); otherwise it gives up.
func (w *Writer) Quote(s string) {
	for i := 0; i < len(s); i++ {
		if !quotesAsIs[s[i]] {
			w.OK = false
			return
		}
	}
	w.B = append(append(append(w.B, '"'), s...), '"')
}

// quotesAsIs says which bytes json.Marshal writes in a string as they are: printable ASCII but
// '"', '\\', '<', '>' and '&'. A table, because Quote runs over every id of every event.
var quotesAsIs = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = true
	}
	for _, c := range `"\<>&` {
		t[c] = false
	}
	return t
}()

// Str writes a string member; an empty one only if always.
func (w *Writer) Str(k, v string, always bool) {
	if v != "" || always {
		w.Key(k)
		w.Quote(v)
	}
}

// Int writes an integer member; a zero only if always.
func (w *Writer) Int(k string, v int, always bool) {
	if v != 0 || always {
		w.Key(k)
		w.B = strconv.AppendInt(w.B, int64(v), 10)
	}
}

// Int64 writes an integer member; a zero only if always.
func (w *Writer) Int64(k string, v int64, always bool) {
	if v != 0 || always {
		w.Key(k)
		w.B = strconv.AppendInt(w.B, v, 10)
	}
}

// Array writes a member whose value is a list of n objects, the i-th of which fill writes.
func (w *Writer) Array(k string, n int, fill func(w *Writer, i int)) {
	w.Key(k)
	w.B = append(w.B, '[')
	for i := range n {
		if i > 0 {
			w.B = append(w.B, ',')
		}
		inner := NewWriter(w.B)
		fill(&inner, i)
		var ok bool
		w.B, ok = inner.Close()
		w.OK = w.OK && ok
	}
	w.B = append(w.B, ']')
}

// Float writes a float64 member, a zero only if always, as json.Marshal does in its plain
// notation (1e-6 <= |v| < 1e21); it gives up on the rest.
func (w *Writer) Float(k string, v float64, always bool) {
	if v == 0 && !always {
		return
	}
	if abs := math.Abs(v); v != 0 && (abs < 1e-6 || abs >= 1e21 || math.IsNaN(v)) {
		w.OK = false
		return
	}
	w.Key(k)
	w.B = strconv.AppendFloat(w.B, v, 'f', -1, 64)
}

// Uint writes an unsigned integer member, zero included.
func (w *Writer) Uint(k string, v uint64) {
	w.Key(k)
	w.B = strconv.AppendUint(w.B, v, 10)
}

// Object writes a member whose value is the object fill writes.
func (w *Writer) Object(k string, fill func(*Writer)) {
	w.Key(k)
	inner := NewWriter(w.B)
	fill(&inner)
	var ok bool
	w.B, ok = inner.Close()
	w.OK = w.OK && ok
}

// StringMap writes a map of strings as an object with its keys sorted, as json.Marshal does; an
// empty one not at all (omitempty).
func (w *Writer) StringMap(k string, m map[string]string) {
	if len(m) == 0 {
		return
	}
	keys := make([]string, 0, len(m))
	for key := range m {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	w.Object(k, func(w *Writer) {
		for _, key := range keys {
			w.Str(key, m[key], true)
		}
	})
}

// Bool writes a boolean member.
func (w *Writer) Bool(k string, v bool) {
	w.Key(k)
	w.B = strconv.AppendBool(w.B, v)
}

// BoolPtr writes a boolean member if v is not nil.
func (w *Writer) BoolPtr(k string, v *bool) {
	if v != nil {
		w.Bool(k, *v)
	}
}

// Null writes a member whose value is null.
func (w *Writer) Null(k string) {
	w.Key(k)
	w.B = append(w.B, "null"...)
}

// List writes a list of strings; an empty one not at all.
func (w *Writer) List(k string, v []string) {
	if len(v) == 0 {
		return
	}
	w.Key(k)
	w.B = append(w.B, '[')
	for i, s := range v {
		if i > 0 {
			w.B = append(w.B, ',')
		}
		w.Quote(s)
	}
	w.B = append(w.B, ']')
}

// Time writes a time as MarshalJSON does, giving up on one MarshalJSON might refuse.
func (w *Writer) Time(k string, t time.Time) {
	_, offset := t.Zone()
	if t.Year() < 0 || t.Year() > 9999 || offset%60 != 0 || offset <= -24*3600 || offset >= 24*3600 {
		w.OK = false
		return
	}
	w.Key(k)
	w.B = append(t.AppendFormat(append(w.B, '"'), time.RFC3339Nano), '"')
}

// Raw writes a raw value: empty, it writes nothing unless always, and then null. It gives up on
// a value that is not valid JSON, has whitespace outside its strings or a byte json.Marshal
// would escape inside them: one that Marshal's compacting might change.
func (w *Writer) Raw(k string, v json.RawMessage, always bool) {
	switch {
	case len(v) == 0 && !always:
		return
	case v == nil:
		w.Null(k)
		return
	case len(v) == 0: // json.Marshal fails on it
		w.OK = false
		return
	}
	inString := false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c >= 0x80, c == '<', c == '>', c == '&':
			w.OK = false
			return
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			w.OK = false
			return
		}
	}
	if !json.Valid(v) {
		w.OK = false
		return
	}
	w.Key(k)
	w.B = append(w.B, v...)
}
