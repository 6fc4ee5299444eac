package signing

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"testing"
)

// Keys and signatures arrive in standard or URL-safe base64, padded or not (seed 002's wire);
// nothing else is taken.
func TestDecodeBase64(t *testing.T) {
	raw := []byte{0xfb, 0xff, 0xbf, 0x01, 0x02} // + and / in standard base64, - and _ in URL-safe
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		s := enc.EncodeToString(raw)
		if got, err := DecodeBase64(s); err != nil || !bytes.Equal(got, raw) {
			t.Errorf("%q: %x, %v", s, got, err)
		}
	}
	for _, bad := range []string{"+_-/AQI", "AQI===", "AQ=I", "AQ\nI", "AQ I", "AQ!", "AR=="} {
		if got, err := DecodeBase64(bad); err == nil {
			t.Errorf("%q was taken as %x", bad, got)
		}
	}
}

// TestOutputHashIsOfTheCanonicalJSON holds OutputHash's shortcut for outputs that are their own
// canonical form to the hash of Canonical's bytes, on the shapes that take it and those that
// must not (whitespace, objects, escapes), and to Canonical's error on invalid JSON.
func TestOutputHashIsOfTheCanonicalJSON(t *testing.T) {
	for _, raw := range []string{
		`null`, `true`, `12`, `1.50e3`, `"done"`, `[1,2,"x"]`, `"a b"`, ` 1 `, `[1, 2]`, "\"a\tb\"",
		`{"b":1,"a":2}`, `"\u00e9"`, `"\/"`, `[{"z":1,"a":[]}]`, `nul`, `[1,]`, `"open`, ``, `1 2`,
	} {
		got, err := OutputHash(json.RawMessage(raw))
		c, cerr := Canonical(json.RawMessage(raw))
		if (err != nil) != (cerr != nil) {
			t.Errorf("%q: OutputHash error %v, Canonical error %v", raw, err, cerr)
			continue
		}
		if err != nil {
			continue
		}
		sum := sha256.Sum256(c)
		if want := hex.EncodeToString(sum[:]); got != want {
			t.Errorf("%q: OutputHash %s, the SHA-256 of its canonical JSON %q is %s", raw, got, c, want)
		}
	}
}

// TestOutputHashOfAPlainOutputAllocatesOnce: a completion's output that is already canonical
// (most are) is hashed without a copy, and its digits cost only the string returned.
func TestOutputHashOfAPlainOutputAllocatesOnce(t *testing.T) {
	output := json.RawMessage(`{"n":1}`)[5:6] // "1", not a constant the compiler could fold
	if n := testing.AllocsPerRun(100, func() { _, _ = OutputHash(output) }); n > 1 {
		t.Fatalf("OutputHash(%s) makes %v allocations; want 1", output, n)
	}
}
