package fastjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

func TestCheck(t *testing.T) {
	manyKeys := func(last string) string {
		var b strings.Builder
		b.WriteString(`{"p":{`)
		for i := range 40 {
			fmt.Fprintf(&b, `"k%d":%d,`, i, i)
		}
		return b.String() + `"` + last + `":0}}`
	}
	for _, c := range []struct{ name, text, want string }{
		{"plain", `{"queue":"q","payload":{"a":[1,{"a":2}],"b":"é"},"labels":{}}`, ""},
		{"scalars", ` "x" `, ""},
		{"the same key in sibling objects", `[{"a":1},{"a":2}]`, ""},
		{"a key that is a prefix of another", `{"ab":1,"a":2,"abc":3}`, ""},
		{"many keys", manyKeys("k40"), ""},
		{"deep as allowed", strings.Repeat("[", 6) + strings.Repeat("]", 6), ""},
		{"a raw byte in a string", "{\"payload\":\"\xff\xfe\"}", "is not UTF-8: byte 0xff at offset 12"},
		{"a raw byte in a key", "{\"p\":{\"k\xc3\":1}}", "is not UTF-8: byte 0xc3 at offset 8"},
		{"a surrogate encoded raw", "\"\xed\xa0\x80\"", "is not UTF-8: byte 0xed at offset 1"},
		{"too deep", `{"a":` + strings.Repeat("[", 6) + strings.Repeat("]", 6) + `}`, "nests deeper than 6 levels of arrays and objects (at offset 10)"},
		{"a key twice at the top", `{"queue":"a","type":"t","queue":"b"}`, `has the key "queue" twice`},
		{"a key twice, one escaped", `{"queue":"a","qu\u0065ue":"b"}`, `has the key "queue" twice`},
		{"a key twice in a payload", `{"jobs":[{},{"payload":{"x":{"a":1,"b":[],"a":2}}}]}`, `has the key "a" twice in the object at jobs[1].payload.x`},
		{"a key twice among many", manyKeys("k7"), `has the key "k7" twice in the object at p`},
		{"not JSON", `{"a":1,}`, "is not valid JSON"},
		{"mismatched", `[1}`, "is not valid JSON"},
		{"unclosed", `{"a":[1`, "is not valid JSON"},
		{"two values", `{} {}`, "is not valid JSON"},
		{"empty", ` `, "is not valid JSON"},
		{"a number past a double", `{"jobs":[{"payload":{"x":[1,1e999]}}]}`, "has the number 1e999 at jobs[0].payload.x[1], beyond the range of a double (I-JSON, RFC 7493; at offset 28)"},
		{"a negative one, at the top", `-1.8E+308`, "has the number -1.8E+308 at the top level, beyond the range of a double (I-JSON, RFC 7493; at offset 0)"},
		{"309 digits", `{"n":2` + strings.Repeat("0", 308) + `}`, "has the number 200000000000000000000000... at n, beyond the range of a double (I-JSON, RFC 7493; at offset 5)"},
		{"the largest double", `[1.7976931348623157e308, 1e-400, 0.0, -0, 12345678901234567890]`, ""},
		{"a lone high surrogate", `{"payload":{"s":"ab\ud800"}}`, `has a lone surrogate \ud800 in the string at payload.s (I-JSON, RFC 7493; at offset 19)`},
		{"a lone low surrogate", `["\udc00\ud83d\ude00"]`, `has a lone surrogate \udc00 in the string at [0] (I-JSON, RFC 7493; at offset 2)`},
		{"a high surrogate then another escape", `"\uD800\u0041"`, `has a lone surrogate \uD800 in the string at the top level (I-JSON, RFC 7493; at offset 1)`},
		{"a lone surrogate in a key", `{"p":{"\udfff":1}}`, `has a lone surrogate \udfff in a key of the object at p (I-JSON, RFC 7493; at offset 7)`},
		{"a lone surrogate in a top-level key", `{"\ud800x":1}`, `has a lone surrogate \ud800 in a key of the object at the top level (I-JSON, RFC 7493; at offset 2)`},
		{"pairs and escaped backslashes", `{"\ud83d\ude00":"\uD83D\uDE00","a":"\\ud800","b":"x\\\\ud800"}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Check([]byte(c.text), 6)
			if got := fmt.Sprint(err); err == nil && c.want != "" || err != nil && got != c.want {
				t.Fatalf("Check(%q) = %v, want %q", c.text, err, c.want)
			}
		})
	}
}

// Check refuses a JSON text exactly when it is not UTF-8, nests too deep, repeats a key in an
// object, or is not I-JSON (a number past a double's range, a lone surrogate in a string or a
// key), as a reading of encoding/json's tokens finds them.
func FuzzCheckMatchesTokens(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"b":{"a":[1,2,{"c":null}]}}`, `{"a":1,"a":2}`, `{"a":{"b":1,"b":2}}`, `[{"a":1},{"a":1}]`,
		`{"a":1,"\u0061":2}`, `{"\ud800":1,"\ud801":2}`, "{\"a\":\"\xff\"}", "{\"\xfe\":1}", `[[[[[[]]]]]]`, `[[[[]]]]`,
		`{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k3":0}`,
		` 1 `, `"x"`, `{}`, `[]`, `{"a":[]}`, `{"a":"\"}"}`,
		`{"p":1e999}`, `[-1E+400]`, `1e-400`, `1.7976931348623157e308`, `1.7976931348623159e308`, `{"s":"\ud800"}`, `["\udc00\ud800"]`,
		`{"\ud83d\ude00":"\ud83d\ude00"}`, `{"\udfff":1}`, `"\ud800\u0041"`, `"\\ud800"`, `"\ud800\\udc00"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		const depthMax = 4
		err := Check(text, depthMax) // never panics, whatever it is given
		if !json.Valid(text) {
			return
		}
		if want := tokenProblem(t, text, depthMax); (err == nil) != (want == "") {
			t.Fatalf("Check(%q) = %v; the tokens say %q", text, err, want)
		}
	})
}

// tokenProblem reads a valid JSON text's tokens and says what Check should refuse in it.
func tokenProblem(t *testing.T, text []byte, depthMax int) string {
	if !utf8.Valid(text) {
		return "not UTF-8"
	}
	type level struct {
		object, keyNext bool
		seen            map[string]bool
	}
	var stack []*level
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber() // a number past float64 is still valid JSON: the check below reads it
	for {
		from := dec.InputOffset()
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return ""
		}
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		switch v := tok.(type) {
		case json.Number:
			if f, err := strconv.ParseFloat(string(v), 64); err != nil || math.IsInf(f, 0) {
				return "a number past a double"
			}
		case string: // a key or a value: its escapes, as they were sent
			raw := text[from:dec.InputOffset()]
			if loneSurrogate(raw[bytes.IndexByte(raw, '"'):]) {
				return "a lone surrogate"
			}
		}
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].keyNext {
			if k, ok := tok.(string); ok {
				if stack[n-1].seen[k] {
					return "a key twice"
				}
				stack[n-1].seen[k], stack[n-1].keyNext = true, false
				continue
			}
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) == depthMax {
				return "too deep"
			}
			stack = append(stack, &level{object: tok == json.Delim('{'), keyNext: true, seen: map[string]bool{}})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if n := len(stack); n > 0 { // a value ended
			stack[n-1].keyNext = true
		}
	}
}

// loneSurrogate reports whether a JSON string, quotes and escapes as sent, holds a UTF-16
// surrogate that is not half of a pair.
func loneSurrogate(quoted []byte) bool {
	var units []uint16
	for i := 1; i < len(quoted)-1; i++ {
		if quoted[i] != '\\' {
			units = append(units, 'x') // a character sent as itself: UTF-8, never a surrogate
			continue
		}
		if i++; quoted[i] == 'u' {
			u, err := strconv.ParseUint(string(quoted[i+1:i+5]), 16, 16)
			if err != nil {
				panic(err) // the text is valid JSON
			}
			units = append(units, uint16(u))
			i += 4
		} else {
			units = append(units, 'x')
		}
	}
	for i := 0; i < len(units); i++ {
		if !utf16.IsSurrogate(rune(units[i])) {
			continue
		}
		if i+1 == len(units) || utf16.DecodeRune(rune(units[i]), rune(units[i+1])) == utf8.RuneError {
			return true
		}
		i++
	}
	return false
}

func BenchmarkCheck(b *testing.B) {
	var payload strings.Builder
	for i := range 40 {
		fmt.Fprintf(&payload, `{"id":%d,"name":"item number %d","tags":["a","b","c"],"price":12.5,"note":"ünïcödé text"},`, i, i)
	}
	for _, c := range []struct{ name, text string }{
		{"bench", `{"queue":"bench-0123","type":"noop","payload":{"sent":1763772000000000000}}`},
		{"4KiB", `{"queue":"q","type":"t","payload":{"items":[` + strings.TrimSuffix(payload.String(), ",") + `]}}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			text := []byte(c.text)
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				if err := Check(text, 512); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
