package transport_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/gorilla/websocket"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// testCA is a private certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tether test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes a server certificate for localhost and 127.0.0.1, with serial, valid from an
// hour ago for two hours, and its key into certFile and keyFile.
func (ca *testCA) issue(t *testing.T, serial int64, certFile, keyFile string) {
	t.Helper()
	ca.issueValid(t, serial, certFile, keyFile, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
}

// issueValid is issue with the certificate valid from notBefore to notAfter.
func (ca *testCA) issueValid(t *testing.T, serial int64, certFile, keyFile string, notBefore, notAfter time.Time) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: notBefore, NotAfter: notAfter, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// serveTLS serves a broker's API over HTTPS with the certificate files, through wrap if set.
func serveTLS(t *testing.T, certs *transport.CertReloader, wrap func(http.Handler) http.Handler) (url string, b *broker.Broker) {
	t.Helper()
	log := zaptest.NewLogger(t)
	b, err := broker.Open(broker.Config{Dir: "/data", FS: vfs.NewMem(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	api, err := transport.NewServer(transport.Config{Auth: transport.AuthNone, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	api.Attach(b)
	var h http.Handler = api
	if wrap != nil {
		h = wrap(api)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Not the test's logger: http.Server.Close does not wait for a connection's goroutine,
	// which may still log a handshake error (the client that does not know the CA) after the
	// test has ended, and testing refuses that.
	srv := transport.NewHTTPServer(h, zap.NewNop())
	srv.TLSConfig = certs.TLSConfig()
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { api.Shutdown(); _ = srv.Close(); _ = b.Close() })
	return "https://localhost:" + strings.TrimPrefix(ln.Addr().String(), "127.0.0.1:"), b
}

// A worker over WSS, a worker that falls back to HTTPS long-polling, a certificate rotated
// under a running server, and a client that does not know the CA, which is refused.
func TestTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newTestCA(t)
	certFile, keyFile, caFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")
	ca.issue(t, 1, certFile, keyFile)
	if err := os.WriteFile(caFile, ca.pem, 0o644); err != nil {
		t.Fatal(err)
	}
	tlsConfig, err := client.TLSConfigWithCA(caFile)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := transport.NewCertReloader(certFile, keyFile, time.Now, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	certs.CheckEvery = 0 // every handshake looks at the files: the rotation shows at once

	runJobOver := func(t *testing.T, url, tr string) string {
		t.Helper()
		c := client.New(url, "", client.NewHTTPClient(tlsConfig))
		reg, err := c.RegisterWorker(ctx(t), wire.RegisterRequest{Name: "w", Queues: []string{"q"}, Capacity: 1})
		if err != nil {
			t.Fatal(err)
		}
		connected := make(chan string, 8)
		w := &client.Worker{Server: url, Token: reg.WorkerToken, Transport: tr, TLSConfig: tlsConfig, Logger: zaptest.NewLogger(t),
			OnConnect: func(tr string) { connected <- tr },
			Handler:   func(context.Context, *client.Job) (any, error) { return "over tls", nil }}
		runUntilTheEnd(t, w)
		if j := await(t, c, submit(t, c, `{}`).ID); j.Status != "succeeded" {
			t.Fatalf("job %+v", j)
		}
		return firstConnect(t, connected)
	}
	t.Run("websocket", func(t *testing.T) {
		url, _ := serveTLS(t, certs, nil)
		if tr := runJobOver(t, url, client.TransportAuto); tr != client.TransportWebSocket {
			t.Fatalf("connected over %s", tr)
		}
	})
	t.Run("fallback to long-polling", func(t *testing.T) {
		url, _ := serveTLS(t, certs, func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if websocket.IsWebSocketUpgrade(r) {
					http.Error(w, "this proxy does not pass WebSockets", http.StatusBadRequest)
					return
				}
				h.ServeHTTP(w, r)
			})
		})
		if tr := runJobOver(t, url, client.TransportAuto); tr != client.TransportLongPoll {
			t.Fatalf("connected over %s", tr)
		}
	})
	t.Run("rotation and an unknown CA", func(t *testing.T) {
		url, _ := serveTLS(t, certs, nil)
		host := strings.TrimPrefix(url, "https://")
		serial := func() int64 {
			t.Helper()
			conn, err := tls.Dial("tcp", host, tlsConfig)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
		}
		if s := serial(); s != 1 {
			t.Fatalf("serial %d", s)
		}
		ca.issue(t, 2, certFile, keyFile)
		if s := serial(); s != 2 {
			t.Fatalf("after rotation, serial %d", s)
		}
		// Half a rotation (the certificate written, its key not yet) keeps the last good pair.
		if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
			t.Fatal(err)
		}
		if s := serial(); s != 2 {
			t.Fatalf("a broken pair served serial %d", s)
		}

		// Refused at once, though told to go on trying a read no server takes: retrying does not
		// mend a CA not given.
		untrusting := client.New(url, "", nil)
		untrusting.RetryFor = time.Hour
		rctx := ctx(t)
		_, err := untrusting.Workers(rctx)
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) || rctx.Err() != nil {
			t.Fatalf("a client without the CA: %v (its context: %v)", err, rctx.Err())
		}
		w := &client.Worker{Server: url, Token: "tw_x", Logger: zaptest.NewLogger(t), Handler: func(context.Context, *client.Job) (any, error) { return nil, nil }}
		if err := w.Run(ctx(t)); !errors.As(err, &unknown) {
			t.Fatalf("a worker without the CA returned %v, want the certificate refused", err)
		}
	})
}

// A certificate every client would refuse for its dates is never served: one expired or not yet
// valid at start is refused, naming the file and the date; one rotated in keeps the last good
// pair in service. The served certificate's coming expiry is logged a week ahead, once a day.
func TestCertificateDates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newTestCA(t)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	day := 24 * time.Hour
	issued := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	notAfter := issued.Add(30 * day)
	ca.issueValid(t, 1, certFile, keyFile, issued, notAfter)
	at := func(now time.Time) func() time.Time { return func() time.Time { return now } }

	for _, tc := range []struct {
		now  time.Time
		want string
	}{
		{notAfter.Add(time.Second), "expired at 2026-03-31T00:00:00Z"},
		{issued.Add(-time.Second), "not valid before 2026-03-01T00:00:00Z"},
	} {
		if _, err := transport.NewCertReloader(certFile, keyFile, at(tc.now), zap.NewNop()); err == nil ||
			!strings.Contains(err.Error(), certFile) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("at %s: NewCertReloader returned %v, want %q about %s", tc.now, err, tc.want, certFile)
		}
	}

	now := issued.Add(day)
	core, logs := observer.New(zap.InfoLevel)
	certs, err := transport.NewCertReloader(certFile, keyFile, func() time.Time { return now }, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	certs.CheckEvery = 0
	served := func() int64 {
		t.Helper()
		c, err := certs.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		return c.Leaf.SerialNumber.Int64()
	}
	for serial, validity := range map[int64][2]time.Time{
		2: {issued, now.Add(-time.Second)},  // expired
		3: {now.Add(time.Second), notAfter}, // not yet valid
	} {
		ca.issueValid(t, serial, certFile, keyFile, validity[0], validity[1])
		if s := served(); s != 1 {
			t.Fatalf("a rotation to a pair valid %s..%s served serial %d", validity[0], validity[1], s)
		}
	}
	ca.issueValid(t, 1, certFile, keyFile, issued, notAfter) // the good pair back

	// A reloader made before the server has a logger (to check the flags) warns of a near expiry
	// on the logger it is handed later, though it found the expiry near with none.
	soon := func() time.Time { return notAfter.Add(-time.Hour) }
	early, err := transport.NewCertReloader(certFile, keyFile, soon, nil)
	if err != nil {
		t.Fatal(err)
	}
	core2, logs2 := observer.New(zap.InfoLevel)
	if early.UseLog(zap.New(core2)); logs2.FilterField(zap.String("code", "TLS_CERT_EXPIRING")).Len() != 1 {
		t.Fatalf("a reloader handed its logger after it was made did not warn of an expiry an hour away: %v", logs2.All())
	}

	if n := logs.FilterField(zap.String("code", "TLS_CERT_RELOAD_FAILED")).FilterMessageSnippet("last good").Len(); n != 2 {
		t.Fatalf("%d warnings of a refused rotation, want 2: %v", n, logs.All())
	}

	expiring := func() int { return logs.FilterField(zap.String("code", "TLS_CERT_EXPIRING")).Len() }
	if served(); expiring() != 0 {
		t.Fatalf("a certificate with 29 days left was warned about: %v", logs.All())
	}
	now = notAfter.Add(-7*day + time.Minute)
	served()
	served()
	if expiring() != 1 {
		t.Fatalf("%d expiry warnings with 7 days left, want 1", expiring())
	}
	now = now.Add(day)
	if served(); expiring() != 2 {
		t.Fatalf("%d expiry warnings a day later, want 2", expiring())
	}
}
