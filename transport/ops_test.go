package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

type fakeReadiness struct{ err error }

func (f fakeReadiness) Ready() error { return f.err }
func (f fakeReadiness) Status() any  { return map[string]int{"head_seq": 42} }

func TestOpsHandler(t *testing.T) {
	t.Parallel()
	get := func(h http.Handler, path string) (int, map[string]any) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: body is not JSON: %q", path, rec.Body.String())
		}
		return rec.Code, body
	}
	notReady := OpsHandler(fakeReadiness{err: errors.New("replaying the log")})
	if code, _ := get(notReady, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz while recovering = %d, want 200", code)
	}
	code, body := get(notReady, "/readyz")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz while recovering = %d, want 503", code)
	}
	e, _ := body["error"].(map[string]any)
	if e["code"] != "NOT_READY" || e["message"] != "replaying the log" {
		t.Fatalf("/readyz error body = %v", body)
	}
	if details, ok := e["details"].(map[string]any); !ok || len(details) != 0 {
		t.Fatalf("/readyz error details = %#v, want {}", e["details"])
	}
	code, body = get(OpsHandler(fakeReadiness{}), "/readyz")
	if code != http.StatusOK || body["head_seq"] != float64(42) {
		t.Fatalf("/readyz when ready = %d %v", code, body)
	}
}

// A standby answers /readyz and the API with 503 STANDBY, the leader's URL in the details
// and the Tether-Leader header; with no leader known, neither.
func TestStandbyAnswers(t *testing.T) {
	t.Parallel()
	s, err := NewServer(Config{Auth: AuthNone})
	if err != nil {
		t.Fatal(err)
	}
	leader := "http://leader:8080"
	s.SetStandby(func() Standby { return Standby{Leader: leader, HeadSeq: 7} })
	for _, req := range []*http.Request{
		httptest.NewRequest(http.MethodGet, "/readyz", nil),
		httptest.NewRequest(http.MethodPost, "/v1/jobs", nil),
	} {
		req.Host = "127.0.0.1:8080"
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		var body struct {
			Error struct {
				Code    string
				Details map[string]any
			}
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &body)
		if rec.Code != http.StatusServiceUnavailable || body.Error.Code != "STANDBY" || body.Error.Details["leader"] != leader ||
			body.Error.Details["head_seq"] != float64(7) || rec.Header().Get("Tether-Leader") != leader {
			t.Fatalf("%s %s: %d %s %s", req.Method, req.URL, rec.Code, rec.Header(), rec.Body)
		}
	}
	leader = ""
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Tether-Leader") != "" || bytes.Contains(rec.Body.Bytes(), []byte(`"leader"`)) {
		t.Fatalf("/readyz with no leader known: %d %s %s", rec.Code, rec.Header(), rec.Body)
	}
}
