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
