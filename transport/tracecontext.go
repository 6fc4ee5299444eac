package transport

import (
	"context"
	"net/http"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/transport/protocol"
	"github.com/tetherhq/tether/transport/tracing"
	"github.com/tetherhq/tether/transport/wire"
)

// TraceparentHeader is the W3C Trace Context header a submit continues.
const TraceparentHeader = "traceparent"

// traceparentKey is TraceparentHeader as net/http keys a request's headers: Header.Get
// canonicalizes a key that is not, and allocates the canonical copy on every call.
var traceparentKey = http.CanonicalHeaderKey(TraceparentHeader)

// assignFrame is the assign frame of a, with the trace context of its attempt when tracing is
// on (tracing.Tracer.Assigned).
func (s *Server) assignFrame(a actors.Assignment) wire.Frame {
	f := protocol.AssignFrame(a)
	f.Traceparent = s.cfg.Tracing.Assigned(a.Traceparent, a.JobID, a.LeaseID)
	return f
}

// reported starts timing a worker's report f (a complete, fail, release or event frame, or
// its HTTP twin) and returns what to call with the server's answer: with tracing on, it makes
// the report's span under the trace context the worker sent with it.
func (s *Server) reported(f wire.Frame, workerID string) func(error) {
	t := s.cfg.Tracing
	if t == nil || f.Type == wire.FrameEvent || f.Traceparent == "" {
		return unreported
	}
	// The closure keeps what it needs, not the frame: with tracing off nothing is moved to
	// the heap.
	name, tp, job, lease, start := "tether."+f.Type, f.Traceparent, f.JobID, f.LeaseID, time.Now()
	return func(err error) { t.Reported(name, tp, job, lease, workerID, start, err) }
}

func unreported(error) {}

// startSubmit opens the span of a submit (when tracing is on) and returns the traceparent its
// jobs continue: the submit's span's, or with tracing off the request's traceparent header when
// it holds a valid one (W3C Trace Context: a header that does not parse is ignored, never
// refused), else "".
func (s *Server) startSubmit(r *request, name string) (string, tracing.Span) {
	caller, _ := ParseTraceparent(r.Header.Get(traceparentKey))
	return s.cfg.Tracing.StartSubmit(r.Context(), name, caller, r.by.tenant)
}

// withTraceparent is ctx carrying tp for the broker's Submit, if there is one.
func withTraceparent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return broker.WithTraceparent(ctx, tp)
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
