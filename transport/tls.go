package transport

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"
)

// CertReloader serves a certificate and key from files and picks up a change to them without a
// restart, so that rotation by certbot or a mounted secret just works. A handshake looks at the
// files at most once a second; a pair that does not load (certbot writes one file, then the
// other) keeps the last good certificate in service until it does.
type CertReloader struct {
	certFile, keyFile string
	log               *zap.Logger
	// CheckEvery is how often a handshake may look at the files; NewCertReloader sets
	// CertCheckEvery.
	CheckEvery time.Duration

	mu      sync.Mutex
	cert    *tls.Certificate
	pem     []byte // the cert and key files as last loaded
	checked time.Time
}

// CertCheckEvery is how often a handshake may look at the certificate files.
const CertCheckEvery = time.Second

// NewCertReloader loads the pair once, and fails if it does not load.
func NewCertReloader(certFile, keyFile string, log *zap.Logger) (*CertReloader, error) {
	if log == nil {
		log = zap.NewNop()
	}
	r := &CertReloader{certFile: certFile, keyFile: keyFile, log: log, CheckEvery: CertCheckEvery}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *CertReloader) load() error {
	certPEM, err := os.ReadFile(r.certFile)
	if err != nil {
		return fmt.Errorf("--tls-cert: %w", err)
	}
	keyPEM, err := os.ReadFile(r.keyFile)
	if err != nil {
		return fmt.Errorf("--tls-key: %w", err)
	}
	both := append(append([]byte{}, certPEM...), keyPEM...)
	if r.cert != nil && bytes.Equal(both, r.pem) {
		return nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("--tls-cert and --tls-key: %w", err)
	}
	if r.cert != nil {
		r.log.Info("TLS certificate reloaded", zap.String("cert", r.certFile))
	}
	r.cert, r.pem = &cert, both
	return nil
}

// GetCertificate implements tls.Config.GetCertificate.
func (r *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checked) >= r.CheckEvery {
		r.checked = now
		if err := r.load(); err != nil {
			r.log.Warn("the TLS certificate files do not load; serving the last good certificate", zap.String("code", "TLS_CERT_RELOAD_FAILED"), zap.Error(err))
		}
	}
	return r.cert, nil
}

// TLSConfig is the server's TLS configuration: TLS 1.2 or later, the certificate from r.
func (r *CertReloader) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
}
