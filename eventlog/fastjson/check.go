package fastjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrNotJSON is Check's answer to a text whose structure is not JSON's. It says no more: a
// decoder explains it better.
var ErrNotJSON = errors.New("is not valid JSON")

// Check refuses what a JSON text that encoding/json would take may still hold and tether does
// not store, because the value would then read back differently, or not at all, in other
// clients: a byte that is not UTF-8 (encoding/json keeps it in a raw value, and turns it into
// U+FFFD in a string), nesting deeper than depthMax arrays and objects, or a key twice in one
// object (encoding/json keeps the last; other parsers the first, or refuse). Keys are compared
// as their escapes decode. It also holds the text to I-JSON (RFC 7493), which every client
// reads alike: a number beyond the range of an IEEE 754 double (1e999, which Go refuses and
// Python reads as inf and cannot write back) and a string or key with a lone surrogate
// (\ud800 without its pair, which Go reads as U+FFFD and Python keeps) are refused. An error's
// message reads after its subject ("the body ...") and names where the value is, as a path
// (payload.items[2]) and a byte offset.
//
// Check reads the structure of the text, not the grammar of its numbers and literals, which
// is the decoder's to check: it may take what is not JSON, and refuses with ErrNotJSON what it
// cannot read.
func Check(b []byte, depthMax int) error {
	if err := CheckUTF8(b); err != nil {
		return err
	}
	var stack [8]container // for the usual text, kept off the heap: run appends to local slices only
	var keys [16]span
	c := checker{Scanner{B: b}}
	return c.run(depthMax, stack[:0], keys[:0])
}

// CheckUTF8 refuses a text that is not UTF-8, naming the first byte that is not, in a message
// that reads after its subject as Check's do.
func CheckUTF8(b []byte) error {
	if utf8.Valid(b) { // the fast way, for the texts that are
		return nil
	}
	at := 0
	for {
		r, size := utf8.DecodeRune(b[at:])
		if r == utf8.RuneError && size <= 1 {
			return fmt.Errorf("is not UTF-8: byte %#x at offset %d", b[at], at)
		}
		at += size
	}
}

// container is an array or an object Check is in.
type container struct {
	object bool
	keys   int                 // where the object's keys start among the keys of every object open
	index  int                 // the array's element being read
	set    map[string]struct{} // the object's keys, once they are too many to compare in turn
}

// keysCompared is how many keys an object may have before Check looks the next up in a set
// rather than comparing it with each.
const keysCompared = 16

// span is a key: where its bytes are in the text, between its quotes.
type span struct {
	start, end int
	escaped    bool
}

// checker is a Scanner that Check reads its text with.
type checker struct{ Scanner }

// run reads the text, with stack the containers open, and keys the keys of every object open,
// each object's after its parent's.
func (c *checker) run(depthMax int, stack []container, keys []span) error {
	var err error
	for {
		// A value starts at c.i.
		c.skipSpace()
		if c.i == len(c.B) {
			return ErrNotJSON
		}
		switch ch := c.B[c.i]; ch {
		case '{', '[':
			if len(stack) == depthMax {
				return fmt.Errorf("nests deeper than %d levels of arrays and objects (at offset %d)", depthMax, c.i)
			}
			stack = append(stack, container{object: ch == '{', keys: len(keys)})
			c.i++
			c.skipSpace()
			if c.i < len(c.B) && (c.B[c.i] == '}' || c.B[c.i] == ']') {
				break // empty: closed below
			}
			if ch == '{' {
				if keys, err = c.key(stack, keys); err != nil {
					return err
				}
			}
			continue
		case '"':
			end, lone := scanString(c.B, c.i)
			if end < 0 {
				return ErrNotJSON
			}
			if lone >= 0 {
				return fmt.Errorf("has a lone surrogate %s in the string at %s (I-JSON, RFC 7493; at offset %d)",
					c.B[lone:lone+6], c.valuePath(stack, keys), lone)
			}
			c.i = end
		default: // a number or a literal, whose grammar is the decoder's to check
			b, i := c.B, c.i
			exponent := false
			for i < len(b) && !delimiter(b[i]) {
				exponent = exponent || b[i] == 'e' || b[i] == 'E'
				i++
			}
			if i == c.i {
				return ErrNotJSON
			}
			// Only an exponent or hundreds of digits reach past a double's 1.8e308.
			if (exponent || i-c.i > numberDigitsSafe) && beyondDouble(b[c.i:i]) {
				return fmt.Errorf("has the number %s at %s, beyond the range of a double (I-JSON, RFC 7493; at offset %d)",
					clipNumber(b[c.i:i]), c.valuePath(stack, keys), c.i)
			}
			c.i = i
		}
		// After a value: close what it ends, then go on to the next member or element.
		for {
			c.skipSpace()
			if len(stack) == 0 {
				if c.i != len(c.B) {
					return ErrNotJSON
				}
				return nil
			}
			if c.i == len(c.B) {
				return ErrNotJSON
			}
			top := &stack[len(stack)-1]
			if ch := c.B[c.i]; ch == '}' && top.object || ch == ']' && !top.object {
				keys = keys[:top.keys]
				stack = stack[:len(stack)-1]
				c.i++
				continue
			}
			if c.B[c.i] != ',' {
				return ErrNotJSON
			}
			c.i++
			if !top.object {
				top.index++
			} else if keys, err = c.key(stack, keys); err != nil {
				return err
			}
			break
		}
	}
}

// numberDigitsSafe is the longest number without an exponent that Check does not parse: a
// double's largest, 1.8e308, has 309 digits.
const numberDigitsSafe = 300

