package transport

import (
	"context"

	"github.com/tetherhq/tether/actors/broker"
)

// TraceparentHeader is the W3C Trace Context header a submit continues.
const TraceparentHeader = "traceparent"

// withTraceparent returns the request's context carrying its traceparent header, when it holds a
// valid one (W3C Trace Context: a header that does not parse is ignored, never refused).
func withTraceparent(ctx context.Context, header string) context.Context {
	if tp, ok := ParseTraceparent(header); ok {
		return broker.WithTraceparent(ctx, tp)
	}
	return ctx
}

// ParseTraceparent checks a traceparent header and returns it as version 00:
// version-traceid-parentid-flags, lowercase hex, with neither id all zeros and version ff
// refused. A later version is read by its first four fields, as the specification asks.
func ParseTraceparent(h string) (string, bool) {
	if len(h) < 55 || (len(h) > 55 && h[55] != '-') || h[2] != '-' || h[35] != '-' || h[52] != '-' {
		return "", false
	}
	version, traceID, parentID, flags := h[0:2], h[3:35], h[36:52], h[53:55]
	if !lowerHex(version) || version == "ff" || (version == "00" && len(h) != 55) ||
		!lowerHex(traceID) || allZeros(traceID) || !lowerHex(parentID) || allZeros(parentID) || !lowerHex(flags) {
		return "", false
	}
	return "00-" + traceID + "-" + parentID + "-" + flags, true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func allZeros(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '0' {
			return false
		}
	}
	return true
}
