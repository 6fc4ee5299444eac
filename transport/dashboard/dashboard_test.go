package dashboard_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tetherhq/tether/transport/dashboard"
)

func TestServesThePageAndItsAssetsOnly(t *testing.T) {
	t.Parallel()
	h := dashboard.Handler()
	for _, tc := range []struct {
		path                  string
		status                int
		contentType, contains string
	}{
		{"/", 200, "text/html", `<script src="/ui/app.js"`},
		{"/ui/app.js", 200, "text/javascript", "readEvents"},
		{"/ui/app.css", 200, "text/css", "@media (max-width: 700px)"},
		{"/ui/missing.js", 404, "", ""},
		{"/anything-else", 404, "", ""},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
		body, _ := io.ReadAll(rec.Body)
		if rec.Code != tc.status {
			t.Errorf("GET %s: %d, want %d", tc.path, rec.Code, tc.status)
			continue
		}
		if tc.status != http.StatusOK {
			continue
		}
		if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, tc.contentType) {
			t.Errorf("GET %s: Content-Type %q, want %s", tc.path, ct, tc.contentType)
		}
		if !strings.Contains(string(body), tc.contains) {
			t.Errorf("GET %s: the body lacks %q", tc.path, tc.contains)
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q", tc.path, csp)
		}
		if rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", tc.path)
		}
	}
}
