package transport

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"
)

// CertReloader serves a certificate and key from files and picks up a change to them without a
// restart, so that rotation by certbot or a mounted secret just works. A handshake looks at the
// files at most once a second; a pair that does not load (certbot writes one file, then the
// other), or that every client would refuse for its dates (expired, not yet valid), keeps the
// last good certificate in service until one does.
type CertReloader struct {
	certFile, keyFile string
	log               *zap.Logger
	now               func() time.Time
	// CheckEvery is how often a handshake may look at the files; NewCertReloader sets
	// CertCheckEvery.
	CheckEvery time.Duration

	mu      sync.Mutex
	cert    *tls.Certificate // its Leaf set
	pem     []byte           // the cert and key files as last loaded
	checked time.Time
	warned  time.Time // when the served certificate's coming expiry was last logged
}

// CertCheckEvery is how often a handshake may look at the certificate files.
const CertCheckEvery = time.Second

// Expiry warnings: the served certificate's coming expiry is logged this long ahead, and again
// as often as this while it lasts.
const (
	certExpiryWarnAhead = 7 * 24 * time.Hour
	certExpiryWarnEvery = 24 * time.Hour
)

// NewCertReloader loads the pair once, and fails if it does not load or is not valid at now()
// (time.Now in production).
func NewCertReloader(certFile, keyFile string, now func() time.Time, log *zap.Logger) (*CertReloader, error) {
	if log == nil {
		log = zap.NewNop()
	}
	r := &CertReloader{certFile: certFile, keyFile: keyFile, log: log, now: now, CheckEvery: CertCheckEvery}
	if err := r.load(now()); err != nil {
		return nil, err
	}
	r.warnIfExpiring(now())
	return r, nil
}

// UseLog makes log the reloader's logger, and warns on it if the certificate expires soon: a
// reloader made to check the flags, before the server had a logger, warns where operators look.
// It is called before the reloader serves.
func (r *CertReloader) UseLog(log *zap.Logger) {
	r.log, r.warned = log, time.Time{} // a warning given before went to no logger
	r.warnIfExpiring(r.now())
}

func (r *CertReloader) load(now time.Time) error {
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
	if err == nil && cert.Leaf == nil {
		cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0])
	}
	if err != nil {
		return fmt.Errorf("--tls-cert and --tls-key: %w", err)
	}
	if err := checkCertDates(r.certFile, cert.Leaf, now); err != nil {
		return err
	}
	if r.cert != nil {
		r.log.Info("TLS certificate reloaded", zap.String("cert", r.certFile), zap.Time("not_after", cert.Leaf.NotAfter))
	}
	r.cert, r.pem = &cert, both
	return nil
}

// checkCertDates refuses a certificate that every client would refuse at now for its dates.
func checkCertDates(file string, leaf *x509.Certificate, now time.Time) error {
	switch {
	case now.After(leaf.NotAfter):
		return fmt.Errorf("--tls-cert %s expired at %s", file, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return fmt.Errorf("--tls-cert %s is not valid before %s", file, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil
}

// warnIfExpiring logs, once a day, that the served certificate expires within a week (or has
// expired, served on because no valid pair replaced it): every client will refuse it.
func (r *CertReloader) warnIfExpiring(now time.Time) {
	notAfter := r.cert.Leaf.NotAfter
	if notAfter.Sub(now) > certExpiryWarnAhead || (!r.warned.IsZero() && now.Sub(r.warned) < certExpiryWarnEvery) {
		return
	}
	r.warned = now
	r.log.Warn("the served TLS certificate is within a week of its expiry, or past it, after which every client refuses it: rotate it", zap.String("code", "TLS_CERT_EXPIRING"),
		zap.String("cert", r.certFile), zap.Time("not_after", notAfter), zap.Duration("left", notAfter.Sub(now)))
}

// GetCertificate implements tls.Config.GetCertificate.
func (r *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.checked) >= r.CheckEvery {
		r.checked = now
		if err := r.load(now); err != nil {
			r.log.Warn("the TLS certificate files do not load, or their certificate is not valid now; serving the last good certificate", zap.String("code", "TLS_CERT_RELOAD_FAILED"), zap.Error(err))
		}
		r.warnIfExpiring(now)
	}
	return r.cert, nil
}

// TLSConfig is the server's TLS configuration: TLS 1.2 or later, the certificate from r.
func (r *CertReloader) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
}
