// Package transporttest serves a broker over real HTTP for tests: the transport's handler
// behind httptest's listener, configured as `tether server` configures its own.
package transporttest

import (
	"net/http/httptest"
	"testing"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/transport"
)

// Serve serves b with cfg until the test ends, then shuts the server down and closes b. It
// returns the API server and its base URL.
func Serve(t testing.TB, b *broker.Broker, cfg transport.Config) (*transport.Server, string) {
	t.Helper()
	api, err := transport.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	api.Attach(b)
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	srv := httptest.NewUnstartedServer(api)
	srv.Config = transport.NewHTTPServer(api, log)
	srv.Start()
	t.Cleanup(func() {
		api.Shutdown()
		srv.Close()
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return api, srv.URL
}