// beyondDouble reports whether number, read as JSON's grammar reads it, is past the largest
// double (strconv and encoding/json refuse it; Python reads it as inf). A number that is too
// small becomes 0, as it does in every client; a token that is not a number is the decoder's.
func beyondDouble(number []byte) bool {
	_, err := strconv.ParseFloat(string(number), 64)
	return errors.Is(err, strconv.ErrRange)
}

// clipNumber quotes a number for a message, cut short if it is long.
func clipNumber(n []byte) string {
	const keep = 24
	if len(n) <= keep {
		return string(n)
	}
	return string(n[:keep]) + "..."
}

// scanString returns the end of the string that starts at b[i] (past its closing quote; -1 if
// it does not end), and where its first lone surrogate escape is (-1 if none): a \uD800-\uDBFF
// not followed at once by a \uDC00-\uDFFF, or one of those not after one of these. A \u escape
// that is not four hex digits is the decoder's to refuse.
func scanString(b []byte, i int) (end, lone int) {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			if i+5 < len(b) && b[i+1] == 'u' {
				if u, ok := hex4(b[i+2 : i+6]); ok && u >= 0xd800 && u <= 0xdfff {
					low, ok := uint16(0), false
					if i+11 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
						low, ok = hex4(b[i+8 : i+12])
					}
					if u >= 0xdc00 || !ok || low < 0xdc00 || low > 0xdfff {
						return skipString(b, i-1), i
					}
					i += 6 // the pair's second half
				}
				i += 5
				continue
			}
			i++
		case '"':
			return i + 1, -1
		}
	}
	return -1, -1
}

// hex4 reads four hex digits.
func hex4(b []byte) (uint16, bool) {
	var u uint16
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		u = u<<4 | uint16(c)
	}
	return u, true
}

// delimiter reports whether c ends a number or a literal.
func delimiter(c byte) bool {
	switch c {
	case ',', ']', '}', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// key reads a key of the innermost object and the colon after it, and returns keys with it,
// refusing a key the object already has.
func (c *checker) key(stack []container, keys []span) ([]span, error) {
	c.skipSpace()
	if c.i == len(c.B) || c.B[c.i] != '"' {
		return keys, ErrNotJSON
	}
	b, i := c.B, c.i+1 // locals, which the loop keeps in registers
	k := span{start: i}
	for ; i < len(b) && b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
			k.escaped = true
		}
	}
	if i >= len(b) {
		return keys, ErrNotJSON
	}
	k.end, c.i = i, i+1
	if k.escaped && !json.Valid(b[k.start-1:c.i]) {
		return keys, ErrNotJSON
	}
	if k.escaped {
		if _, lone := scanString(b, k.start-1); lone >= 0 {
			return keys, fmt.Errorf("has a lone surrogate %s in a key of the object at %s (I-JSON, RFC 7493; at offset %d)",
				b[lone:lone+6], orTop(c.path(stack, keys)), lone)
		}
	}
	top := &stack[len(stack)-1]
	seen := keys[top.keys:]
	dup := false
	switch {
	case top.set != nil:
		_, dup = top.set[c.name(k)]
	case len(seen) < keysCompared:
		for _, s := range seen {
			if dup = (s.escaped || k.escaped || s.end-s.start == k.end-k.start) && c.same(s, k); dup { // most keys differ in length
				break
			}
		}
	default:
		top.set = make(map[string]struct{}, 2*len(seen))
		for _, s := range seen {
			top.set[c.name(s)] = struct{}{}
		}
		_, dup = top.set[c.name(k)]
	}
	if dup {
		if where := c.path(stack, keys); where != "" {
			return keys, fmt.Errorf("has the key %s twice in the object at %s", strconv.Quote(c.name(k)), where)
		}
		return keys, fmt.Errorf("has the key %s twice", strconv.Quote(c.name(k)))
	}
	if top.set != nil {
		top.set[c.name(k)] = struct{}{}
	}
	c.skipSpace()
	if c.i == len(c.B) || c.B[c.i] != ':' {
		return keys, ErrNotJSON
	}
	c.i++
	return append(keys, k), nil
}

// name is a key as it decodes.
func (c *checker) name(k span) string {
	if !k.escaped {
		return string(c.B[k.start:k.end])
	}
	var s string
	_ = json.Unmarshal(c.B[k.start-1:k.end+1], &s) // key checked that it decodes
	return s
}

func (c *checker) same(x, y span) bool {
	if !x.escaped && !y.escaped {
		return bytes.Equal(c.B[x.start:x.end], c.B[y.start:y.end])
	}
	return c.name(x) == c.name(y)
}

// valuePath names the value that starts at the checker's place by the keys and indexes that
// lead to it, as payload.items[2]; "the top level" for the text's own value.
func (c *checker) valuePath(stack []container, keys []span) string {
	if len(stack) == 0 {
		return "the top level"
	}
	p, top := c.path(stack, keys), stack[len(stack)-1]
	switch {
	case !top.object:
		return p + "[" + strconv.Itoa(top.index) + "]"
	case p == "":
		return c.name(keys[len(keys)-1])
	}
	return p + "." + c.name(keys[len(keys)-1])
}

// orTop is a container's path, or "the top level" for the text's own.
func orTop(path string) string {
	if path == "" {
		return "the top level"
	}
	return path
}

// path names the innermost open container by the keys and indexes that lead to it, as
// jobs[2].payload; "" for the top level.
func (c *checker) path(stack []container, keys []span) string {
	var p strings.Builder
	for n := range len(stack) - 1 {
		if f := stack[n]; !f.object {
			fmt.Fprintf(&p, "[%d]", f.index)
			continue
		}
		if p.Len() > 0 {
			p.WriteByte('.')
		}
		p.WriteString(c.name(keys[stack[n+1].keys-1])) // the key whose value holds the next container
	}
	return p.String()
}
