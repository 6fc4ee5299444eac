package signing

import (
	"bytes"
	"encoding/base64"
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
