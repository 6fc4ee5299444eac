package transport_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/transporttest"
)

// A leader of a replicated log shows its claim on /readyz while NATS answers it, answers 503
// when NATS does not (a standby that found the key expired then takes over), and, once it
// stops leading, sends every new request to the leader at once.
func TestLeaderLetsGo(t *testing.T) {
	t.Parallel()
	log := zaptest.NewLogger(t)
	b, err := broker.Open(broker.Config{Dir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	api, url := transporttest.Serve(t, b, transport.Config{Auth: transport.AuthNone, Logger: log})
	var cut atomic.Bool
	api.SetLeading(transport.Leading{Claim: map[string]string{"id": "claim-1"}, Healthy: func() error {
		if cut.Load() {
			return errors.New("NATS has not answered it for half the leader TTL")
		}
		return nil
	}})
	get := func(method, path string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, url+path, strings.NewReader(`{"queue":"q","type":"t"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	if st, body := get(http.MethodGet, "/readyz"); st != http.StatusOK || body["leader"].(map[string]any)["id"] != "claim-1" {
		t.Fatalf("a healthy leader's /readyz: %d %v", st, body)
	}
	cut.Store(true)
	if st, body := get(http.MethodGet, "/readyz"); st != http.StatusServiceUnavailable || body["error"].(map[string]any)["code"] != "UNAVAILABLE" {
		t.Fatalf("a leader NATS does not answer: %d %v", st, body)
	}
	if st, _ := get(http.MethodPost, "/v1/jobs"); st != http.StatusCreated {
		t.Fatalf("a submit to it is still taken: %d", st)
	}
	api.Detach(func() transport.Standby { return transport.Standby{Leader: "http://next:8080"} })
	for _, path := range []string{"/v1/jobs", "/readyz"} {
		method := http.MethodPost
		if path == "/readyz" {
			method = http.MethodGet
		}
		st, body := get(method, path)
		e, _ := body["error"].(map[string]any)
		if st != http.StatusServiceUnavailable || e["code"] != "STANDBY" || e["details"].(map[string]any)["leader"] != "http://next:8080" {
			t.Fatalf("%s %s after it stopped leading: %d %v", method, path, st, body)
		}
	}
}
