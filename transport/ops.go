package transport

import (
	"errors"
	"net/http"

	"github.com/tetherhq/tether/transport/wire"
)

// Readiness reports whether the server can take traffic: nil once recovery is done, else the
// reason it cannot (answered as NOT_READY, unless it is an answer of its own). Status is a JSON-encodable summary shown on /readyz.
type Readiness interface {
	Ready() error
	Status() any
}

// OpsHandler serves the operations endpoints:
//
//	GET /healthz  200 while the process is up
//	GET /readyz   200 with the status once ready, 503 with the reason before that
func OpsHandler(r Readiness) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := r.Ready(); err != nil {
			var e *apiError // an answer of its own (a standby's), else NOT_READY
			if !errors.As(err, &e) {
				e = errorf(wire.CodeNotReady, "%v", err)
			}
			writeError(w, e)
			return
		}
		writeJSON(w, http.StatusOK, r.Status())
	})
	return mux
}

// archive serves GET /v1/archive: the server's archive and what its scrubs found, which the
// dashboard's overview shows. It is the server's, not a tenant's: it names segments and seqs,
// never a job or its data.
func (s *Server) archive(r *request) error {
	st := r.b.Archive()
	out := wire.Archive{Segments: st.Segments, Bytes: st.ArchiveBytes, OldestHotSeq: st.OldestHotSeq, Damaged: []wire.DamagedSegment{},
		Scrub: wire.ArchiveScrub{EverySeconds: st.ScrubEvery.Seconds(), Passes: st.ScrubPasses, Bytes: st.ScrubbedBytes}}
	for _, d := range st.Damaged {
		out.Damaged = append(out.Damaged, wire.DamagedSegment{Segment: d.Name, FirstSeq: d.First, LastSeq: d.Last, Reason: d.Reason, FoundAt: d.FoundAt.UTC()})
	}
	if !st.ScrubLastEnd.IsZero() {
		out.Scrub.LastEnd = new(st.ScrubLastEnd.UTC())
	}
	return r.reply(http.StatusOK, &out)
}
